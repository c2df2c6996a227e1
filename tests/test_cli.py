"""`simulate` end to end: result files, errors, determinism, parallel points."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scenarios import vocab
from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """
version: 1
name: cli-test
seed: 4
model: {name: toy, params: 10e6, flops_per_sample: 1 GFLOP}
cluster:
  hosts: 2
  devices_per_host: 2
  device: {peak_flops: 10 TFLOP/s, efficiency: 0.5}
  host_link: nvlink2
  network: 10GbE
training: {batch_per_worker: 8, steps: 6, warmup_steps: 2}
stragglers: {jitter: 0.1}
sweep:
  cluster.hosts: [1, 2]
  strategy:
    - {kind: allreduce, algorithm: ring}
    - {kind: parameter_server, servers: 2}
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return path


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
    )


def test_writes_the_contract_files(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([str(scenario), "--out", str(out), "--trace", "--quiet"]) == 0
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert list(results.columns[: len(vocab.RESULT_COLUMNS)]) == list(vocab.RESULT_COLUMNS)
    assert len(results) == 4 and set(results.backend) == {"sim"}
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert list(steps.columns) == list(vocab.STEP_COLUMNS)
    # one row per (point, worker, step), warm-up included and marked
    assert len(steps) == (2 + 4) * 2 * 8
    assert steps.warmup.sum() == (2 + 4) * 2 * 2
    assert (steps.start_s <= steps.compute_end_s).all() and (steps.comm_end_s <= steps.end_s).all()
    meta = json.loads((out / vocab.META_FILE).read_text())
    for key in ("scenario", "seed", "git_commit", "versions", "machine", "date", "command"):
        assert key in meta
    assert meta["scenario"]["sha256"] and len(meta["points"]) == 4
    for point in results.point:
        trace = json.loads((out / vocab.trace_file(point)).read_text())
        names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert names <= set(vocab.PHASES) and "compute" in names


def test_same_seed_identical_files(scenario: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert main([str(scenario), "--out", str(tmp_path / name), "--trace", "--quiet"]) == 0
    a = pd.read_csv(tmp_path / "a" / vocab.RESULTS_FILE).drop(columns=["wall_time_s"])
    b = pd.read_csv(tmp_path / "b" / vocab.RESULTS_FILE).drop(columns=["wall_time_s"])
    pd.testing.assert_frame_equal(a, b)
    for name in [vocab.STEPS_FILE] + [vocab.trace_file(p) for p in a.point]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_jobs_give_the_same_results(scenario: Path, tmp_path: Path) -> None:
    assert main([str(scenario), "--out", str(tmp_path / "seq"), "--quiet"]) == 0
    assert main([str(scenario), "--out", str(tmp_path / "par"), "--jobs", "2", "--quiet"]) == 0
    for name in (vocab.RESULTS_FILE, vocab.STEPS_FILE):
        a = pd.read_csv(tmp_path / "seq" / name).drop(columns=["wall_time_s"], errors="ignore")
        b = pd.read_csv(tmp_path / "par" / name).drop(columns=["wall_time_s"], errors="ignore")
        pd.testing.assert_frame_equal(a, b)


def test_set_changes_the_run(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    sets = ["--set", "training.steps=3", "--set", "sweep.cluster.hosts=[3]"]
    assert main([str(scenario), "--out", str(out), "--quiet", *sets]) == 0
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert set(results.steps) == {3} and set(results.workers) == {6}


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--set", "strategy.sevrers=3"], "unknown key 'strategy.sevrers'; did you mean"),
        (["--set", "training.steps=0"], "training.steps:"),
        (["--set", "cluster.hosts=3"], "the sweep sets cluster.hosts"),
        (["--jobs", "0"], "--jobs: must be at least 1"),
        (["--jobs", "x"], "invalid int value"),
        (["--set", "cluster.profile=calibration.yaml"], "cluster.profile: cannot read"),
    ],
)
def test_bad_input_one_line_exit_2_nothing_written(
    scenario: Path, tmp_path: Path, args: list[str], fragment: str
) -> None:
    out = tmp_path / "never"
    proc = run_cli(str(scenario), "--out", str(out), *args)
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_missing_scenario_file(tmp_path: Path) -> None:
    proc = run_cli(str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2 and "no such scenario file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_default_output_directory(scenario: Path, tmp_path: Path) -> None:
    proc = run_cli(str(scenario.resolve()), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "runs" / "cli-test" / "sim" / vocab.RESULTS_FILE).exists()
    assert "scaling eff" in proc.stdout  # the summary table
