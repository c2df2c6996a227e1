"""The sections of a scenario file, one module each, as the file names them: `model`,
`cluster`, `training` (with `trials`' grid and the time-to-target `convergence` entries),
`strategy`, the failures and stragglers (`dynamics`), the backends' own settings
(`backends`: `sim`, `real`), a published figure's block (`figures`) and a plan's
(`plan`). `scenarios/spec.py` joins them into one `ScenarioSpec` and checks one against
another."""
