"""The scenario language, version 1, as pydantic models (docs/scenarios.md).

One declarative spec holds every default, bound and enum (STYLE.md rule 8). Validation
turns catalog names into full entries and unit strings into SI floats, so a validated
`ScenarioSpec` is frozen and fully resolved: seconds, bytes, bytes/s, FLOP, FLOP/s.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from . import catalog, keras_layers
from .backends import RealSpec, SimSpec
from .convergence import ConvergenceSpec
from .dynamics import (
    CheckpointSpec,
    FailureSpec,
    RandomFailure,
    StragglerSpec,
)
from .fields import (
    COMPUTE_DTYPES,
    DTYPE_BYTES,
    Bandwidth,
    Bytes,
    Count,
    DType,
    FlopRate,
    Flops,
    Seconds,
    Strict,
    _catalog_ref,
    _LocatedError,
)
from .figures import PublishedSpec
from .strategy import StrategySpec
from .training import TrainingSpec
from .units import parse

# --------------------------------------------------------------------------- model


class Layer(Strict):
    """One layer with trainable parameters or compute, in input -> output order."""

    name: str
    params: Count = 0.0
    flops: Flops = 0.0  # forward, per sample
    backward_flops: Flops | None = None  # per sample; 2 x forward unless given
    # elements per sample its forward keeps for its backward (not its output: a transformer
    # layer keeps s h (34 + 5 a s / h) bytes at 16 bits, Korthikanti et al. 2022, eq. 1;
    # docs/scenarios.md), also what crosses to the next stage of a pipeline cut after it
    # (None: not known)
    activations: Count | None = None
    # elements per sample its tensor-parallel split all-reduces in its forward (the same
    # again in its backward): 2 s h for a transformer layer (Shoeybi et al. 2019); None:
    # the layer cannot be split
    tensor_exchange: Count | None = None


class KerasSpec(BaseModel):
    """What run-real builds: a builder name and its arguments (free-form per builder)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    builder: str


class ModelSpec(Strict):
    """A model: catalog name, or totals, or a per-layer table."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    params: Count | None = None
    flops_per_sample: Flops | None = None
    backward_flops_per_sample: Flops | None = None
    dtype: DType = "float32"
    input_shape: tuple[int, ...] | None = None
    classes: int | None = Field(default=None, ge=1)
    keras: KerasSpec | None = None
    # a table, or a number N of identical layers sharing params and flops_per_sample
    # evenly, each keeping `activations` elements per sample for its backward
    layers: tuple[Layer, ...] | None = None
    activations: Count | None = None
    tensor_exchange: Count | None = None
    # statistical efficiency on its data set (scenarios/convergence.py): a catalog name,
    # a mapping, or, for a catalog model, its own entry where the catalog has one
    convergence: Annotated[ConvergenceSpec | None, _catalog_ref("convergence")] = None

    @model_validator(mode="before")
    @classmethod
    def _catalog_convergence(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "convergence" not in data
            and data.get("base") in catalog.names("convergence")
        ):
            data = {**data, "convergence": data["base"]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _identical_layers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if not isinstance(data.get("layers"), int):
            for field in ("activations", "tensor_exchange"):
                if data.get(field) is not None:
                    raise _LocatedError(
                        (field,), "applies to layers: N (a table gives each layer's own)"
                    )
            return data
        n, data = data["layers"], dict(data)
        if isinstance(n, bool) or n < 1:
            raise _LocatedError(("layers",), f"{n}: a number of layers is at least 1")
        if data.get("params") is None or data.get("flops_per_sample") is None:
            raise _LocatedError(
                ("layers",), f"{n} identical layers need the model's params and flops_per_sample"
            )
        totals = {}
        for field, kind in (
            ("params", "count"),
            ("flops_per_sample", "flops"),
            ("backward_flops_per_sample", "flops"),
        ):
            if data.get(field) is not None:
                try:
                    totals[field] = parse(data[field], kind)  # type: ignore[arg-type]
                except ValueError as exc:
                    raise _LocatedError((field,), str(exc)) from None
        layer: dict[str, Any] = {
            "params": totals["params"] / n,
            "flops": f"{totals['flops_per_sample'] / n!r} FLOP",
        }
        if "backward_flops_per_sample" in totals:
            layer["backward_flops"] = f"{totals['backward_flops_per_sample'] / n!r} FLOP"
        for field in ("activations", "tensor_exchange"):
            if data.get(field) is not None:
                layer[field] = data[field]
        data["layers"] = [{"name": f"layer{i}", **layer} for i in range(n)]
        return data

    @model_validator(mode="before")
    @classmethod
    def _layers_from_builder(cls, data: Any) -> Any:
        # mlp and small_cnn tables are computable without TensorFlow.
        if isinstance(data, dict) and not data.get("layers") and data.get("params") is None:
            spec = data.get("keras")
            if isinstance(spec, dict) and spec.get("builder") in keras_layers.DEFAULT_SPECS:
                full = {**keras_layers.DEFAULT_SPECS[spec["builder"]], **spec}
                try:
                    table = keras_layers.layer_table(full)
                except ValueError as exc:
                    raise ValueError(f"keras: {exc}") from None
                layers = [
                    {**row, "flops": f"{row['flops']!r} FLOP", "activations": size}
                    for row, size in zip(table, keras_layers.output_sizes(full), strict=True)
                ]
                data = {**data, "keras": full, "layers": layers}
        return data

    @model_validator(mode="after")
    def _totals_agree(self) -> ModelSpec:
        if self.layers:
            if self.params is not None and not _close(self.params, self._sum("params")):
                raise ValueError(
                    f"params {self.params:.6g} disagrees with the sum of layers "
                    f"{self._sum('params'):.6g}; give one or the other"
                )
            if self.flops_per_sample is not None and not _close(
                self.flops_per_sample, self._sum("flops")
            ):
                raise ValueError(
                    f"flops_per_sample {self.flops_per_sample:.6g} FLOP disagrees with the sum "
                    f"of layers {self._sum('flops'):.6g} FLOP; give one or the other"
                )
        elif self.params is None:
            raise ValueError(
                "a model needs params, a layers table, a catalog name or a keras builder "
                f"({', '.join(keras_layers.DEFAULT_SPECS)})"
            )
        return self

    def _sum(self, field: str) -> float:
        return float(sum(getattr(layer, field) for layer in self.layers or ()))

    def variables(self) -> list[float]:
        """Trainable variable sizes (parameters) in creation order, which is how
        TensorFlow's ParameterServerStrategy deals them round-robin to the servers.

        Exact (kernel, then bias, per layer) for the builders computable without TensorFlow
        when the layer table is theirs; otherwise each layer is taken as one variable (the
        catalog lists layers, not variables), or the whole model as one."""
        if self.keras is not None and self.keras.builder in keras_layers.DEFAULT_SPECS:
            sizes = keras_layers.variable_sizes(self.keras.model_dump())
            if _close(float(sum(sizes)), self.total_params):
                return [float(n) for n in sizes]
        if self.layers:
            return [layer.params for layer in self.layers if layer.params > 0]
        return [self.total_params]

    @property
    def total_params(self) -> float:
        return self._sum("params") if self.layers else float(self.params or 0.0)

    @property
    def bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def gradient_bytes(self) -> float:
        """Bytes of one full gradient (= one full copy of the parameters)."""
        return self.total_params * self.bytes_per_param

    @property
    def has_flops(self) -> bool:
        return bool(self.layers and self._sum("flops") > 0) or self.flops_per_sample is not None

    def layer_table(self) -> tuple[tuple[str, float, float, float], ...]:
        """(name, params, forward FLOP, backward FLOP) per layer, input -> output, per sample.

        A model given by totals is one layer; backward is 2 x forward unless given.
        """
        if self.layers:
            total_fwd = self._sum("flops")
            rows = []
            for layer in self.layers:
                bwd = layer.backward_flops
                if bwd is None:
                    if self.backward_flops_per_sample is not None and total_fwd > 0:
                        bwd = self.backward_flops_per_sample * layer.flops / total_fwd
                    else:
                        bwd = 2.0 * layer.flops
                rows.append((layer.name, layer.params, layer.flops, bwd))
            return tuple(rows)
        fwd = self.flops_per_sample or 0.0
        bwd = self.backward_flops_per_sample
        return (("all", float(self.params or 0.0), fwd, 2.0 * fwd if bwd is None else bwd),)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


# ------------------------------------------------------------------------ hardware


class DeviceSpec(Strict):
    """One accelerator (one worker each): peak FLOP/s per dtype x efficiency, or measured."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    peak_flops: dict[str, FlopRate] | None = None
    efficiency: (
        Annotated[float, Field(gt=0, le=1)] | dict[str, Annotated[float, Field(gt=0, le=1)]]
    ) = 0.5
    memory: Bytes | None = None
    memory_bandwidth: Bandwidth | None = None
    samples_per_s: dict[str, Annotated[float, Field(gt=0)]] | None = None
    # gpu: collectives run on NCCL (its per-collective and per-step latencies apply);
    # cpu: TensorFlow's gRPC ring on the host
    kind: Literal["gpu", "cpu"] = "gpu"

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _one_figure_for_all(cls, value: Any) -> Any:
        return {"any": value} if isinstance(value, str) else value

    @field_validator("peak_flops", "efficiency")
    @classmethod
    def _known_dtypes(cls, value: Any) -> Any:
        for key in value if isinstance(value, dict) else ():
            if key not in COMPUTE_DTYPES:
                raise ValueError(f"unknown dtype {key!r}; use one of {', '.join(COMPUTE_DTYPES)}")
        return value

    @model_validator(mode="after")
    def _needs_speed(self) -> DeviceSpec:
        if not self.peak_flops and not self.samples_per_s:
            raise ValueError("a device needs peak_flops (with efficiency) or samples_per_s")
        return self

    def compute_dtype(self, dtype: str) -> str:
        """The arithmetic a model of `dtype` runs in: float32 runs as TF32 where the device
        has it (TensorFlow's default for convolutions and matmuls on Ampere and newer)."""
        if dtype == "float32" and "tf32" in (self.peak_flops or {}):
            return "tf32"
        return dtype

    def peak_for(self, dtype: str) -> float | None:
        """Datasheet peak for a compute dtype, or the figure given for all dtypes."""
        table = self.peak_flops or {}
        return table.get(dtype, table.get("any"))

    def efficiency_for(self, dtype: str) -> float | None:
        """Sustained fraction of peak for a compute dtype (one number serves all)."""
        if isinstance(self.efficiency, dict):
            return self.efficiency.get(dtype, self.efficiency.get("any"))
        return self.efficiency


class LinkSpec(Strict):
    """A link between the devices of one host (per device, per direction)."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    # the share of `bandwidth` that transfers achieve (protocol overhead)
    goodput: float = Field(default=1.0, gt=0, le=1)
    # what one step of a GPU collective (NCCL) costs on this link, beyond its bytes
    step_latency: Seconds = 0.0


class NetworkSpec(Strict):
    """Each host's NIC into one switch (per direction), and the switch's oversubscription."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    oversubscription: float = Field(default=1.0, ge=1.0)
    # tcp: kernel sockets (gRPC, NCCL's socket transport); rdma: verbs (InfiniBand, RoCE)
    protocol: Literal["tcp", "rdma"] = "tcp"
    # the share of `bandwidth` that transfers achieve (headers, protocol overhead)
    goodput: float = Field(default=1.0, gt=0, le=1)
    # what one step of a GPU collective (NCCL) costs across the network, beyond its bytes
    step_latency: Seconds = 0.0


class ClusterSpec(Strict):
    hosts: int = Field(default=1, ge=1)
    devices_per_host: int = Field(default=1, ge=1)
    # default: the catalog's cpu (one core per worker), what run-real runs on a machine
    # without GPUs
    device: Annotated[DeviceSpec, _catalog_ref("device")] = Field(
        default="cpu", validate_default=True
    )
    host_link: Annotated[LinkSpec, _catalog_ref("link")] = Field(
        default="pcie3", validate_default=True
    )
    network: Annotated[NetworkSpec, _catalog_ref("network")] = Field(
        default="25GbE", validate_default=True
    )
    # between the devices of a host and its CPU (where colocated parameter servers run):
    # one port, whatever `host_link` joins the devices to each other
    cpu_link: Annotated[LinkSpec, _catalog_ref("link")] = Field(
        default="pcie3", validate_default=True
    )
    profile: str | None = None

    @property
    def workers(self) -> int:
        return self.hosts * self.devices_per_host


# ------------------------------------------------------------------------ training


# ------------------------------------------------------------------ the file

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


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
    def _resolve_global_batch(self) -> ScenarioSpec:
        """`training.global_batch` fixes workers x batch_per_worker: the point's own
        batch_per_worker is set from it (strong scaling)."""
        global_batch = self.training.global_batch
        if global_batch is None:
            return self
        where = self._replacing("global_batch", "batch_per_worker")
        if global_batch % self.workers:
            raise _LocatedError(
                where, f"{global_batch} does not divide evenly over {self.workers} workers"
            )
        self._resolve(batch_per_worker=global_batch // self.workers)
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
            bound = max(1, math.ceil(training.max_epochs * epoch - 1e-9))
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
        batches = self.workers if st.trains_alone else st.kept(self.workers)
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
        if self.strategy.counts_updates and self.training.steps < workers:
            # asynchronous steps are updates, all workers together: fewer than one per
            # worker measure less than one iteration of each, and a window of updates
            # that all land in the first round can have no length at all
            raise _LocatedError(
                ("training", "steps"),
                f"{self.training.steps} updates measure less than one iteration of each of "
                f"{workers} asynchronous workers; give at least {workers} (asynchronous "
                "parameter servers count updates, all workers together)",
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
