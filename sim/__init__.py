"""Discrete-event simulator of distributed training, on SimPy.

`sim.run(scenario)` simulates every sweep point of a loaded scenario and returns a
`RunResult` (`.results`, `.steps`, `.traces`); `results.files.write_run` writes them
as the result files of docs/scenarios.md, as `simulate` does. What every point costs
comes from `sim.costs.cost_model`.
"""

from .runner import PointResult, RunResult, run, simulate_point
from .simulation import Simulation

__all__ = ["PointResult", "RunResult", "Simulation", "run", "simulate_point"]
