"""What a Spark barrier task runs for `real.engine: spark`, and the files it shares.

`stage.py` starts one task per TensorFlow process of a job (`JobTask`). Each task
picks a free port on its own host, the tasks exchange `host:port` with
`BarrierTaskContext.allGather`, and each starts `python -m real.process.worker JOB.json`, the same
worker code as the local launcher, with the `TF_CONFIG` built from what they gathered. The
process dies with the task (the kernel's parent-death signal).

Tasks and the driver share one directory (`files.py`'s `RunDir`).

A failure that stops the job makes its task fail, so the stage fails and Spark's stage
retry starts every task again (the barrier stage feeds a shuffle, the only barrier stage
Spark retries); the new attempt's tasks wait out the failure's downtime and their
processes restore the last checkpoint. Any other failed task fails its attempt too; the
attempts after it fail at once, until Spark gives up (`spark.stage.maxConsecutiveAttempts`)
and the driver reports the first failure's own line.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from .. import protocol
from ..job import Job, reports
from ..launcher import CRASHES, START_ATTEMPTS, free_ports, last_error, process_env
from ..protocol import Done, Error, Progressing, Record
from .files import BEAT_S, Planned, RunDir

#: seconds between looks at the run directory while a process runs
POLL_S = 0.05


class Watch:
    """Which failures are due, and which fall to this task's process.

    A failure is watched for by the task of the process whose records count for it
    (`Planned.watch`), struck by the task of the process it kills; they meet in the run
    directory. Failures strike in order; one whose process is down waits until it is
    back (a worker down does not hold back a failure of another process)."""

    def __init__(self, run: RunDir, failures: list[Planned], me: int):
        self.run = run
        self.failures = failures
        self.me = me

    def upcoming(self) -> int | None:
        """The first failure that has not struck."""
        for number in range(len(self.failures)):
            if self.run.struck(number) is None:
                return number
        return None

    def down(self, process: int) -> bool:
        """Process `process` was killed and is to start again, and has not yet."""
        return any(
            f.process == process
            and f.restart_after is not None
            and self.run.struck(number) is not None
            and not self.run.has(f"restarted-{number}.json")
            for number, f in enumerate(self.failures)
        )

    def look(self, record: Record | None, now: float, stepping: bool) -> None:
        """Say the upcoming failure is due where this task watches for it and it is."""
        number = self.upcoming() if self.failures else None
        if number is None:
            return
        failure = self.failures[number]
        if failure.watch != self.me or self.run.has(f"request-{number}"):
            return
        if self.down(failure.process):
            return
        if failure.at_step is not None:
            due = isinstance(record, Progressing) and record.step >= failure.at_step - 1
        else:
            origin = self.run.read("origin.json")
            due = (
                failure.at_time is not None
                and origin is not None
                and stepping
                and now >= origin["time"] + failure.at_time
            )
        if due:
            self.run.claim(f"request-{number}", {"time": now})

    def strike(self) -> int | None:
        """A failure that is due and kills this task's process, not yet struck."""
        for number, failure in enumerate(self.failures):
            if (
                failure.process == self.me
                and self.run.has(f"request-{number}")
                and self.run.struck(number) is None
            ):
                return number
        return None


class StoppedByFailure(RuntimeError):
    """This task killed its process as the scenario asked, and so fails its attempt."""


class _Process:
    """One `python -m real.process.worker JOB.json` process, started (and started again) by a
    task, in a directory of its own; its records come through `next`."""

    END = "end"

    def __init__(self, job: Job, env: dict[str, str]):
        self.workdir = Path(tempfile.mkdtemp(prefix="trainscale-spark-"))
        self.path = self.workdir / "job.json"
        self.path.write_text(job.to_json())
        self.log = self.workdir / "stderr"
        self.env = env
        self.lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self.incarnation = 0
        self.process = self._start()

    def _start(self) -> subprocess.Popen[str]:
        with self.log.open("a") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "real.process.worker", str(self.path)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        threading.Thread(
            target=self._read, args=(self.incarnation, process.stdout), daemon=True
        ).start()
        return process

    def _read(self, incarnation: int, stream: Any) -> None:
        for line in stream:
            self.lines.put((incarnation, line.rstrip("\n")))
        self.lines.put((incarnation, None))

    def next(self) -> dict[str, Any] | str | None:
        """The running process's next record as it printed it (a JSON object), END once
        it has closed its output, or None if nothing came within `POLL_S`."""
        try:
            incarnation, line = self.lines.get(timeout=POLL_S)
        except queue.Empty:
            return None
        if incarnation != self.incarnation:
            return None  # what a killed process said last
        if line is None:
            return self.END
        return protocol.data_of(line)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> None:
        self.incarnation += 1
        self.process = self._start()

    def __enter__(self) -> _Process:
        return self

    def __exit__(self, *_: object) -> None:
        _stop(self.process)
        with contextlib.suppress(OSError):
            for item in self.workdir.iterdir():
                item.unlink()
            self.workdir.rmdir()


class _Beat:
    """A task's beat: its count, written to `name` in the run directory every `BEAT_S`
    until `stop` (or until the task's Python worker dies)."""

    def __init__(self, run: RunDir, name: str):
        self.done = threading.Event()
        threading.Thread(target=self._beat, args=(run, name), daemon=True).start()

    def _beat(self, run: RunDir, name: str) -> None:
        count = 0
        while True:
            run.write(name, {"beat": count})
            count += 1
            if self.done.wait(BEAT_S):
                return

    def stop(self) -> None:
        self.done.set()


class JobTask:
    """What each barrier task of a job runs (pickled to the executors: the jobs and the
    failures, plain data)."""

    def __init__(
        self,
        jobs: Sequence[Job],
        device: str,
        local: bool,
        run_dir: str,
        failures: list[Planned],
    ):
        self.jobs = jobs
        self.device = device
        self.local = local
        self.run_dir = run_dir
        self.failures = failures

    def __call__(self, _: Iterator[int]) -> Iterator[tuple[int, int]]:
        from pyspark import BarrierTaskContext

        ctx = BarrierTaskContext.get()
        index = ctx.partitionId()
        run = RunDir(self.run_dir)
        attempt = run.attempt(index)
        if attempt > 0:
            self._resume(run, attempt)
        # the address Spark reaches this task's executor at (a host's name may resolve
        # to loopback there, as Debian's 127.0.1.1 does): where the peers reach it too
        host = "127.0.0.1" if self.local else ctx.getTaskInfos()[index].address.rpartition(":")[0]
        (port,) = free_ports(1, host)
        gathered = ctx.allGather(json.dumps({"index": index, "host": host, "port": port}))
        peers = sorted((json.loads(m) for m in gathered), key=lambda p: p["index"])
        addresses = [f"{peer['host']}:{peer['port']}" for peer in peers]
        about: dict[str, Any] = {"index": index, "launched": time.time(), **where()}
        run.write(f"task-{attempt}-{index}.json", about)
        env = process_env(self.jobs, index, addresses, self.device)
        records = (run.path / f"records-{attempt}-{index}.jsonl").open("a")
        beat = _Beat(run, f"alive-{attempt}-{index}")
        try:
            with _Process(self.jobs[index], env) as process:
                ended = self._drive(run, attempt, index, process, records)
        finally:
            records.close()
            beat.stop()
        if ended.get("error") and not ended.get("crashed"):
            # a process whose peer's task is gone fails with it: the job was stopped from
            # outside (an executor lost), not by this process
            failed_at = time.time()
            lost = run.lost(attempt, index, len(self.jobs))
            if lost is not None:
                ended = {"lost": lost, "lost_at": failed_at}
        run.write(f"task-{attempt}-{index}.json", {**about, **ended, "finished": time.time()})
        if ended.get("stopped") is not None:
            raise StoppedByFailure(f"process {index} was killed (failure {ended['stopped']})")
        if ended.get("lost") is not None:
            raise StoppedByFailure(f"process {index} stopped: process {ended['lost']} was lost")
        if ended.get("error"):
            raise RuntimeError(f"process {index} failed: {ended['error']}")
        yield (0, index)

    def _resume(self, run: RunDir, attempt: int) -> None:
        """Before attempt `attempt`: wait out the downtime of the failure that stopped the
        one before; start again at once after a crash at start-up (once, as the local
        launcher does) or a failure of Spark's own; fail at once after a process failed."""
        stopped = run.stopped(attempt - 1, self.failures)
        if stopped is not None:
            number, struck = stopped
            wait = struck["time"] + self.failures[number].downtime - time.time()
            if wait > 0:
                time.sleep(wait)
            return
        before = run.tasks(attempt - 1).values()
        failed = [t for t in before if t.get("error")]
        crashes = sum(
            1 for a in range(attempt) if any(t.get("crashed") for t in run.tasks(a).values())
        )
        if failed and not (all(t.get("crashed") for t in failed) and crashes < START_ATTEMPTS):
            raise RuntimeError(f"an earlier attempt failed: {failed[0]['error']}")

    def _drive(
        self, run: RunDir, attempt: int, index: int, process: _Process, out: TextIO
    ) -> dict[str, Any]:
        """Follow the process to its end (a server's: until every reporting process is
        done), injecting the scenario's failures; how it ended: {} (done), `stopped` (the
        failure that stopped the job), or `error` (and whether it `crashed` at start-up)."""
        reporter = reports(self.jobs[index])
        reporting = [i for i, job in enumerate(self.jobs) if reports(job)]
        watch = Watch(run, self.failures, index)
        stepping = origin_known = False
        down: int | None = None  # the failure that killed this process, until it restarts
        while True:
            item = process.next()
            now = time.time()
            record = protocol.record_of(item) if isinstance(item, dict) else None
            if isinstance(item, dict):
                out.write(json.dumps(item) + "\n")
                out.flush()
            if isinstance(record, Progressing):
                stepping = True
                if not origin_known:
                    run.claim("origin.json", {"time": protocol.started(record)})
                    origin_known = True
            elif isinstance(record, Error):
                return {"error": record.error}
            elif isinstance(record, Done):
                (run.path / f"done-{attempt}-{index}").touch()
            if not reporter and all(run.has(f"done-{attempt}-{i}") for i in reporting):
                return {}
            watch.look(record, now, stepping)
            number = watch.strike() if down is None else None
            if number is not None:
                process.kill()
                run.write(f"struck-{number}.json", {"time": time.time(), "attempt": attempt})
                if self.failures[number].restart_after is None:
                    return {"stopped": number}
                down = number
            if down is not None:
                struck = run.struck(down) or {"time": now}
                if now >= struck["time"] + (self.failures[down].restart_after or 0.0):
                    process.restart()
                    run.write(f"restarted-{down}.json", {"time": now})
                    down = None
                continue
            if item == _Process.END:
                code = process.process.wait()
                if reporter and code == 0 and run.has(f"done-{attempt}-{index}"):
                    return {}
                return {
                    "error": f"exited with status {code}: {last_error(process.log)}",
                    "crashed": code < 0 and -code in CRASHES and not stepping,
                }


def where() -> dict[str, str]:
    """This task's executor (Spark's id; "driver" in local mode) and host."""
    log = os.environ.get("SPARK_LOG_URL_STDERR", "")  # ...&executorId=N&... on executors
    executor = "driver"
    if "executorId=" in log:
        executor = log.split("executorId=", 1)[1].split("&", 1)[0]
    return {"executor": executor, "host": socket.gethostname()}


def run_process(job: Job, device: str) -> tuple[list[dict[str, Any]], str]:
    """One single-process job to its end: its records as it printed them (JSON objects,
    read back typed with `protocol.record_of`), and what went wrong ("" if nothing)."""
    records: list[dict[str, Any]] = []
    error = ""
    done = False
    with _Process(job, process_env([job], 0, [], device)) as process:
        while (item := process.next()) != _Process.END:
            if isinstance(item, dict):
                records.append(item)
                record = protocol.record_of(item)
                if isinstance(record, Error):
                    error = record.error
                done = done or isinstance(record, Done)
        code = process.process.wait()
        if not error and (code != 0 or not done):
            error = f"exited with status {code}: {last_error(process.log)}"
    return records, error


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


def planned(kill: Any, downtime: float) -> Planned:
    """A launcher's `Kill` as the tasks inject it."""
    return Planned(
        kill.process, kill.watch, kill.at_step, kill.at_time, kill.restart_after, downtime
    )
