"""What was measured: this machine's calibration profiles and others' published figures.

`profile` reads and writes a calibration profile (`run-real --calibrate`, its entries in
`entries`) and loads the ones a scenario's points name (`profiles_of`); `published`
matches a scenario's published figures to its sweep points. The scenario language
(`scenarios`) names a profile by its path only; this package reads it.
"""
