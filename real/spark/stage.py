"""Run one multi-process job as a Spark barrier stage (`real.engine: spark`).

The TensorFlowOnSpark way: one barrier task per TensorFlow process (chief, workers,
parameter servers), each running the same `python -m real.process.worker JOB.json` as the local
launcher (`real/launcher.py`); what a task does, and the directory the tasks and the driver
share, is in `task.py`. The barrier stage feeds a shuffle, so that a failure
that stops the job is recovered by Spark's own stage retry: every task starts again, waits
out the downtime, and its process restores the last checkpoint. Cancelling the stage
(timeout, Ctrl-C) leaves no process behind: each dies with its task.

`SparkLauncher(jobs, timeout_s, device, master=..., conf=..., shared_dir=...)`: `.run()`
returns a `LaunchResult` as `Launcher.run` does, `.generations(failures)` every launch of
the job that the failures made (`Generation`, as the runner accounts them). Placement
(executor and host of each process, and the stage attempt) is in `LaunchResult.placement`.
`run_trials` runs independent trials as ordinary tasks, one single-worker process each, as
many at once as the executors have slots.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engines.spark import DEFAULT_MASTER, is_local, session
from scenarios.spec import ScenarioSpec

from .. import protocol
from ..job import Job, Trial
from ..launcher import GaveUp, Generation, Kill, LaunchResult, RunError
from .task import JobTask, Planned, RunDir, run_process, where

#: what Spark says when it stops retrying a stage
GAVE_UP = "has failed the maximum allowable number of times"
#: Spark's own default of spark.stage.maxConsecutiveAttempts
STAGE_ATTEMPTS = "4"


class SparkLauncher:
    """Run one multi-process job as a barrier stage, leaving no process behind."""

    def __init__(
        self,
        jobs: Sequence[Job],
        timeout_s: float,
        device: str = "cpu",
        master: str = DEFAULT_MASTER,
        conf: Mapping[str, str] | None = None,
        shared_dir: str | None = None,
    ):
        """`shared_dir`: where the tasks and the driver share the run's files (a
        temporary directory of its own is made there; None: this machine's)."""
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.device = device
        self.master = master
        self.conf = dict(conf or {})
        self.shared_dir = shared_dir

    @classmethod
    def of(cls, spec: ScenarioSpec, jobs: Sequence[Job]) -> SparkLauncher:
        """The launcher of a point's job on the point's Spark master and shared directory."""
        settings = spec.real.spark
        return cls(
            jobs,
            spec.real.timeout,
            spec.real.device,
            settings.master,
            settings.conf,
            spec.real.shared_dir,
        )

    def run(self) -> LaunchResult:
        """Run the job once, without failures."""
        (generation,) = self.generations([])
        return generation.result

    def generations(self, failures: list[Planned]) -> list[Generation]:
        """Run the job, injecting `failures` (in the order they strike); every launch of
        it, the last one complete. A launch is one attempt of the stage; an attempt after
        a crash at start-up, or a failure of Spark's own, is not a launch of its own."""
        spark = session(self.master, self.conf)
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        n = len(self.jobs)
        if n > slots:  # a barrier stage starts all its tasks at once or none
            raise RunError(
                f"real.spark.master: {self.master} has {slots} task slots; this job needs "
                f"{n} processes at once (one barrier task each)"
            )
        path = tempfile.mkdtemp(prefix="trainscale-spark-run-", dir=self.shared_dir)
        run = RunDir(path)
        try:
            task = JobTask(self.jobs, self.device, is_local(self.master), path, failures)
            # the shuffle makes the barrier stage a map stage: Spark retries those
            stage = lambda: (  # noqa: E731
                sc.parallelize(range(n), n).barrier().mapPartitions(task).partitionBy(1)
            )
            try:
                _collect(sc, stage, self.timeout_s * (1 + len(failures)), "run", needed=n)
            except _Starved as exc:  # what finished before it is kept
                raise GaveUp(
                    f"real.spark.master: {self.master}: {exc.slots} task slots left for "
                    f"{exc.waited_s:g} s (spark.scheduler.maxRegisteredResourcesWaitingTime); "
                    f"this job needs {n} at once (executors were lost)"
                ) from None
            except _StageFailed as exc:
                limit = sc.getConf().get("spark.stage.maxConsecutiveAttempts", STAGE_ATTEMPTS)
                raise _why(run, failures, exc.text, limit) from None
            return self._generations(run, failures)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _generations(self, run: RunDir, failures: list[Planned]) -> list[Generation]:
        attempts = run.attempts()
        found = []
        for attempt in attempts:
            stopped = run.stopped(attempt, failures)
            lost = run.lost_in(attempt) if stopped is None else None
            if stopped is None and lost is None and attempt != attempts[-1]:
                continue  # relaunched at once: a crash at start-up, or Spark's own failure
            tasks = run.tasks(attempt)
            records = run.records(attempt)
            records.sort(key=protocol.when)
            result = LaunchResult(
                records=records,
                launched=min((t["launched"] for t in tasks.values()), default=time.time()),
                finished=max((t.get("finished", 0.0) for t in tasks.values()), default=0.0),
            )
            result.placement = [
                {"process": i, "executor": t["executor"], "host": t["host"], "attempt": attempt}
                for i, t in sorted(tasks.items())
            ]
            struck = []
            for number, failure in enumerate(failures):
                hit = run.struck(number)
                if hit is None or hit["attempt"] != attempt:
                    continue
                back = run.read(f"restarted-{number}.json")
                struck.append(
                    Kill(
                        process=failure.process,
                        watch=failure.watch,
                        at_step=failure.at_step,
                        at_time=failure.at_time,
                        restart_after=failure.restart_after,
                        killed_at=hit["time"],
                        restarted_at=back["time"] if back else None,
                    )
                )
            stopped_at = stopped[1]["time"] if stopped else None
            if lost is not None:  # an executor lost: a failure from outside stopped the job
                struck.append(Kill(process=lost[0], watch=0, killed_at=lost[1]))
                stopped_at = lost[1]
            found.append(Generation(result, struck, stopped_at))
        return found


class _StageFailed(RunError):
    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


def _why(run: RunDir, failures: list[Planned], text: str, limit: str) -> RunError:
    """Why the stage failed, in one line: the first process that failed on its own, or
    Spark giving up on the failures, or what Spark said."""
    for attempt in run.attempts():
        if run.stopped(attempt, failures) is not None:
            continue
        failed = [t for _, t in sorted(run.tasks(attempt).items()) if t.get("error")]
        if failed:
            return RunError(f"process {failed[0]['index']} failed: {failed[0]['error']}")
    if GAVE_UP in text:
        stopped = sum(run.stopped(a, failures) is not None for a in run.attempts())
        return GaveUp(
            f"real.spark: Spark stopped retrying the job's stage after {stopped} of the "
            f"point's failures stopped it (spark.stage.maxConsecutiveAttempts: {limit})"
        )
    return RunError(f"the Spark stage failed: {_first_line(text)}")


class _Starved(RunError):
    """The executors offered fewer task slots than the barrier stage needs, for longer
    than Spark waits for resources to register (executors lost for good)."""

    def __init__(self, slots: int, waited_s: float):
        super().__init__(f"{slots} task slots")
        self.slots, self.waited_s = slots, waited_s


class _Slots:
    """Watch the task slots the executors offer while a barrier stage runs: fewer than
    `needed` for `spark.scheduler.maxRegisteredResourcesWaitingTime` (an executor lost
    and none come in its place), and the stage is cancelled (`starved`)."""

    def __init__(self, sc: Any, needed: int, cancel: Callable[[], None]):
        self.sc, self.needed, self.cancel = sc, needed, cancel
        self.wait_s = float(
            sc._jsc.sc()
            .conf()
            .getTimeAsSeconds("spark.scheduler.maxRegisteredResourcesWaitingTime", "30s")
        )
        self.slots = needed
        self.starved = threading.Event()
        self.done = threading.Event()
        if needed:
            threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        jsc = self.sc._jsc.sc()
        short_since: float | None = None
        while not self.done.wait(1.0):
            try:
                profile = jsc.resourceProfileManager().defaultResourceProfile()
                self.slots = int(jsc.maxNumConcurrentTasks(profile))
            except Exception:  # the session is stopping
                return
            if self.slots >= self.needed:
                short_since = None
                continue
            short_since = short_since or time.monotonic()
            if time.monotonic() - short_since >= self.wait_s:
                self.starved.set()
                self.cancel()
                return


def _collect(
    sc: Any, stage: Callable[[], Any], timeout_s: float, what: str, needed: int = 0
) -> list[Any]:
    """The results of `stage()`'s tasks; past `timeout_s`, or on Ctrl-C, its job group is
    cancelled (the tasks stop their processes) and the run fails in one line; so too
    while the executors offer fewer than `needed` task slots for long (`_Slots`)."""
    group = f"trainscale-{uuid.uuid4().hex}"
    sc.setJobGroup(group, f"trainscale run-real {what}", interruptOnCancel=True)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        sc.cancelJobGroup(group)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    slots = _Slots(sc, needed, lambda: sc.cancelJobGroup(group))
    try:
        return list(stage().collect())
    except Exception as exc:
        if slots.starved.is_set():
            raise _Starved(slots.slots, slots.wait_s) from None
        if expired.is_set():
            raise RunError(
                f"real.timeout: the {what} took longer than {timeout_s:g} s and was stopped "
                "(its Spark stage was cancelled)"
            ) from None
        raise _StageFailed(f"the Spark stage failed: {_first_line(str(exc))}", str(exc)) from None
    except BaseException:  # Ctrl-C: cancel the stage, whose tasks stop their processes
        sc.cancelJobGroup(group)
        raise
    finally:
        timer.cancel()
        slots.done.set()


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    for line in lines:
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return lines[0][:300] if lines else "no message"


class _Trial:
    """What each trial's task runs: one single-worker process (`strategy.kind:
    independent`), timed on the executor's clock."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, job: Trial) -> dict[str, Any]:
        started = time.time()
        records, error = run_process(job, self.device)
        return {
            "trial": job.trial,
            "started": started,
            "finished": time.time(),
            "records": records,
            "error": error,
            **where(),
        }


def run_trials(
    jobs: list[Trial],
    timeout_s: float,
    device: str = "cpu",
    master: str = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
) -> list[tuple[float, float, LaunchResult]]:
    """Every trial a Spark task, as many at once as the executors have slots; for each,
    in the jobs' order: when it started and ended, and its records."""
    sc = session(master, dict(conf or {})).sparkContext
    task = _Trial(device)
    outcomes = _collect(sc, lambda: sc.parallelize(jobs, len(jobs)).map(task), timeout_s, "search")
    done = []
    for outcome in sorted(outcomes, key=lambda o: o["trial"]):
        if outcome["error"]:
            raise RunError(f"trial {outcome['trial']} failed: {outcome['error']}")
        result = LaunchResult(
            records=[protocol.record_of(r) for r in outcome["records"]],
            launched=outcome["started"],
            finished=outcome["finished"],
        )
        result.placement = [{"trial": outcome["trial"], **_where_of(outcome)}]
        done.append((outcome["started"], outcome["finished"], result))
    return done


def _where_of(outcome: dict[str, Any]) -> dict[str, str]:
    return {"executor": outcome["executor"], "host": outcome["host"]}
