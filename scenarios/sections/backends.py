"""The scenario's `sim` and `real` sections: what `simulate` and `run-real` alone read."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from ..fields import PositiveSeconds, Strict


class SimSpec(Strict):
    network_model: Literal["flow", "analytical"] = "flow"
    # where the sweep points run: here, or as Spark tasks (on real.spark's master)
    engine: Literal["local", "spark"] = "local"
    replications: int = Field(default=1, ge=1)
    # time only the first N measured steps event by event; a target's time beyond them
    # extends at their mean step time (long runs to a target: 90 epochs of ImageNet).
    # `all` (or null): every step; `auto`: the first AUTO_TIMED_STEPS where a target is
    # set, the run is longer and nothing in it changes with time (sim/engine/convergence.py
    # timed_steps)
    timed_steps: Annotated[int, Field(ge=1)] | Literal["all", "auto"] | None = "auto"
    # `auto`: a bounded engine (its error against the exact one measured, documented)
    # times the points of the class it was measured on: large parameter-server
    # jobs, on a replica of part of the cluster
    # (sim/strategies/parameter_server/replica.py); `exact`: every worker, every event
    timing: Literal["auto", "exact"] = "auto"


#: sim.timed_steps: auto times this many measured steps of a long run to a target
AUTO_TIMED_STEPS = 1000


class SparkSpec(Strict):
    """Where `real.engine: spark` runs: any Spark master URL, and Spark properties."""

    master: str = "local[*]"  # local[N], local-cluster[...], spark://host:port, yarn, k8s://...
    conf: dict[str, str] = Field(default_factory=dict)


class RealSpec(Strict):
    engine: Literal["local", "spark"] = "local"
    spark: SparkSpec = Field(default_factory=SparkSpec)
    # a directory every Spark executor and the driver see (checkpoints); a non-local
    # master needs one
    shared_dir: str | None = None
    device: Literal["cpu", "gpu"] = "cpu"
    timeout: PositiveSeconds = Field(default="15 min", validate_default=True)
    # runs of each point, interleaved (every point once, then again, the grid forward and
    # backward in turn: real.runner.round_order); results are their
    # means with 95% half-widths, as sim.replications are for the simulator
    repeats: int = Field(default=1, ge=1)
    # run each job shape once on one worker too, for scaling_efficiency (empty without)
    baseline: bool = True
