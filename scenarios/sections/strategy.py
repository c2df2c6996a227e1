"""The `strategy` section: how the workers share the training (docs/scenarios.md).

Data parallelism (`allreduce`, `parameter_server`), independent trials, and model
parallelism as a pipeline of stages (`pipeline`, GPipe or 1F1B; docs/simulator.md,
Pipelines), its replicas' gradients all-reduced among them, or pushed to parameter
servers where `servers` is given; a transformer's layout as Megatron-LM and DeepSpeed
users write it (`hybrid`: tensor x pipeline x data, with context parallelism,
interleaved virtual stages, micro-batches, ZeRO's stage and recomputation;
docs/simulator.md, "Transformer layouts").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..fields import Bytes, Strict, _LocatedError

#: fields that belong to some strategy kinds only
_KINDS_OF_FIELD = {
    "algorithm": ("allreduce", "pipeline"),
    "library": ("allreduce",),
    "fusion_buffer": ("allreduce", "parameter_server", "sharded"),
    "overlap": ("allreduce", "parameter_server", "sharded", "hybrid"),
    "stage": ("sharded", "hybrid"),
    "servers": ("parameter_server", "pipeline"),
    "placement": ("parameter_server",),
    "partition": ("parameter_server", "pipeline"),
    "local_aggregation": ("parameter_server",),
    "backup_workers": ("parameter_server",),
    "sync_scope": ("parameter_server",),
    "staleness": ("parameter_server", "allreduce"),
    "max_iterations_ahead": ("parameter_server",),
    "trials": ("independent",),
    "stages": ("pipeline",),
    "micro_batches": ("pipeline",),
    "schedule": ("pipeline", "hybrid"),
    "split": ("pipeline",),
    "tensor": ("pipeline", "hybrid"),
    "pipeline": ("hybrid",),
    "data": ("hybrid",),
    "context": ("hybrid",),
    "expert": ("hybrid",),
    "virtual_stages": ("hybrid",),
    "first_layers": ("hybrid",),
    "last_layers": ("hybrid",),
    "micro_batch": ("hybrid",),
    "sequence_parallel": ("hybrid",),
    "scatter_gather": ("hybrid",),
    "recompute": ("hybrid",),
    "attention": ("hybrid",),
    "replication": ("allreduce",),
}


#: the backends a scenario runs on; each fills the fields a file leaves unset its own way
Backend = Literal["sim", "real"]


def counts_updates(kind: str, sync: bool) -> bool:
    """Whether a strategy of `kind` (a results row's `strategy` column) counts its steps
    in updates of one worker's batch: asynchronous parameter servers."""
    return kind == "parameter_server" and not sync


def trains_alone(kind: str) -> bool:
    """Whether a strategy of `kind` (a results row's `strategy` column) is independent
    trials."""
    return kind == "independent"


def serves_parameters(kind: str) -> bool:
    """Whether a strategy of `kind` (a results row's `strategy` column) is data
    parallelism through parameter servers."""
    return kind == "parameter_server"


def algorithm_column(strategy: StrategySpec) -> str:
    """The `algorithm` column of a results row: the collective where the strategy runs one
    (both backends write it so, and rows pair only when it matches)."""
    kind = strategy.kind
    if kind not in _KINDS_OF_FIELD["algorithm"] or strategy.parameter_servers:
        return ""
    return strategy.algorithm


class StrategySpec(Strict):
    kind: Literal[
        "allreduce", "parameter_server", "independent", "pipeline", "sharded", "hybrid"
    ] = "allreduce"
    sync: bool = True
    # allreduce; pipeline: how the replicas of a stage all-reduce its gradients
    algorithm: Literal["ring", "hierarchical", "tree", "halving_doubling"] = "ring"
    # allreduce: the collective library (None: NCCL on GPUs, TensorFlow's gRPC ring on
    # CPUs); gloo: Gloo over TCP, its own ring (chunked) and halving-doubling
    library: Literal["nccl", "gloo"] | None = None
    # allreduce: gradient buckets (Horovod tensor fusion); parameter servers: the
    # gradients one push carries (default per variable, TensorFlow's own sends)
    fusion_buffer: Bytes = Field(default=64 * 2**20, validate_default=False)
    # allreduce: reduce buckets while backward runs; parameter servers: push gradients as
    # backward produces them and start each layer's forward once its variables arrived
    overlap: bool = True
    # parameter_server; pipeline: where given, each stage's gradients go to this many
    # parameter servers (dedicated hosts) instead of an all-reduce among the replicas
    servers: int = Field(default=1, ge=1)
    placement: Literal["dedicated", "colocated"] = "dedicated"
    partition: Literal["round_robin", "greedy", "sliced", "mxnet"] = "round_robin"
    local_aggregation: bool = False
    backup_workers: int = Field(default=0, ge=0)
    # synchronous: what one update waits for. step: every variable's gradients, then every
    # worker pulls (TensorFlow's SyncReplicasOptimizer); variable: each variable's (each
    # pushed group's) gradients are summed, and pulled, on their own as soon as all have
    # arrived (ps-lite's per-key synchronisation: MXNet's dist_sync, BytePS)
    sync_scope: Literal["step", "variable"] = "step"
    # asynchronous all-reduce: gradients applied at most this many steps late (default 1);
    # asynchronous parameter servers: the contract's name for max_iterations_ahead
    staleness: int | None = Field(default=None, ge=0)
    # asynchronous parameter servers, stale synchronous parallel: no worker runs more than
    # this many iterations ahead of the slowest live one (None: unbounded). A bound in
    # iterations; the staleness recorded in the results counts updates, another unit
    max_iterations_ahead: int | None = Field(default=None, ge=0)
    # independent
    trials: dict[str, Annotated[list[Any], Field(min_length=1)]] | None = None
    # pipeline: the model's layers cut into `stages` consecutive stages, one device each
    # (the cluster's devices / stages replicas of the pipeline); a replica's batch is cut
    # into `micro_batches` that flow through the stages; gpipe runs every micro-batch's
    # forward, then every backward; 1f1b alternates them once the pipeline is full;
    # split: balanced (the least time of the slowest stage) or the layers of each stage
    stages: int = Field(default=1, ge=1)
    micro_batches: int = Field(default=1, ge=1)
    schedule: Literal["gpipe", "1f1b"] = "gpipe"
    split: Literal["balanced"] | tuple[Annotated[int, Field(ge=1)], ...] = "balanced"
    # sharded (ZeRO, Rajbhandari et al. 2020; FSDP): what the workers divide among them
    # beyond the optimizer's state (stage 1): the gradients too (2), and the parameters (3)
    stage: Literal[0, 1, 2, 3] = 1
    # allreduce: one process (client) per device (between_graph), or one per host driving
    # every device of it (in_graph: TensorFlow's MirroredStrategy)
    replication: Literal["between_graph", "in_graph"] = "between_graph"
    # pipeline: each stage's layers split over `tensor` devices (Megatron's column and row
    # splits), which all-reduce what the layers exchange (Layer.tensor_exchange); hybrid:
    # the tensor-parallel size (Megatron's --tensor-model-parallel-size)
    tensor: int = Field(default=1, ge=1)
    # hybrid (a transformer model): the sizes of a layout whose product is the devices,
    # as Megatron-LM's arguments name them: `pipeline` stages, `data` copies (None: the
    # devices left over), `context` (the sequence split), `expert` (the MoE experts split
    # among data-parallel ranks); each device runs `virtual_stages` chunks of the layers
    # (the interleaved 1F1B schedule); a copy's batch (training.batch_per_worker, or
    # global_batch / data) runs in micro-batches of `micro_batch` sequences; `stage` is
    # ZeRO's (0: none; 1: the distributed optimizer); `sequence_parallel` shards the layer
    # norms and dropouts over the tensor group (Korthikanti et al. 2022); `recompute`:
    # none, selective (the attention's core) or full (every layer's forward again)
    pipeline: int = Field(default=1, ge=1)
    data: int | None = Field(default=None, ge=1)
    context: int = Field(default=1, ge=1)
    expert: int = Field(default=1, ge=1)
    virtual_stages: int = Field(default=1, ge=1)
    # hybrid: the layers of the pipeline's first and last virtual stage (the ones that
    # hold the embedding and the output layer), the rest divided evenly among the others
    # (None: every virtual stage l / (p v)); without interleaving, Megatron-LM's
    # --decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers
    first_layers: int | None = Field(default=None, ge=1)
    last_layers: int | None = Field(default=None, ge=1)
    micro_batch: int = Field(default=1, ge=1)
    sequence_parallel: bool = False
    # hybrid: what crosses between stages is split over the tensor group, each rank
    # sending 1/t of it and the receivers all-gathering it inside their node (Narayanan
    # et al. 2021, section 4.1; on by default in Megatron-LM of 2021-22, whose
    # --no-scatter-gather-tensors-in-pipeline turned it off); sequence parallelism
    # splits it without a gather
    scatter_gather: bool = False
    recompute: Literal["none", "selective", "full"] = "none"
    # hybrid: how the attention's core runs: flash (one fused kernel that keeps no s x s
    # matrix and recomputes the scores in its backward, Dao et al. 2022; Megatron-LM's
    # default through Transformer Engine) or unfused (softmax and dropout over the s x s
    # scores in memory, Megatron-LM of 2021-22: Narayanan et al., Korthikanti et al.)
    attention: Literal["flash", "unfused"] = "flash"

    @model_validator(mode="before")
    @classmethod
    def _layout_defaults(cls, data: Any) -> Any:
        """A hybrid layout runs without ZeRO, on 1F1B and reduces its gradients after the
        pipeline's flush unless told otherwise (Megatron-LM's defaults; `overlap: true`
        is its --overlap-grad-reduce), where the other kinds that take the fields start
        from stage 1, GPipe and overlap."""
        if isinstance(data, dict) and data.get("kind") == "hybrid":
            data = {"stage": 0, "schedule": "1f1b", "overlap": False, **data}
        return data

    @property
    def parameter_servers(self) -> int:
        """The parameter servers the strategy runs: `servers` under parameter_server, and
        under pipeline where it is given; else none."""
        if self.kind == "parameter_server":
            return self.servers
        return self.servers if self.kind == "pipeline" and "servers" in self.model_fields_set else 0

    # ---- what follows from the kind: the only place that compares kind strings ----

    @property
    def all_reduces(self) -> bool:
        """Data parallelism whose workers all-reduce their gradients (`allreduce`)."""
        return self.kind == "allreduce"

    @property
    def serves_parameters(self) -> bool:
        """Data parallelism through parameter servers (`parameter_server`)."""
        return serves_parameters(self.kind)

    @property
    def pipelined(self) -> bool:
        """Model parallelism: the layers cut into stages (`pipeline`)."""
        return self.kind == "pipeline"

    @property
    def hybrid(self) -> bool:
        """A transformer's layout: tensor x pipeline x data (x context), `hybrid`."""
        return self.kind == "hybrid"

    def layout_data(self, workers: int) -> int:
        """A hybrid layout's data-parallel size on `workers` devices: `data` where given,
        else the devices over tensor x pipeline x context."""
        if self.data is not None:
            return self.data
        return max(1, workers // (self.tensor * self.pipeline * self.context))

    def words(self, workers: int) -> str:
        """How `workers` devices train together, in words: 'hierarchical all-reduce',
        '8 parameter servers (colocated)', 'TP 8 x PP 8 x DP 16, ZeRO-1, selective
        recompute, micro-batch 1' (the pages' names: `scenarios.point_ids.describe`)."""
        if self.all_reduces:
            return f"{self.algorithm.replace('_', '-')} all-reduce"
        if self.serves_parameters:
            words = f"{self.servers} parameter server{'s' if self.servers != 1 else ''}"
            words += f" ({self.placement})"
            return words if self.sync else words + ", asynchronous"
        if self.pipelined:
            return (
                f"{self.stages}-stage {self.schedule.upper()} pipeline, "
                f"{self.micro_batches} micro-batches"
            )
        if self.shards_state:
            return f"ZeRO-{self.stage}"
        if self.hybrid:
            return self._layout_words(workers)
        return "independent trials" if self.trains_alone else self.kind

    def _layout_words(self, workers: int) -> str:
        degrees = [f"TP {self.tensor}", f"PP {self.pipeline}"]
        if self.context > 1:
            degrees.append(f"CP {self.context}")
        degrees.append(f"DP {self.layout_data(workers)}")
        head = " x ".join(degrees)
        if self.virtual_stages > 1:
            head += f" ({self.virtual_stages} virtual stages)"
        recompute = "no recompute" if self.recompute == "none" else f"{self.recompute} recompute"
        zero = f"ZeRO-{self.stage}" if self.stage else "no ZeRO"
        return f"{head}, {zero}, {recompute}, micro-batch {self.micro_batch}"

    @property
    def trains_alone(self) -> bool:
        """Independent trials: every worker slot trains a model of its own."""
        return trains_alone(self.kind)

    @property
    def shards_state(self) -> bool:
        """Sharded data parallelism: the workers divide the model's state among them and
        reduce-scatter gradients and all-gather parameters instead of all-reducing."""
        return self.kind == "sharded"

    def state_shares(self, workers: int) -> tuple[float, float, float]:
        """The share of the parameters, the gradients and the optimizer's state that one
        of `workers` devices holds: all of each, but for the ZeRO stage's 1/N."""
        if not self.shards_state:
            return 1.0, 1.0, 1.0
        part = 1.0 / workers
        return (part if self.stage >= 3 else 1.0), (part if self.stage >= 2 else 1.0), part

    @property
    def averages_gradients(self) -> bool:
        """Whether an update averages the gradients of a batch the workers share (every
        kind but independent trials, each of which trains alone)."""
        return not self.trains_alone

    @property
    def counts_updates(self) -> bool:
        """Asynchronous parameter servers: every push is an update of one worker's batch,
        and `training.steps` counts those updates, all workers together."""
        return counts_updates(self.kind, self.sync)

    def copies(self, workers: int) -> int:
        """The copies of the model among `workers` devices: one per device, one per
        `stages x tensor` devices of a pipeline, or a hybrid layout's data-parallel size."""
        if self.hybrid:
            return self.layout_data(workers)
        return max(1, workers // (self.stages * self.tensor)) if self.pipelined else workers

    def averaged(self, workers: int, devices_per_host: int = 1) -> int:
        """The gradients one update averages on `workers` devices: one (an asynchronous
        push; a trial), a host's devices' (an asynchronous push with `local_aggregation`),
        or one per copy of the model."""
        if self.counts_updates:
            return devices_per_host if self.local_aggregation else 1
        return 1 if self.trains_alone else self.copies(workers)

    def kept(self, workers: int, devices_per_host: int = 1) -> int:
        """The gradients one update applies: those it averages, less what backup workers
        drop (synchronous parameter servers)."""
        averaged = self.averaged(workers, devices_per_host)
        if self.serves_parameters and self.sync:
            return averaged - min(self.backup_workers, workers - 1)
        return averaged

    def for_backend(self, backend: Backend) -> StrategySpec:
        """The strategy as `backend` runs it where the file leaves a field unset: all-reduce
        overlaps backward in the simulator (Horovod's buckets), and in run-real reduces
        once backward is done (TensorFlow's MultiWorkerMirroredStrategy and
        MirroredStrategy), so there `overlap` is false unless given. Self where nothing
        changes."""
        if (
            backend == "real"
            and self.kind == "allreduce"
            and "overlap" not in self.model_fields_set
        ):
            return self.model_copy(update={"overlap": False})
        return self

    @property
    def in_graph(self) -> bool:
        """Data parallelism with one client per host driving its devices (all-reduce,
        `replication: in_graph`)."""
        return self.kind == "allreduce" and self.replication == "in_graph"

    def _check_layout(self) -> None:
        """What a hybrid layout needs of itself alone (what it needs of the model and the
        cluster, `ScenarioSpec` checks)."""
        if not self.sync:
            raise ValueError("kind hybrid is synchronous (a flush every step): sync: true")
        uneven = self.first_layers is not None or self.last_layers is not None
        if uneven and self.pipeline * self.virtual_stages == 1:
            which = "first_layers" if self.first_layers is not None else "last_layers"
            raise ValueError(f"{which} sizes a pipeline's end stage: pipeline > 1")
        if self.virtual_stages > 1 and self.pipeline == 1:
            raise ValueError(
                f"virtual_stages {self.virtual_stages} interleaves a pipeline: pipeline > 1"
            )
        if self.virtual_stages > 1 and self.schedule == "gpipe":
            raise ValueError("virtual_stages interleave the 1F1B schedule, not gpipe")
        if self.sequence_parallel and self.tensor == 1:
            raise ValueError("sequence_parallel splits over the tensor group: tensor > 1")
        if self.stage > 1 and self.pipeline > 1:
            raise ValueError(
                f"stage {self.stage} shards gradients across micro-batches, which a pipeline "
                "accumulates (Megatron and DeepSpeed take ZeRO 2 and 3 without one): "
                "stage 0 or 1, or pipeline 1"
            )

    @model_validator(mode="after")
    def _fields_fit_kind(self) -> StrategySpec:
        for field, kinds in _KINDS_OF_FIELD.items():
            if field in self.model_fields_set and self.kind not in kinds:
                raise ValueError(
                    f"'{field}' applies to kind {' and '.join(kinds)} only, not {self.kind}"
                )
        if self.kind == "pipeline":
            if not self.sync:
                raise ValueError("kind pipeline is synchronous (a flush every step): sync: true")
            if {"servers", "algorithm"} <= self.model_fields_set:
                raise ValueError(
                    "a pipeline's replicas all-reduce their gradients (algorithm) or push "
                    "them to parameter servers (servers): give one, not both"
                )
            if isinstance(self.split, tuple) and len(self.split) != self.stages:
                raise ValueError(
                    f"split gives {len(self.split)} stage(s) but stages is {self.stages}"
                )
        if self.kind == "hybrid":
            self._check_layout()
        if self.kind == "sharded" and self.stage == 0:
            raise ValueError("kind sharded divides the state: stage 1, 2 or 3 (0 is plain data)")
        if self.kind == "sharded" and not self.sync:
            raise ValueError(
                "kind sharded is synchronous (an update needs every shard): sync: true"
            )
        if self.kind == "independent" and not self.trials:
            raise ValueError("kind independent needs 'trials' (a mapping of lists)")
        for key in ("batch_per_worker", "steps"):  # what changes a trial's work
            for value in (self.trials or {}).get(key, []):
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise _LocatedError(
                        ("trials", key), f"each trial's {key} is a whole number >= 1, not {value!r}"
                    )
        for bound in ("staleness", "max_iterations_ahead"):
            if self.sync and bound in self.model_fields_set and getattr(self, bound) is not None:
                raise ValueError(f"'{bound}' applies to asynchronous training (sync: false) only")
        if self.staleness is not None and self.max_iterations_ahead is not None:
            raise ValueError(
                "give max_iterations_ahead or staleness (the contract's name for it), not both"
            )
        if self.library == "gloo" and self.algorithm not in ("ring", "halving_doubling"):
            raise ValueError(
                f"library gloo runs ring or halving_doubling, not algorithm {self.algorithm}"
            )
        if not self.sync and "sync_scope" in self.model_fields_set:
            raise ValueError("'sync_scope' applies to synchronous training (sync: true) only")
        return self
