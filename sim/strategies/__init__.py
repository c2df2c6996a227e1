"""The training strategies of the simulator, one plug-in per `strategy.kind` (STYLE.md
rule 23), found by kind as `sim/network/collectives.py`'s `ALGORITHMS` finds a collective.

A plug-in (`Strategy`, `sim/engine/plugin.py`) says what the engine needs to know of a
kind and nothing else asks: the training that runs it (its package or module here:
`allreduce/`, `parameter_server/`, `hybrid/`, `pipeline.py`, `sharded.py`,
`independent.py`), the
strategy of its one-worker baseline (scaling efficiency's denominator), the faster engine
that may time it, and which failures it survives without restarting the job. This module
is the one place that knows them all; no module of a strategy imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scenarios.sections.strategy import StrategySpec
from sim.engine.plugin import Engine, Strategy

from .allreduce import lockstep
from .allreduce.training import AllreduceTraining
from .hybrid import engine as hybrid_engine
from .hybrid.training import HybridTraining
from .independent import IndependentTrials
from .parameter_server import lockstep as ps_lockstep
from .parameter_server.training import ParameterServerTraining
from .pipeline import PipelineTraining
from .sharded import sharded_training

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation
    from sim.engine.training import Training


class _Strategy:
    """What most kinds answer: the same strategy on one worker, the event engine, and
    every failure fatal."""

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return strategy

    def engine(self, strategy: StrategySpec) -> Engine | None:
        return None

    def survives(self, role: str, index: int) -> bool:
        return False


class AllReduce(_Strategy):
    """Every worker all-reduces its gradients (allreduce/training.py); any failure stops the
    job (a collective waits for every worker)."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return AllreduceTraining(sim, start_step)

    def engine(self, strategy: StrategySpec) -> Engine | None:
        return lockstep if strategy.sync else None


class ParameterServers(_Strategy):
    """Workers push to and pull from parameter servers (parameter_server/training.py): a
    non-chief worker is stateless and rejoins; a server or the chief takes the job down."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return ParameterServerTraining(sim, start_step)

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return (
            strategy.model_copy(update={"backup_workers": 0})
            if strategy.backup_workers
            else strategy
        )

    def engine(self, strategy: StrategySpec) -> Engine | None:
        return ps_lockstep

    def survives(self, role: str, index: int) -> bool:
        return role == "worker" and index != 0


class Pipeline(_Strategy):
    """Stages of the model on devices of their own (pipeline.py); its one-worker
    baseline is the whole model on one device, as it would fit."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return PipelineTraining(sim, start_step)

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        return StrategySpec()


class Hybrid(_Strategy):
    """A transformer's tensor x pipeline x data layout (hybrid/); any failure stops the
    job. Its one-worker baseline is the same model on one device (as far as it would
    fit, it is timed), its faster engine the schedule laid out once (`hybrid/engine.py`)."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return HybridTraining(sim, start_step)

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        keep = ("micro_batch", "recompute", "attention")
        return StrategySpec.model_validate(
            {"kind": "hybrid", **{name: getattr(strategy, name) for name in keep}}
        )

    def engine(self, strategy: StrategySpec) -> Engine | None:
        return hybrid_engine


class Independent(_Strategy):
    """Trials on the worker slots, each training alone (independent.py)."""

    def training(self, sim: Simulation, start_step: int) -> Training:
        return IndependentTrials(sim, start_step)


class Sharded(_Strategy):
    """The model's state divided among the workers (sharded.py, ZeRO's stages); like
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
    "hybrid": Hybrid(),
}


def strategy_of(spec: StrategySpec) -> Strategy:
    """The plug-in of a scenario's strategy."""
    return STRATEGIES[spec.kind]
