"""The strategies run-real runs, one plug-in per `strategy.kind` (STYLE.md rule 23), found
by kind as the simulator's are (sim/strategies/__init__.py).

A `Strategy` (`base.py`) says what run-real refuses of its kind (`problems`), the
processes it launches (`jobs`) and the calibration probes its simulation needs
(`probes`); the code those processes run is in real/process/. A kind with no plug-in here
(`sharded`) is refused in one line.
"""

from __future__ import annotations

from scenarios.sections.strategy import StrategySpec

from .allreduce import AllReduce
from .base import Probe, Strategy
from .hybrid import Hybrid
from .independent import Independent
from .parameter_server import ParameterServers
from .pipeline import Pipeline

__all__ = ["STRATEGIES", "Probe", "Strategy", "strategy_of"]

#: the strategies run-real runs, by `strategy.kind`
STRATEGIES: dict[str, Strategy] = {
    "allreduce": AllReduce(),
    "parameter_server": ParameterServers(),
    "independent": Independent(),
    "pipeline": Pipeline(),
    "hybrid": Hybrid(),
}


def strategy_of(spec: StrategySpec) -> Strategy | None:
    """The plug-in of a scenario's strategy; None where run-real has none for its kind."""
    return STRATEGIES.get(spec.kind)
