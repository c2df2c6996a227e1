"""`run-real --calibrate`: this machine measured for the simulator. `measure.py` runs the
calibration and writes the profile; the probes besides compute (`probes.py`), a pipeline
stage's compute (`stage.py`) and a model's statistical efficiency (`convergence.py`) are
measured by their own modules, and `pool.py` pools later measurements into a profile
(`run-real --recalibrate`)."""
