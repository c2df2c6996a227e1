"""`simulate` end to end: result files, errors, determinism, parallel points."""

from __future__ import annotations

import json
import re
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
    assert main([str(scenario), "--out", str(out), "--trace", "--quiet", "--steps", "all"]) == 0
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


# -- long runs: steps.csv's two forms, the table, progress, timed steps ---------------------

KEYS = ["point", "replication", "step", "generation", "trial"]


def summed_up(per_worker: pd.DataFrame) -> pd.DataFrame:
    """The summary form worked out here from `--steps all`'s rows, with pandas alone."""
    rows = per_worker.assign(
        step_time=per_worker.end_s - per_worker.start_s,
        compute_time=per_worker.compute_end_s - per_worker.start_s,
        comm_time=(per_worker.comm_end_s - per_worker.compute_end_s).clip(lower=0.0),
    )
    grouped = rows.groupby(KEYS)
    out = pd.DataFrame(
        {
            "workers": grouped.size(),
            "warmup": grouped.warmup.any(),
            "lost": grouped.lost.any(),
            "start_s": grouped.start_s.min(),
            "compute_end_s": grouped.compute_end_s.max(),
            "comm_end_s": grouped.comm_end_s.max(),
            "end_s": grouped.end_s.max(),
            "staleness_mean": grouped.staleness.mean(),
            "staleness_max": grouped.staleness.max(),
        }
    )
    for name in ("step_time", "compute_time", "comm_time"):
        out[f"{name}_mean_s"] = grouped[name].mean()
        out[f"{name}_min_s"] = grouped[name].min()
        out[f"{name}_max_s"] = grouped[name].max()
    return out


@pytest.mark.parametrize(
    "sets",
    [
        [],  # sync ring and parameter servers, with jitter
        ["--set", "sweep.strategy=[{kind: parameter_server, servers: 2, sync: false}]"],
        # a failure: the steps since the last checkpoint are run again, the first lost
        ["--set", "checkpoint.every_steps=3", "--set", "sweep={}"]
        + ["--set", "failures=[{role: worker, index: 1, at_step: 5, downtime: 1 s}]"],
    ],
    ids=["sync", "async", "failure"],
)
def test_steps_summary_is_the_per_worker_rows_summed_up(
    scenario: Path, tmp_path: Path, sets: list[str]
) -> None:
    """steps.csv by default: one row per step whose figures are those of the same run's
    per-worker rows (`--steps all`) summed up; results.csv is the same either way."""
    for form in ("summary", "all"):
        args = [str(scenario), "--out", str(tmp_path / form), "--quiet", *sets]
        assert main([*args, *(["--steps", "all"] if form == "all" else [])]) == 0
        meta = json.loads((tmp_path / form / vocab.META_FILE).read_text())
        assert meta["steps_form"] == form
    summary = pd.read_csv(tmp_path / "summary" / vocab.STEPS_FILE)
    assert list(summary.columns) == list(vocab.STEP_SUMMARY_COLUMNS)
    expected = summed_up(pd.read_csv(tmp_path / "all" / vocab.STEPS_FILE))
    got = summary.set_index(KEYS)
    assert len(got) == len(expected)
    if "failures=" in " ".join(sets):
        assert got.lost.any() and (got.index.get_level_values("generation") > 0).any()
    pd.testing.assert_frame_equal(
        got[list(expected.columns)].astype(float),
        expected.loc[got.index].astype(float),
        check_exact=False,
        rtol=1e-12,
        atol=1e-15,
    )
    results = [
        pd.read_csv(tmp_path / form / vocab.RESULTS_FILE).drop(columns=["wall_time_s"])
        for form in ("summary", "all")
    ]
    pd.testing.assert_frame_equal(*results)


LONG = """
version: 1
name: long-to-target
seed: 3
model: resnet50
cluster: {hosts: 1, devices_per_host: 8, device: v100, host_link: nvlink2, network: 100GbE}
training:
  batch_per_worker: 32
  dataset_samples: 64000
  warmup_steps: 2
  max_epochs: 12
  learning_rate: {base: 0.0125, scaling: linear}
  target: {metric: accuracy, value: 0.15}
  evaluation: {every_steps: 250, samples: 5000}
strategy: {kind: allreduce, algorithm: ring, overlap: true}
sim: {network_model: analytical}
"""


def test_a_long_run_to_a_target_times_its_first_steps_and_says_so(tmp_path: Path) -> None:
    """3,000 updates to a target: by default the first 1,000 measured steps are timed and
    the rest extend at their mean, with one line on stderr saying so and how to time
    every step. Without jitter every step takes the same time, so the cut run's time to
    target is the closed form (step time x measured updates + evaluations) and that of
    the run that times every step."""
    from scenarios import load
    from sim.costs import cost_model, evaluation_seconds

    path = tmp_path / "long.yaml"
    path.write_text(LONG)
    cut = run_cli(str(path), "--out", str(tmp_path / "cut"))
    assert cut.returncode == 0, cut.stderr
    note = [line for line in cut.stderr.splitlines() if "sim.timed_steps" in line]
    assert len(note) == 1 and "base (1,000 of 2,998)" in note[0]
    assert "--set sim.timed_steps=all times every step" in note[0]
    meta = json.loads((tmp_path / "cut" / vocab.META_FILE).read_text())
    assert meta["timed_steps"]["base"]["timed"] == 1000
    assert meta["timed_steps"]["base"]["measured"] == 2998
    assert "auto" in meta["timed_steps"]["base"]["why"]
    steps = pd.read_csv(tmp_path / "cut" / vocab.STEPS_FILE)
    assert len(steps) == 2 + 1000  # what the engine simulated: warm-up and timed steps

    every = run_cli(str(path), "--out", str(tmp_path / "all"), "--set", "sim.timed_steps=all")
    assert every.returncode == 0, every.stderr
    assert "sim.timed_steps" not in every.stderr
    full = json.loads((tmp_path / "all" / vocab.META_FILE).read_text())["timed_steps"]
    assert full["base"]["timed"] == "all"
    a = pd.read_csv(tmp_path / "cut" / vocab.RESULTS_FILE).iloc[0]
    b = pd.read_csv(tmp_path / "all" / vocab.RESULTS_FILE).iloc[0]
    assert a.steps_to_target == b.steps_to_target == 2250
    assert a.time_to_target_s == pytest.approx(b.time_to_target_s, rel=1e-12)
    spec = load(path).points[0].spec
    evaluation = evaluation_seconds(spec, float(cost_model(spec, None).compute.forward_s.sum()))
    measured = a.steps_to_target - spec.training.warmup_steps
    evaluations = a.steps_to_target // spec.training.evaluation.every_steps
    closed = a.step_time_mean_s * measured + evaluations * evaluation
    assert a.time_to_target_s == pytest.approx(closed, rel=1e-12)


def test_the_table_shows_what_a_target_took(tmp_path: Path) -> None:
    """The terminal table: time, epochs and samples to target, and the peak learning
    rate where results.csv has one, as results.csv holds them."""
    path = tmp_path / "long.yaml"
    path.write_text(LONG)
    proc = run_cli(str(path), "--out", str(tmp_path / "out"), "--set", "sim.timed_steps=20")
    assert proc.returncode == 0, proc.stderr
    header, _, row = proc.stdout.splitlines()[:3]
    for title in ("time to target", "epochs to target", "samples to target"):
        assert title in header
    r = pd.read_csv(tmp_path / "out" / vocab.RESULTS_FILE).iloc[0]
    assert f"{r.time_to_target_s:,.1f} s" in row
    assert f"{r.epochs_to_target:,.2f}" in row and f"{r.samples_to_target:,.0f}" in row
    if "peak_learning_rate" in r:
        assert "peak lr" in header and f"{r.peak_learning_rate:.4g}" in row.split()


def test_no_target_no_target_columns(scenario: Path, tmp_path: Path) -> None:
    proc = run_cli(str(scenario), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "to target" not in proc.stdout


def test_progress_moves_within_a_point_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the bar counts simulated steps, so a single long point moves it;
    piped, stderr stays empty."""
    import os

    from processes import on_terminal

    path = tmp_path / "long.yaml"
    path.write_text(LONG)
    sets = ["--set", "sim.timed_steps=all", "--set", "training.target=null"]
    env = {**os.environ, "TQDM_MININTERVAL": "0"}  # every update drawn
    command = [sys.executable, "-m", "sim.cli", str(path), "--out", str(tmp_path / "o"), *sets]
    code, text = on_terminal(command, 120, env)
    assert code == 0
    counts = {float(m) for m in re.findall(r"([\d.]+)k/3\.00k", text)}  # thousands
    assert any(0 < c < 3 for c in counts), text[-2000:]  # within the one point
    assert "base, simulated" in text
    piped = run_cli(str(path), "--out", str(tmp_path / "p"), *sets)
    assert piped.returncode == 0 and piped.stderr == ""
