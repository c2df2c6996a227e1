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
(`real/calibrate/pool.py`): a pooled fit says how many calibrations it pools (`measurements`).
It keeps each round's figures too (`rounds`, round 0 the calibration's own): a prediction
made from each round alone (`as_measured_in`) tells how far the calibration's spread moves
the prediction (`simulate`'s calibration interval, docs/validation.md).

Each entry is a class of `measured/entries.py` (importable from here too); this module
holds the profile, its look-ups, reading and writing the file, and loading the profiles a
scenario's points name (`profiles_of`: the language keeps only the path). Both back ends
and `reports` read it; the writer is `real/calibrate/measure.py`.

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
from pydantic import ValidationError, field_validator

from scenarios.errors import ScenarioError
from scenarios.loader import Scenario
from scenarios.reading import read_yaml
from scenarios.sections.strategy import serves_parameters
from scenarios.spec import StrategySpec

from .entries import (
    CLOSURES,
    CLOSURES_CPU,
    CollectiveFit,
    ComputeEntry,
    ConvergenceEntry,
    Coordinator,
    CurveFit,
    Fit,
    Machine,
    Messages,
    Probed,
    RestartEntry,
    Round,
    Sample,
    UpdateEntry,
)

#: the entries (measured/entries.py) are imported from here as well
__all__ = [
    "CLOSURES",
    "CLOSURES_CPU",
    "CollectiveFit",
    "ComputeEntry",
    "ConvergenceEntry",
    "Coordinator",
    "CurveFit",
    "Fit",
    "Machine",
    "Messages",
    "Profile",
    "RestartEntry",
    "Round",
    "Sample",
    "UpdateEntry",
    "dump_profile",
    "load_profile",
    "profiles_of",
    "restart_job",
    "server_processes",
]


def restart_job(strategy: StrategySpec) -> tuple[str, int]:
    """How a restart entry names the job it was measured for, besides model, batch and
    workers: (strategy, servers), e.g. ("allreduce/ring", 0), ("parameter_server/sync", 2)."""
    if strategy.serves_parameters:
        return f"{strategy.kind}/{'sync' if strategy.sync else 'async'}", strategy.servers
    return f"{strategy.kind}/{strategy.algorithm}", 0


class Profile(Probed):
    version: Literal[1] = 1
    kind: Literal["trainscale-profile"] = "trainscale-profile"
    created: str = ""
    machine: Machine
    # the probed sections (`Probed`: compute, transfer, exchange, messages, allreduce,
    # in_graph, coordinator, updates), then
    restarts: list[RestartEntry] = []
    convergence: list[ConvergenceEntry] = []
    # what each round of `run-real --recalibrate` measured again (round 0: the
    # calibration's own figures of the same probes); the sections above pool them
    rounds: list[Round] = []

    def as_measured_in(self, index: int) -> Profile:
        """The profile with round `index`'s figures in place of the pooled ones of the
        probes it measured (and no rounds): what a prediction from that round alone reads."""
        r = self.rounds[index]

        def replaced(pooled: list[Any], measured: list[Any], key: Any) -> list[Any]:
            again = {key(e) for e in measured}
            return [e for e in pooled if key(e) not in again] + list(measured)

        return self.model_copy(
            update={
                "compute": replaced(self.compute, r.compute, lambda e: e.key),
                "transfer": r.transfer or self.transfer,
                "exchange": r.exchange or self.exchange,
                "messages": r.messages or self.messages,
                "coordinator": r.coordinator or self.coordinator,
                "allreduce": replaced(self.allreduce, r.allreduce, lambda f: f.workers),
                "in_graph": replaced(self.in_graph, r.in_graph, lambda f: f.workers),
                "updates": replaced(self.updates, r.updates, lambda u: u.key),
                "rounds": [],
            }
        )

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
        layout: bool = False,
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
            and e.layout == layout
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
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{field}: cannot read {path} ({exc.strerror})") from None
    document = read_yaml(raw, f"{field}: {path}")
    if not isinstance(document, dict):
        raise ScenarioError(f"{field}: {path} is not a trainscale profile (got {document!r:.40})")
    try:
        return Profile.model_validate(document)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ScenarioError(f"{field}: {path}: {where}: {error['msg']}") from None


def profiles_of(scenario: Scenario) -> dict[str, Profile]:
    """The calibration profile of each point whose `cluster.profile` names one, by point
    id; the points naming one file share one `Profile`, the file read once.

    The loader made each path absolute (relative to the scenario file's directory). A
    file that cannot be read or is no profile is a ScenarioError in one line naming
    `cluster.profile` and the file (and, in a sweep, the point): callers ask this before
    any work, so a bad profile is refused before anything runs or is written.
    """
    swept = bool(scenario.document.get("sweep"))
    loaded: dict[str, Profile] = {}
    found: dict[str, Profile] = {}
    for point in scenario.points:
        path = point.spec.cluster.profile
        if path is None:
            continue
        if path not in loaded:
            try:
                loaded[path] = load_profile(path, "cluster.profile")
            except ScenarioError as exc:
                context = f" (sweep point {point.id})" if swept else ""
                raise ScenarioError(f"{exc}{context}") from None
        found[point.id] = loaded[path]
    return found


def dump_profile(profile: Profile) -> str:
    """The profile as YAML with explicit units (`ms`, `MB/s`, `B`), readable by load."""
    document: dict[str, Any] = {
        "version": 1,
        "kind": "trainscale-profile",
        "created": profile.created,
        "machine": profile.machine.model_dump(),
        "compute": [e.to_document() for e in profile.compute],
    }
    if profile.transfer is not None:
        document["transfer"] = profile.transfer.to_document()
    if profile.exchange is not None:
        document["exchange"] = profile.exchange.to_document()
    if profile.messages is not None:
        document["messages"] = profile.messages.to_document()
    document["allreduce"] = [f.to_document() for f in profile.allreduce]
    if profile.in_graph:
        document["in_graph"] = [f.to_document() for f in profile.in_graph]
    if profile.coordinator is not None:
        document["coordinator"] = profile.coordinator.to_document()
    if profile.updates:
        document["updates"] = [u.to_document() for u in profile.updates]
    if profile.restarts:
        document["restarts"] = [r.to_document() for r in profile.restarts]
    if profile.convergence:
        document["convergence"] = [c.to_document() for c in profile.convergence]
    if profile.rounds:
        document["rounds"] = [r.to_document() for r in profile.rounds]
    return yaml.safe_dump(document, sort_keys=False, width=100)
