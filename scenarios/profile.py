"""Calibration profiles: what `run-real --calibrate` measured on one machine.

A profile is a YAML file that `cluster.profile` names. It holds only measurements of the
machine at hand, never of the multi-worker runs a simulation is about to predict:

- `compute`: the step time (and start-up: processes started to their first step) of one
  single-worker training process (forward, backward and
  update of one batch, no strategy), per model, batch and dtype, measured with 1, 2, ...
  such processes running at once on the host (`processes`), so the cost of processes
  sharing the host's cores is measured, not assumed;
- `transfer`: moving a tensor from one TensorFlow process to another on this host (gRPC on
  loopback), at a range of sizes, and the alpha-beta fit `time = latency + bytes / bandwidth`
  with its quality (r2, worst relative residual);
- `exchange`: the same two processes moving a tensor of the same size each way at once
  (one call reads one variable and writes another), fitted the same way, `bandwidth`
  being each direction's: how much of what a process sends and receives overlaps;
- `coordinator`: the round trips of TensorFlow's ClusterCoordinator itself (dispatching a
  closure to a worker and fetching its result; running a function on a server variable),
  which every parameter-server update pays on top of moving its tensors;
- `compute` entries with `gradients_only` (the dispatch probe): a step's forward and
  backward alone, of N single-worker processes at once and of one process driving N
  devices (`in_graph`): what in-graph replication's one client costs each device;
- `in_graph`: the all-reduce among N devices of one process (MirroredStrategy over
  logical CPUs, or the visible GPUs), fitted the same way: what in-graph replication's
  gradients cost, never crossing a process;
- `allreduce`: TensorFlow's ring all-reduce (MultiWorkerMirroredStrategy) between N
  processes at a range of sizes, fitted the same way: algbw and busbw as nccl-tests reports
  them. The simulator predicts collectives from `transfer`; of these fits it takes only
  the 2-process one's bandwidth, as what a process moves sending as it receives.

`run-real --recalibrate` measures these again beside the runs and pools the measurements
(`real/pool.py`): a pooled fit says how many calibrations it pools (`measurements`).

Both back ends and `reports` read this module; the writer is `real/calibrate.py`.

    version: 1
    kind: trainscale-profile
    created: 2026-11-29T12:00:00+00:00
    machine: {hostname: box, cpus: 2, platform: Linux-6.1-x86_64, tensorflow: 2.21.0, device: cpu}
    compute:
      - {model: mlp, batch_per_worker: 32, dtype: float32, processes: 1,
         step_time: 6.4 ms, p10: 6.1 ms, p90: 7.0 ms, steps: 50}
    transfer:
      latency: 1.9 ms
      bandwidth: 160 MB/s
      r2: 0.998
      max_rel_residual: 0.12
      points: [{bytes: 1 KiB, time: 2.0 ms}, ...]
    allreduce:
      - {workers: 2, latency: 5 ms, bandwidth: 120 MB/s, r2: 0.99, max_rel_residual: 0.2,
         points: [...]}
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .convergence import ConvergenceSpec
from .errors import ScenarioError
from .fields import Bandwidth, Bytes, DType, PositiveSeconds, Seconds
from .spec import StrategySpec
from .strategy import serves_parameters


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Machine(_Strict):
    hostname: str = ""
    cpus: int = Field(ge=1)
    platform: str = ""
    tensorflow: str = ""
    device: Literal["cpu", "gpu"] = "cpu"


class ComputeEntry(_Strict):
    model: str
    batch_per_worker: int = Field(ge=1)
    dtype: DType = "float32"
    processes: int = Field(default=1, ge=1)  # single-worker processes running at once
    servers: int = Field(default=0, ge=0)  # listening TF server processes beside them
    # a pipeline stage holding every layer (real/calibrate_stage.py, one core a process):
    # the batch in this many micro-batches, their gradients summed; 1 elsewhere
    micro_batches: int = Field(default=1, ge=1)
    # that stage fed by a process of its own, which sends it each micro-batch's input and
    # takes back the input's gradient: what a stage's messages cost its core
    fed: bool = False
    # the dispatch probe: each step's forward and backward only (no update, no all-reduce),
    # of `processes` single-worker processes at once, or (`in_graph`) of one process
    # driving `processes` devices with MirroredStrategy: what its one client costs
    gradients_only: bool = False
    in_graph: bool = False
    step_time: PositiveSeconds  # mean (what throughput sees; p10/p90 give the spread)
    p10: Seconds | None = None
    p90: Seconds | None = None
    steps: int = Field(default=0, ge=0)
    startup: Seconds | None = None  # processes started to their first step (median)


class Sample(_Strict):
    bytes: Bytes
    time: PositiveSeconds


class Fit(_Strict):
    """time = latency + bytes / bandwidth, least squares over `points`."""

    latency: Seconds
    bandwidth: Bandwidth
    r2: float
    max_rel_residual: float = Field(ge=0)
    points: list[Sample] = []
    # calibrations pooled into it (run-real --recalibrate): each point is the mean of
    # their medians at its size, and the fit is over those means
    measurements: int = Field(default=1, ge=1)


class CollectiveFit(Fit):
    workers: int = Field(ge=2)


class Messages(_Strict):
    """Small messages inside one call (medians over rounds, nothing of any size moved): a
    call that reads one small tensor from the other process (`first`: what a point-to-point
    call's latency is made of), and each further message the same call waits for in turn
    (`chained`: the slope over a chain of `chain` dependent reads). A collective's ring
    steps are messages of one op, each waiting for the one before: they pay `chained`."""

    first: PositiveSeconds
    chained: Seconds
    chain: int = Field(ge=2)
    samples: int = Field(default=0, ge=0)


class Coordinator(_Strict):
    """ClusterCoordinator's own round trips (medians), nothing of any size moved."""

    dispatch: PositiveSeconds  # schedule a closure on a worker and fetch its result
    call: PositiveSeconds  # the coordinator runs a function on a server variable
    # closures scheduled back to back and joined, per closure (None in older profiles)
    queued: PositiveSeconds | None = None
    samples: int = Field(default=0, ge=0)


class UpdateEntry(_Strict):
    """The optimizer's update of a whole model applied on `servers` parameter servers by
    one ClusterCoordinator call (mean of the calls), nothing computed on a worker: what
    the call that ends a synchronous round costs."""

    model: str
    dtype: DType = "float32"
    servers: int = Field(ge=1)
    time: PositiveSeconds
    p10: Seconds | None = None
    p90: Seconds | None = None
    samples: int = Field(default=0, ge=0)
    # closures of the same model on the same servers, one worker, each scheduled and
    # fetched alone (means; None in older profiles): `closure_read` reads every weight on
    # the worker; `closure_accumulate` also adds a gradient to every accumulator and
    # counts it (a synchronous closure's push without backup workers); `closure_apply`
    # instead applies it with the optimizer (an asynchronous closure's push and update)
    closure_read: PositiveSeconds | None = None
    closure_accumulate: PositiveSeconds | None = None
    closure_apply: PositiveSeconds | None = None
    # `closure_bare` reads one scalar on a server and nothing of the model: the dispatch,
    # the worker's function and the fetch that every closure pays (None in older profiles)
    closure_bare: PositiveSeconds | None = None
    # the CPU time the machine's cores spent while each closure ran (all processes, all
    # cores: /proc/stat, Linux only; means; None elsewhere and in older profiles). Over
    # the closure's time it says how many cores one closure keeps busy. Recorded for
    # analysis; `simulate` charges closures to the cores by their bytes instead
    closure_read_cpu: Seconds | None = None
    closure_accumulate_cpu: Seconds | None = None
    closure_apply_cpu: Seconds | None = None
    closure_bare_cpu: Seconds | None = None


#: UpdateEntry's closure timings, as named in profiles
CLOSURES = ("closure_read", "closure_accumulate", "closure_apply", "closure_bare")
#: the CPU each closure spent, as named in profiles
CLOSURES_CPU = tuple(f"{name}_cpu" for name in CLOSURES)


class CurveFit(_Strict):
    """One calibration curve: a run at a constant rate, its evaluations (after `steps`
    updates, the metric's `values`) and, asynchronous, each update's staleness."""

    kind: Literal["single", "async"]
    batch: int = Field(ge=1)  # samples one update applies
    rate: float = Field(gt=0)
    scaling: str = "linear"
    steps: list[int]
    values: list[float]
    staleness: list[float] = []
    eval_s: float | None = None  # the median evaluation's duration, seconds


class ConvergenceEntry(_Strict):
    """The model's statistical efficiency on its data, fitted to calibration curves."""

    model: str
    data: str
    fit: ConvergenceSpec
    rms: float = Field(ge=0)  # of the fit's residuals over every evaluation (metric units)
    # one evaluation of the held-out split by one worker (median over the single-worker
    # curves), seconds; what the simulator charges each evaluation
    eval_s: float | None = None
    curves: list[CurveFit] = []


class RestartEntry(_Strict):
    """A job relaunched from its checkpoint after a failure: the point's job (its strategy,
    its workers and servers) killed after a checkpoint and launched again at once, timed
    from the kill to the end of the first step after the restore, less one steady step
    (the first step's tracing is part of the restart); the mean of `samples` such kills.
    No scenario step is timed."""

    model: str
    batch_per_worker: int = Field(ge=1)
    dtype: DType = "float32"
    strategy: str  # kind, and algorithm or sync/async: "allreduce/ring", "parameter_server/sync"
    workers: int = Field(ge=1)
    servers: int = Field(default=0, ge=0)
    time: PositiveSeconds
    samples: int = Field(default=1, ge=1)  # kills timed (profiles before it: one)


def restart_job(strategy: StrategySpec) -> tuple[str, int]:
    """How a restart entry names the job it was measured for, besides model, batch and
    workers: (strategy, servers), e.g. ("allreduce/ring", 0), ("parameter_server/sync", 2)."""
    if strategy.serves_parameters:
        return f"{strategy.kind}/{'sync' if strategy.sync else 'async'}", strategy.servers
    return f"{strategy.kind}/{strategy.algorithm}", 0


class Profile(_Strict):
    version: Literal[1] = 1
    kind: Literal["trainscale-profile"] = "trainscale-profile"
    created: str = ""
    machine: Machine
    compute: list[ComputeEntry] = []
    transfer: Fit | None = None
    exchange: Fit | None = None
    messages: Messages | None = None
    allreduce: list[CollectiveFit] = []
    # the all-reduce among one process's devices (MirroredStrategy, in-graph replication)
    in_graph: list[CollectiveFit] = []
    coordinator: Coordinator | None = None
    updates: list[UpdateEntry] = []
    restarts: list[RestartEntry] = []
    convergence: list[ConvergenceEntry] = []

    @field_validator("created", mode="before")
    @classmethod
    def _timestamp_as_text(cls, value: Any) -> Any:
        # YAML reads an unquoted `created: 2026-11-29T12:00:00+00:00` as a datetime
        return value.isoformat() if isinstance(value, dt.date) else value

    def convergence_for(self, model: str, data: str) -> ConvergenceEntry | None:
        """The calibrated statistical efficiency of `model` on `data`, if any."""
        for entry in self.convergence:
            if entry.model == model and entry.data == data:
                return entry
        return None

    def startup(self, model: str, batch: int, dtype: str, processes: int) -> float | None:
        """Measured start-up (processes started to their first step) of `processes`
        single-worker processes at once, the nearest count measured at or below."""
        entries = [
            e
            for e in self.compute
            if e.model == model
            and e.batch_per_worker == batch
            and e.dtype == dtype
            and e.startup is not None
            and e.processes <= processes
        ]
        if not entries:
            return None
        return max(entries, key=lambda e: e.processes).startup

    def restart(
        self, model: str, batch: int, dtype: str, strategy: str, workers: int, servers: int
    ) -> float | None:
        """Measured relaunch of the job from its checkpoint, if measured for this job."""
        for e in self.restarts:
            key = (e.model, e.batch_per_worker, e.dtype, e.strategy, e.workers, e.servers)
            if key == (model, batch, dtype, strategy, workers, servers):
                return e.time
        return None

    def update(self, model: str, dtype: str, servers: int) -> float | None:
        """Measured update of `model` on `servers` parameter servers, if measured."""
        entry = self._update_entry(model, dtype, servers)
        return None if entry is None else entry.time

    def closures(self, model: str, dtype: str, servers: int) -> tuple[float, float, float] | None:
        """Measured closures of `model` on `servers` servers (read, accumulate, apply)."""
        e = self._update_entry(model, dtype, servers)
        if e is None or e.closure_read is None:
            return None
        if e.closure_accumulate is None or e.closure_apply is None:
            return None
        return (e.closure_read, e.closure_accumulate, e.closure_apply)

    def _update_entry(self, model: str, dtype: str, servers: int) -> UpdateEntry | None:
        for e in self.updates:
            if e.model == model and e.dtype == dtype and e.servers == servers:
                return e
        return None

    def step_time(
        self,
        model: str,
        batch: int,
        dtype: str = "float32",
        processes: int = 1,
        servers: int = 0,
        micro_batches: int = 1,
        fed: bool = False,
        gradients_only: bool = False,
        in_graph: bool = False,
    ) -> float | None:
        """Measured single-worker step time with `processes` such processes on the host.

        Beyond the largest count measured, the host's cores are shared in proportion: the
        time at the largest count times processes / that count (never below it)."""
        entries = [
            e
            for e in self.compute
            if e.model == model
            and e.batch_per_worker == batch
            and e.dtype == dtype
            and e.micro_batches == micro_batches
            and e.fed == fed
            and e.gradients_only == gradients_only
            and e.in_graph == in_graph
        ]
        # measured beside as many listening servers, if it was; else without any
        beside = [e for e in entries if e.servers == servers]
        entries = beside or [e for e in entries if e.servers == 0]
        if not entries:
            return None
        exact = [e for e in entries if e.processes == processes]
        if exact:
            return exact[0].step_time
        below = max(
            (e for e in entries if e.processes < processes), key=lambda e: e.processes, default=None
        )
        if below is None:
            return min(entries, key=lambda e: e.processes).step_time
        return below.step_time * processes / below.processes


def server_processes(kind: str, servers: int) -> int:
    """TensorFlow processes of a job that listen while its workers compute: under
    parameter servers, the servers and the coordinator; none otherwise."""
    return servers + 1 if serves_parameters(kind) else 0


def load_profile(path: str | Path, field: str = "cluster.profile") -> Profile:
    """Read and validate a profile; errors are one line naming the file and the field."""
    path = Path(path)
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{field}: cannot read {path} ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{field}: {path} is not YAML ({exc})") from None
    if not isinstance(document, dict):
        raise ScenarioError(f"{field}: {path} is not a trainscale profile (got {document!r:.40})")
    try:
        return Profile.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ScenarioError(f"{field}: {path}: {where}: {error['msg']}") from None


def dump_profile(profile: Profile) -> str:
    """The profile as YAML with explicit units (`ms`, `MB/s`, `B`), readable by load."""

    def seconds(x: float) -> str:
        return f"{x * 1e3:.6g} ms"

    def fit(f: Fit) -> dict[str, Any]:
        return {
            "latency": seconds(f.latency),
            "bandwidth": f"{f.bandwidth / 1e6:.6g} MB/s",
            "r2": round(f.r2, 6),
            "max_rel_residual": round(f.max_rel_residual, 6),
            "points": [{"bytes": f"{p.bytes:.0f} B", "time": seconds(p.time)} for p in f.points],
            **({"measurements": f.measurements} if f.measurements > 1 else {}),
        }

    document: dict[str, Any] = {
        "version": 1,
        "kind": "trainscale-profile",
        "created": profile.created,
        "machine": profile.machine.model_dump(),
        "compute": [
            {
                "model": e.model,
                "batch_per_worker": e.batch_per_worker,
                "dtype": e.dtype,
                "processes": e.processes,
                "servers": e.servers,
                **({"micro_batches": e.micro_batches} if e.micro_batches > 1 else {}),
                **({"fed": True} if e.fed else {}),
                **({"gradients_only": True} if e.gradients_only else {}),
                **({"in_graph": True} if e.in_graph else {}),
                "step_time": seconds(e.step_time),
                **({"p10": seconds(e.p10)} if e.p10 is not None else {}),
                **({"p90": seconds(e.p90)} if e.p90 is not None else {}),
                "steps": e.steps,
                **({"startup": seconds(e.startup)} if e.startup is not None else {}),
            }
            for e in profile.compute
        ],
    }
    if profile.transfer is not None:
        document["transfer"] = fit(profile.transfer)
    if profile.exchange is not None:
        document["exchange"] = fit(profile.exchange)
    if profile.messages is not None:
        m = profile.messages
        document["messages"] = {
            "first": seconds(m.first),
            "chained": seconds(m.chained),
            "chain": m.chain,
            "samples": m.samples,
        }
    document["allreduce"] = [{"workers": f.workers, **fit(f)} for f in profile.allreduce]
    if profile.in_graph:
        document["in_graph"] = [{"workers": f.workers, **fit(f)} for f in profile.in_graph]
    if profile.coordinator is not None:
        c = profile.coordinator
        document["coordinator"] = {
            "dispatch": seconds(c.dispatch),
            "call": seconds(c.call),
            **({"queued": seconds(c.queued)} if c.queued is not None else {}),
            "samples": c.samples,
        }
    if profile.updates:
        document["updates"] = [
            {
                "model": u.model,
                "dtype": u.dtype,
                "servers": u.servers,
                "time": seconds(u.time),
                **({"p10": seconds(u.p10)} if u.p10 is not None else {}),
                **({"p90": seconds(u.p90)} if u.p90 is not None else {}),
                "samples": u.samples,
                **{
                    name: seconds(getattr(u, name))
                    for name in (*CLOSURES, *CLOSURES_CPU)
                    if getattr(u, name) is not None
                },
            }
            for u in profile.updates
        ]
    if profile.restarts:
        document["restarts"] = [
            {
                "model": r.model,
                "batch_per_worker": r.batch_per_worker,
                "dtype": r.dtype,
                "strategy": r.strategy,
                "workers": r.workers,
                "servers": r.servers,
                "time": seconds(r.time),
                "samples": r.samples,
            }
            for r in profile.restarts
        ]
    if profile.convergence:
        document["convergence"] = [
            {
                "model": c.model,
                "data": c.data,
                "fit": c.fit.model_dump(exclude={"name", "base"}),
                "rms": c.rms,
                **({"eval_s": c.eval_s} if c.eval_s is not None else {}),
                "curves": [curve.model_dump() for curve in c.curves],
            }
            for c in profile.convergence
        ]
    return yaml.safe_dump(document, sort_keys=False, width=100)
