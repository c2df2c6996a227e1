"""The training strategies of the simulator, by `strategy.kind`: the registry the engine
builds a run's training from, as `sim/collectives.py`'s `ALGORITHMS` is for collectives."""

from __future__ import annotations

from .allreduce import AllreduceTraining
from .independent import IndependentTrials
from .pipeline import PipelineTraining
from .ps import ParameterServerTraining
from .training import TrainingFactory


def trainings() -> dict[str, TrainingFactory]:
    """The strategies by `strategy.kind`."""
    return {
        "allreduce": AllreduceTraining,
        "parameter_server": ParameterServerTraining,
        "independent": IndependentTrials,
        "pipeline": PipelineTraining,
    }
