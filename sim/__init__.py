"""Discrete-event simulator of distributed training, on SimPy.

`sim.run(scenario)` simulates every sweep point of a loaded scenario and returns the
results; `sim.write(...)` writes the result files of `../shared/SCENARIO.md`.
"""

from .runner import PointResult, RunResult, run, simulate_point
from .simulation import Simulation

__all__ = ["PointResult", "RunResult", "Simulation", "run", "simulate_point"]
