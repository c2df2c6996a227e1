"""What one TensorFlow process runs: the job description both launchers take.

A job is one of seven kinds of work, each a frozen dataclass with a `kind` tag, made of the
parts it needs:

- `Place` (every job): its task in the cluster, device and seed;
- `Model` (what builds and updates the model) and `Training` (a model trained: batches,
  steps, data, target, checkpoints), a training job's;
- `Stragglers`: what a worker injects into its own steps.

The kinds: `AllReduceWorker` (an all-reduce worker, or one worker with no strategy),
`Trial` (an independent trial: a worker alone), `Coordinator` (the parameter-server
chief), `PipelineChief` (a pipeline's client), `TensorWorker` (a device of a
transformer's tensor x data layout), `Server` (a task that only serves: a
parameter-server job's workers and servers, a pipeline's stages) and `Probe` (a
calibration probe in place of training).

The strategy plug-ins (`real/strategies/`), `trials` and `calibrate` make them; the local
launcher (`real/launcher.py`) and each Spark task (`real/spark/task.py`) get them and
nothing else, and write each as the JSON file (`to_json`, with its tag) that
`python -m real.process.worker JOB.json` reads back (`load_job`). Every field has the
meaning below and a default, so a probe's job says only what it needs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, TypeVar

import numpy as np

from results.streams import lognormal_factors, stream
from scenarios.sections.training import Target
from workloads.schedule import Schedule

#: `data: digits` (real/process/training.py): pixels per image and classes of the data set, to
#: which the model's input and output must fit
DIGITS_FEATURES = 64
DIGITS_CLASSES = 10


class _Part:
    """A part of a job, or a job: frozen, changed by copying."""

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` (of its own fields only)."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclass(frozen=True, kw_only=True)
class Place(_Part):
    """Where a process is: its task in the cluster (SI units)."""

    index: int = 0  # its task index within its role
    role: str = "worker"  # worker | chief | ps: its task type in TF_CONFIG
    workers: int = 1  # the job's workers
    device: str = "cpu"  # cpu | gpu (one visible GPU per worker)
    seed: int = 0
    collective_timeout_s: float = 120.0  # before TensorFlow aborts a collective
    # in-graph replication: the devices this process drives with MirroredStrategy
    # (logical CPUs split from the host's, or the visible GPUs); 1: itself alone
    local_devices: int = 1
    standalone: bool = False  # joins no cluster (no TF_CONFIG) though started beside others
    intra_op_threads: int = 1
    inter_op_threads: int = 1

    def to_json(self) -> str:
        """The job as the process reads it: its fields and its `kind` tag."""
        fields = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        return json.dumps({"kind": getattr(self, "kind", None), **fields})


@dataclass(frozen=True, kw_only=True)
class Model(_Part):
    """The model a process builds and the rate its optimizer applies."""

    keras: dict[str, Any] = field(default_factory=dict)  # the model's builder and sizes
    learning_rate: float = 0.05  # the rate, where no schedule is given
    schedule: Schedule | None = None  # the rate at every update; None: learning_rate


@dataclass(frozen=True, kw_only=True)
class Training(Model):
    """A model trained: a worker's, or the coordinator's under parameter servers."""

    batch_per_worker: int = 32
    warmup_steps: int = 0
    steps: int = 0
    data: str = "synthetic"  # synthetic | digits
    # time to target: evaluate on the held-out images every `eval_every` updates (0:
    # never), stop once the target is met
    target: Target | None = None
    eval_every: int = 0
    holdout: int = 0  # digits images held out of training for evaluation
    # checkpoints (tf.train.CheckpointManager)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None  # steps; None: none


@dataclass(frozen=True, kw_only=True)
class Stragglers(_Part):
    """What a worker injects into its own steps."""

    jitter: float = 0.0  # lognormal step-time jitter (coefficient of variation)
    slow: float = 1.0  # persistent slowdown factor
    hiccups: list[float] = field(default_factory=list)  # seconds added to each step


@dataclass(frozen=True, kw_only=True)
class AllReduceWorker(Place, Training, Stragglers):
    """A worker that trains and all-reduces its gradients with its peers
    (real/process/allreduce.py): MultiWorkerMirroredStrategy, MirroredStrategy over
    `local_devices` (in graph), or alone."""

    kind: ClassVar[str] = "allreduce"
    bytes_per_pack: int = 0  # MultiWorkerMirroredStrategy's packs of gradients (0: one)
    # the dispatch probe: each replica's forward and backward alone (no all-reduce, no
    # update), so that one client driving D devices compares with D processes
    gradients_only: bool = False

    def step_slowdowns(self, total: int) -> list[float]:
        """Per step, how much longer than its own compute this worker takes: jitter (from
        the simulator's own seeded stream for this worker) x persistent slowness, minus 1.
        A factor below 1 cannot be made real (a worker cannot compute faster): it counts
        as 1."""
        rng = stream(self.seed, 0, "jitter", self.index)
        factors = lognormal_factors(rng, self.jitter, total) * self.slow
        return [max(0.0, float(f) - 1.0) for f in np.asarray(factors)]


@dataclass(frozen=True, kw_only=True)
class Trial(AllReduceWorker):
    """One independent trial: a worker alone (real/trials.py), its hyperparameters given."""

    kind: ClassVar[str] = "trial"
    trial: int = 0
    hyperparameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Coordinator(Place, Training):
    """The parameter-server chief (real/process/ps.py): it schedules every worker's steps
    on the servers, and injects the workers' stragglers into them."""

    kind: ClassVar[str] = "coordinator"
    role: str = "chief"
    servers: int = 0
    partition: str = "round_robin"
    sync: bool = True
    backup_workers: int = 0
    # each worker's slowdown factor and hiccup (seconds) per step
    slowdowns: list[list[float]] = field(default_factory=list)
    worker_hiccups: list[list[float]] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class PipelineChief(Place, Training):
    """A pipeline's client (real/process/pipeline.py): its stages, micro-batches, schedule
    and layers per stage, run on the stages' servers."""

    kind: ClassVar[str] = "pipeline"
    role: str = "chief"
    stages: int = 1
    micro_batches: int = 1
    pipeline_schedule: str = "gpipe"
    split: list[int] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class TensorWorker(Place, Training):
    """One device of a transformer's tensor x data layout (real/process/tensor.py): a
    DTensor client of a mesh of `data_parallel` x `tensor` devices, a copy's batch in
    `micro_batches`."""

    kind: ClassVar[str] = "tensor"
    tensor: int = 1
    data_parallel: int = 1
    micro_batches: int = 1


@dataclass(frozen=True, kw_only=True)
class Server(Place):
    """A task that joins the cluster, serves and reports no steps
    (real/process/server.py): a parameter-server job's workers and servers, a pipeline's
    stages, a probe's peers."""

    kind: ClassVar[str] = "server"
    pin: bool = False  # a pipeline stage: pinned to one core
    core: int | None = None  # the core a pinned stage takes; None: its index's
    # a stage's server samples its process's CPU time this often (0: never) and reports
    # the samples in `busy` records: when the stage computed (real/process/pipeline.py)
    busy_every_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Probe(Place, Model):
    """A calibration probe in place of training (real/process/probe.py); `update` builds
    the model (`Model`) to time its update."""

    kind: ClassVar[str] = "probe"
    probe: Literal["transfer", "allreduce", "coordinator", "update"] = "transfer"
    sizes: list[int] = field(default_factory=list)  # bytes per message size probed
    repeats: int = 0
    warmup: int = 0
    chain: int = 0  # reads chained in one call


J = TypeVar("J", bound=Place)

#: a job of any kind
Job = AllReduceWorker | Trial | Coordinator | PipelineChief | TensorWorker | Server | Probe
#: a job that trains a model
Trainer = AllReduceWorker | Trial | Coordinator | PipelineChief | TensorWorker

#: the kinds of job by their tag
KINDS: dict[str, type[Job]] = {
    cls.kind: cls
    for cls in (AllReduceWorker, Trial, Coordinator, PipelineChief, TensorWorker, Server, Probe)
}


def make(kind: type[J], *given: Place | Model | Stragglers, **fields: Any) -> J:
    """A job of `kind` made of the parts `given` (a `Place`, a `Training`, ...), with
    `fields` over theirs."""
    found = {f.name: getattr(part, f.name) for part in given for f in dataclasses.fields(part)}
    return kind(**{**found, **fields})


def trains(job: Job) -> bool:
    """Whether `job` trains a model (and so takes checkpoints, evaluations, rates)."""
    return isinstance(job, Training)


def reports(job: Job) -> bool:
    """Whether `job`'s process reports its work and ends by itself (all but servers)."""
    return not isinstance(job, Server)


def load_job(text: str) -> Job:
    """The job a JSON file holds (`to_json`): its class picked by its `kind` tag. An
    unknown tag or field is refused in one line."""
    data = json.loads(text)
    tag = data.pop("kind", None)
    cls = KINDS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise ValueError(f"job: unknown kind {tag!r} (one of {', '.join(KINDS)})")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"job: unknown field {unknown[0]!r} for kind {tag}")
    if data.get("schedule") is not None:
        data["schedule"] = Schedule.of(data["schedule"])
    if data.get("target") is not None:
        data["target"] = Target.model_validate(data["target"])
    return cls(**data)


def _plain(value: Any) -> Any:
    """A field's value as JSON holds it."""
    if isinstance(value, Schedule):
        return dataclasses.asdict(value)
    if isinstance(value, Target):
        return value.model_dump()
    return value
