"""A standalone Spark cluster on 127.0.0.1 for the tests: a master and workers started
from pyspark's own distribution (`bin/spark-class`), each its own JVM with its own cores,
every one of them (and every executor JVM and process they start) a process of ours.

The cluster authenticates (`spark.authenticate`) with a secret made for it
(`secrets.token_hex`), which the daemons read from their environment, never from a
command line. Every process the cluster starts inherits its tag (tests/processes.py), so
that `stop` can tell, by process id and environment, whether any of them is left.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyspark
from processes import TAG, kill_tagged, new_tag, tagged

HOME = Path(pyspark.__file__).resolve().parent
#: seconds a master or worker may take to start and register
START_S = 90.0


class Cluster:
    """A master and `workers` workers of `cores` cores each, on 127.0.0.1."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "2g"):
        self.root = root
        self.secret = secrets.token_hex(16)
        self.tag = new_tag()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            TAG: self.tag,
            "SPARK_HOME": str(HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",  # the daemons' web UIs too
            "_SPARK_AUTH_SECRET": self.secret,  # Spark's own: read by every daemon
        }
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0"],
            SPARK_MASTER_OPTS="-Dspark.authenticate=true -Dspark.master.rest.enabled=false",
        )
        self._wait("master", lambda: self._answers())
        self.workers = []
        for i in range(workers):
            args = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
            args += ["--cores", str(cores), "--memory", memory]
            args += ["--work-dir", str(root / f"work-{i}"), self.master_url]
            self.workers.append(
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    args,
                    SPARK_WORKER_OPTS="-Dspark.authenticate=true",
                )
            )
        for i in range(workers):
            self._wait(
                f"worker-{i}", lambda i=i: "Successfully registered" in self.log(f"worker-{i}")
            )

    def _start(self, name: str, cls: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        with (self.root / f"{name}.log").open("wb") as log:
            return subprocess.Popen(
                [str(HOME / "bin" / "spark-class"), cls, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, **env},
                start_new_session=True,  # its own process group: the JVM and its executors
            )

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False

    def _wait(self, name: str, ready: object) -> None:
        deadline = time.monotonic() + START_S
        while not ready():  # type: ignore[operator]
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Spark {name} did not start: {self.log(name)[-2000:]}")
            time.sleep(0.2)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def executor_of(self, worker: int) -> int | None:
        """The pid of worker `worker`'s executor JVM (CoarseGrainedExecutorBackend): a
        child of the worker's JVM."""
        parent = self.workers[worker].pid
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat[1]) == parent and b"CoarseGrainedExecutorBackend" in cmdline:
                return int(entry.name)
        return None

    def kill_worker(self, worker: int) -> None:
        """Stop worker `worker` for good: its JVM and its executor's (its process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.workers[worker].pid, signal.SIGKILL)
        self.workers[worker].wait()

    def stop(self) -> list[int]:
        """End every process of the cluster; the pids of those still there 10 s after its
        daemons' process groups were killed (then killed too): none, if each went with
        its parent as it should."""
        for process in [self.master, *getattr(self, "workers", [])]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 10
        while tagged(self.tag) and time.monotonic() < deadline:
            time.sleep(0.2)
        return kill_tagged(self.tag)
