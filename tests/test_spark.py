"""run-real on Spark (`real.engine: spark`, real/spark/stage.py): the same jobs as local runs,
as one barrier stage on a local Spark master; and what it refuses, in one line.

Skipped where TensorFlow or pyspark is not installed, or no Java runtime is found (.ci/run
installs one). Every test checks that no worker process outlives the run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("pyspark")
if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
    pytest.skip("no Java runtime for Spark", allow_module_level=True)

from jobs import PS_FAILURES, check_ps_failures  # noqa: E402
from processes import run_real, workers_alive  # noqa: E402

from scenarios import vocab  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("own")]
ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """
version: 1
name: spark-test
seed: 3
model: {name: tiny-mlp, keras: {builder: mlp, inputs: 64, hidden: [128], classes: 10}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training: {batch_per_worker: 16, steps: 10, warmup_steps: 2, learning_rate: {base: 0.05}}
strategy: {kind: allreduce, algorithm: ring, overlap: false}
real: {timeout: 4 min, baseline: false}
"""


def run_on_local_2(scenario: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`run-real SCENARIO --out OUT --steps all` on `local[2]`, quietly, with `args`."""
    return run_real(
        str(scenario), "--out", str(out), "--steps", "all", "--master", "local[2]", "--quiet", *args
    )


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "spark.yaml"
    path.write_text(SCENARIO)
    return path


def test_ring_and_parameter_servers_on_two_executors(tmp_path: Path) -> None:
    # local-cluster: two executor JVMs of two slots each, as on two hosts. A local run's
    # files are checked against the contract in tests/test_real.py; here the same files
    # with the same columns, and where every process ran
    path = tmp_path / "two.yaml"
    two_hosts = SCENARIO.replace("hosts: 1, devices_per_host: 2", "hosts: 2, devices_per_host: 1")
    path.write_text(
        two_hosts + "sweep:\n  strategy:\n"
        "    - {kind: allreduce, algorithm: ring, overlap: false}\n"
        "    - {kind: parameter_server, servers: 1}\n"
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    out = tmp_path / "out"
    master = "local-cluster[2,2,1024]"
    proc = run_real(
        str(path),
        "--out",
        str(out),
        "--steps",
        "all",
        "--master",
        master,
        "--set",
        f"real.shared_dir={shared}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert workers_alive() == []
    files = {vocab.RESULTS_FILE, vocab.STEPS_FILE, vocab.META_FILE}
    assert {p.name for p in out.iterdir()} == files
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert list(results.columns[: len(vocab.RESULT_COLUMNS)]) == list(vocab.RESULT_COLUMNS)
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert list(steps.columns) == [*vocab.STEP_COLUMNS, "loss"]
    ring, ps = results.to_dict(orient="records")
    assert (ring["strategy"], ps["strategy"], ps["servers"]) == ("allreduce", "parameter_server", 1)
    assert ring["workers"] == ps["workers"] == 2
    assert ring["throughput_samples_per_s"] > 0 and ps["throughput_samples_per_s"] > 0
    ring_steps = steps[steps.point == ring["point"]]
    assert sorted(ring_steps["worker"].unique()) == [0, 1] and ring_steps["step"].max() == 11
    meta = json.loads((out / vocab.META_FILE).read_text())
    placed = meta["placement"]
    assert sorted(p["process"] for p in placed[ring["point"]]) == [0, 1]
    assert len(placed[ps["point"]]) == 4  # the coordinator, two workers, the server
    # the PS job's four processes fill both executors' slots; Spark places the ring's two
    # where it offers slots (once in nine runs both on one executor)
    assert {p["executor"] for p in placed[ps["point"]]} == {"0", "1"}
    assert meta["points"][0]["resolved"]["real"]["engine"] == "spark"


def test_too_few_slots_is_one_line(scenario: Path, tmp_path: Path) -> None:
    proc = run_real(str(scenario), "--out", str(tmp_path / "out"), "--master", "local[1]")
    assert proc.returncode == 1
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("run-real:")]
    assert line == (
        "run-real: failed: real.spark.master: local[1] has 1 task slots; this job needs 2 "
        "processes at once (one barrier task each)"
    )
    assert not (tmp_path / "out").exists()
    assert workers_alive() == []


@pytest.mark.slow  # CI time: `make test-slow`
def test_killed_worker_recovers_from_checkpoint_on_spark(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "fail"
    proc = run_on_local_2(
        scenario,
        out,
        "--set",
        "checkpoint.every_steps=3",
        "--set",
        "failures=[{role: worker, index: 1, at_step: 8, downtime: 1 s}]",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert workers_alive() == []
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    # killed as it started step 8; the last checkpoint held 6 steps: 2 lost and redone
    assert (row["failures"], row["lost_steps"]) == (1, 2)
    assert row["recovery_time_s"] > 1.0  # the downtime, then a measured restart
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    kept = steps[~steps.lost]
    # every requested step completed exactly once in the end, by both workers
    assert sorted(kept.step.unique()) == list(range(12))
    assert kept.groupby(["worker", "step"]).size().max() == 1 and len(kept) == 2 * 12
    assert set(steps[steps.lost].step) == {6, 7} and set(steps.generation) == {0, 1}
    # Spark's own stage retry started the job again: every process ran in attempts 0 and 1
    (placed,) = json.loads((out / vocab.META_FILE).read_text())["placement"].values()
    assert sorted((p["attempt"], p["process"]) for p in placed) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [p["generation"] for p in placed] == [p["attempt"] for p in placed]


@pytest.mark.slow  # CI time: `make test-slow`
def test_parameter_server_failures_on_spark(scenario: Path, tmp_path: Path) -> None:
    """The local run's async PS failures (tests/jobs.py) on local[4] (coordinator, 2
    workers, 1 server): worker 1's task starts it again and it rejoins, the stage going on;
    the server's failure fails the stage, and Spark's retry starts the job again from the
    checkpoint. The same files as the local run's."""
    out = tmp_path / "ps-fail"
    proc = run_real(
        str(scenario), "--out", str(out), "--master", "local[4]", "--quiet", *PS_FAILURES
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert workers_alive() == []
    check_ps_failures(out)
    (placed,) = json.loads((out / vocab.META_FILE).read_text())["placement"].values()
    assert {p["attempt"] for p in placed} == {0, 1} and len(placed) == 2 * 4


def test_spark_giving_up_is_one_line_and_writes_what_finished(
    scenario: Path, tmp_path: Path
) -> None:
    # one attempt allowed: the second point's failure ends the run; the first is written
    out = tmp_path / "out"
    proc = run_on_local_2(
        scenario,
        out,
        "--set",
        "cluster.devices_per_host=1",
        "--set",
        "real.spark.conf={spark.stage.maxConsecutiveAttempts: '1'}",
        "--set",
        "sweep={failures: [[], [{role: worker, index: 0, at_step: 4, downtime: 1 s}]]}",
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert workers_alive() == []
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("run-real:")]
    assert line == (
        "run-real: failed: real.spark: Spark stopped retrying the job's stage after 1 of the "
        "point's failures stopped it (spark.stage.maxConsecutiveAttempts: 1); "
        f"wrote {out}/ (1 of 2 points)"
    )
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["failures"] == 0 and row["steps"] == 10
    meta = json.loads((out / vocab.META_FILE).read_text())
    assert meta["incomplete"]["point"] == meta["points"][1]["id"]


@pytest.mark.parametrize(
    "sets, message",
    [
        (
            ["--master", "spark://nowhere:7077"],
            "real.spark.master: spark://nowhere:7077 without real.shared_dir (a directory "
            "every executor sees): not implemented yet by run-real",
        ),
        (
            ["--engine", "spark", "--set", "real.shared_dir=/no/such/dir"],
            "real.shared_dir: /no/such/dir is not a directory here",
        ),
        (
            ["--master", "spark://127.0.0.1:9", "--set", "real.shared_dir=/tmp"],
            "real.spark.master: spark://127.0.0.1:9: no Spark master answers at "
            "127.0.0.1:9 (Connection refused)",
        ),
    ],
)
def test_refusals_before_anything_starts(
    scenario: Path, tmp_path: Path, sets: list[str], message: str
) -> None:
    proc = run_real(str(scenario), "--out", str(tmp_path / "out"), *sets)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"run-real: error: {message}"  # one line, no traceback
    assert not (tmp_path / "out").exists()


def test_no_java_is_one_line(scenario: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java on it
    proc = run_real(str(scenario), "--out", str(tmp_path / "out"), "--engine", "spark", env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "run-real: error: real.engine: spark needs a Java runtime (Java 17): none on PATH or "
        "in JAVA_HOME"
    )
    assert not (tmp_path / "out").exists()


def test_simulate_on_spark_gives_the_local_results(tmp_path: Path) -> None:
    sweep = ROOT / "scenarios/library/allreduce-algorithms.yaml"
    spark, local = tmp_path / "spark", tmp_path / "local"
    for out, extra in ((spark, ["--master", "local[2]"]), (local, [])):
        proc = subprocess.run(
            [sys.executable, "-m", "sim.cli", str(sweep), "--out", str(out), "--quiet", *extra],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    wall = list(vocab.WALL_CLOCK_COLUMNS)
    a = pd.read_csv(spark / vocab.RESULTS_FILE).drop(columns=wall)
    b = pd.read_csv(local / vocab.RESULTS_FILE).drop(columns=wall)
    assert a.to_csv(index=False) == b.to_csv(index=False)
    assert (spark / vocab.STEPS_FILE).read_bytes() == (local / vocab.STEPS_FILE).read_bytes()
    meta = json.loads((spark / vocab.META_FILE).read_text())
    assert meta["points"][0]["resolved"]["sim"]["engine"] == "spark"


@pytest.mark.slow  # CI time: `make test-slow`
def test_trials_on_spark_and_the_best_one(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_on_local_2(
        scenario,
        out,
        "--set",
        "strategy={kind: independent, trials: {learning_rate: [0.001, 0.01, 0.05, 0.2]}}",
        "--set",
        "training.steps=6",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert workers_alive() == []
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["trials"] == 4 and row["makespan_s"] > 0
    assert 0 < row["slot_utilization"] <= 1
    # the best trial: the lowest loss at its last step, from steps.csv itself
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    last = steps.sort_values("step").groupby("trial").tail(1).set_index("trial")["loss"]
    assert row["best_trial"] == last.idxmin()
    assert row["best_final_loss"] == pytest.approx(last.min())
    (placed,) = json.loads((out / vocab.META_FILE).read_text())["placement"].values()
    assert sorted(p["trial"] for p in placed) == [0, 1, 2, 3]
