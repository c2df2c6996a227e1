"""Run one multi-process job as a Spark barrier stage (`real.engine: spark`).

The TensorFlowOnSpark way: one barrier task per TensorFlow process (chief, workers,
parameter servers). Each task picks a free port on its own host, the tasks exchange
`host:port` with `BarrierTaskContext.allGather`, and each starts the same
`python -m real.worker JOB.json` as the local launcher does (`real/launcher.py`), with the
`TF_CONFIG` built from what they gathered. A task returns its process's records to the
driver; servers run until every reporting process is done (a second barrier), then are
stopped. Every TensorFlow process dies with the Spark task that started it (the kernel's
parent-death signal), so cancelling the stage (timeout, Ctrl-C) leaves none behind.

`SparkLauncher(jobs, timeout_s, device, master=..., conf=...).run()` returns a
`LaunchResult` as `Launcher.run` does; placement (executor and host of each process) is
in `LaunchResult.placement`. `run_trials` runs independent trials as ordinary tasks, one
single-worker process each, as many at once as the executors have slots.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from scenarios.spark import DEFAULT_MASTER, is_local, session

from . import protocol
from .launcher import (
    InjectedFailure,
    Kill,
    LaunchResult,
    RunError,
    free_ports,
    last_error,
    process_env,
)


class SparkLauncher:
    """Run one multi-process job as a barrier stage, leaving no process behind."""

    def __init__(
        self,
        jobs: list[dict[str, Any]],
        timeout_s: float,
        device: str = "cpu",
        master: str = DEFAULT_MASTER,
        conf: Mapping[str, str] | None = None,
        kills: list[Kill] | None = None,
    ):
        """`kills`: failures to inject, as `Launcher` takes them; on Spark only at a step,
        of a process that reports its own steps, and stopping the job (no rejoin)."""
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.device = device
        self.master = master
        self.conf = dict(conf or {})
        self.kills = list(kills or [])
        for kill in self.kills:
            if kill.at_step is None or kill.watch != kill.process or kill.restart_after:
                raise ValueError("on Spark a failure strikes at a step of the process it kills")
        self.origin: float | None = None  # host clock of the first step
        self.killed_at: float | None = None  # when the failure that stopped the job struck

    def run(self) -> LaunchResult:
        spark = session(self.master, self.conf)
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        if len(self.jobs) > slots:  # a barrier stage starts all its tasks at once or none
            raise RunError(
                f"real.spark.master: {self.master} has {slots} task slots; this job needs "
                f"{len(self.jobs)} processes at once (one barrier task each)"
            )
        result = LaunchResult(launched=time.time())
        # the next failure strikes in this launch (the runner starts a new one after it)
        kill = self.kills[0] if self.kills else None
        at = {kill.process: kill.at_step} if kill and kill.at_step is not None else {}
        task = _Task(self.jobs, self.device, is_local(self.master), at)
        outcomes = _collect(
            sc,
            lambda: (
                sc.parallelize(range(len(self.jobs)), len(self.jobs)).barrier().mapPartitions(task)
            ),
            self.timeout_s,
            "run",
        )
        outcomes.sort(key=lambda o: o["index"])
        records = [r for o in outcomes for r in o["records"]]
        records.sort(key=lambda r: r.get("end", r.get("time", r.get("start", 0.0))))
        result.records = records
        result.placement = [
            {"process": o["index"], "executor": o["executor"], "host": o["host"]} for o in outcomes
        ]
        starts = [r["start"] for r in records if r.get("event") == "step"]
        if self.origin is None and starts:
            self.origin = min(starts)
        killed = [o for o in outcomes if o["killed_at"] is not None]
        if kill is not None and killed:  # the job stopped as the scenario asked
            kill.killed_at = self.killed_at = killed[0]["killed_at"]
            raise InjectedFailure(
                f"process {kill.process} was killed at step {kill.at_step}", result
            )
        for outcome in outcomes:
            if outcome["error"]:
                raise RunError(f"process {outcome['index']} failed: {outcome['error']}", result)
        result.finished = time.time()
        return result


def _collect(sc: Any, stage: Callable[[], Any], timeout_s: float, what: str) -> list[Any]:
    """The results of `stage()`'s tasks; past `timeout_s`, or on Ctrl-C, its job group is
    cancelled (the tasks stop their processes) and the run fails in one line."""
    group = f"trainscale-{uuid.uuid4().hex}"
    sc.setJobGroup(group, f"trainscale run-real {what}", interruptOnCancel=True)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        sc.cancelJobGroup(group)

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        return list(stage().collect())
    except Exception as exc:
        if expired.is_set():
            raise RunError(
                f"real.timeout: the {what} took longer than {timeout_s:g} s and was stopped "
                "(its Spark stage was cancelled)"
            ) from None
        raise RunError(f"the Spark stage failed: {_first_line(exc)}") from None
    except BaseException:  # Ctrl-C: cancel the stage, whose tasks stop their processes
        sc.cancelJobGroup(group)
        raise
    finally:
        timer.cancel()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return text[0][:300] if text else type(exc).__name__


class _Worker:
    """One `python -m real.worker` process started by a task, in a directory of its own;
    it dies with the task (`_die_with_parent`) and is always stopped on the way out."""

    def __init__(self, job: dict[str, Any], env: dict[str, str]):
        self.killed_at: float | None = None  # when it was killed on purpose
        self.workdir = Path(tempfile.mkdtemp(prefix="trainscale-spark-"))
        path = self.workdir / "job.json"
        path.write_text(json.dumps(job))
        self.log = self.workdir / "stderr"
        with self.log.open("w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "real.worker", str(path)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def __enter__(self) -> _Worker:
        return self

    def __exit__(self, *_: object) -> None:
        _stop(self.process)
        with contextlib.suppress(OSError):
            for item in self.workdir.iterdir():
                item.unlink()
            self.workdir.rmdir()

    def records(self, kill_at: int | None = None) -> tuple[list[dict[str, Any]], str]:
        """Its records until it exits, and what went wrong ("" if nothing). `kill_at`: kill
        it (SIGKILL to its group) once it reported step `kill_at - 1`, as `Launcher` does."""
        records: list[dict[str, Any]] = []
        error = ""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            record = protocol.parse(line.rstrip("\n"))
            if record is None:
                continue
            if record.get("event") == "error":
                error = str(record.get("error"))
            records.append(record)
            if (
                kill_at is not None
                and self.killed_at is None
                and record.get("event") in ("step", "round", "progress")
                and (record.get("step") or 0) >= kill_at - 1
            ):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.killed_at = time.time()
        code = self.process.wait()
        if self.killed_at is not None:
            return records, ""  # killed on purpose
        if not error and (code != 0 or not any(r.get("event") == "done" for r in records)):
            error = f"exited with status {code}: {last_error(self.log)}"
        return records, error


def _where() -> dict[str, str]:
    """This task's executor (Spark's id; "driver" in local mode) and host."""
    log = os.environ.get("SPARK_LOG_URL_STDERR", "")  # ...&executorId=N&... on executors
    executor = "driver"
    if "executorId=" in log:
        executor = log.split("executorId=", 1)[1].split("&", 1)[0]
    return {"executor": executor, "host": socket.gethostname()}


class _Task:
    """What each barrier task runs (pickled to the executors: plain data only)."""

    def __init__(
        self, jobs: list[dict[str, Any]], device: str, local: bool, kill_at: dict[int, int]
    ):
        self.jobs = jobs
        self.device = device
        self.local = local
        self.kill_at = kill_at  # process -> the step at which to kill it

    def __call__(self, _: Iterator[int]) -> Iterator[dict[str, Any]]:
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        index = ctx.partitionId()
        host = "127.0.0.1" if self.local else socket.gethostbyname(socket.gethostname())
        (port,) = free_ports(1, host)
        gathered = ctx.allGather(json.dumps({"index": index, "host": host, "port": port}))
        peers = sorted((json.loads(m) for m in gathered), key=lambda p: p["index"])
        job = self.jobs[index]
        addresses = [f"{peer['host']}:{peer['port']}" for peer in peers]
        records: list[dict[str, Any]] = []
        error = ""
        with _Worker(job, process_env(self.jobs, index, addresses, self.device)) as worker:
            if not job.get("serve"):
                records, error = worker.records(self.kill_at.get(index))
            # servers stay up until every reporting process is done
            ctx.barrier()
        yield {
            "index": index,
            "records": records,
            "error": error,
            "killed_at": worker.killed_at,
            **_where(),
        }


class _Trial:
    """What each trial's task runs: one single-worker process (`strategy.kind:
    independent`), timed on the executor's clock."""

    def __init__(self, device: str):
        self.device = device

    def __call__(self, job: dict[str, Any]) -> dict[str, Any]:
        started = time.time()
        with _Worker(job, process_env([job], 0, [], self.device)) as worker:
            records, error = worker.records()
        return {
            "trial": job["trial"],
            "started": started,
            "finished": time.time(),
            "records": records,
            "error": error,
            **_where(),
        }


def run_trials(
    jobs: list[dict[str, Any]],
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
            records=outcome["records"], launched=outcome["started"], finished=outcome["finished"]
        )
        result.placement = [{"trial": outcome["trial"], **_where_of(outcome)}]
        done.append((outcome["started"], outcome["finished"], result))
    return done


def _where_of(outcome: dict[str, Any]) -> dict[str, str]:
    return {"executor": outcome["executor"], "host": outcome["host"]}


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the task's Python worker dies."""
    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    if process.stdout:
        process.stdout.close()
