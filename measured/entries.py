"""The entries of a calibration profile (`measured/profile.py`): what each probe of
`run-real --calibrate` measured on one machine, and how a profile file writes each one.

Times are seconds and rates bytes/s once read; written, they carry explicit units (`ms`,
`MB/s`, `B`), so a profile written and read again is the same profile.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from scenarios.fields import Bandwidth, Bytes, DType, PositiveSeconds, Seconds
from scenarios.sections.convergence import ConvergenceSpec


def _ms(seconds: float) -> str:
    """Seconds as a profile file writes them: milliseconds, six significant digits."""
    return f"{seconds * 1e3:.6g} ms"


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
    # a pipeline stage holding every layer (real/calibrate/stage.py, one core a process):
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
    # a transformer's layout (`kind: hybrid`): the model run by real/process/tensor.py,
    # one device (tensor 1, data 1), rather than the Keras model a worker builds
    layout: bool = False
    step_time: PositiveSeconds  # mean (what throughput sees; p10/p90 give the spread)
    p10: Seconds | None = None
    p90: Seconds | None = None
    steps: int = Field(default=0, ge=0)
    startup: Seconds | None = None  # processes started to their first step (median)

    @property
    def key(self) -> tuple[Any, ...]:
        """What the entry was measured for: two entries of one key measured the same."""
        return (
            self.model,
            self.batch_per_worker,
            self.dtype,
            self.processes,
            self.servers,
            self.micro_batches,
            self.fed,
            self.gradients_only,
            self.in_graph,
            self.layout,
        )

    def to_document(self) -> dict[str, Any]:
        """The entry as a profile file holds it: what tells it apart only where set."""
        e = self
        return {
            "model": e.model,
            "batch_per_worker": e.batch_per_worker,
            "dtype": e.dtype,
            "processes": e.processes,
            "servers": e.servers,
            **({"micro_batches": e.micro_batches} if e.micro_batches > 1 else {}),
            **({"fed": True} if e.fed else {}),
            **({"gradients_only": True} if e.gradients_only else {}),
            **({"in_graph": True} if e.in_graph else {}),
            **({"layout": True} if e.layout else {}),
            "step_time": _ms(e.step_time),
            **({"p10": _ms(e.p10)} if e.p10 is not None else {}),
            **({"p90": _ms(e.p90)} if e.p90 is not None else {}),
            "steps": e.steps,
            **({"startup": _ms(e.startup)} if e.startup is not None else {}),
        }


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

    def to_document(self) -> dict[str, Any]:
        """The fit as a profile file holds it, with explicit units."""
        return {
            "latency": _ms(self.latency),
            "bandwidth": f"{self.bandwidth / 1e6:.6g} MB/s",
            "r2": round(self.r2, 6),
            "max_rel_residual": round(self.max_rel_residual, 6),
            "points": [{"bytes": f"{p.bytes:.0f} B", "time": _ms(p.time)} for p in self.points],
            **({"measurements": self.measurements} if self.measurements > 1 else {}),
        }


class CollectiveFit(Fit):
    workers: int = Field(ge=2)

    def to_document(self) -> dict[str, Any]:
        """The fit as a profile file holds it: its process count, then the fit's."""
        return {"workers": self.workers, **super().to_document()}


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

    def to_document(self) -> dict[str, Any]:
        """The probe as a profile file holds it."""
        return {
            "first": _ms(self.first),
            "chained": _ms(self.chained),
            "chain": self.chain,
            "samples": self.samples,
        }


class Coordinator(_Strict):
    """ClusterCoordinator's own round trips (medians), nothing of any size moved."""

    dispatch: PositiveSeconds  # schedule a closure on a worker and fetch its result
    call: PositiveSeconds  # the coordinator runs a function on a server variable
    # closures scheduled back to back and joined, per closure (None in older profiles)
    queued: PositiveSeconds | None = None
    samples: int = Field(default=0, ge=0)

    def to_document(self) -> dict[str, Any]:
        """The round trips as a profile file holds them."""
        return {
            "dispatch": _ms(self.dispatch),
            "call": _ms(self.call),
            **({"queued": _ms(self.queued)} if self.queued is not None else {}),
            "samples": self.samples,
        }


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

    @property
    def key(self) -> tuple[str, str, int]:
        """What the entry was measured for: model, dtype, servers."""
        return (self.model, self.dtype, self.servers)

    def to_document(self) -> dict[str, Any]:
        """The entry as a profile file holds it: the closures only where measured."""
        u = self
        return {
            "model": u.model,
            "dtype": u.dtype,
            "servers": u.servers,
            "time": _ms(u.time),
            **({"p10": _ms(u.p10)} if u.p10 is not None else {}),
            **({"p90": _ms(u.p90)} if u.p90 is not None else {}),
            "samples": u.samples,
            **{
                name: _ms(getattr(u, name))
                for name in (*CLOSURES, *CLOSURES_CPU)
                if getattr(u, name) is not None
            },
        }


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

    def to_document(self) -> dict[str, Any]:
        """The entry as a profile file holds it (the fit without its catalog names)."""
        return {
            "model": self.model,
            "data": self.data,
            "fit": self.fit.model_dump(exclude={"name", "base"}),
            "rms": self.rms,
            **({"eval_s": self.eval_s} if self.eval_s is not None else {}),
            "curves": [curve.model_dump() for curve in self.curves],
        }


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

    def to_document(self) -> dict[str, Any]:
        """The entry as a profile file holds it."""
        r = self
        return {
            "model": r.model,
            "batch_per_worker": r.batch_per_worker,
            "dtype": r.dtype,
            "strategy": r.strategy,
            "workers": r.workers,
            "servers": r.servers,
            "time": _ms(r.time),
            "samples": r.samples,
        }


class Probed(_Strict):
    """The sections of a profile that the probes measure, and `run-real --recalibrate`
    measures again beside the runs: a `Profile` holds them pooled, a `Round` one round's."""

    compute: list[ComputeEntry] = []
    transfer: Fit | None = None
    exchange: Fit | None = None
    messages: Messages | None = None
    allreduce: list[CollectiveFit] = []
    # the all-reduce among one process's devices (MirroredStrategy, in-graph replication)
    in_graph: list[CollectiveFit] = []
    coordinator: Coordinator | None = None
    updates: list[UpdateEntry] = []


class Round(Probed):
    """What one round of measurements gave the probes measured again beside the runs
    (`run-real --recalibrate`, once per round of `real.repeats`; round 0 is the
    calibration's own figures of the same probes): one entry a key. A profile keeps its
    rounds so that a prediction can be made from each (`Profile.as_measured_in`), and
    their spread tells how far the calibration moved from one measurement to the next."""

    def to_document(self) -> dict[str, Any]:
        """The round as a profile file holds it: the sections it measured."""
        document: dict[str, Any] = {}
        for name in ("compute", "allreduce", "in_graph", "updates"):
            if getattr(self, name):
                document[name] = [e.to_document() for e in getattr(self, name)]
        for name in ("transfer", "exchange", "messages", "coordinator"):
            if getattr(self, name) is not None:
                document[name] = getattr(self, name).to_document()
        return document
