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
in `LaunchResult.placement`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from scenarios.errors import UserError

from . import protocol
from .launcher import LaunchResult, RunError, free_ports, last_error, process_env

ROOT = Path(__file__).resolve().parent.parent
#: the master a scenario with `real.engine: spark` and no master runs on
DEFAULT_MASTER = "local[*]"

_session: Any = None
_session_key: tuple[str, tuple[tuple[str, str], ...]] | None = None


def is_local(master: str) -> bool:
    """Whether every task of this master runs on this machine."""
    return master.startswith("local")


def session(master: str, conf: Mapping[str, str]) -> Any:
    """The process's SparkSession for this master and configuration (made once)."""
    global _session, _session_key
    key = (master, tuple(sorted(conf.items())))
    if _session is not None and _session_key == key:
        return _session
    if _session is not None:
        _session.stop()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UserError(
            "real.engine: spark needs pyspark (pip install -e '.[spark]'; make test installs it)"
        ) from None
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise UserError(
            "real.engine: spark needs a Java runtime (Java 17): none on PATH or in JAVA_HOME"
        )

    # the tasks import this package: give its root to the Python workers Spark starts
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = path
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("trainscale run-real")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", path)
        .config("spark.task.maxFailures", "1")
    )
    if is_local(master):  # nothing listens beyond this host
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for name, value in conf.items():
        builder = builder.config(name, value)
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    _session_key = key
    atexit.register(stop_session)
    return _session


def stop_session() -> None:
    global _session, _session_key
    if _session is not None:
        with contextlib.suppress(Exception):
            _session.stop()
    _session, _session_key = None, None


class SparkLauncher:
    """Run one multi-process job as a barrier stage, leaving no process behind."""

    def __init__(
        self,
        jobs: list[dict[str, Any]],
        timeout_s: float,
        device: str = "cpu",
        master: str = DEFAULT_MASTER,
        conf: Mapping[str, str] | None = None,
    ):
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.device = device
        self.master = master
        self.conf = dict(conf or {})

    def run(self) -> LaunchResult:
        spark = session(self.master, self.conf)
        sc = spark.sparkContext
        slots = sc.defaultParallelism
        if len(self.jobs) > slots:  # a barrier stage starts all its tasks at once or none
            raise RunError(
                f"real.spark.master: {self.master} has {slots} task slots; this job needs "
                f"{len(self.jobs)} processes at once (one barrier task each)"
            )
        group = f"trainscale-{uuid.uuid4().hex}"
        sc.setJobGroup(group, "trainscale run-real", interruptOnCancel=True)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            sc.cancelJobGroup(group)

        timer = threading.Timer(self.timeout_s, expire)
        timer.daemon = True
        result = LaunchResult(launched=time.time())
        task = _Task(self.jobs, self.device, is_local(self.master))
        rdd = sc.parallelize(range(len(self.jobs)), len(self.jobs)).barrier()
        timer.start()
        try:
            outcomes = rdd.mapPartitions(task).collect()
        except Exception as exc:
            if expired.is_set():
                raise RunError(
                    f"real.timeout: the run took longer than {self.timeout_s:g} s and was "
                    "stopped (its Spark stage was cancelled)"
                ) from None
            raise RunError(f"the Spark stage failed: {_first_line(exc)}") from None
        except BaseException:  # Ctrl-C: cancel the stage, whose tasks stop their processes
            sc.cancelJobGroup(group)
            raise
        finally:
            timer.cancel()
        outcomes.sort(key=lambda o: o["index"])
        for outcome in outcomes:
            if outcome["error"]:
                raise RunError(f"process {outcome['index']} failed: {outcome['error']}", result)
        records = [r for o in outcomes for r in o["records"]]
        records.sort(key=lambda r: r.get("end", r.get("time", r.get("start", 0.0))))
        result.records = records
        result.placement = [
            {"process": o["index"], "executor": o["executor"], "host": o["host"]} for o in outcomes
        ]
        result.finished = time.time()
        return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:
        if "Error" in line or "error" in line:
            return line.strip()[:300]
    return text[0][:300] if text else type(exc).__name__


class _Task:
    """What each barrier task runs (pickled to the executors: plain data only)."""

    def __init__(self, jobs: list[dict[str, Any]], device: str, local: bool):
        self.jobs = jobs
        self.device = device
        self.local = local

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
        env = process_env(self.jobs, index, addresses, self.device)
        workdir = Path(tempfile.mkdtemp(prefix="trainscale-spark-"))
        path = workdir / "job.json"
        path.write_text(json.dumps(job))
        log = workdir / "stderr"
        records: list[dict[str, Any]] = []
        error = ""
        with log.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "real.worker", str(path)],
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
            try:
                if job.get("serve"):  # a server: up until every reporting process is done
                    ctx.barrier()
                else:
                    assert process.stdout is not None
                    for line in process.stdout:
                        record = protocol.parse(line.rstrip("\n"))
                        if record is None:
                            continue
                        if record.get("event") == "error":
                            error = str(record.get("error"))
                        records.append(record)
                    code = process.wait()
                    if not error and (
                        code != 0 or not any(r.get("event") == "done" for r in records)
                    ):
                        error = f"exited with status {code}: {last_error(log)}"
                    ctx.barrier()
            finally:
                _stop(process)
        with contextlib.suppress(OSError):
            for item in workdir.iterdir():
                item.unlink()
            workdir.rmdir()
        yield {
            "index": index,
            "records": records,
            "error": error,
            "executor": os.environ.get("SPARK_EXECUTOR_ID", "driver"),
            "host": socket.gethostname(),
        }


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
