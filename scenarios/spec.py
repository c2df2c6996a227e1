"""The scenario language, version 1, as pydantic models (docs/scenarios.md).

One declarative spec holds every default, bound and enum (STYLE.md rule 8). Validation
turns catalog names into full entries and unit strings into SI floats, so a validated
`ScenarioSpec` is frozen and fully resolved: seconds, bytes, bytes/s, FLOP, FLOP/s.
Each section of the document is a module of its own (`model.py`, `cluster.py`,
`training.py`, `strategy.py`, `dynamics.py`, `backends.py`, `figures.py`); this one joins
them and checks what one section asks of another.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from .fields import Strict, _catalog_ref, _LocatedError
from .sections.backends import RealSpec, SimSpec
from .sections.cluster import ClusterSpec
from .sections.dynamics import (
    CheckpointSpec,
    FailureSpec,
    RandomFailure,
    StragglerSpec,
)
from .sections.figures import PublishedSpec
from .sections.model import ModelSpec
from .sections.strategy import StrategySpec
from .sections.training import TrainingSpec

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


#: the most workers (hosts x devices_per_host) or parameter servers a scenario may hold
MAX_PROCESSES = 1_000_000
#: the most steps (warm-up included) one point may run
MAX_STEPS = 1_000_000_000
#: the most forward and backward passes of a pipeline's stages one step of a hybrid layout
#: may schedule (micro-batches x chunks x stages): a step's list scheduling keeps each
MAX_PASSES = 1_000_000


def _over(value: float | None) -> bool:
    """Whether a field that sets the steps (a count of steps, samples or epochs) is what
    made them too many: past MAX_STEPS itself, or an epoch count given at all."""
    return value is not None and (value > MAX_STEPS or isinstance(value, float))


def _ends_fit(s: StrategySpec, layers: int) -> bool:
    """Whether a layout's uneven end stages (`first_layers`, `last_layers`) leave the
    other virtual stages a whole number of layers each; False where none is given (every
    virtual stage then l / (p v)). A ScenarioError naming the field where they do not."""
    ends = [
        (f, n)
        for f, n in (("first_layers", s.first_layers), ("last_layers", s.last_layers))
        if n is not None
    ]
    if not ends:
        return False
    rest = layers - sum(n for _, n in ends)
    others = s.pipeline * s.virtual_stages - len(ends)
    if rest < others or (others == 0 and rest) or (others and rest % others):
        given = " and ".join(f"{f} {n}" for f, n in ends)
        raise _LocatedError(
            ("strategy", ends[0][0]),
            f"{given} leave {rest} of model.transformer.layers {layers} "
            f"for {others} other virtual stages, not a whole number each",
        )
    return True


class ScenarioSpec(Strict):
    """One scenario document (for one sweep point, or the file before its sweep)."""

    version: Literal[1]
    name: str
    description: str = ""
    seed: int = Field(default=0, ge=0)
    model: Annotated[ModelSpec, _catalog_ref("model")]
    cluster: ClusterSpec = Field(default_factory=ClusterSpec)
    training: TrainingSpec = TrainingSpec()
    strategy: StrategySpec = StrategySpec()
    stragglers: StragglerSpec = StragglerSpec()
    failures: tuple[FailureSpec, ...] = ()
    checkpoint: CheckpointSpec = CheckpointSpec()
    sweep: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    sim: SimSpec = SimSpec()
    real: RealSpec = RealSpec()
    published: PublishedSpec | None = None

    @field_validator("name")
    @classmethod
    def _file_name_safe(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use letters, digits, '.', '_' and '-' (it names files)")
        return value

    def _replacing(self, field: str, instead_of: str) -> tuple[str, str]:
        """Where `training.<field>` is, after checking that it may stand in for
        `training.<instead_of>` here: not for trials, not beside the field it replaces."""
        where = ("training", field)
        if self.strategy.trains_alone:
            raise _LocatedError(where, "not defined for strategy kind independent (trials)")
        if instead_of in self.training.model_fields_set:
            raise _LocatedError(where, f"give {instead_of} or {field}, not both")
        return where

    def _resolve(self, **update: int) -> None:
        resolved = self.training.model_copy(update=update)
        object.__setattr__(self, "training", resolved)  # frozen: set once, while validating

    @model_validator(mode="after")
    def _within_reach(self) -> ScenarioSpec:
        """A cluster of more than MAX_PROCESSES workers or servers is a typo, and the
        simulator's arrays of one entry per worker or server would not fit in memory."""
        for where, count in (
            (("cluster", "hosts"), self.cluster.workers),
            (("strategy", "servers"), self.strategy.servers),
        ):
            if count > MAX_PROCESSES:
                what = "workers" if where[0] == "cluster" else "servers"
                raise _LocatedError(
                    where, f"{count:,} {what}, more than the {MAX_PROCESSES:,} a scenario may hold"
                )
        return self

    @model_validator(mode="after")
    def _resolve_global_batch(self) -> ScenarioSpec:
        """`training.global_batch` fixes workers x batch_per_worker: the point's own
        batch_per_worker is set from it (strong scaling)."""
        global_batch = self.training.global_batch
        if global_batch is None:
            return self
        where = self._replacing("global_batch", "batch_per_worker")
        if self.strategy.hybrid:  # a copy of the model's batch: global over data-parallel
            copies = self.strategy.copies(self.workers)
            if global_batch % copies:
                raise _LocatedError(
                    where, f"{global_batch} does not divide evenly over data {copies}"
                )
            self._resolve(batch_per_worker=global_batch // copies)
            return self
        if global_batch % self.workers:
            raise _LocatedError(
                where, f"{global_batch} does not divide evenly over {self.workers} workers"
            )
        self._resolve(batch_per_worker=global_batch // self.workers)
        return self

    @model_validator(mode="after")
    def _layout_fits(self) -> ScenarioSpec:
        """A hybrid layout against its model and cluster: the sizes multiply to the
        devices and divide what they split (Megatron-LM's own checks), each refused in one
        line that names the field and the numbers."""
        s = self.strategy
        if not s.hybrid:
            return self
        model = self.model.transformer
        if model is None:
            raise _LocatedError(
                ("model",),
                f"{self.model.name}: kind hybrid lays out a transformer; give "
                "model.transformer (or a catalog transformer: trainscale catalog models)",
            )
        devices = self.workers
        product = s.tensor * s.pipeline * s.context
        data = s.layout_data(devices)
        if product * data != devices:
            field = "data" if s.data is not None else "tensor"
            raise _LocatedError(
                ("strategy", field),
                f"tensor {s.tensor} x pipeline {s.pipeline} x context {s.context} x data "
                f"{data} = {product * data}, not the cluster's {devices} devices",
            )
        shape = model.shape()
        stages = ("pipeline", "pipeline x virtual_stages")
        checks = [
            (("tensor", "tensor"), "model.transformer.heads", shape.heads, s.tensor),
            (("tensor", "tensor"), "model.transformer.kv_heads", shape.kv_heads, s.tensor),
            (("tensor", "tensor"), "model.transformer.ffn_hidden", shape.ffn_hidden, s.tensor),
            (("context", "context"), "model.transformer.sequence", shape.sequence, s.context),
            (("expert", "expert"), "model.transformer.experts", shape.experts, s.expert),
            (("expert", "expert"), "strategy.data", data, s.expert),
        ]
        if s.sequence_parallel:
            sequence = ("model.transformer.sequence", shape.sequence, s.context * s.tensor)
            checks.append((("tensor", "tensor x context"), *sequence))
        if not _ends_fit(s, shape.layers):
            layers = ("model.transformer.layers", shape.layers, s.pipeline * s.virtual_stages)
            checks.append((stages, *layers))
        for (field, by), what, whole, size in checks:
            if whole % size:
                raise _LocatedError(
                    ("strategy", field), f"{by} {size} does not divide {what} {whole}"
                )
        batch = self.training.batch_per_worker
        if batch % s.micro_batch:
            raise _LocatedError(
                ("strategy", "micro_batch"),
                f"{s.micro_batch} does not divide a copy's batch {batch} "
                "(training.batch_per_worker, or global_batch / data)",
            )
        micro = batch // s.micro_batch
        passes = micro * s.virtual_stages * s.pipeline
        if passes > MAX_PASSES:
            raise _LocatedError(
                ("strategy", "micro_batch"),
                f"{micro:,} micro-batches a step x {s.virtual_stages} chunks x {s.pipeline} "
                f"stages = {passes:,} passes, more than the {MAX_PASSES:,} a step may schedule",
            )
        if s.virtual_stages > 1 and micro % s.pipeline:
            raise _LocatedError(
                ("strategy", "virtual_stages"),
                f"the interleaved schedule runs micro-batches in groups of pipeline "
                f"{s.pipeline}: {micro} micro-batches a step do not divide into them",
            )
        return self

    @model_validator(mode="after")
    def _resolve_samples(self) -> ScenarioSpec:
        """`training.samples` fixes the work of the measured steps, whatever the strategy:
        the point's steps are the fewest that train at least that many samples, where one
        step trains what reaches the model (samples_per_step). Runs after the global
        batch is resolved, before the checks that read the steps."""
        samples = self.training.samples
        if samples is None:
            return self
        self._replacing("samples", "steps")
        self._resolve(steps=max(1, -(-samples // self.samples_per_step)))
        return self

    @model_validator(mode="after")
    def _resolve_bound(self) -> ScenarioSpec:
        """`training.max_steps` (or `max_epochs`) bounds every update, warm-up steps
        included: the point's steps are the bound less the warm-up. An epoch is the
        training split over the samples one update applies (samples_per_step)."""
        training = self.training
        if training.max_steps is not None:
            field, bound = "max_steps", training.max_steps
        elif training.max_epochs is not None:
            field = "max_epochs"
            epoch = (training.epoch_samples or 0) / self.samples_per_step
            updates = training.max_epochs * epoch - 1e-9
            if not math.isfinite(updates):
                raise _LocatedError(("training", field), "too many epochs to count their updates")
            bound = max(1, math.ceil(updates))
        else:
            return self
        where = self._replacing(field, "steps")
        if "samples" in training.model_fields_set and training.samples is not None:
            raise _LocatedError(where, "give samples or a bound, not both")
        if bound <= training.warmup_steps:
            raise _LocatedError(
                where,
                f"{getattr(training, field)} is {bound} updates, not more than warmup_steps "
                f"{training.warmup_steps}",
            )
        self._resolve(steps=bound - training.warmup_steps)
        return self

    @model_validator(mode="after")
    def _steps_within_reach(self) -> ScenarioSpec:
        """At most MAX_STEPS steps, warm-up included, once samples, epochs and bounds are
        resolved: the simulator keeps a record of every step."""
        steps = self.training.steps + self.training.warmup_steps
        if steps > MAX_STEPS:
            given = ("warmup_steps", "samples", "max_steps", "max_epochs")  # else steps
            field = next((f for f in given if _over(getattr(self.training, f))), "steps")
            raise _LocatedError(
                ("training", field),
                f"{steps:,} steps with the warm-up, more than the {MAX_STEPS:,} a point may run",
            )
        return self

    @model_validator(mode="after")
    def _library_on_its_devices(self) -> ScenarioSpec:
        if self.strategy.library == "nccl" and self.cluster.device.kind != "gpu":
            raise _LocatedError(
                ("strategy", "library"),
                f"nccl runs on GPU devices, not {self.cluster.device.kind} (leave library out "
                "for TensorFlow's gRPC ring, or give gloo)",
            )
        return self

    @model_validator(mode="after")
    def _timed_steps_alone(self) -> ScenarioSpec:
        timed = self.sim.timed_steps
        if isinstance(timed, int) and (self.failures or self.checkpoint.every_steps):
            raise _LocatedError(
                ("sim", "timed_steps"),
                "not with failures or checkpoints (the steps past the timed ones are not "
                "simulated, so neither is what would happen in them)",
            )
        return self

    @property
    def samples_per_step(self) -> int:
        """What one of `training.steps` trains, samples whose gradients reach the model:
        the batches an update applies (`StrategySpec.kept`: one worker's under
        asynchronous parameter servers, one per copy of a pipeline, else every worker's
        but the backup workers', whose gradients are dropped); a batch of every trial."""
        st = self.strategy
        # trials: every worker's batch trains a model of its own
        batches = (
            self.workers
            if st.trains_alone
            else st.kept(self.workers, self.cluster.devices_per_host)
        )
        return batches * self.training.batch_per_worker

    @model_validator(mode="after")
    def _pipeline_fits(self) -> ScenarioSpec:
        st = self.strategy
        if not st.pipelined:
            return self
        layers = len(self.model.layer_table())
        if st.stages > layers:
            raise _LocatedError(
                ("strategy", "stages"), f"{st.stages}: more stages than layers ({layers})"
            )
        if isinstance(st.split, tuple) and sum(st.split) != layers:
            raise _LocatedError(
                ("strategy", "split"), f"{list(st.split)}: {sum(st.split)} layers, not {layers}"
            )
        if self.workers % (st.stages * st.tensor):
            raise _LocatedError(
                ("strategy", "stages"),
                f"{st.stages} x tensor {st.tensor}: does not divide the {self.workers} "
                "devices into replicas",
            )
        if st.tensor > 1:
            for layer in self.model.layers or ():
                if layer.tensor_exchange is None:
                    raise _LocatedError(
                        ("strategy", "tensor"),
                        f"{st.tensor}: layer {layer.name!r} gives no tensor_exchange "
                        "(what its split all-reduces): it cannot be split",
                    )
            if not self.model.layers:
                raise _LocatedError(
                    ("strategy", "tensor"), f"{st.tensor}: the model has no layers to split"
                )
        if self.training.batch_per_worker % st.micro_batches:
            raise _LocatedError(
                ("strategy", "micro_batches"),
                f"{st.micro_batches}: does not divide batch_per_worker "
                f"{self.training.batch_per_worker}",
            )
        if self.failures or self.checkpoint.every_steps:
            raise _LocatedError(
                ("strategy", "kind"), "pipeline: failures and checkpoints are not simulated yet"
            )
        return self

    @model_validator(mode="after")
    def _indices_in_range(self) -> ScenarioSpec:
        workers = self.cluster.workers
        for i, slow in enumerate(self.stragglers.slow):
            for w in slow.workers:
                if w >= workers:
                    raise _LocatedError(
                        ("stragglers", "slow", i, "workers"),
                        f"worker {w} does not exist ({workers} workers: 0..{workers - 1})",
                    )
        ps = self.strategy.serves_parameters
        if self.strategy.trains_alone:
            # each trial is a training run of its own: the contract gives no failure or
            # checkpoint semantics to a search
            if self.failures:
                raise _LocatedError(
                    ("failures",), "not defined for strategy kind independent (trials)"
                )
            if self.checkpoint.every_steps is not None:
                raise _LocatedError(
                    ("checkpoint", "every_steps"),
                    "not defined for strategy kind independent (trials)",
                )
        for i, failure in enumerate(self.failures):
            if isinstance(failure, RandomFailure):
                continue
            if failure.role == "worker" and failure.index >= workers:
                raise _LocatedError(
                    ("failures", i, "index"), f"worker {failure.index} does not exist"
                )
            if failure.role == "ps" and not ps:
                raise _LocatedError(
                    ("failures", i, "role"), "role ps needs strategy kind parameter_server"
                )
            if failure.role == "ps" and failure.index >= self.strategy.servers:
                raise _LocatedError(
                    ("failures", i, "index"), f"parameter server {failure.index} does not exist"
                )
        members, who = workers, "workers"
        if self.strategy.counts_updates and self.strategy.local_aggregation:
            members, who = self.cluster.hosts, "hosts"  # a host's devices push once
        if self.strategy.counts_updates and self.training.steps < members:
            # asynchronous steps are updates, all workers together: fewer than one per
            # worker measure less than one iteration of each, and a window of updates
            # that all land in the first round can have no length at all
            raise _LocatedError(
                ("training", "steps"),
                f"{self.training.steps} updates measure less than one iteration of each of "
                f"{members} asynchronous {who}; give at least {members} (asynchronous "
                f"parameter servers count updates, all {who} together)",
            )
        if ps and self.strategy.backup_workers >= workers:
            raise _LocatedError(
                ("strategy", "backup_workers"),
                f"{self.strategy.backup_workers} backup workers need more than {workers} workers",
            )
        return self

    @property
    def workers(self) -> int:
        return self.cluster.workers
