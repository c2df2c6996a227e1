"""A standalone Spark cluster for the tests: a master and workers started from pyspark's
own distribution (`bin/spark-class`), each its own JVM with its own cores, every one of
them (and every executor JVM and process they start) a process of ours. They run on
127.0.0.1, or each worker on a host of its own: a Linux network namespace with its own
address on a bridge (`Namespaces`), where Spark's daemons listen on that address only.

The cluster authenticates (`spark.authenticate`) with a secret made for it
(`secrets.token_hex`), which the daemons read from their environment, never from a
command line. Every process the cluster starts inherits its tag (tests/processes.py), so
that `stop` can tell, by process id and environment, whether any of them is left.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyspark
from processes import TAG, kill_tagged, new_tag, tagged

HOME = Path(pyspark.__file__).resolve().parent
#: seconds a master or worker may take to start and register
START_S = 90.0


@dataclass(frozen=True)
class Host:
    """Where a program runs: the address it listens on, and the command line that runs
    it there (`ip netns exec NS`; none in the test's own network namespace)."""

    address: str = "127.0.0.1"
    enter: tuple[str, ...] = ()


class Cluster:
    """A master on `master` and a worker of `cores` cores on each of `hosts` (`workers`
    of them on the master's host if None)."""

    def __init__(
        self,
        root: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "2g",
        master: Host = Host(),
        hosts: Sequence[Host] | None = None,
    ):
        self.root = root
        self.secret = secrets.token_hex(16)
        self.tag = new_tag()
        self.host = master
        with socket.socket() as s:
            s.bind((master.address, 0))
            self.port = s.getsockname()[1]
        self.master_url = f"spark://{master.address}:{self.port}"
        self.env = {
            **os.environ,
            TAG: self.tag,
            "SPARK_HOME": str(HOME),
            "_SPARK_AUTH_SECRET": self.secret,  # Spark's own: read by every daemon
        }
        self.master = self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            ["--host", master.address, "--port", str(self.port), "--webui-port", "0"],
            master,
            SPARK_MASTER_OPTS="-Dspark.authenticate=true -Dspark.master.rest.enabled=false",
        )
        self._wait("master", lambda: self._answers())
        hosts = list(hosts) if hosts is not None else [master] * workers
        self.workers = []
        for i, host in enumerate(hosts):
            args = ["--host", host.address, "--port", "0", "--webui-port", "0"]
            args += ["--cores", str(cores), "--memory", memory]
            args += ["--work-dir", str(root / f"work-{i}"), self.master_url]
            self.workers.append(
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    args,
                    host,
                    SPARK_WORKER_OPTS="-Dspark.authenticate=true",
                )
            )
        for i in range(len(hosts)):
            self._wait(
                f"worker-{i}", lambda i=i: "Successfully registered" in self.log(f"worker-{i}")
            )

    def _start(
        self, name: str, cls: str, args: list[str], host: Host, **env: str
    ) -> subprocess.Popen[bytes]:
        # SPARK_LOCAL_IP: the address of every listener of the daemon (its web UI's too)
        # and of the executors a worker starts
        env = {**self.env, "SPARK_LOCAL_IP": host.address, **env}
        with (self.root / f"{name}.log").open("wb") as log:
            return subprocess.Popen(  # `ip netns exec` execs: the pid is the JVM's
                [*host.enter, str(HOME / "bin" / "spark-class"), cls, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: the JVM and its executors
            )

    def _answers(self) -> bool:
        address = (self.host.address, self.port)
        with contextlib.suppress(OSError), socket.create_connection(address, 1):
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


class NoNamespaces(Exception):
    """Network namespaces cannot be made here: why, in one line."""


class Namespaces:
    """`n` hosts on this machine: a network namespace each (`trainscale-PID-wI`, PID the
    test process's), its `eth0` one end of a veth pair whose other end (`tsPIDvI`) is on
    a bridge in the test's own namespace (`tsPIDbr`); the bridge has address .1 of a
    private /24 (10.231.X.0/24, X one no address or route here overlaps), namespace I
    address I+2. Names made of the pid keep concurrent runs apart.

    `master` is the bridge's address (a program there runs in the test's namespace),
    `hosts` the namespaces'. Each namespace has its own loopback, which no other reaches.
    `remove` kills every process in them and deletes all that was made; `left` says what
    is still there (nothing, once removed)."""

    def __init__(self, n: int):
        pid = os.getpid()
        self.names = [f"trainscale-{pid}-w{i}" for i in range(n)]
        self.bridge = f"ts{pid}br"
        self.veths = [f"ts{pid}v{i}" for i in range(n)]
        self.made: list[str] = []  # namespaces and links, in the order they were made
        if os.geteuid() != 0:
            raise NoNamespaces("network namespaces need root")
        try:
            self._make()
        except FileNotFoundError:
            raise NoNamespaces("no `ip` command (iproute2) to make network namespaces") from None
        except (OSError, subprocess.CalledProcessError) as exc:
            self.remove()
            said = getattr(exc, "stderr", "") or str(exc)
            raise NoNamespaces(f"cannot make network namespaces: {said.strip()}") from None

    def _make(self) -> None:
        for name in self.names:
            _ip("netns", "add", name)
            self.made.append(name)
        _ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(self.bridge)
        net = _free_subnet(os.getpid())
        _ip("addr", "add", f"{net[1]}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        self.master = Host(str(net[1]))
        self.hosts = []
        for i, (name, veth) in enumerate(zip(self.names, self.veths, strict=True)):
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
            self.made.append(veth)
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", name, "addr", "add", f"{net[i + 2]}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
            self.hosts.append(Host(str(net[i + 2]), ("ip", "netns", "exec", name)))

    def pids(self, name: str) -> list[int]:
        """The processes in namespace `name` (none once it is gone)."""
        with contextlib.suppress(subprocess.CalledProcessError):
            return [int(p) for p in _ip("netns", "pids", name).split()]
        return []

    def remove(self) -> list[int]:
        """Kill every process in the namespaces, then delete the veths, the bridge and
        the namespaces; the pids that had to be killed."""
        names = [n for n in self.names if n in self.made]
        killed = []
        for name in names:
            for pid in self.pids(name):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        deadline = time.monotonic() + 10
        while any(self.pids(n) for n in names) and time.monotonic() < deadline:
            time.sleep(0.1)
        for made in reversed(self.made):  # a veth's deletion takes its peer with it
            kind = ("netns", "del") if made in names else ("link", "del")
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*kind, made)
        self.made = []
        return killed

    def left(self) -> list[str]:
        """The namespaces and links of ours still on the machine."""
        namespaces = _ip("netns", "list").split()
        links = [line.split()[0].split("@")[0] for line in _ip("-br", "link").splitlines()]
        ours = {*self.names, self.bridge, *self.veths}
        return sorted(ours & {*namespaces, *links})


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def _free_subnet(pid: int) -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that no address or route of this namespace overlaps."""
    taken = []
    for line in _ip("-4", "-o", "addr", "show").splitlines():
        taken.append(ipaddress.ip_interface(line.split()[3]).network)
    for line in _ip("-4", "route", "show").splitlines():
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.ip_network(line.split()[0]))
    for x in range(254):
        net = ipaddress.IPv4Network(f"10.231.{(pid + x) % 254 + 1}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise NoNamespaces("no free /24 in 10.231.0.0/16")


def run_client(
    argv: Sequence[str], env: dict[str, str], log: Path, until: str, cwd: Path | None = None
) -> str:
    """Runs a Spark client in a session of its own until its output says `until` (at most
    60 s, failing if it exits first), then kills it with the JVM pyspark started for it and
    waits up to 10 s for every tagged process to go; returns what it printed."""
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # with the JVM pyspark starts for it
        )
        try:
            while until not in log.read_text(errors="replace"):
                assert time.monotonic() - started < 60, log.read_text()[-3000:]
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.2)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while tagged(os.environ[TAG]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return log.read_text(errors="replace")
