"""Result files written as points finish, and `--resume` (results/progress.py): a sweep
killed midway and resumed ends with the files of an uninterrupted run; a directory of
another run is refused in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import sim.runner
from results.progress import _blocks, header_line
from scenarios import vocab
from sim import cli

ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "scenarios" / "library" / "digits-time-to-target.yaml"  # 12 points, curves
RESULT_FILES = (vocab.RESULTS_FILE, vocab.STEPS_FILE, vocab.CURVES_FILE)


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], cwd=ROOT, capture_output=True, text=True
    )


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command says (the scenario's warnings aside)."""
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("simulate: warning:")]
    assert len(lines) == 1 and lines[0].startswith("simulate: error: "), proc.stderr
    return lines[0]


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line `simulate ARGS`, run in this process, is refused with."""
    capsys.readouterr()
    assert cli.main(list(args)) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if "warning:" not in x]
    assert len(lines) == 1 and lines[0].startswith("simulate: error: "), lines
    return lines[0]


def meta(directory: Path) -> dict[str, Any]:
    return json.loads((directory / vocab.META_FILE).read_text())  # type: ignore[no-any-return]


def killed_once_done(
    argv: list[str], out: Path, timeout_s: float, poll_s: float
) -> subprocess.Popen[str]:
    """Run a command and SIGKILL it once its meta.json lists a finished point (or when
    `timeout_s` have passed); returns the reaped child."""
    child = subprocess.Popen(argv, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and child.poll() is None:
            try:
                if meta(out)["done"]:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(poll_s)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    return child


def same_files(a: Path, b: Path) -> None:
    """The result files of two runs are the same bytes, wall-clock columns aside, and
    so are their traces."""
    for name in RESULT_FILES:
        left, right = (a / name).read_text(), (b / name).read_text()
        if name == vocab.RESULTS_FILE:
            left, right = (
                pd.read_csv(d / name, dtype=str, keep_default_na=False)
                .drop(columns=list(vocab.WALL_CLOCK_COLUMNS))
                .to_csv(index=False)
                for d in (a, b)
            )
        assert left == right, name
    traces = sorted(p.name for p in a.glob("trace-*.json"))
    assert traces == sorted(p.name for p in b.glob("trace-*.json"))
    for name in traces:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "sim"
    proc = simulate(str(SWEEP), "--quiet", "--trace", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_a_sweep_killed_midway_resumes_to_the_files_of_an_uninterrupted_run(
    tmp_path: Path, uninterrupted: Path
) -> None:
    out = tmp_path / "sim"
    child = killed_once_done(
        [sys.executable, "-m", "sim.cli", str(SWEEP), "--quiet", "--trace", "--out", str(out)],
        out,
        120,
        0.01,
    )
    assert child.returncode == -signal.SIGKILL
    written = meta(out)
    assert not written["complete"] and 0 < len(written["done"]) < 12
    # what the kill left is a valid directory of the finished points
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert list(results["point"]) == list(written["done"])
    assert set(pd.read_csv(out / vocab.STEPS_FILE)["point"]) == set(written["done"])
    proc = simulate(str(SWEEP), "--trace", "--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"{len(written['done'])} of 12 points done" in proc.stderr
    assert meta(out)["complete"]
    same_files(out, uninterrupted)


def test_ctrl_c_keeps_the_points_finished_and_a_resume_runs_the_rest(
    tmp_path: Path, uninterrupted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted after 5 points (in process, --jobs 1), then one point's rows cut from
    steps.csv and another's trace deleted: the resume runs those again and the rest."""
    out = tmp_path / "sim"
    real_point = sim.runner.simulate_point
    calls = []

    def fifth_interrupts(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real_point(*args, **kwargs)

    monkeypatch.setattr(sim.runner, "simulate_point", fifth_interrupts)
    assert cli.main([str(SWEEP), "--quiet", "--trace", "--out", str(out)]) == 130
    monkeypatch.undo()
    done = list(meta(out)["done"])
    assert len(done) == 5 and done == list(pd.read_csv(out / vocab.RESULTS_FILE)["point"])
    steps = (out / vocab.STEPS_FILE).read_text().splitlines(keepends=True)
    cell = f'"{done[1]}",' if "," in done[1] else f"{done[1]},"
    cut = [line for line in steps if not line.startswith(cell)]
    assert len(cut) < len(steps)
    (out / vocab.STEPS_FILE).write_text("".join(cut))
    (out / vocab.trace_file(done[3])).unlink()
    ran: list[str] = []
    monkeypatch.setattr(
        sim.runner,
        "simulate_point",
        lambda point, *a, **k: ran.append(point.id) or real_point(point, *a, **k),
    )
    assert cli.main([str(SWEEP), "--quiet", "--trace", "--resume", str(out)]) == 0
    points = list(meta(uninterrupted)["done"])
    assert ran == [p for p in points if p not in (done[0], done[2], done[4])]
    same_files(out, uninterrupted)


def test_a_finished_run_resumed_runs_nothing_and_keeps_its_files(
    tmp_path: Path, uninterrupted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "sim"
    assert cli.main([str(SWEEP), "--quiet", "--trace", "--out", str(out)]) == 0
    monkeypatch.setattr(sim.runner, "simulate_point", None)  # calling it would fail
    assert cli.main([str(SWEEP), "--quiet", "--trace", "--resume", str(out)]) == 0
    same_files(out, uninterrupted)


def test_resume_of_a_new_directory_runs_every_point(tmp_path: Path) -> None:
    out = tmp_path / "new"
    proc = simulate("scenarios/library/mlp-localhost.yaml", "--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    assert meta(out)["complete"] and len(meta(out)["done"]) == 2
    assert "0 of 2 points done" in proc.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["scenarios/library/mlp-localhost.yaml"], "another scenario file (digits-time-to-target"),
        ([str(SWEEP), "--set", "training.max_epochs=3"], "other points than this scenario"),
        ([str(SWEEP), "--steps", "all"], "steps_form 'summary', this run has 'all'"),
        ([str(SWEEP)], "trace True, this run has False"),
        ([str(SWEEP), "--trace", "--out", "elsewhere"], "--out: elsewhere, with --resume"),
    ],
)
def test_resume_refuses_another_run_in_one_line(
    uninterrupted: Path,
    tmp_path: Path,
    args: list[str],
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "sim"
    out.mkdir()
    for path in uninterrupted.iterdir():
        (out / path.name).write_bytes(path.read_bytes())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert said in refused(capsys, *args, "--resume", str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched


def test_resume_refuses_another_version_backend_or_a_run_without_done(
    uninterrupted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for key, value, said in (
        ("versions", {"trainscale": "0.0.1"}, "was written by trainscale 0.0.1"),
        ("backend", "real", "holds results of backend 'real', not 'sim'"),
        ("done", None, "holds no list of finished points"),  # a run written at its end
    ):
        out = tmp_path / key
        out.mkdir()
        for path in uninterrupted.iterdir():
            (out / path.name).write_bytes(path.read_bytes())
        written = meta(out)
        written[key] = value
        (out / vocab.META_FILE).write_text(json.dumps(written))
        assert said in refused(capsys, str(SWEEP), "--trace", "--resume", str(out), "--force")


def test_resume_refuses_a_directory_without_a_run(tmp_path: Path) -> None:
    """As the command line says it: one line, exit status 2."""
    (tmp_path / "notes.txt").write_text("mine")
    line = refusal(simulate(str(SWEEP), "--resume", str(tmp_path)))
    assert "meta.json: missing or not JSON" in line


def test_blocks_reads_quoted_point_ids_and_drops_a_cut_off_row(tmp_path: Path) -> None:
    """Point ids with commas are quoted; a last row without its newline is no row."""
    path = tmp_path / "steps.csv"
    path.write_text(header_line(["point", "x"]) + '"a,b",1\n"a,b",2\nc,3\nc,4')
    assert _blocks(path, ["point", "x"]) == {"a,b": (2, '"a,b",1\n"a,b",2\n'), "c": (1, "c,3\n")}
    assert _blocks(path, ["point", "y"]) == {}  # another header: nothing of it is kept


# ------------------------------------------------------------------ compare and run-real

MLP = ROOT / "scenarios" / "library" / "mlp-localhost.yaml"


def test_compare_resume_keeps_the_calibration_and_resumes_both_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare --resume (its steps recorded, not run): the profile there is kept, run-real
    and simulate resume; where run-real pooled new runs into the profile, the simulation
    starts afresh."""
    import real.compare

    (tmp_path / "profile.yaml").write_text("calibrated\n")
    steps: list[tuple[str, list[str]]] = []
    pooled = [False]

    def step(what: str, argv: list[str]) -> None:
        steps.append((what, argv))
        if what == "calibrate":
            (tmp_path / "profile.yaml").write_text("calibrated again\n")
        if what == "run-real" and pooled[0]:
            (tmp_path / "profile.yaml").write_text("calibrated, then pooled\n")

    monkeypatch.setattr(real.compare, "_step", step)
    assert real.compare.main([str(MLP), "--resume", str(tmp_path)]) == 0
    assert [what for what, _ in steps] == ["run-real", "simulate", "report"]
    assert ["--resume", str(tmp_path / "real")] == steps[0][1][3:5]
    assert "--resume" in steps[1][1] and "--out" not in steps[1][1]
    steps.clear()
    pooled[0] = True
    assert real.compare.main([str(MLP), "--resume", str(tmp_path)]) == 0
    assert "--out" in steps[1][1] and "--resume" not in steps[1][1]
    steps.clear()
    (tmp_path / "profile.yaml").unlink()
    assert real.compare.main([str(MLP), "--resume", str(tmp_path)]) == 0
    assert [what for what, _ in steps] == ["calibrate", "run-real", "simulate", "report"]


def test_compare_resume_refuses_another_scenarios_runs_before_any_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import real.compare
    from results.files import versions

    (tmp_path / "real").mkdir()
    other = {
        "backend": "real",
        "versions": versions(),
        "scenario": {"name": "other", "sha256": "0" * 64},
    }
    (tmp_path / "real" / vocab.META_FILE).write_text(json.dumps(other))
    monkeypatch.setattr(real.compare, "_step", None)  # a step started would fail
    assert real.compare.main([str(MLP), "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("compare: error: --resume: ")
    assert "another scenario file (other, sha256 000000000000)" in err


@pytest.mark.real
@pytest.mark.usefixtures("own")
def test_run_real_killed_and_resumed_has_every_point_once(tmp_path: Path) -> None:
    """run-real SIGKILLed once its first point is written (the second one's workers
    killed with it), then resumed: each point once, the first as the killed run wrote it."""
    pytest.importorskip("tensorflow")
    from tests.processes import TAG, kill_tagged, run_real

    out = tmp_path / "real"
    cheap = ["--set", "training.steps=8", "--set", "training.warmup_steps=2"]
    cheap += ["--set", "real.baseline=false"]  # no 1-worker run beside the 2-worker point
    try:
        killed_once_done(
            [sys.executable, "-m", "real.cli", str(MLP), "--quiet", "--out", str(out), *cheap],
            out,
            300,
            0.05,
        )
    finally:
        kill_tagged(os.environ[TAG])  # the next point's workers, if they started
    first = meta(out)
    assert not first["complete"] and len(first["done"]) == 1
    (kept,) = first["done"]
    proc = run_real(str(MLP), "--resume", str(out), *cheap)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "1 of 2 points done" in proc.stderr
    resumed = meta(out)
    assert resumed["complete"] and list(resumed["done"]) == [
        "devices_per_host=1",
        "devices_per_host=2",
    ]
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert list(results["point"]) == list(resumed["done"])  # each point once, in order
    assert resumed["done"][kept]["row"] == first["done"][kept]["row"]  # not run again
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert list(dict.fromkeys(steps["point"])) == list(resumed["done"])
    assert (steps.groupby("point")["step"].nunique() == 10).all()  # warm-up + measured
