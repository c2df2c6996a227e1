"""run-real on a standalone Spark cluster (`spark://`): a master and two workers of one
core each, separate JVMs on 127.0.0.1 (tests/spark_cluster.py), with Spark's shared-secret
authentication; its faults (an executor's JVM killed, a worker lost for good); who may
connect; and where TensorFlow's servers listen.

One cluster serves the module; the test that stops a worker for good runs last. Skipped
where TensorFlow or pyspark is not installed, or no Java runtime is found. Nothing of the
cluster's, or of a run's, outlives the module: checked by process id and environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("pyspark")
if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

from processes import TAG, tagged  # noqa: E402
from spark_cluster import Cluster, run_client  # noqa: E402

from scenarios import vocab  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("own")]
ROOT = Path(__file__).resolve().parent.parent

# two workers of one process each, one per executor; 150 ms per step (a hiccup on every
# step) so that a fault lands mid-run; a checkpoint every 10 steps
SCENARIO = """
version: 1
name: standalone
seed: 3
model: {name: tiny-mlp, keras: {builder: mlp, inputs: 64, hidden: [128], classes: 10}}
cluster: {hosts: 2, devices_per_host: 1, device: cpu, host_link: loopback}
training: {batch_per_worker: 16, steps: 40, warmup_steps: 2, learning_rate: {base: 0.05}}
strategy: {kind: allreduce, algorithm: ring, overlap: false}
stragglers: {transient: {probability: 1.0, delay: 150 ms}}
checkpoint: {every_steps: 10}
real: {timeout: 4 min, baseline: false}
sweep: {training.steps: [40, 30]}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        yield running
    finally:
        left = running.stop()
        assert left == [], f"processes of the cluster outlived it: {left}"


def test_a_client_without_the_secret_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    # a bare pyspark session, as anyone on the network could start one: the master
    # refuses its connection (Spark's SASL handshake), and it never registers
    client = tmp_path / "client.py"
    client.write_text(
        "from pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.master('{cluster.master_url}')"
        ".config('spark.ui.enabled', 'false').getOrCreate()\n"
        "print('registered', flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if "SECRET" not in k}
    registered = cluster.log("master").count("Registering app")
    said = run_client([sys.executable, str(client)], env, tmp_path / "client.log",
                      "Failed to connect to master")
    assert "Expected SaslMessage" in said  # refused for want of authentication
    assert "registered" not in said.replace("Successfully registered", "")
    assert cluster.log("master").count("Registering app") == registered
    assert tagged(os.environ[TAG]) == []  # the client's JVM went with it


@pytest.mark.parametrize(
    "secret, sets, message",
    [
        (
            None,
            [],
            "{url}: a standalone master is spoken to with Spark's shared-secret "
            "authentication (spark.authenticate): give its cluster's secret in "
            "TRAINSCALE_SPARK_SECRET",
        ),
        (
            "yes",
            ["--set", "real.spark.conf={spark.authenticate.secret: s3cret}"],
            "real.spark.conf: spark.authenticate.secret: not in the scenario (its resolved "
            "copy is written to meta.json); give the cluster's secret in TRAINSCALE_SPARK_SECRET",
        ),
    ],
)
def test_the_secret_from_the_environment_only(
    cluster: Cluster, tmp_path: Path, secret: str | None, sets: list[str], message: str
) -> None:
    path = tmp_path / "standalone.yaml"
    path.write_text(SCENARIO)
    env = {k: v for k, v in os.environ.items() if "SECRET" not in k}
    if secret:
        env["TRAINSCALE_SPARK_SECRET"] = cluster.secret
    command = [sys.executable, "-m", "real.cli", str(path), "--out", str(tmp_path / "out")]
    command += ["--master", cluster.master_url, "--set", f"real.shared_dir={tmp_path}", *sets]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    expected = message.format(url=f"real.spark.master: {cluster.master_url}")
    assert proc.stderr.strip() == f"run-real: error: {expected}"  # one line, nothing run
    assert not (tmp_path / "out").exists()


def test_executor_lost_recovers_and_worker_lost_keeps_what_finished(
    cluster: Cluster, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    path = tmp_path / "standalone.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "out"
    env = {**os.environ, "TRAINSCALE_SPARK_SECRET": cluster.secret}
    command = [sys.executable, "-m", "real.cli", str(path), "--out", str(out), "--steps", "all"]
    command += ["--master", cluster.master_url, "--set", f"real.shared_dir={shared}"]
    # a slot lost is given 20 s to come back (Spark's own wait for executors): time for a
    # worker to start an executor in a dead one's place on a busy machine, not for a
    # worker lost for good
    command += ["--set", "real.spark.conf={spark.scheduler.maxRegisteredResourcesWaitingTime: 20s}"]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            # the first point: an executor's JVM killed mid-run (not only the TensorFlow
            # process it hosts); the worker starts another, and Spark's stage retry the job
            first = _wait_for_step(shared, 14, proc, set())
            for pid in tagged(cluster.tag, command="real.process.worker"):
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                assert cluster.secret.encode() not in environ  # the secret stays with Spark
            executor = cluster.executor_of(1)
            assert executor is not None
            os.kill(executor, 9)
            # the second point: a worker lost for good, with its executor
            _wait_for_step(shared, 14, proc, {first})
            cluster.kill_worker(0)
            stdout, stderr = proc.communicate(timeout=180)
        finally:
            proc.kill()
    assert proc.returncode == 1, stderr[-3000:]
    (line,) = [x for x in stderr.splitlines() if x.startswith("run-real:")]
    assert line == (
        f"run-real: failed: real.spark.master: {cluster.master_url}: 1 task slots left for "
        "20 s (spark.scheduler.maxRegisteredResourcesWaitingTime); this job needs 2 at once "
        f"(executors were lost); wrote {out}/ (1 of 2 points)"
    )
    assert tagged(cluster.tag, command="real.process.worker") == []
    assert tagged(os.environ[TAG]) == []  # run-real's driver JVM and its Python workers
    # the first point, kept: every step done once in the end, by both workers
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert (row["steps"], row["failures"]) == (40, 1)
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    kept = steps[~steps.lost]
    assert sorted(kept.step.unique()) == list(range(42))  # 2 warm-up steps and 40
    assert kept.groupby(["worker", "step"]).size().max() == 1 and len(kept) == 2 * 42
    lost = steps[steps.lost]
    assert set(lost.step) == set(range(10, 10 + row["lost_steps"]))  # since the checkpoint
    assert set(steps.generation) == {0, 1}
    meta = json.loads((out / vocab.META_FILE).read_text())
    (placed,) = meta["placement"].values()
    assert {(p["attempt"], p["process"]) for p in placed} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert meta["incomplete"]["point"] == meta["points"][1]["id"]
    # authenticated, and said so; the secret in no file and on no output
    assert meta["spark"] == {"master": cluster.master_url, "authenticate": True}
    for text in [stdout, stderr, *(p.read_text() for p in out.iterdir())]:
        assert cluster.secret not in text


def _wait_for_step(shared: Path, step: int, proc: subprocess.Popen[str], seen: set[Path]) -> Path:
    """The run directory of a job under `shared` not in `seen`, once its process 1 has
    reported `step` (its records: real/spark/task.py's RunDir)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        for run in set(shared.glob("trainscale-spark-run-*")) - seen:
            with contextlib.suppress(OSError):
                lines = (run / "records-0-1.jsonl").read_text().splitlines()
                if sum('"event": "step"' in line for line in lines) > step:
                    return run
        time.sleep(0.2)
    raise AssertionError(f"no step {step} of a new run within 120 s")


def test_tensorflow_servers_listen_on_every_interface(tmp_path: Path) -> None:
    """TensorFlow's gRPC server listens on the wildcard address whatever host the cluster
    spec names (TensorFlow 2.21 binds `0.0.0.0:PORT`, and offers no setting for it):
    why the docs ask for a trusted training network. Should TensorFlow ever bind the
    named host only, this fails, and the docs should say so."""
    probe = (
        "import socket, tensorflow as tf\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()\n"
        "spec = tf.train.ClusterSpec({'worker': [f'127.0.0.1:{port}']})\n"
        "server = tf.distribute.Server(spec, job_name='worker', task_index=0)\n"
        "bound = []\n"
        "for table in ('/proc/net/tcp', '/proc/net/tcp6'):\n"
        "    for line in open(table).read().splitlines()[1:]:\n"
        "        local, state = line.split()[1], line.split()[3]\n"
        "        if state == '0A' and int(local.rsplit(':', 1)[1], 16) == port:\n"
        "            bound.append(local.rsplit(':', 1)[0])\n"
        "print(sorted(bound))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (bound,) = [x for x in proc.stdout.splitlines() if x.startswith("[")]
    # the IPv6 wildcard (which takes IPv4 too), or 0.0.0.0: never 127.0.0.1 (0100007F)
    assert bound in ("['00000000000000000000000000000000']", "['00000000']")
