"""What runs inside a TensorFlow process of run-real: `python -m real.process.worker JOB.json`.

`worker` reads the job (`real/job.py`) and starts what it names: an all-reduce worker
(`allreduce`), the parameter-server coordinator (`ps`), a pipeline's chief (`pipeline`),
a task that only serves (`server`) or a calibration probe (`probe`); `training`, `models`,
`data` and `evaluate` are what these share. Each reports to the launcher through
`real/protocol.py`. Nothing here launches processes or reads their records: that is the
rest of `real/`, which never imports this package.
"""
