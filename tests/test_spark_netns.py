"""run-real on a standalone Spark cluster whose workers are hosts of their own: each in a
Linux network namespace with its own address on a bridge (tests/spark_cluster.py's
`Namespaces`), the master and run-real's driver on the bridge's address. A job's
TensorFlow processes find each other across the namespaces; where Spark's daemons, its
executors and TensorFlow listen; who may connect from another host.

One cluster and one run serve the module. Skipped where TensorFlow, pyspark or a Java
runtime is missing, or network namespaces cannot be made (not root, no `ip`, no
CAP_NET_ADMIN). Nothing outlives the module: no process (by process id and environment,
and in the namespaces), no namespace, veth or bridge.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("pyspark")
if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

from processes import TAG, kill_tagged, new_tag, tagged  # noqa: E402
from spark_cluster import Cluster, Namespaces, NoNamespaces, run_client  # noqa: E402

from scenarios import vocab  # noqa: E402

pytestmark = pytest.mark.real
ROOT = Path(__file__).resolve().parent.parent
#: /proc/net/tcp's states
LISTEN, ESTABLISHED = "0A", "01"
#: the kinds of process a cluster starts, by what their command lines hold
KINDS = {
    b"real.process.worker": "tensorflow",
    b"CoarseGrainedExecutorBackend": "executor",
    b"deploy.worker.Worker": "worker",
    b"deploy.master.Master": "master",
    b"pyspark": "python",
}


@pytest.fixture(scope="module")
def net() -> Iterator[Namespaces]:
    try:
        made = Namespaces(2)
    except NoNamespaces as exc:
        pytest.skip(str(exc))
    try:
        yield made
    finally:
        killed = made.remove()
        assert made.left() == [], f"left configured: {made.left()}"
        assert killed == [], f"processes left in the namespaces: {killed}"


@pytest.fixture(scope="module")
def cluster(net: Namespaces, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("spark-netns"), master=net.master, hosts=net.hosts)
    try:
        yield running
    finally:
        left = running.stop()
        assert left == [], f"processes of the cluster outlived it: {left}"


@dataclass
class Seen:
    """One process of the cluster's, as seen while the run ran: its kind, network
    namespace (a name of `Namespaces`, or "" for the test's own), TF_CONFIG, and the
    TCP addresses it listened on and was connected from and to."""

    kind: str
    namespace: str
    tf_config: dict[str, Any]  # {} if none
    listening: set[tuple[str, int]] = field(default_factory=set)
    connected: set[tuple[str, str]] = field(default_factory=set)

    def cluster(self) -> tuple[list[str], int]:
        """Its TF_CONFIG's workers' hosts (a job of workers only), and the index of its own."""
        (workers,) = self.tf_config["cluster"].values()
        return [address.rpartition(":")[0] for address in workers], self.tf_config["task"]["index"]


@dataclass
class Run:
    out: Path
    proc: subprocess.CompletedProcess[str]
    seen: dict[int, Seen]
    #: the ports that processes in the namespaces listened on, seen from the test's
    #: namespace: whether something listened there, and whether the process's namespace's
    #: address answered
    outside: dict[int, tuple[bool, bool]]


@pytest.fixture(scope="module")
def run(cluster: Cluster, net: Namespaces, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """scenarios/library/mlp-localhost.yaml's 2-worker point (ring all-reduce), one
    process on each namespace's executor; its driver on the bridge's address."""
    root = tmp_path_factory.mktemp("netns-run")
    tag = new_tag()
    env = {**os.environ, TAG: tag, "TRAINSCALE_SPARK_SECRET": cluster.secret}
    env["SPARK_LOCAL_IP"] = net.master.address  # where the executors reach the driver
    command = [sys.executable, "-m", "real.cli", "scenarios/library/mlp-localhost.yaml"]
    command += ["--out", str(root / "out"), "--steps", "all", "--master", cluster.master_url]
    command += ["--set", f"real.shared_dir={root}", "--set", "real.baseline=false"]
    command += ["--set", "sweep.cluster.devices_per_host=[2]"]
    namespaces = {os.stat(f"/run/netns/{name}").st_ino: name for name in net.names}
    seen: dict[int, Seen] = {}
    outside: dict[int, tuple[bool, bool]] = {}
    with (root / "stdout").open("w+") as stdout, (root / "stderr").open("w+") as stderr:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout, stderr=stderr, text=True)
        try:
            deadline = time.monotonic() + 240
            while proc.poll() is None and time.monotonic() < deadline:
                _look(cluster.tag, namespaces, seen, outside, net)
                time.sleep(0.1)
        finally:
            proc.kill()
            proc.wait()
            kill_tagged(tag)
    said = [(root / name).read_text() for name in ("stdout", "stderr")]
    done = subprocess.CompletedProcess(command, proc.returncode, *said)
    return Run(root / "out", done, seen, outside)


def _look(
    tag: str,
    namespaces: dict[int, str],
    seen: dict[int, Seen],
    outside: dict[int, tuple[bool, bool]],
    net: Namespaces,
) -> None:
    """Add what the cluster's processes do now to `seen`; for a port a process in a
    namespace listens on, seen for the first time, what the test's namespace finds."""
    for pid in tagged(tag):
        try:
            if pid not in seen:
                seen[pid] = _process(pid, namespaces)
            sockets = _sockets(pid)
        except OSError:  # gone
            continue
        process = seen[pid]
        for local, remote, state in sockets:
            if state == LISTEN:
                process.listening.add(local)
            elif state == ESTABLISHED:
                process.connected.add((local[0], remote[0]))
        if not process.namespace:
            continue
        address = net.hosts[net.names.index(process.namespace)].address
        for port in {p for _, p in process.listening} - outside.keys():
            here = {p for (_, p), _, state in _sockets(os.getpid()) if state == LISTEN}
            outside[port] = (port in here, _answers(address, port))


def _process(pid: int, namespaces: dict[int, str]) -> Seen:
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    kind = next((k for mark, k in KINDS.items() if mark in cmdline), "other")
    namespace = namespaces.get(os.stat(f"/proc/{pid}/ns/net").st_ino, "")
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    (config,) = [e[10:] for e in environ if e.startswith(b"TF_CONFIG=")] or [b"{}"]
    return Seen(kind, namespace, json.loads(config))


def _sockets(pid: int) -> list[tuple[tuple[str, int], tuple[str, int], str]]:
    """Process `pid`'s TCP sockets, in its network namespace: local and remote address
    and port, and state (/proc/net/tcp's)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                found.append((_endpoint(fields[1]), _endpoint(fields[2]), fields[3]))
    return found


def _endpoint(text: str) -> tuple[str, int]:
    """An address and port as /proc/net/tcp{,6} writes them (32-bit words, each in host
    order: little-endian here); an IPv4-mapped IPv6 address as its IPv4 one."""
    address, port = text.split(":")
    raw = bytes.fromhex(address)
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def _answers(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), 2):
        return True
    return False


def test_a_job_spans_the_namespaces_every_step_done_once(run: Run, cluster: Cluster) -> None:
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    (row,) = pd.read_csv(run.out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert (row["steps"], row["failures"]) == (30, 0)
    steps = pd.read_csv(run.out / vocab.STEPS_FILE)
    assert sorted(steps.step.unique()) == list(range(35))  # 5 warm-up steps and 30
    assert steps.groupby(["worker", "step"]).size().max() == 1 and len(steps) == 2 * 35
    meta = json.loads((run.out / vocab.META_FILE).read_text())
    assert meta["spark"] == {"master": cluster.master_url, "authenticate": True}
    (placed,) = meta["placement"].values()
    assert sorted(p["executor"] for p in placed) == ["0", "1"]  # one on each host


def test_tf_config_names_the_namespaces_addresses(run: Run, net: Namespaces) -> None:
    addresses = {host.address: name for host, name in zip(net.hosts, net.names, strict=True)}
    processes = [s for s in run.seen.values() if s.kind == "tensorflow"]
    assert sorted(p.namespace for p in processes) == net.names  # one process in each
    for process in processes:
        hosts, me = process.cluster()
        assert sorted(hosts) == sorted(addresses)  # never 127.0.0.1
        assert addresses[hosts[me]] == process.namespace  # its own address, in its namespace
        # the ring crosses hosts: connected from its namespace's address to the other's
        (other,) = set(addresses) - {hosts[me]}
        assert (hosts[me], other) in process.connected


def test_spark_listens_on_its_hosts_address_only(run: Run, net: Namespaces) -> None:
    (master,) = [s for s in run.seen.values() if s.kind == "master"]
    assert {a for a, _ in master.listening} == {net.master.address}  # the bridge's
    for host, name in zip(net.hosts, net.names, strict=True):
        spark = [s for s in run.seen.values() if s.namespace == name and s.kind != "tensorflow"]
        assert {"worker", "executor", "python"} <= {s.kind for s in spark}
        for process in spark:
            addresses = {a for a, _ in process.listening}
            if process.kind == "worker":
                assert addresses == {host.address}, process
            elif process.kind == "executor":  # its Python workers call it back on loopback
                assert addresses == {host.address, "127.0.0.1"}, process
            else:  # the executor's Python workers
                assert addresses <= {"127.0.0.1"}, process
            # the namespace's loopback is its own: nothing of it in the test's namespace
            for address, port in process.listening:
                assert run.outside[port] == (False, address == host.address), (address, port)


def test_tensorflow_listens_on_its_namespace_interfaces_only(run: Run, net: Namespaces) -> None:
    processes = [s for s in run.seen.values() if s.kind == "tensorflow"]
    assert len(processes) == 2
    for process in processes:
        (workers,) = process.tf_config["cluster"].values()
        port = int(workers[process.tf_config["task"]["index"]].rpartition(":")[2])
        # the wildcard address (TensorFlow 2.21's, whatever host the spec names): in a
        # namespace of its own, that is its interfaces only
        assert (("0.0.0.0", port) in process.listening) or (("::", port) in process.listening)
        assert {p for _, p in process.listening} == {port}
        # from the test's namespace, its address answers on that port, its loopback not
        assert run.outside[port] == (False, True)


# a bare pyspark session, as anyone on the training network could start one, and
# run-real's own (engines/spark.py), with the cluster's secret in its environment; on a
# worker's host, with an executor size no worker offers (it registers, and starts none)
BARE = (
    "from pyspark.sql import SparkSession\n"
    "s = SparkSession.builder.master({url!r}).config('spark.ui.enabled', 'false')"
    ".config('spark.executor.cores', '2').getOrCreate()\n"
    "print('registered', s.sparkContext.applicationId, flush=True)\n"
)
OURS = (
    "from engines.spark import session\n"
    "s = session({url!r}, {{'spark.executor.cores': '2'}})\n"
    "print('registered', s.sparkContext.applicationId, flush=True)\n"
)


@pytest.mark.usefixtures("own")
@pytest.mark.parametrize("secret", [False, True], ids=["without-the-secret", "with-it"])
def test_a_client_on_another_host_needs_the_secret(
    cluster: Cluster, net: Namespaces, tmp_path: Path, secret: bool
) -> None:
    host = net.hosts[1]  # not the master's: it reaches the master over the bridge
    client = tmp_path / "client.py"
    client.write_text((OURS if secret else BARE).format(url=cluster.master_url))
    env = {k: v for k, v in os.environ.items() if "SECRET" not in k}
    env.update(SPARK_LOCAL_IP=host.address, PYTHONPATH=str(ROOT))
    if secret:
        env["TRAINSCALE_SPARK_SECRET"] = cluster.secret
    ends = "registered app-" if secret else "Failed to connect to master"
    registered = cluster.log("master").count("Registering app")
    said = run_client([*host.enter, sys.executable, str(client)], env,
                      tmp_path / "client.log", ends, cwd=ROOT)
    if secret:
        assert cluster.log("master").count("Registering app") == registered + 1
    else:  # refused for want of authentication, and never registered
        assert "Expected SaslMessage" in said
        assert "registered app-" not in said
        assert cluster.log("master").count("Registering app") == registered
    assert tagged(os.environ[TAG]) == []  # the client's JVM went with it
