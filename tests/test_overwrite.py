"""Nothing overwritten silently (results/files.py `claim_output`, and the four commands
that write results): a command replaces what it wrote itself for the same scenario, and
refuses in one line, before anything runs and with every file left as it was, to replace
what another command, a calibrated run or a run on another engine wrote, unless --force.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write

import real.compare
import real.runner
import sim.cli
from real import cli as real_cli
from reports import cli as report_cli
from results.files import claim_output, origin, origin_of, page_origin

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "scenarios" / "library" / "mlp-localhost.yaml"


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file under folder: its bytes' hash and its modification time."""
    return {
        str(p.relative_to(folder)): (
            hashlib.sha256(p.read_bytes()).hexdigest(),
            p.stat().st_mtime_ns,
        )
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def simulate(*args: str) -> int:
    return sim.cli.main([*map(str, args), "--quiet"])


def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal comes before the simulation: running one fails the test."""

    def ran(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("simulated before refusing")

    monkeypatch.setattr(sim.cli, "run", ran)


def test_simulate_runs_again_into_its_own_directory(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    assert simulate(MLP, "--out", out) == 0
    assert simulate(MLP, "--out", out, "--set", "training.steps=7") == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["origin"] == {
        "command": "simulate",
        "scenario": "mlp-localhost",
        "calibrated": False,
        "engine": None,
    }


def test_simulate_refuses_to_replace_compare_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case from the user's side: `simulate FILE` after `compare FILE`, in the
    checkout's root; then --force and --out as the refusal says."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    path = write(tmp_path)  # a calibrated scenario (cluster.profile), as compare runs it
    out = Path("runs") / "calibrated" / "sim"
    assert simulate(path, "--written-by", "compare") == 0  # what compare's step runs
    before = snapshot(tmp_path / "runs")
    capsys.readouterr()
    with monkeypatch.context() as m:
        no_simulation(m)
        code = sim.cli.main([str(path), "--set", "cluster.profile=null"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == (
        f"simulate: error: {out} holds what `compare` wrote for calibrated (calibrated); "
        "`simulate` would replace it: add --force to do so, or write elsewhere with --out DIR\n"
    )
    assert snapshot(tmp_path / "runs") == before
    assert [p.name for p in (tmp_path / "runs" / "calibrated").iterdir()] == ["sim"]
    # the same, calibrated as compare's was, is still not compare's to replace
    with monkeypatch.context() as m:
        no_simulation(m)
        assert sim.cli.main([str(path), "--quiet"]) == 2
    assert snapshot(tmp_path / "runs") == before
    # what the line says to do
    assert simulate(path, "--set", "cluster.profile=null", "--out", "elsewhere") == 0
    assert snapshot(tmp_path / "runs") == before
    assert simulate(path, "--set", "cluster.profile=null", "--force") == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["origin"]["command"] == "simulate" and not meta["origin"]["calibrated"]


def test_simulate_refusal_from_a_shell(tmp_path: Path) -> None:
    """As a user types it: the first --help example after compare; exit 2, one line."""
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    out = tmp_path / "runs" / "mlp-localhost" / "sim"
    argv = [sys.executable, "-m", "sim.cli", "scenarios/library/mlp-localhost.yaml"]
    first = subprocess.run(
        [*argv, "--quiet", "--written-by", "compare"], cwd=tmp_path, capture_output=True
    )
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("simulate: error: runs/mlp-localhost/sim holds what `compare`")
    assert "--force" in proc.stderr and "--out DIR" in proc.stderr
    assert snapshot(out) == before


def test_uncalibrated_does_not_replace_calibrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path)
    out = tmp_path / "out"
    assert simulate(path, "--out", out) == 0  # calibrated: cluster.profile
    assert simulate(path, "--out", out) == 0  # again: its own
    before = snapshot(out)
    capsys.readouterr()
    no_simulation(monkeypatch)
    assert sim.cli.main([str(path), "--out", str(out), "--set", "cluster.profile=null"]) == 2
    assert "holds what `simulate` wrote for calibrated (calibrated)" in capsys.readouterr().err
    assert snapshot(out) == before


def test_another_scenario_is_refused_and_a_new_directory_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert simulate(MLP, "--out", out) == 0
    before = snapshot(out)
    other = ROOT / "scenarios" / "library" / "sync-vs-async.yaml"
    capsys.readouterr()
    with monkeypatch.context() as m:
        no_simulation(m)
        assert sim.cli.main([str(other), "--out", str(out)]) == 2
    assert "holds what `simulate` wrote for mlp-localhost;" in capsys.readouterr().err
    assert snapshot(out) == before
    # a directory of the user's own files, with no results in it, is not a claim
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert simulate(MLP, "--out", mine) == 0
    assert (mine / "notes.txt").read_text() == "mine"
    # results without a readable meta.json are of unknown origin
    (out / "meta.json").unlink()
    capsys.readouterr()
    with monkeypatch.context() as m:
        no_simulation(m)
        assert sim.cli.main([str(MLP), "--out", str(out)]) == 2
    assert "holds files of unknown origin" in capsys.readouterr().err


def test_origin_of_a_directory_written_before_origin_was_recorded(tmp_path: Path) -> None:
    meta = {
        "backend": "sim",
        "scenario": {"name": "x", "sets": ["cluster.profile=runs/x/profile.yaml"]},
    }
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert origin_of(tmp_path) == origin("simulate", "x", calibrated=True)
    assert origin_of(tmp_path / "nothing") is None
    claim_output(tmp_path, origin("simulate", "x", calibrated=True), force=False)
    with pytest.raises(Exception, match="holds what `simulate` wrote for x"):
        claim_output(tmp_path, origin("simulate", "x"), force=False)
    claim_output(tmp_path, origin("simulate", "x"), force=True)


# ---------------------------------------------------------------- run-real


def real_run_dir(out: Path, engine: str, calibrated: bool = False) -> None:
    """A directory as run-real writes it (meta.json is what the claim reads)."""
    out.mkdir(parents=True)
    (out / "results.csv").write_text("point\nx\n")
    meta = {
        "backend": "real",
        "scenario": {"name": "mlp-localhost", "sets": []},
        "origin": origin("run-real", "mlp-localhost", calibrated, engine),
    }
    (out / "meta.json").write_text(json.dumps(meta))


@pytest.fixture
def no_real_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def ran(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ran before refusing")

    monkeypatch.setattr(real.runner, "run", ran)


@pytest.mark.usefixtures("no_real_run")
def test_run_real_refuses_a_spark_run_over_a_local_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "real"
    real_run_dir(out, "local")
    before = snapshot(out)
    code = real_cli.main([str(MLP), "--out", str(out), "--master", "local[2]"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == (
        f"run-real: error: {out} holds what `run-real` wrote for mlp-localhost (on local); "
        "`run-real` would replace it: add --force to do so, or write elsewhere with --out DIR\n"
    )
    assert snapshot(out) == before


@pytest.mark.usefixtures("no_real_run")
def test_run_real_refuses_to_replace_simulate_or_a_recalibrated_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert simulate(MLP, "--out", out) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert real_cli.main([str(MLP), "--out", str(out)]) == 2
    assert "holds what `simulate` wrote for mlp-localhost;" in capsys.readouterr().err
    recalibrated = tmp_path / "recalibrated"
    real_run_dir(recalibrated, "local", calibrated=True)
    assert real_cli.main([str(MLP), "--out", str(recalibrated)]) == 2
    assert "(calibrated, on local)" in capsys.readouterr().err
    assert snapshot(out) == before


def test_run_real_runs_again_into_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own local run is replaced (the run itself is stubbed: the claim is the test)."""
    out = tmp_path / "real"
    real_run_dir(out, "local")
    started: list[str] = []

    def run(scenario: Any, *args: Any, **kwargs: Any) -> list[Any]:
        started.append(scenario.name)
        raise KeyboardInterrupt

    monkeypatch.setattr(real.runner, "run", run)
    assert real_cli.main([str(MLP), "--out", str(out), "--quiet"]) == 130
    assert started == ["mlp-localhost"]


# ---------------------------------------------------------------- compare


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """compare's steps, recorded instead of run."""
    said: list[list[str]] = []
    monkeypatch.setattr(real.compare, "_step", lambda what, argv: said.append(argv))
    return said


def test_compare_refuses_before_it_calibrates(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    steps: list[list[str]],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert simulate(MLP) == 0  # runs/mlp-localhost/sim: simulate's
    before = snapshot(tmp_path / "runs")
    capsys.readouterr()
    assert real.compare.main([str(MLP)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "compare: error: runs/mlp-localhost/sim holds what `simulate` wrote for mlp-localhost;"
    )
    assert steps == [] and snapshot(tmp_path / "runs") == before


def test_compare_steps_write_as_compare(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    steps: list[list[str]],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert real.compare.main([str(MLP)]) == 0
    assert [argv[1] for argv in steps] == ["real.cli", "real.cli", "sim.cli", "reports.cli"]
    for argv in steps[1:]:
        assert argv[-2:] == ["--written-by", "compare"] and "--force" not in argv
    assert steps[3][-4:-2] == ["--out", "runs/mlp-localhost"]
    steps.clear()
    assert real.compare.main([str(MLP), "--force"]) == 0
    assert all(argv[-3:] == ["--written-by", "compare", "--force"] for argv in steps[1:])
    # what compare's steps wrote, compare replaces; a page that `report` wrote it does not
    assert simulate(MLP, "--written-by", "compare") == 0
    steps.clear()
    assert real.compare.main([str(MLP)]) == 0 and len(steps) == 4
    page = Path("runs/mlp-localhost/report.html")
    page.write_text('<meta name="generator" content="trainscale report">')
    capsys.readouterr()
    assert real.compare.main([str(MLP)]) == 2
    assert "runs/mlp-localhost/report.html holds what `report` wrote;" in capsys.readouterr().err


# ---------------------------------------------------------------- report


@pytest.fixture
def sim_run(tmp_path: Path) -> Path:
    out = tmp_path / "runs" / "mlp-localhost" / "sim"
    assert simulate(MLP, "--out", out) == 0
    return out


def test_report_replaces_its_own_page_and_not_compares(
    sim_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = sim_run.parent / "report.html"
    assert report_cli.main([str(sim_run), "--no-timelines"]) == 0
    assert page_origin(page) == origin("report", None)
    assert report_cli.main([str(sim_run), "--no-timelines"]) == 0  # again: its own
    # compare's page (what `compare` makes its report step write)
    assert report_cli.main([str(sim_run), "--no-timelines", "--written-by", "compare"]) == 2
    argv = [str(sim_run), "--no-timelines", "--written-by", "compare", "--force"]
    assert report_cli.main(argv) == 0
    assert page_origin(page) == origin("compare", None)
    before = snapshot(sim_run.parent)
    capsys.readouterr()
    assert report_cli.main([str(sim_run), "--no-timelines"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == (
        f"report: error: {page} holds what `compare` wrote; `report` would replace it: "
        "add --force to do so, or write elsewhere with --out DIR\n"
    )
    assert snapshot(sim_run.parent) == before
    assert report_cli.main([str(sim_run), "--no-timelines", "--force"]) == 0
    assert page_origin(page) == origin("report", None)
    # a page no trainscale command wrote
    page.write_text("<html>mine</html>")
    assert report_cli.main([str(sim_run), "--no-timelines"]) == 2
    assert "holds files of unknown origin" in capsys.readouterr().err
    assert page.read_text() == "<html>mine</html>"


def test_report_out_writes_where_it_is_told_and_nothing_else(
    sim_run: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`report ... --out mlp.html` in the checkout's root is refused with what to write
    instead, and nothing is left in the working directory; `--out mlp` writes the two
    files in mlp/ and nothing else."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert report_cli.main([str(sim_run), "--out", "mlp.html"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "report: error: --out: 'mlp.html' names a file; --out is the directory that "
        "receives report.html and report.md, e.g. --out mlp\n"
    )
    assert os.listdir(work) == []
    beside = snapshot(sim_run.parent)
    assert report_cli.main([str(sim_run), "--out", "mlp", "--no-timelines"]) == 0
    assert capsys.readouterr().out == "wrote mlp/report.html and mlp/report.md\n"
    assert sorted(os.listdir(work)) == ["mlp"]
    assert sorted(os.listdir(work / "mlp")) == ["report.html", "report.md"]
    assert snapshot(sim_run.parent) == beside  # nothing beside the input either
