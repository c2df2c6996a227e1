"""Data parallelism with all-reduce: the workers' training on the event engine
(`training.py`) and the same model in lockstep, all workers a step at a time
(`lockstep.py`)."""
