"""Run every sweep point of a scenario for real and summarize it like the simulator does.

What runs today: synchronous ring all-reduce with TensorFlow's MultiWorkerMirroredStrategy
(one process per worker on this host, RING collectives on CPU, NCCL on GPU), and a single
worker without a strategy. Everything else in the scenario language is refused before
anything starts, with a line that names the field (`... not implemented yet by run-real`):
never run something else under its name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from scenarios import vocab
from scenarios.errors import NotModelledError, ScenarioError
from scenarios.loader import Point, Scenario
from scenarios.spec import RandomFailure, ScenarioSpec
from scenarios.stats import step_stats

from .launcher import InjectedFailure, Kill, Launcher, LaunchResult

#: seconds a collective may hang before TensorFlow aborts it (a hang is reported, never waited)
COLLECTIVE_TIMEOUT_S = 120


def check_supported(spec: ScenarioSpec) -> None:
    """Refuse, before anything starts, what run-real cannot (yet) run as specified."""
    st = spec.strategy
    problems = []
    if st.kind == "parameter_server":
        if st.sync and st.partition == "sliced" and st.servers > 1:
            problems.append("strategy.partition: sliced with synchronous parameter servers")
        elif st.partition == "greedy":
            problems.append("strategy.partition: greedy (TF 2 has no greedy placement)")
        elif st.placement != "dedicated":
            problems.append(f"strategy.placement: {st.placement}")
        elif st.local_aggregation:
            problems.append("strategy.local_aggregation")
        elif st.staleness is not None:
            problems.append("strategy.staleness (TensorFlow has no SSP bound)")
    elif st.kind == "independent":
        pass  # trials: single-worker processes on the slots (real/trials.py)
    elif not st.sync:
        problems.append("strategy.sync: false (asynchronous all-reduce)")
    elif st.algorithm != "ring":
        problems.append(
            f"strategy.algorithm: {st.algorithm} (TensorFlow's MultiWorkerMirroredStrategy "
            "offers ring on CPU and NCCL's own choice on GPU)"
        )
    if st.kind == "independent" and spec.failures:
        problems.append("failures with independent trials")
    if spec.real.engine != "local":
        problems.append(f"real.engine: {spec.real.engine}")
    if spec.cluster.hosts > 1:
        problems.append("cluster.hosts > 1 (local processes run on this host only)")
    if problems:
        raise NotModelledError(f"{problems[0]}: not implemented yet by run-real")
    if spec.model.keras is None:
        raise ScenarioError(
            f"model: {spec.model.name} has no keras builder, so run-real cannot build it"
        )
    if spec.training.data == "digits":
        from scenarios.keras_layers import resolve_spec

        from .data import DIGITS_CLASSES, DIGITS_FEATURES

        keras = resolve_spec(spec.model.keras.model_dump())
        shape = keras.get("input_shape") or [keras.get("inputs", 0)]
        if int(np.prod(shape)) != DIGITS_FEATURES or keras.get("classes") != DIGITS_CLASSES:
            raise ScenarioError(
                f"training.data: digits needs a model with {DIGITS_FEATURES} inputs and "
                f"{DIGITS_CLASSES} classes (mlp or small_cnn with input_shape [8, 8, 1]); "
                f"model {spec.model.name} takes {shape} and {keras.get('classes')} classes"
            )


def jobs_for(spec: ScenarioSpec, workers: int | None = None) -> list[dict[str, Any]]:
    n = spec.workers if workers is None else workers
    lr = spec.training.learning_rate
    scale = {"linear": n, "sqrt": n**0.5, "none": 1}[lr.scaling]  # Goyal et al.
    if spec.strategy.kind == "parameter_server" and not spec.strategy.sync:
        scale = 1  # asynchronous: every update is one worker's batch
    common = {
        "workers": n,
        "device": spec.real.device,
        "collective_timeout_s": COLLECTIVE_TIMEOUT_S,
        "batch_per_worker": spec.training.batch_per_worker,
        "seed": spec.seed,
        "keras": spec.model.keras.model_dump() if spec.model.keras else {},
        "learning_rate": lr.base * scale,
        "warmup_steps": spec.training.warmup_steps,
        "steps": spec.training.steps,
        "data": spec.training.data,
    }
    st = spec.strategy
    if st.kind == "parameter_server":  # even alone, a worker talks to its servers
        from .worker import _slowdowns

        total = spec.training.warmup_steps + spec.training.steps
        injected = [dict(common, index=i, **stragglers_of(spec, i)) for i in range(n)]
        chief = dict(
            common,
            role="chief",
            index=0,
            servers=st.servers,
            partition=st.partition,
            sync=st.sync,
            backup_workers=st.backup_workers if st.sync else 0,
            slowdowns=[_slowdowns(job, total) for job in injected],
            hiccups=[job["hiccups"] for job in injected],
        )
        workers_ = [dict(common, role="worker", index=i, serve=True) for i in range(n)]
        servers = [dict(common, role="ps", index=j, serve=True) for j in range(st.servers)]
        return [chief, *workers_, *servers]
    return [dict(common, index=i, **stragglers_of(spec, i)) for i in range(n)]


def stragglers_of(spec: ScenarioSpec, worker: int) -> dict[str, Any]:
    """What worker `worker` injects: jitter, persistent slowness, transient hiccups (seconds
    per step), from the same seeded streams as the simulator."""
    from scenarios.streams import stream

    total = spec.training.warmup_steps + spec.training.steps
    slow = 1.0
    for group in spec.stragglers.slow:
        if worker in group.workers:
            slow *= group.factor
    hiccups = [0.0] * total
    transient = spec.stragglers.transient
    if transient is not None and transient.probability > 0:
        hit = stream(spec.seed, 0, "transient", worker).random(total) < transient.probability
        hiccups = [transient.delay if h else 0.0 for h in hit.tolist()]
    return {"jitter": spec.stragglers.jitter, "slow": slow, "hiccups": hiccups}


@dataclass
class RealPoint:
    point_id: str
    row: dict[str, Any]
    steps: pd.DataFrame
    trace: str | None = None
    # with real.repeats: each run's headline figures, in the order run
    runs: list[dict[str, float]] | None = None


def trace_of(spec: ScenarioSpec, point_id: str, steps: pd.DataFrame) -> str:
    """A Chrome trace of what was measured (the simulator's format): per worker, compute
    (step start to compute end) on one thread, then the exchange (all-reduce, or push
    under parameter servers) and any wait on the other; lost attempts and warm-up too."""
    from scenarios.trace import ChromeTracer

    tracer = ChromeTracer(spec.cluster.devices_per_host)
    exchange = vocab.PUSH if spec.strategy.kind == "parameter_server" else vocab.ALLREDUCE
    columns = ["worker", "step", "start_s", "compute_end_s", "comm_end_s", "end_s"]
    for w, step, start, computed, exchanged, end in steps[columns].itertuples(index=False):
        worker, at = int(w), int(step)
        tracer.span(worker, vocab.COMPUTE, float(start), float(computed), step=at)
        tracer.span(worker, exchange, float(computed), float(exchanged), comm=True, step=at)
        tracer.span(worker, vocab.WAIT, float(exchanged), float(end), comm=True, step=at)
    return tracer.dumps({"point": point_id, "backend": "real", "scenario": spec.name})


def _index(record: dict[str, Any]) -> int:
    """Where a record stands in the job's progress: its global update (async parameter
    servers) or its step (round)."""
    return int(record.get("update", record["step"]))


def summarize(spec: ScenarioSpec, launch: LaunchResult) -> tuple[dict[str, Any], pd.DataFrame]:
    warmup, steps, n = spec.training.warmup_steps, spec.training.steps, spec.workers
    attempts = launch.of("step")
    # a job restarted from a checkpoint redoes the steps (rounds, updates) since: what an
    # earlier generation did from the step the next one resumed at is lost
    resumed: dict[int, int] = {}
    for r in launch.records:
        if r.get("event") in ("step", "round", "progress"):
            g = r.get("generation", 0)
            resumed[g] = min(resumed.get(g, 1 << 62), _index(r))
    records = [
        r
        for r in attempts
        if not any(
            g > r.get("generation", 0) and first <= _index(r) for g, first in resumed.items()
        )
    ]
    ready = launch.of("ready")
    t0 = min(r["start"] for r in records)
    asynchronous = spec.strategy.kind == "parameter_server" and not spec.strategy.sync
    rounds = {r["step"]: r for r in launch.of("round")}  # sync PS: a step ends at its update
    if asynchronous:  # a step is one update (one worker's batch), in order of completion
        ends = np.sort(np.array([r["end"] for r in records]))
        samples = spec.training.batch_per_worker * steps
    else:  # a step ends when its last worker's update ends
        ends = np.full(warmup + steps, -np.inf)
        for r in records:
            ends[r["step"]] = max(ends[r["step"]], r["end"])
        for step, r in rounds.items():
            ends[step] = r["end"]
        samples = n * spec.training.batch_per_worker * steps
    begin = ends[warmup - 1] if warmup else t0
    measured = ends[warmup:]
    finish = float(measured[-1])
    training_time = float(finish - begin)
    if asynchronous:
        window = [r for r in records if begin <= r["start"] and r["end"] <= finish]
        free = _free_since(records, launch.of("serving"))
        durations = np.array([r["end"] - free[id(r)] for r in window])
    else:
        window = [r for r in records if r["step"] >= warmup]
        durations = np.diff(np.concatenate([[begin], measured]))
    compute = sum(r["compute_end"] - r["start"] for r in window)
    comm = sum(r["end"] - r["compute_end"] for r in window)
    busy = n * training_time
    staleness = [r.get("staleness", 0) for r in window] or [0]
    last = max(r["step"] for r in records)
    row = {
        **step_stats(durations),
        "throughput_samples_per_s": samples / training_time,
        "compute_time_frac": compute / busy,
        # all-reduce (or push) and update, including waiting (not separable from outside)
        "comm_time_frac": comm / busy,
        "wait_time_frac": max(0.0, 1 - (compute + comm) / busy),
        "bytes_on_network": 0.0,  # loopback: nothing crosses a NIC
        "max_staleness": int(max(staleness)),
        "mean_staleness": float(np.mean(staleness)),
        "dropped_gradients": sum(1 for r in window if r.get("dropped")),
        "failures": launch.failures,
        "lost_steps": launch.lost_steps,
        "recovery_time_s": launch.recovery_time_s,
        "checkpoint_time_s": sum(
            r["end"] - r["start"] for r in launch.of("checkpoint") if r["worker"] == 0
        ),
        "training_time_s": training_time,
        "startup_time_s": max(r["time"] for r in ready if r.get("generation", 0) == 0)
        - launch.launched,
        "final_loss": float(np.mean([r["loss"] for r in records if r["step"] == last])),
    }
    kept = {id(r) for r in records}
    frame = pd.DataFrame(
        {
            "worker": [r["worker"] for r in attempts],
            "step": [r["step"] for r in attempts],
            "warmup": [r["step"] < warmup for r in attempts],
            "start_s": [r["start"] - t0 for r in attempts],
            "compute_end_s": [r["compute_end"] - t0 for r in attempts],
            "comm_end_s": [r["end"] - t0 for r in attempts],
            "end_s": [r["end"] - t0 for r in attempts],
            "replication": 0,
            "generation": [r.get("generation", 0) for r in attempts],
            "lost": [id(r) not in kept for r in attempts],
            "trial": -1,
            "staleness": [r.get("staleness", 0) for r in attempts],
            "loss": [r["loss"] for r in attempts],
        }
    )
    return row, frame


_BASELINES: dict[str, float] = {}


def run_trials_point(point: Point) -> RealPoint:
    from .trials import run_trials

    started = time.perf_counter()
    spec = point.spec
    figures, records = run_trials(spec, jobs_for(spec, 1)[0])
    t0 = min(r["start"] for r in records)
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "real",
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": "independent",
        "algorithm": "",
        "sync": True,
        "workers": spec.workers,
        "servers": 0,
        "batch_per_worker": spec.training.batch_per_worker,
        "steps": spec.training.steps,
        **figures,
        **vocab.NO_DYNAMICS,
        "device": spec.real.device,
    }
    row["wall_time_s"] = time.perf_counter() - started
    frame = pd.DataFrame(
        {
            "point": point.id,
            "worker": 0,
            "step": [r["step"] for r in records],
            "warmup": [r["step"] < spec.training.warmup_steps for r in records],
            "start_s": [r["start"] - t0 for r in records],
            "compute_end_s": [r["compute_end"] - t0 for r in records],
            "comm_end_s": [r["end"] - t0 for r in records],
            "end_s": [r["end"] - t0 for r in records],
            "replication": 0,
            "generation": 0,
            "lost": False,
            "trial": [r["trial"] for r in records],
            "staleness": 0,
            "loss": [r["loss"] for r in records],
        }
    ).reindex(columns=list(vocab.STEP_COLUMNS) + ["loss"])
    return RealPoint(point.id, row, frame)


def run_point(point: Point) -> RealPoint:
    if point.spec.strategy.kind == "independent":
        return run_trials_point(point)
    started = time.perf_counter()
    spec = point.spec
    launch = launch_with_failures(spec)
    stats, frame = summarize(spec, launch)
    key = repr(jobs_for(spec, 1))
    if key not in _BASELINES:
        if spec.workers == 1:
            _BASELINES[key] = stats["throughput_samples_per_s"]
        else:
            one = Launcher(jobs_for(spec, 1), spec.real.timeout, spec.real.device).run()
            single = spec.model_copy(
                update={
                    "cluster": spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1})
                }
            )
            _BASELINES[key] = summarize(single, one)[0]["throughput_samples_per_s"]
    base = _BASELINES[key]
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "real",
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": spec.strategy.kind,
        "algorithm": spec.strategy.algorithm if spec.strategy.kind == "allreduce" else "",
        "sync": spec.strategy.sync,
        "workers": spec.workers,
        "servers": spec.strategy.servers if spec.strategy.kind == "parameter_server" else 0,
        "batch_per_worker": spec.training.batch_per_worker,
        "steps": spec.training.steps,
        **stats,
        "scaling_efficiency": stats["throughput_samples_per_s"] / (spec.workers * base),
        "device": spec.real.device,
    }
    row["wall_time_s"] = time.perf_counter() - started
    frame.insert(0, "point", point.id)
    frame = frame.reindex(columns=list(vocab.STEP_COLUMNS) + ["loss"])
    frame = frame.sort_values(["step", "worker"], kind="stable", ignore_index=True)
    return RealPoint(point.id, row, frame)


@dataclass
class Failure:
    """One failure to inject into a real run: which role, when (a step, or seconds after
    the first step), for how long the failed process stays down."""

    role: str
    index: int
    at_step: int | None
    at_time: float | None
    downtime: float


def failure_schedule(spec: ScenarioSpec) -> list[Failure]:
    """The scenario's failures, random ones drawn as the simulator draws them: per host,
    exponential times between failures from the host's own seeded stream (`failures`),
    hitting the roles that host carries (one host here: the chief, so the job, and under
    parameter servers each dedicated server's own "host"), up to `real.timeout`."""
    from scenarios.streams import stream

    st = spec.strategy
    schedule = []
    for f in spec.failures:
        if not isinstance(f, RandomFailure):
            schedule.append(Failure(f.role, f.index, f.at_step, f.at_time, f.downtime))
            continue
        params = f.random
        servers = st.servers if st.kind == "parameter_server" else 0
        for host in range(spec.cluster.hosts + servers):
            roles = (
                ({"chief", "worker"} if host == 0 else {"worker"})
                if host < spec.cluster.hosts
                else {"ps"}
            )
            roles &= set(params.roles)
            if not roles:
                continue
            rng = stream(spec.seed, 0, "failures", host)
            t = 0.0
            while True:
                t += float(rng.exponential(params.mtbf_per_host))
                if t > spec.real.timeout:
                    break
                role = "chief" if "chief" in roles else sorted(roles)[0]
                index = 0 if role != "ps" else host - spec.cluster.hosts
                schedule.append(Failure(role, index, None, t, params.downtime))
    return sorted(schedule, key=lambda f: (f.at_step is None, f.at_step or 0, f.at_time or 0))


def _process_of(spec: ScenarioSpec, failure: Failure) -> tuple[int, int, bool]:
    """(process to kill, process whose records count steps, whether it rejoins alone)."""
    if spec.strategy.kind == "parameter_server":  # jobs: chief, workers, servers
        if failure.role == "worker":
            return 1 + failure.index, 0, True  # a worker rejoins; the coordinator goes on
        if failure.role == "ps":
            return 1 + spec.workers + failure.index, 0, False
        return 0, 0, False  # the coordinator
    index = failure.index if failure.role == "worker" else 0
    return index, index, False


def launch_with_failures(spec: ScenarioSpec) -> LaunchResult:
    """Run a point; kill the processes its failures name; recover as SCENARIO.md says.

    A worker under parameter servers is killed and started again after its `downtime` on
    the same address: it rejoins, and the coordinator reschedules what it was running.
    Any other failure stops the job (under all-reduce the survivors' next collective fails
    within a fraction of a second; under parameter servers the coordinator's next call
    does, TF-NOTES.md): every process is ended, the `downtime` waited, and the cluster
    started again, restoring the last `tf.train.CheckpointManager` checkpoint (every
    `checkpoint.every_steps`) and redoing the steps since. `at_time` counts from the
    first step of the run; a failure whose time passes while the job restarts strikes as
    the restarted job takes its first step. Failures, lost steps, recovery (downtime +
    measured restart to the next step, or to the worker serving again) and checkpoint
    time are measured.
    """
    import shutil
    import tempfile

    pending = failure_schedule(spec)
    directory = tempfile.mkdtemp(prefix="trainscale-ckpt-")
    jobs = [
        dict(job, checkpoint_dir=directory, checkpoint_every=spec.checkpoint.every_steps)
        for job in jobs_for(spec)
    ]
    total = LaunchResult()
    generation = 0
    failed_at: float | None = None
    origin: float | None = None  # host clock of the run's first step (at_time counts from it)
    try:
        while True:
            kills = []
            for failure in pending:
                process, watch, rejoins = _process_of(spec, failure)
                kills.append(
                    Kill(
                        process=process,
                        watch=watch,
                        at_step=failure.at_step,
                        at_time=failure.at_time,
                        restart_after=failure.downtime if rejoins else None,
                    )
                )
            launcher = Launcher(jobs, spec.real.timeout, spec.real.device, kills, origin=origin)
            try:
                result = launcher.run()
                finished = True
            except InjectedFailure as exc:
                assert exc.result is not None
                result = exc.result
                finished = False
            for record in result.records:
                record["generation"] = generation
            total.records.extend(result.records)
            if generation == 0:
                total.launched = result.launched
                origin = launcher.origin
            if failed_at is not None:
                starts = [r["start"] for r in result.records if r.get("event") == "step"]
                total.recovery_time_s += (min(starts) if starts else time.time()) - failed_at
            struck = [k for k in kills if k.killed_at is not None]
            for kill in struck:
                total.failures += 1
                if kill.restart_after is not None:  # a worker that rejoined: the job went on
                    back = [
                        r["time"]
                        for r in result.records
                        if r.get("event") == "serving" and r["time"] > (kill.killed_at or 0)
                    ]
                    # not back before the job ended or stopped: down until then
                    end = kill.restarted_at or launcher.killed_at or result.finished
                    back_at = min(back) if back else end or time.time()
                    total.recovery_time_s += back_at - (kill.killed_at or 0)
            downtime = pending[len(struck) - 1].downtime if struck else 0.0
            pending = pending[len(struck) :]
            if finished:
                total.finished = result.finished
                return total
            fatal = struck[-1]
            done = max(
                (_index(r) + 1 for r in result.records if _counts(r, fatal.watch)), default=0
            )
            saved = max((r["step"] for r in total.of("checkpoint") if r["worker"] == 0), default=0)
            total.lost_steps += max(0, done - saved)
            failed_at = launcher.killed_at or time.time()
            time.sleep(downtime)
            generation += 1
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _free_since(records: list[dict[str, Any]], serving: list[dict[str, Any]]) -> dict[int, float]:
    """When each asynchronous closure's worker became free for it (by `id` of its record):
    the end of the worker's previous closure, so that a step is the worker's whole
    iteration, the coordinator's dispatch included, as the simulator's is; or the closure's
    own start where nothing came just before it on that worker: its first, the first after
    a checkpoint's barrier (another `chunk`), after a restart of the job (another
    `generation`), or after the worker process was started again (a `serving` record of
    it between the two)."""
    rejoined = sorted(
        (r.get("generation", 0), r["index"], r["time"]) for r in serving if r["role"] == "worker"
    )
    free: dict[int, float] = {}
    last: dict[int, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("generation", 0), r["end"])):
        before = last.get(r["worker"])
        free[id(r)] = r["start"]
        if (
            before is not None
            and before.get("generation", 0) == r.get("generation", 0)
            and before.get("chunk") == r.get("chunk")
            and before["end"] <= r["start"]
            and not any(
                g == r.get("generation", 0) and w == r["worker"] and before["end"] < t < r["start"]
                for g, w, t in rejoined
            )
        ):
            free[id(r)] = before["end"]
        last[r["worker"]] = r
    return free


def _counts(record: dict[str, Any], watch: int) -> bool:
    """A record that counts the job's progress."""
    if record.get("event") in ("round", "progress"):
        return True
    return record.get("event") == "step" and record.get("worker") == watch


def run(
    scenario: Scenario,
    progress: Any = None,
    trace: bool = False,
    before: Callable[[Point, int], None] | None = None,
) -> list[RealPoint]:
    """Check every point first (nothing starts if one is refused), then run them in turn;
    with `trace`, a Chrome trace of each point's measured steps; `before(point,
    repetition)` is called before each run (run-real --recalibrate measures there)."""
    for point in scenario.points:
        check_supported(point.spec)
    if any(p.spec.real.device == "gpu" for p in scenario.points):
        require_gpu()
    runs: dict[str, list[RealPoint]] = {p.id: [] for p in scenario.points}
    done = []
    rounds = max(p.spec.real.repeats for p in scenario.points)
    for repetition in range(rounds):  # interleaved: a slow spell falls on every point alike
        for point in scenario.points:
            if repetition >= point.spec.real.repeats:
                continue
            if before is not None:
                before(point, repetition)
            runs[point.id].append(run_point(point))
            if repetition + 1 < point.spec.real.repeats:
                continue
            done.append(merge_repeats(runs[point.id]))
            if trace:  # of the first run
                first = done[-1].steps
                done[-1].trace = trace_of(
                    point.spec, point.id, first[first["replication"] == 0].copy()
                )
            if progress:
                progress(done[-1])
    order = {p.id: i for i, p in enumerate(scenario.points)}
    return sorted(done, key=lambda r: order[r.point_id])


def merge_repeats(runs: list[RealPoint]) -> RealPoint:
    """One point's repeated runs as one: the mean of every figure with 95% half-widths of
    the headline ones (`scenarios.stats.combine`, as the simulator combines replications),
    `replications` the number of runs; the step records of all, `replication` the run."""
    from scenarios.stats import combine

    frames = [run.steps.assign(replication=i) for i, run in enumerate(runs)]
    row = combine([run.row for run in runs]) if len(runs) > 1 else {**runs[0].row}
    # what the point is (workers, steps, ...) stays as it is: only measurements are averaged
    identity = vocab.RESULT_COLUMNS[: vocab.RESULT_COLUMNS.index("steps") + 1]
    row.update({k: runs[0].row[k] for k in (*identity, "device") if k in runs[0].row})
    row.setdefault("replications", 1)
    row["wall_time_s"] = sum(run.row["wall_time_s"] for run in runs)
    steps = pd.concat(frames, ignore_index=True)
    figures = [{key: float(run.row[key]) for key in RUN_FIGURES if key in run.row} for run in runs]
    return RealPoint(runs[0].point_id, row, steps, runs=figures if len(runs) > 1 else None)


#: per run of a repeated point, what meta.json's `runs` keeps
RUN_FIGURES = ("step_time_mean_s", "throughput_samples_per_s", "training_time_s")


def require_gpu() -> None:
    """Refuse `real.device: gpu` where TensorFlow sees no GPU."""
    import subprocess
    import sys

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    count = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else "0"
    if probe.returncode != 0 or count == "0":
        raise ScenarioError("real.device: gpu, but TensorFlow sees no GPU on this machine")
