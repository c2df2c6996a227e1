"""The discrete-event engine every strategy runs in: one run's state (`simulation.py`),
the workers and the training loop they share (`training.py`), stragglers
(`stragglers.py`, `distributions.py`), failures and their recovery (`failures.py`), what a
run leaves (`outcome.py`) and what it is summed up to (`metrics.py`, `steps.py`), and
time to target (`convergence.py`)."""
