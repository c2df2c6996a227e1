"""`run-real FILE --calibrate [--out PROFILE.yaml]`: measure this machine for the simulator.

What is measured (never the multi-worker runs a simulation will predict):

- compute: the scenario's model and batch trained by one single-worker process (no
  strategy), with P such processes running at once for every P (workers per host) the
  scenario's points use: the step time, and what sharing the host's cores costs;
- the probes (`probes.py`): transfer, exchange and small messages between
  two processes; ClusterCoordinator's round trips and a synchronous round's update
  (parameter-server scenarios); all-reduce among N processes for every N > 1 the
  scenario's all-reduce points use, and among 2 wherever processes move tensors
  (all-reduce on several, parameter servers: it sets what a busy core moves), algbw with
  busbw = algbw x 2(N-1)/N (nccl-tests' definitions); in graph, among the N devices of
  one process (MirroredStrategy);
- dispatch (in-graph points): each step's forward and backward alone of N single-worker
  processes at once, and of one process driving N devices: what the one client costs.

The profile (`measured/profile.py`) records every median point, the fits and their
quality (r2 and the worst relative residual), so a user sees how far alpha-beta holds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import socket
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from measured.profile import ComputeEntry, Machine, Profile, RestartEntry, restart_job
from measured.profile import server_processes as processes_serving
from scenarios.loader import Scenario
from scenarios.sections.dynamics import ScheduledFailure, StragglerSpec
from scenarios.spec import ScenarioSpec

from ..checks import check_supported, require_gpu
from ..failures import Failure, process_of
from ..job import Job, Server, Training
from ..launcher import InjectedFailure, Kill, Launcher, LaunchResult
from ..protocol import Step
from ..runner import jobs_for
from ..strategies import Probe, strategy_of
from .convergence import calibrate_convergence
from .pool import Measured
from .probes import (
    TIMEOUT_S,
    describe_coordinator,
    describe_fit,
    describe_transfer,
    describe_update,
    measure_allreduce,
    measure_coordinator,
    measure_transfer,
    measure_update,
    single_worker,
)
from .stage import measure_stage

#: steps timed per compute measurement (after the scenario's warm-up steps)
COMPUTE_STEPS = 100
#: checkpoint interval (steps) of the job whose relaunch is timed; the kill strikes
#: after the first checkpoint
RESTART_STEPS = 3
#: kills and relaunches timed per job (a job's start-up varies by seconds between launches)
RESTART_REPEATS = 3


def cores() -> int:
    """The cores this process may run on (the profile's `machine.cpus`)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def compute_key(spec: ScenarioSpec) -> tuple[str, int, str, int, int, int, bool]:
    """What a point's compute entry is measured for: model, batch, dtype, the host's
    worker processes (P), the server processes listening beside them, a pipeline's
    micro-batches, and whether the model is a transformer layout's (`kind: hybrid`, its
    own implementation). A pipeline's P: its stages, side by side on a core each, at most
    cores()."""
    pipeline = spec.strategy.pipelined
    return (
        spec.model.name,
        spec.training.batch_per_worker,
        spec.model.dtype,
        min(spec.strategy.stages, cores()) if pipeline else spec.cluster.devices_per_host,
        0 if pipeline else server_processes(spec),
        spec.strategy.micro_batches if pipeline else 1,
        spec.strategy.hybrid,
    )


def measure_compute(spec: ScenarioSpec, processes: int, servers: int = 0) -> ComputeEntry:
    """`processes` single-worker training processes at once, beside `servers` TensorFlow
    server processes that only listen (as a job's parameter servers and coordinator do
    while its workers compute): their gRPC threads share the cores too. A pipeline's
    point: its stages side by side (`stage.py`)."""
    if spec.strategy.pipelined:
        return measure_stage(spec, COMPUTE_STEPS, TIMEOUT_S, together=processes)
    if spec.strategy.hybrid:  # the layout's own model on one device, `processes` at once
        alone = jobs_for(spec, 1)[0].replace(standalone=True, steps=COMPUTE_STEPS)
        apart = [alone.replace(index=i) for i in range(processes)]
        result = Launcher(apart, TIMEOUT_S, spec.real.device).run()
        return _compute_entry(spec, result, processes, layout=True)
    base = jobs_for(single_worker(spec), 1)[0]
    warmup = spec.training.warmup_steps
    # a single plain worker injects nothing: no per-step hiccups, whatever the step count
    quiet = [0.0] * (warmup + COMPUTE_STEPS)
    jobs: list[Job] = [
        base.replace(
            index=i, standalone=True, steps=COMPUTE_STEPS, hiccups=quiet, checkpoint_dir=None
        )
        for i in range(processes)
    ]
    jobs += [Server(role="ps", index=j) for j in range(servers)]
    result = Launcher(jobs, TIMEOUT_S, spec.real.device).run()
    return _compute_entry(spec, result, processes, servers=servers)


def measure_dispatch(spec: ScenarioSpec, steps: int = COMPUTE_STEPS) -> list[ComputeEntry]:
    """What in-graph replication's one client costs: each step's forward and backward
    alone (no update, no all-reduce) of D single-worker processes at once, then of one
    process driving D devices with MirroredStrategy, as the point's in-graph job does
    (D: the host's devices). The simulator charges each device the difference over D
    (sim/costs/measured.py)."""
    devices = spec.cluster.devices_per_host
    quiet = [0.0] * (spec.training.warmup_steps + steps)
    fields = dict(steps=steps, hiccups=quiet, checkpoint_dir=None, gradients_only=True)
    alone = jobs_for(single_worker(spec), 1)[0].replace(standalone=True, **fields)
    apart = [alone.replace(index=i) for i in range(devices)]
    (together,) = jobs_for(spec)  # one process, `devices` replicas
    entries = []
    for jobs, in_graph in ((apart, False), ([together.replace(**fields)], True)):
        result = Launcher(jobs, TIMEOUT_S, spec.real.device).run()
        entries.append(
            _compute_entry(spec, result, devices, gradients_only=True, in_graph=in_graph)
        )
    return entries


def _compute_entry(
    spec: ScenarioSpec, result: LaunchResult, processes: int, **fields: Any
) -> ComputeEntry:
    """A compute entry from a launch's step records: workers 0 to `processes` - 1 (an
    in-graph process reports a record per device, each a worker)."""
    warmup = spec.training.warmup_steps
    durations: list[float] = []
    for worker in range(processes):
        ends = sorted(r.end for r in result.of(Step) if r.worker == worker)
        durations.extend(np.diff(ends[max(warmup, 1) - 1 :]).tolist())
    t = np.asarray(durations)
    firsts = [min(r.start for r in result.of(Step) if r.worker == w) for w in range(processes)]
    # processes started to their first step: what relaunching a job costs (imports,
    # building the model, tracing)
    startup = float(np.median(firsts)) - result.launched
    return ComputeEntry.model_validate(
        {
            "model": spec.model.name,
            "batch_per_worker": spec.training.batch_per_worker,
            "dtype": spec.model.dtype,
            "processes": processes,
            **fields,
            # the mean, as throughput sees it (steps on a shared machine have a long tail)
            "step_time": f"{float(np.mean(t))} s",
            "p10": f"{float(np.percentile(t, 10))} s",
            "p90": f"{float(np.percentile(t, 90))} s",
            "steps": len(t),
            "startup": f"{startup} s",
        }
    )


def server_processes(spec: ScenarioSpec) -> int:
    """TensorFlow processes of a point that serve while its workers compute: under
    parameter servers, the servers and the coordinator."""
    return processes_serving(spec.strategy.kind, spec.strategy.servers)


def measure_restart(spec: ScenarioSpec, repeats: int = RESTART_REPEATS) -> RestartEntry:
    """What a failure that stops the point's job costs besides its downtime, measured by
    doing it, `repeats` times: the job (its strategy, workers and servers; no stragglers)
    runs a few steps with a checkpoint, the process the point's first failure names is
    killed, the job ends as it does in a run (the survivors' next collective or call
    fails, every process is stopped) and is launched again at once on the same checkpoint
    directory. The restart is the time from the kill to the end of the first step after
    the restore, less one steady step: detection and teardown, imports, the cluster's
    handshake, building the model, restoring, and the first step's tracing (the
    simulator charges every step after the restart at its steady time). The mean over
    the repeats, as a run's throughput sees it."""
    times = [_one_restart(spec) for _ in range(repeats)]
    strategy, servers = restart_job(spec.strategy)
    return RestartEntry.model_validate(
        {
            "model": spec.model.name,
            "batch_per_worker": spec.training.batch_per_worker,
            "dtype": spec.model.dtype,
            "strategy": strategy,
            "workers": spec.workers,
            "servers": servers,
            "time": f"{float(np.mean(times))} s",
            "samples": len(times),
        }
    )


def _one_restart(spec: ScenarioSpec) -> float:
    """One kill and relaunch (`measure_restart`): seconds from the kill to the end of the
    relaunched job's first step, less its steady step."""
    import shutil
    import tempfile

    # a few steps, every one counted (no warm-up), nothing injected but the kill
    short = spec.training.model_copy(update={"steps": 3 * RESTART_STEPS, "warmup_steps": 0})
    quiet = spec.model_copy(
        update={"stragglers": StragglerSpec(), "failures": (), "training": short}
    )
    failure = _stopping_failure(spec)
    if failure is None:
        raise ValueError("no failure of this point stops its job: no restart to measure")
    process, watch, _ = process_of(spec, failure)
    directory = tempfile.mkdtemp(prefix="trainscale-calibrate-ckpt-")
    try:
        jobs = [
            job.replace(checkpoint_dir=directory, checkpoint_every=RESTART_STEPS)
            if isinstance(job, Training)
            else job
            for job in jobs_for(quiet)
        ]
        kill = Kill(process=process, watch=watch, at_step=RESTART_STEPS + 2)
        launcher = Launcher(jobs, TIMEOUT_S, spec.real.device, [kill])
        with contextlib.suppress(InjectedFailure):  # the failure struck, as asked
            launcher.run()
        if launcher.killed_at is None:
            raise RuntimeError("the job ended before the calibration's failure struck")
        result = Launcher(jobs, TIMEOUT_S, spec.real.device).run()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    steps = result.of(Step)
    if not steps:
        raise RuntimeError("the relaunched job took no step")
    first = min(steps, key=lambda r: r.start)
    return first.end - launcher.killed_at - _steady_step(steps)


def _steady_step(steps: list[Step]) -> float:
    """The median time between one step's end and the next's on the same worker, the
    first step of each (the one that traces) left out; 0 with too few steps."""
    gaps: list[float] = []
    for worker in {r.worker for r in steps}:
        ends = sorted(r.end for r in steps if r.worker == worker)
        gaps.extend(np.diff(ends[1:]).tolist())
    return float(np.median(gaps)) if gaps else 0.0


def _stopping_failure(spec: ScenarioSpec) -> Any:
    """The point's first failure that stops its job (and so restarts it), as a
    `runner.Failure` to inject, or None: any under all-reduce, a parameter server's or the
    coordinator's; a random one strikes the chief. A parameter-server worker rejoins alone."""

    for f in spec.failures:
        failure = (
            Failure(f.role, f.index, None, None, 0.0)
            if isinstance(f, ScheduledFailure)
            else Failure("chief", 0, None, None, 0.0)
        )
        if not process_of(spec, failure)[2]:
            return failure
    return None


def _machine(device: str) -> Machine:
    version = ""
    for package in ("tensorflow", "tensorflow-cpu"):
        try:
            version = importlib.metadata.version(package)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return Machine(
        hostname=socket.gethostname(),
        cpus=cores(),
        platform=platform.platform(),
        tensorflow=version,
        device=device,  # type: ignore[arg-type]
    )


def probes_of(spec: ScenarioSpec) -> list[Probe]:
    """The probes a point's simulation takes numbers from, besides its compute: the
    transfer (with the exchange and small messages; sim/costs/measured.py) always, then
    those its strategy's plug-in names (real/strategies/<kind>.py, `probes`)."""
    plugin = strategy_of(spec.strategy)
    return [("transfer",), *(plugin.probes(spec) if plugin is not None else [])]


def measure_probe(probe: Probe, spec: ScenarioSpec, into: Measured) -> str:
    """Run one probe for `spec`'s point, add what it measured to `into`, and say what."""
    device = spec.real.device
    match probe:
        case ("fed", *_):
            pair = [measure_stage(spec, COMPUTE_STEPS, TIMEOUT_S, fed=f) for f in (False, True)]
            into.compute += pair
            return "\n".join(map(describe_compute, pair))
        case ("dispatch", *_):
            pair = measure_dispatch(spec)
            into.compute += pair
            return "\n".join(map(describe_compute, pair))
        case ("transfer", *_):
            transfer, exchange, messages = measure_transfer(device)
            into.transfer.append(transfer)
            into.exchange.append(exchange)
            into.messages.append(messages)
            return describe_transfer(transfer, exchange, messages)
        case ("allreduce", n, *_):
            fit = measure_allreduce(n, device)
            into.allreduce.append(fit)
            return describe_fit(
                f"all-reduce, {n} processes (algbw; busbw x {2 * (n - 1) / n:.2f})", fit
            )
        case ("in_graph", n, *_):
            fit = measure_allreduce(n, device, in_graph=True)
            into.in_graph.append(fit)
            return describe_fit(f"all-reduce among {n} devices of one process (in graph)", fit)
        case ("coordinator", *_):
            c = measure_coordinator(device)
            into.coordinator.append(c)
            return describe_coordinator(c)
    # what is left: ("update", model, dtype, servers)
    u = measure_update(spec)
    into.updates.append(u)
    return describe_update(u)


def calibrate(scenario: Scenario, say: Callable[[str], None] | None = None) -> Profile:
    """Measure what the scenario's points need on this machine; return the profile."""
    say = say or (lambda line: print(line, file=sys.stderr))
    specs = [p.spec for p in scenario.points]
    for spec in specs:
        check_supported(spec)
    device = specs[0].real.device
    if device == "gpu":
        require_gpu()
    compute: list[ComputeEntry] = []
    seen: set[tuple[str, int, str, int, int, int, bool]] = set()
    for spec in specs:
        key = compute_key(spec)
        if key in seen:
            continue
        seen.add(key)
        entry = measure_compute(spec, key[3], key[4])
        say(describe_compute(entry))
        compute.append(entry)
    measured = Measured()
    seen_probes: set[Probe] = set()
    for spec in specs:
        for probe in probes_of(spec):
            if probe not in seen_probes:
                seen_probes.add(probe)
                say(measure_probe(probe, spec, measured))
    restarts: list[RestartEntry] = []
    timed: set[tuple[Any, ...]] = set()
    for spec in specs:
        job = restart_job(spec.strategy)
        job_key = (spec.model.name, spec.training.batch_per_worker, spec.workers, *job)
        if _stopping_failure(spec) is None or job_key in timed:
            continue
        timed.add(job_key)
        restart = measure_restart(spec)
        say(
            f"restart: {restart.model} under {restart.strategy}, {restart.workers} worker(s)"
            f"{f' and {restart.servers} server(s)' if restart.servers else ''}, relaunched "
            f"from its checkpoint to the end of its first step, less a steady step: "
            f"{restart.time:.3g} s (mean of {restart.samples})"
        )
        restarts.append(restart)
    targeted = [spec for spec in specs if spec.training.target is not None]
    convergence = []
    if targeted and targeted[0].training.data == "digits":
        convergence.append(calibrate_convergence(targeted, say))
    return Profile(
        convergence=convergence,
        restarts=restarts,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        machine=_machine(device),
        compute=[*compute, *measured.compute],
        transfer=measured.transfer[0],
        exchange=measured.exchange[0],
        messages=measured.messages[0],
        allreduce=measured.allreduce,
        in_graph=measured.in_graph,
        coordinator=measured.coordinator[0] if measured.coordinator else None,
        updates=measured.updates,
    )


def describe_compute(entry: ComputeEntry) -> str:
    beside = f" beside {entry.servers} server(s)" if entry.servers else ""
    if entry.micro_batches > 1:
        beside += f", a pipeline stage of every layer in {entry.micro_batches} micro-batches"
    if entry.fed:
        beside += ", fed by a stage of its own"
    if entry.gradients_only:
        beside += ", forward and backward only" + (
            f", one process driving {entry.processes} devices" if entry.in_graph else ""
        )
    return (
        f"compute: {entry.model} batch {entry.batch_per_worker}, {entry.processes} "
        f"process(es) at once{beside}: {entry.step_time * 1e3:.2f} ms per step "
        f"(p10 {(entry.p10 or 0) * 1e3:.2f}, p90 {(entry.p90 or 0) * 1e3:.2f}); "
        f"start-up {entry.startup or 0:.1f} s"
    )
