"""Failures in real runs: the scenario's schedule of them, which process each kills, and
the launches of a job they make, accounted as the contract says (`launch_with_failures`).
Locally the job is launched again after each failure that stops it; on Spark the stage's
own retry starts it again (`real/spark/stage.py`)."""

from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import TypeGuard

from results.streams import stream
from scenarios.sections.dynamics import RandomFailure
from scenarios.spec import ScenarioSpec

from .job import Job, Training
from .launcher import Generation, InjectedFailure, Kill, Launcher, LaunchResult
from .protocol import Checkpoint, Progress, Progressing, Record, Round, Serving, Step
from .spark.stage import SparkLauncher
from .spark.task import planned
from .summary import progress_index


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
    st = spec.strategy
    schedule = []
    for f in spec.failures:
        if not isinstance(f, RandomFailure):
            schedule.append(Failure(f.role, f.index, f.at_step, f.at_time, f.downtime))
            continue
        params = f.random
        servers = st.servers if st.serves_parameters else 0
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


def process_of(spec: ScenarioSpec, failure: Failure) -> tuple[int, int, bool]:
    """(process to kill, process whose records count steps, whether it rejoins alone)."""
    if spec.strategy.serves_parameters:  # jobs: chief, workers, servers
        if failure.role == "worker":
            return 1 + failure.index, 0, True  # a worker rejoins; the coordinator goes on
        if failure.role == "ps":
            return 1 + spec.workers + failure.index, 0, False
        return 0, 0, False  # the coordinator
    index = failure.index if failure.role == "worker" else 0
    return index, index, False


def _kills(spec: ScenarioSpec, pending: list[Failure]) -> list[Kill]:
    """The launcher's kills of the failures still to come, in order."""
    kills = []
    for failure in pending:
        process, watch, rejoins = process_of(spec, failure)
        kills.append(
            Kill(
                process=process,
                watch=watch,
                at_step=failure.at_step,
                at_time=failure.at_time,
                restart_after=failure.downtime if rejoins else None,
            )
        )
    return kills


def _local_generations(
    spec: ScenarioSpec, jobs: list[Job], pending: list[Failure]
) -> Generator[Generation, None, None]:
    """Launch the job here, again after each failure that stops it (once its downtime
    has passed), until a launch finishes."""
    origin: float | None = None  # host clock of the run's first step (at_time counts from it)
    while True:
        kills = _kills(spec, pending)
        launcher = Launcher(jobs, spec.real.timeout, spec.real.device, kills, origin=origin)
        try:
            result = launcher.run()
            stopped_at = None
        except InjectedFailure as exc:
            assert exc.result is not None
            result = exc.result
            stopped_at = launcher.killed_at or time.time()
        origin = launcher.origin if origin is None else origin
        struck = [k for k in kills if k.killed_at is not None]
        yield Generation(result, struck, stopped_at)
        if stopped_at is None:
            return
        downtime = pending[len(struck) - 1].downtime
        pending = pending[len(struck) :]
        time.sleep(downtime)


def _spark_generations(
    spec: ScenarioSpec, jobs: list[Job], pending: list[Failure]
) -> Generator[Generation, None, None]:
    """Run the job as one Spark stage, which Spark's stage retry starts again after each
    failure that stops it (`real/spark/stage.py`)."""
    launcher = SparkLauncher.of(spec, jobs)
    kills = _kills(spec, pending)
    yield from launcher.generations(
        [planned(k, f.downtime) for k, f in zip(kills, pending, strict=True)]
    )


def launch_with_failures(spec: ScenarioSpec, jobs: list[Job]) -> LaunchResult:
    """Run a point; kill the processes its failures name; recover as the contract says.

    A worker under parameter servers is killed and started again after its `downtime` on
    the same address: it rejoins, and the coordinator reschedules what it was running.
    Any other failure stops the job (under all-reduce the survivors' next collective fails
    within a fraction of a second; under parameter servers the coordinator's next call
    does, docs/tf-notes.md): every process is ended, the `downtime` waited, and the cluster
    started again, restoring the last `tf.train.CheckpointManager` checkpoint (every
    `checkpoint.every_steps`) and redoing the steps since; on Spark the stage's retry
    starts it again. `at_time` counts from the first step of the run; a failure whose
    time passes while the job restarts strikes as the restarted job takes its first step.
    Failures, lost steps, recovery (downtime + measured restart to the next step, or to
    the worker serving again) and checkpoint time are measured.
    """
    import shutil
    import tempfile

    pending = failure_schedule(spec)
    spark = spec.real.engine == "spark"
    # checkpoints: where every process sees them (on Spark, real.shared_dir where given)
    shared = spec.real.shared_dir if spark else None
    directory = tempfile.mkdtemp(prefix="trainscale-ckpt-", dir=shared)
    every = spec.checkpoint.every_steps
    jobs = [  # every training process checkpoints; servers hold nothing of their own
        job.replace(checkpoint_dir=directory, checkpoint_every=every)
        if isinstance(job, Training)
        else job
        for job in jobs
    ]
    total = LaunchResult()
    failed_at: float | None = None
    launches = (_spark_generations if spark else _local_generations)(spec, jobs, pending)
    try:
        for number, generation in enumerate(launches):
            result = generation.result
            result.records = [replace(record, generation=number) for record in result.records]
            total.records.extend(result.records)
            total.placement += [dict(p, generation=number) for p in result.placement]
            if number == 0:
                total.launched = result.launched
            if failed_at is not None:
                starts = [r.start for r in result.of(Step)]
                total.recovery_time_s += (min(starts) if starts else time.time()) - failed_at
            for kill in generation.struck:
                total.failures += 1
                if kill.restart_after is not None:  # a worker that rejoined: the job went on
                    back = [r.time for r in result.of(Serving) if r.time > (kill.killed_at or 0)]
                    # not back before the job ended or stopped: down until then
                    end = kill.restarted_at or generation.stopped_at or result.finished
                    back_at = min(back) if back else end or time.time()
                    total.recovery_time_s += back_at - (kill.killed_at or 0)
            if generation.stopped_at is None:
                total.finished = result.finished
                return total
            fatal = [k for k in generation.struck if k.restart_after is None][-1]
            every = not spec.strategy.serves_parameters
            done = max(
                (
                    progress_index(r) + 1
                    for r in result.records
                    if _counts(r, fatal.watch, every)
                ),
                default=0,
            )
            saved = max((r.step for r in total.of(Checkpoint) if r.worker == 0), default=0)
            total.lost_steps += max(0, done - saved)
            failed_at = generation.stopped_at
        raise AssertionError("the launches ended without one that finished")
    finally:
        launches.close()
        shutil.rmtree(directory, ignore_errors=True)


def _counts(record: Record, watch: int, every: bool) -> TypeGuard[Progressing]:
    """A record that counts the job's progress: a round, an update, the watched process's
    step, or (`every`: workers in step, without servers) any worker's. A worker lost
    between its peer's record of a step and its own has done that step too, and both redo
    it: the lost steps are those `kept_steps` marks lost."""
    if isinstance(record, Round | Progress):
        return True
    return isinstance(record, Step) and (every or record.worker == watch)
