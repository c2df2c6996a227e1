"""The training strategies of the simulator, one plug-in per `strategy.kind` (STYLE.md
rule 23), found by kind as `sim/collectives.py`'s `ALGORITHMS` finds a collective.

A `Strategy` says what the engine needs to know of a kind and nothing else asks: the
training that runs it (its module: `sim/allreduce.py`, `sim/ps.py`, `sim/pipeline.py`,
`sim/independent.py`), the strategy of its one-worker baseline (scaling efficiency's
denominator), which engine may time it, and which failures it survives without
restarting the job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from scenarios.strategy import StrategySpec

from .allreduce import AllreduceTraining
from .independent import IndependentTrials
from .pipeline import PipelineTraining
from .ps import ParameterServerTraining
from .sharded import sharded_training

if TYPE_CHECKING:
    from .simulation import Simulation
    from .training import Training


class Strategy(Protocol):
    def training(self, sim: Simulation, start_step: int) -> Training:
        """The training of one generation of the job, from `start_step`."""
        ...

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        """The strategy of the same point on one worker."""
        ...

    def engine(self, strategy: StrategySpec) -> str:
        """The engine that may time it: `lockstep` (`sim/lockstep.py`), `ps-lockstep`
        (`sim/ps_lockstep.py`) or `events`; the engine checks the rest (no failures, no
        trace, ...) and leaves what it cannot time to the event engine."""
        ...

    def survives(self, role: str, index: int) -> bool:
        """Whether a failure of `role` `index` leaves the job running (the process is
        replaced) rather than restarting it from its last checkpoint."""
        ...


class _Strategy:
    """What most kinds answer: the same strategy on one worker, the event engine, and
    every failure fatal."""

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return strategy

    def engine(self, strategy: StrategySpec) -> str:
        return "events"

    def survives(self, role: str, index: int) -> bool:
        return False


class AllReduce(_Strategy):
    """Every worker all-reduces its gradients (sim/allreduce.py); any failure stops the
    job (a collective waits for every worker)."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return AllreduceTraining(sim, start_step)

    def engine(self, strategy: StrategySpec) -> str:
        return "lockstep" if strategy.sync else "events"


class ParameterServers(_Strategy):
    """Workers push to and pull from parameter servers (sim/ps.py): a non-chief worker is
    stateless and rejoins; a server or the chief takes the job down."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return ParameterServerTraining(sim, start_step)

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return (
            strategy.model_copy(update={"backup_workers": 0})
            if strategy.backup_workers
            else strategy
        )

    def engine(self, strategy: StrategySpec) -> str:
        return "ps-lockstep"

    def survives(self, role: str, index: int) -> bool:
        return role == "worker" and index != 0


class Pipeline(_Strategy):
    """Stages of the model on devices of their own (sim/pipeline.py); its one-worker
    baseline is the whole model on one device, as it would fit."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return PipelineTraining(sim, start_step)

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return StrategySpec()


class Independent(_Strategy):
    """Trials on the worker slots, each training alone (sim/independent.py)."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return IndependentTrials(sim, start_step)


class Sharded(_Strategy):
    """The model's state divided among the workers (sim/sharded.py, ZeRO's stages); like
    all-reduce, any failure stops the job."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return sharded_training(sim, start_step)


#: the strategies by `strategy.kind`
STRATEGIES: dict[str, Strategy] = {
    "allreduce": AllReduce(),
    "parameter_server": ParameterServers(),
    "independent": Independent(),
    "pipeline": Pipeline(),
    "sharded": Sharded(),
}


def strategy_of(spec: StrategySpec) -> Strategy:
    """The plug-in of a scenario's strategy."""
    return STRATEGIES[spec.kind]
