"""Start a local TensorFlow cluster, stream its records, and always clean it up.

Each worker is `python -m real.process.worker JOB.json` in a process group of its own, with a
`TF_CONFIG` naming every worker at 127.0.0.1 on a free port. The launcher reads their
records (`real/protocol.py`) as they come, enforces the timeout, and on success, error,
timeout or Ctrl-C ends every child: SIGTERM to its group, then SIGKILL, then reaps it.
No process outlives `Launcher.run`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from engines.spark import SECRET_ENV, SPARK_SECRET_ENV

from . import protocol
from .job import Job, reports
from .protocol import Done, Error, Progressing, Record

R = TypeVar("R", bound=Record)

#: a relaunch is said here: with no logging set up, Python prints a warning's message
_log = logging.getLogger(__name__)

#: seconds a worker gets to exit after SIGTERM before SIGKILL
GRACE_S = 3.0


class RunError(RuntimeError):
    """A worker failed or the run timed out: the message says which and why."""

    def __init__(self, message: str, result: LaunchResult | None = None):
        super().__init__(message)
        self.result = result  # what the run reported before it failed


class InjectedFailure(RunError):
    """The run failed because the launcher killed a process, as the scenario asked."""


class GaveUp(RunError):
    """Spark stopped retrying a job's stage: the point's failures stopped it more often
    than `spark.stage.maxConsecutiveAttempts` allows. The runner sets `done` (the points
    finished before it) and `point` (its id), which run-real writes."""

    done: list[Any]
    point: str = ""


class CrashedAtStart(RunError):
    """A process died of a fatal signal of its own (a segmentation fault, an abort) before
    the job took any step: the run measured nothing, and is launched again once."""


#: signals that end a process that crashed (none of them is sent by this launcher)
CRASHES = {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
#: launches of one run when its processes crash before the first step
START_ATTEMPTS = 2


#: environment variables that hold a Spark cluster's shared secret
SECRETS = (SPARK_SECRET_ENV, SECRET_ENV)


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports that were free on host a moment ago (bound together, then closed)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(jobs: Sequence[Job], addresses: list[str], me: int) -> str:
    """TF_CONFIG for job `me`: every job's role and `host:port`."""
    cluster: dict[str, list[str]] = {}
    for job, address in zip(jobs, addresses, strict=True):
        cluster.setdefault(job.role, []).append(address)
    task = {"type": jobs[me].role, "index": jobs[me].index}
    return json.dumps({"cluster": cluster, "task": task})


def process_env(
    jobs: Sequence[Job], index: int, addresses: list[str], device: str
) -> dict[str, str]:
    """The environment of job `index`'s process: its TF_CONFIG, the GPU it may use (none
    on a CPU run), and this package on its path; never a Spark cluster's shared secret,
    which a Spark worker hands its executors (engines/spark.py)."""
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env.pop("TF_CONFIG", None)
    job = jobs[index]
    if len(jobs) > 1 and not job.standalone:
        env["TF_CONFIG"] = tf_config(jobs, addresses, index)
    if device == "gpu" and job.role == "worker" and job.local_devices > 1:
        # in graph: the process drives every GPU of the host
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(job.local_devices))
    elif device == "gpu" and job.role == "worker":
        env["CUDA_VISIBLE_DEVICES"] = str(job.index)  # one GPU per worker
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # never touch a GPU on a CPU run
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


@dataclass
class LaunchResult:
    records: list[Record] = field(default_factory=list)
    launched: float = 0.0  # host clock when the first process was started
    finished: float = 0.0
    failures: int = 0  # set by the runner across restarts
    lost_steps: int = 0
    recovery_time_s: float = 0.0
    # where each process ran (Spark: its executor and host); empty for local runs
    placement: list[dict[str, Any]] = field(default_factory=list)

    def of(self, kind: type[R]) -> list[R]:
        """Its records of one kind (`real/protocol.py`), in order."""
        return [r for r in self.records if isinstance(r, kind)]


@dataclass
class Kill:
    """One failure to inject: SIGKILL process `process` once process `watch` has reported
    step `at_step - 1` (a step, round or update record), or `at_time` seconds after
    `origin` (not before this launch's first step). With `restart_after` the process is
    started again that many seconds later (a parameter-server worker rejoins); otherwise
    the run fails with InjectedFailure and the caller restarts the job."""

    process: int
    watch: int
    at_step: int | None = None
    at_time: float | None = None  # seconds after the launcher's origin
    restart_after: float | None = None
    killed_at: float | None = None  # set by the launcher
    restarted_at: float | None = None


@dataclass
class Generation:
    """One launch of a job as the runner accounts it: a local launch, or one attempt of
    its Spark stage. `struck`: the failures that struck in it, in order; `stopped_at`:
    when the one that stopped it struck (None: the job finished in this launch)."""

    result: LaunchResult
    struck: list[Kill]
    stopped_at: float | None


def last_error(log: Path) -> str:
    """The last line of a process's stderr that names an error (else its last line)."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no output"
    for line in reversed(lines):
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else "no output"


#: seconds without any record after the first step before a run is declared hung
HANG_S = 180.0


class Launcher:
    """Run one multi-process job to completion (or failure), leaving no process behind."""

    def __init__(
        self,
        jobs: Sequence[Job],
        timeout_s: float,
        device: str = "cpu",
        kills: list[Kill] | None = None,
        hang_s: float = HANG_S,
        origin: float | None = None,
    ):
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.device = device
        self.kills = list(kills or [])  # in the order they strike
        self.origin = origin  # host clock at_time counts from; None: this run's first step
        self.hang_s = hang_s
        self.killed_at: float | None = None  # when a kill that stops the job struck
        self._stepping = False  # a step (or round, or progress) has been reported
        self._commands: list[tuple[list[str], dict[str, str], Path]] = []
        self.processes: list[subprocess.Popen[str]] = []
        self._queue: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._logs: list[Path] = []

    def _env(self, index: int, ports: list[int]) -> dict[str, str]:
        addresses = [f"127.0.0.1:{port}" for port in ports]
        return process_env(self.jobs, index, addresses, self.device)

    def _read(self, index: int, stream: Any) -> None:
        for line in stream:
            self._queue.put((index, line.rstrip("\n")))
        self._queue.put((index, None))

    def run(self) -> LaunchResult:
        """Run the job; launch it again, once, if a process crashes before the first step
        (TensorFlow on this VM has segfaulted while starting: docs/real-backend.md)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._run_once()
            except CrashedAtStart as exc:
                if attempt == START_ATTEMPTS:
                    raise
                _log.warning(
                    "run-real: warning: %s; launching the run again (%d of %d relaunch)",
                    exc,
                    attempt,
                    START_ATTEMPTS - 1,
                )
        raise AssertionError("unreachable")

    def _run_once(self) -> LaunchResult:
        # this launch's own processes, logs and records (a relaunch starts afresh)
        self._commands, self.processes, self._logs = [], [], []
        self._queue = queue.Queue()
        self._stepping = False
        result = LaunchResult()
        workdir = Path(tempfile.mkdtemp(prefix="trainscale-real-"))
        try:
            ports = free_ports(len(self.jobs))
            result.launched = time.time()
            for index, job in enumerate(self.jobs):
                path = workdir / f"job-{index}.json"
                path.write_text(job.to_json())
                keep = os.environ.get("TRAINSCALE_LOG_DIR")  # keep every child's stderr there
                log = (Path(keep) if keep else workdir) / f"{job.role}-{job.index}.stderr"
                log.parent.mkdir(parents=True, exist_ok=True)
                self._logs.append(log)
                self._commands.append(
                    (
                        [sys.executable, "-m", "real.process.worker", str(path)],
                        self._env(index, ports),
                        log,
                    )
                )
                self.processes.append(self._start(index))
            try:
                self._collect(result)
            except RunError as exc:
                exc.result = result
                if self.killed_at is not None:
                    raise InjectedFailure(str(exc), result) from None
                raise
            result.finished = time.time()
            return result
        finally:
            try:
                self.stop()
            except KeyboardInterrupt:  # a signal struck during the stop: finish it first
                self.stop()
                raise
            for log in self._logs:
                if log.parent == workdir:
                    log.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                for path in workdir.iterdir():
                    path.unlink()
                workdir.rmdir()

    def _start(self, index: int) -> subprocess.Popen[str]:
        argv, env, log = self._commands[index]
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=log.open("a"),
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: killed as a whole
        )
        threading.Thread(target=self._read, args=(index, process.stdout), daemon=True).start()
        return process

    def _inject(self, index: int, record: Record | None) -> None:
        """Start again every rejoining process whose downtime is over; kill the process
        the next failure names when its time comes. Failures strike in order, and a
        worker that is down does not hold back a failure of another process (the job goes
        on without it); one of a process that is down waits until it is back."""
        now = time.time()
        for kill in self.kills:
            if (
                kill.killed_at is not None
                and kill.restart_after is not None
                and kill.restarted_at is None
                and now >= kill.killed_at + kill.restart_after
            ):
                self.processes[kill.process] = self._start(kill.process)
                kill.restarted_at = now
        upcoming = [k for k in self.kills if k.killed_at is None]
        if not upcoming or self._killed(upcoming[0].process):
            return
        kill = upcoming[0]
        if kill.at_step is not None:
            due = (
                record is not None
                and index == kill.watch
                and isinstance(record, Progressing)
                and record.step >= kill.at_step - 1
            )
        else:
            due = (
                kill.at_time is not None
                and self.origin is not None
                and self._stepping
                and now >= self.origin + kill.at_time
            )
        if due:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.processes[kill.process].pid, signal.SIGKILL)
            self.processes[kill.process].wait()
            kill.killed_at = now
            if kill.restart_after is None:
                self.killed_at = now

    def _collect(self, result: LaunchResult) -> None:
        """Read records until every reporting process is done (servers never are)."""
        deadline = time.monotonic() + self.timeout_s
        reporting = {i for i, job in enumerate(self.jobs) if reports(job)}
        done: set[int] = set()
        self._stepping = False
        heard = time.monotonic()
        while not reporting <= done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RunError(
                    f"real.timeout: the run took longer than {self.timeout_s:g} s and was "
                    f"stopped ({len(done)} of {len(reporting)} processes had finished)"
                )
            if self._stepping and time.monotonic() - heard > self.hang_s:
                raise RunError(
                    f"hang: no process reported progress for {self.hang_s:g} s; every "
                    "process was stopped"
                )
            try:
                index, line = self._queue.get(timeout=min(left, 0.05 if self.kills else 0.5))
            except queue.Empty:
                self._inject(-1, None)
                self._check_exits(done)
                continue
            if line is None:
                if self.processes[index].poll() is None:
                    continue  # the end of a killed process's output; its successor runs
                if index in reporting and index not in done and not self._killed(index):
                    self._check_exits(done, only=index)
                continue
            try:
                record = protocol.parse(line)
            except protocol.ProtocolError as exc:
                raise RunError(f"process {index}: {exc}") from None
            if record is None:
                continue
            heard = time.monotonic()
            if isinstance(record, Progressing):
                self._stepping = True
                if self.origin is None:
                    self.origin = protocol.started(record)
            if isinstance(record, Error):
                raise RunError(f"process {index} failed: {record.error}")
            if isinstance(record, Done):
                done.add(index)
            result.records.append(record)
            self._inject(index, record)
        for index in reporting:
            self.processes[index].wait(timeout=60)
        self._check_exits(done)

    def _killed(self, index: int) -> bool:
        """A process this launcher killed on purpose and will start again (its end is no
        error)."""
        return any(
            kill.process == index
            and kill.restart_after is not None
            and kill.killed_at is not None
            and kill.restarted_at is None
            for kill in self.kills
        )

    def _check_exits(self, done: set[int], only: int | None = None) -> None:
        """Fail on any process that ended badly, or a reporting one that ended early."""
        for index, process in enumerate(self.processes):
            if (only is not None and index != only) or self._killed(index):
                continue
            code = process.poll() if only is None else process.wait(timeout=30)
            if code is None:
                continue
            if code < 0 and -code in CRASHES and not self._stepping:
                name = signal.Signals(-code).name
                raise CrashedAtStart(
                    f"process {index} ({self.jobs[index].role} "
                    f"{self.jobs[index].index}) crashed with {name} before the first "
                    f"step: {self._last_error(index)}"
                )
            if code != 0 or (index not in done and reports(self.jobs[index])):
                raise RunError(
                    f"process {index} exited with status {code}: {self._last_error(index)}"
                )

    def _last_error(self, index: int) -> str:
        return last_error(self._logs[index])

    def stop(self) -> None:
        """End every child: SIGTERM to its group, SIGKILL after a grace period, reap."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for process in self.processes:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # anything it left in its group
            if process.stdout:
                process.stdout.close()
