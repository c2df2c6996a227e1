"""What a Spark task decides from the run directory (real/spark/task.py), without Spark:
which attempt it is, when a failure is due and whose it is, and what a new attempt does
after the one before ended."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from real.job import AllReduceWorker
from real.protocol import Step
from real.spark.task import JobTask, Planned, RunDir, Watch


def _step(n: int) -> Step:
    return Step(worker=0, step=n, start=0.0, compute_end=0.05, end=0.1, loss=1.0)


def test_every_task_of_an_attempt_marks_the_same_attempt(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert [run.attempt(i) for i in (0, 1)] == [0, 0]
    assert [run.attempt(i) for i in (1, 0)] == [1, 1]  # the retry, in any order
    assert run.attempts() == [0, 1]


def test_a_failure_at_a_step_is_said_by_its_watcher_and_struck_by_its_process(
    tmp_path: Path,
) -> None:
    # parameter servers: the coordinator (0) watches; worker 1's task kills its process
    run = RunDir(tmp_path)
    failures = [Planned(1, 0, 8, None, 1.0, 1.0), Planned(3, 0, 22, None, None, 1.0)]
    watcher, worker, server = (Watch(run, failures, i) for i in (0, 1, 3))
    watcher.look(_step(6), time.time(), True)
    assert worker.strike() is None  # step 7 is the last one before the failure
    worker.look(_step(7), time.time(), True)  # records of another process say nothing
    assert worker.strike() is None
    watcher.look(_step(7), time.time(), True)
    assert worker.strike() == 0 and server.strike() is None and watcher.strike() is None
    run.write("struck-0.json", {"time": time.time(), "attempt": 0})
    assert worker.strike() is None and watcher.upcoming() == 1
    # the next failure waits for its step, not for worker 1 (down: another process)
    assert watcher.down(1) and not watcher.down(3)
    watcher.look(_step(21), time.time(), True)
    assert server.strike() == 1
    run.write("struck-1.json", {"time": time.time(), "attempt": 0})
    assert run.stopped(0, failures) == (1, run.struck(1))  # the server's stopped the job
    assert run.stopped(1, failures) is None


def test_failures_strike_in_order_and_wait_for_a_process_that_is_down(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    # worker 1 twice: the second waits until it is back, however far the steps are
    failures = [Planned(1, 0, 4, None, 5.0, 5.0), Planned(1, 0, 5, None, 5.0, 5.0)]
    watcher, worker = Watch(run, failures, 0), Watch(run, failures, 1)
    watcher.look(_step(9), time.time(), True)
    assert worker.strike() == 0
    run.write("struck-0.json", {"time": time.time(), "attempt": 0})
    watcher.look(_step(10), time.time(), True)
    assert worker.strike() is None  # down
    run.write("restarted-0.json", {"time": time.time()})
    watcher.look(_step(11), time.time(), True)
    assert worker.strike() == 1


def test_a_failure_at_a_time_counts_from_the_runs_first_step(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    failures = [Planned(0, 0, None, 3.0, None, 1.0)]
    watch = Watch(run, failures, 0)
    watch.look(None, 100.0, False)  # no first step yet: no origin
    assert watch.strike() is None
    assert run.claim("origin.json", {"time": 50.0})
    assert not run.claim("origin.json", {"time": 60.0})  # the first one stands
    watch.look(None, 52.9, True)
    assert watch.strike() is None
    watch.look(None, 53.0, False)  # due, but this launch has not stepped yet
    assert watch.strike() is None
    watch.look(None, 53.0, True)
    assert watch.strike() == 0


def _task(run: RunDir, failures: list[Planned]) -> JobTask:
    return JobTask(
        [AllReduceWorker(index=0), AllReduceWorker(index=1)], "cpu", True, str(run.path), failures
    )


def test_a_new_attempt_waits_out_the_downtime_of_the_failure_that_stopped_the_last(
    tmp_path: Path,
) -> None:
    run = RunDir(tmp_path)
    failures = [Planned(1, 1, 3, None, None, 0.3)]
    task = _task(run, failures)
    run.write("struck-0.json", {"time": time.time(), "attempt": 0})
    # the survivors' errors in the stopped attempt are the failure's, not their own
    run.write("task-0-0.json", {"index": 0, "error": "Collective ops is aborted"})
    started = time.monotonic()
    task._resume(run, 1)
    assert time.monotonic() - started >= 0.25


def test_a_new_attempt_after_a_process_failed_fails_at_once(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    task = _task(run, [])
    run.write("task-0-1.json", {"index": 1, "error": "exited with status 1: ValueError: bad"})
    with pytest.raises(RuntimeError, match="an earlier attempt failed: exited with status 1"):
        task._resume(run, 1)


def test_a_crash_at_start_up_is_launched_again_once(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    task = _task(run, [])
    crash = {"index": 0, "error": "exited with status -11: ...", "crashed": True}
    run.write("task-0-0.json", crash)
    task._resume(run, 1)  # once: on at once
    run.write("task-1-0.json", crash)
    with pytest.raises(RuntimeError, match="an earlier attempt failed"):
        task._resume(run, 2)
