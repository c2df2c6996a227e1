"""Every command line a help text shows runs as written, from a checkout's root; the
`trainscale` entry point runs the same commands as their short names."""

from __future__ import annotations

import importlib
import json
import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PARSERS = {
    "simulate": "sim.cli",
    "run-real": "real.cli",
    "compare": "real.compare",
    "report": "reports.cli",
    "catalog": "commands.catalog",
}


def examples(command: str) -> list[str]:
    """The command lines in `command --help`'s examples."""
    parser = importlib.import_module(PARSERS[command]).build_parser()
    epilog = parser.epilog or ""
    assert epilog.startswith("examples:"), f"{command} --help shows no examples"
    return [line.strip() for line in epilog.splitlines()[1:] if line.strip()]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A working directory that looks like the checkout's root: examples write there."""
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios")
    return tmp_path


def run_as_written(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line)
    assert argv[0] in PARSERS, line
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=900
    )


def test_every_command_shows_examples() -> None:
    for command in PARSERS:
        lines = examples(command)
        assert lines and all(line.split()[0] == command for line in lines)


def test_simulate_and_report_examples_run_as_written(checkout: Path) -> None:
    for line in examples("simulate") + examples("report")[:1]:
        proc = run_as_written(line, checkout)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    assert (checkout / "runs/allreduce-algorithms/sim/results.csv").exists()
    assert (checkout / "runs/mlp-localhost/report.html").exists()


def test_catalog_examples_run_as_written(checkout: Path) -> None:
    for line in examples("catalog"):
        proc = run_as_written(line, checkout)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        assert "v100" in proc.stdout or "resnet50" in proc.stdout, line  # devices or models


@pytest.mark.real
@pytest.mark.slow  # CI time: `make test-slow`
@pytest.mark.usefixtures("own")  # what the examples start is killed if left over
def test_real_examples_run_as_written(checkout: Path) -> None:
    pytest.importorskip("tensorflow")
    # what the README's own test runs (`trainscale COMMAND ...` is `COMMAND ...`)
    readme = {tuple(shlex.split(line)[1:]) for line, _ in readme_commands()}
    lines = examples("simulate")[:1] + examples("run-real") + examples("compare")
    lines = [x for x in lines if tuple(shlex.split(x)) not in readme]
    for line in [*lines, *examples("report")[1:]]:
        proc = run_as_written(line, checkout)
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    assert (checkout / "mlp-report" / "report.html").exists()


def readme_commands() -> list[tuple[str, str | None]]:
    """(command line, what it prints on stderr or None) for every `trainscale` line of the
    README; a shell transcript (`$ ...`) gives the line it prints after it."""
    lines = (ROOT / "README.md").read_text().splitlines()
    found: list[tuple[str, str | None]] = []
    for i, line in enumerate(lines):
        text = line.strip()
        if text.startswith("$ trainscale "):
            found.append((text[2:], lines[i + 1].strip()))
        elif text.startswith("trainscale ") and line.startswith("    "):
            found.append((text.split("  #")[0].strip(), None))
    return found


def test_readme_commands_run_as_written(checkout: Path) -> None:
    commands = readme_commands()
    assert any(line.startswith("trainscale compare") for line, _ in commands)
    for line, prints in commands:
        argv = shlex.split(line)
        if argv[1] in ("run-real", "compare") or "FILE" in argv:
            continue  # the real ones: test_real_readme_commands; usage lines are no command
        proc = subprocess.run(
            [str(BIN / "trainscale"), *argv[1:]], cwd=checkout, capture_output=True, text=True
        )
        if prints is None:
            assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
        else:
            assert proc.returncode == 2 and proc.stderr.strip() == prints, line


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.usefixtures("own")
def test_real_readme_commands_run_as_written_and_warn_of_a_load_change(checkout: Path) -> None:
    """The README's compare, as written, with a CPU hog started between its calibration
    and its runs: it works, says in one line that the machine changed, and the report
    shows the drift."""
    pytest.importorskip("tensorflow")
    (line,) = [line for line, _ in readme_commands() if shlex.split(line)[1] == "compare"]
    proc = subprocess.Popen(
        [str(BIN / "trainscale"), *shlex.split(line)[1:]],
        cwd=checkout,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        assert proc.stderr is not None
        said = []
        for out in proc.stderr:
            said.append(out)
            if out.startswith("compare: calibrate took"):
                break
        # a spinning process per core, each in a session of its own as another user's job
        # would be (Linux's autogroup scheduling shares the CPU between sessions, and
        # run-real's processes have sessions of their own), until the runs are done
        hogs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(os.cpu_count() or 1)
        ]
        for out in proc.stderr:
            said.append(out)
            if out.startswith("compare: run-real took"):
                break
        for hog in hogs:
            hog.kill()
        said += list(proc.stderr)  # the same reader to the end: it buffers ahead
        proc.wait(timeout=900)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    err = "".join(said)
    assert proc.returncode == 0, f"{line}\n{err[-3000:]}"
    warnings = [x for x in err.splitlines() if x.startswith("compare: warning:")]
    assert len(warnings) == 1 and "the machine changed under the runs" in warnings[0], err
    out_dir = checkout / "runs" / "mlp-localhost"
    moved = json.loads((out_dir / "real" / "meta.json").read_text())["machine_drift"]
    assert moved["changed"] and moved["drift"] > 0.2
    assert "Warning: the machine changed under the real runs" in (
        out_dir / "report.html"
    ).read_text(encoding="utf-8")


def test_trainscale_runs_the_same_commands(tmp_path: Path) -> None:
    scenario = "scenarios/library/mlp-localhost.yaml"
    for argv, out in (
        ([str(BIN / "trainscale"), "simulate"], "long"),
        ([str(BIN / "simulate")], "short"),
        ([sys.executable, "-m", "trainscale", "simulate"], "module"),
    ):
        proc = subprocess.run(
            [*argv, scenario, "--quiet", "--out", str(tmp_path / out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    wall = [c for c in pd.read_csv(tmp_path / "long/results.csv").columns if "wall" in c]
    frames = [
        pd.read_csv(tmp_path / out / "results.csv").drop(columns=wall)
        for out in ("long", "short", "module")
    ]
    pd.testing.assert_frame_equal(frames[0], frames[1])
    pd.testing.assert_frame_equal(frames[0], frames[2])


def trainscale(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "trainscale"), *args], cwd=ROOT, capture_output=True, text=True
    )


def test_trainscale_version_help_and_unknown_command() -> None:
    version = f"trainscale {metadata.version('trainscale')}"
    assert trainscale("--version").stdout.strip() == version
    for command in PARSERS:  # every command tells the same version
        assert trainscale(command, "--version").stdout.strip() == version
    helped = trainscale("--help")
    assert helped.returncode == 0 and all(c in helped.stdout for c in PARSERS)
    usage = trainscale("simulate", "--help").stdout
    assert usage.startswith("usage: trainscale simulate")
    wrong = trainscale("simulte", "x.yaml")
    assert wrong.returncode == 2
    assert (
        wrong.stderr == "trainscale: error: unknown command 'simulte'; did you mean 'simulate'?\n"
    )
    bare = trainscale()
    assert bare.returncode == 2 and bare.stderr.startswith("usage: trainscale")


def test_plan_examples_run_as_written(checkout: Path) -> None:
    # `plan` has no short name: its examples are `trainscale plan ...`
    parser = importlib.import_module("planner.cli").build_parser()
    lines = [line.strip() for line in (parser.epilog or "").splitlines()[1:] if line.strip()]
    assert lines and all(line.startswith("trainscale plan ") for line in lines)
    for line in lines:
        argv = shlex.split(line)
        proc = subprocess.run(
            [str(BIN / "trainscale"), *argv[1:]], cwd=checkout, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{line}\n{proc.stderr[-2000:]}"
    assert (checkout / "runs/plan-digits/best.yaml").exists()
