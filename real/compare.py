"""`compare FILE [--out DIR | --resume DIR] [--set PATH=VALUE ...] [--force]`: both worlds
from one command.

1. `run-real FILE --calibrate` measures this machine (`DIR/profile.yaml`);
2. `run-real FILE --recalibrate DIR/profile.yaml` runs every point for real (`DIR/real/`),
   measuring again just before each of its runs what the point's simulation takes from
   the profile (its single-worker compute and the probes: `calibrate.probes_of`) and
   pooling those measurements into the profile (`real/calibrate/pool.py`): the calibration sees
   the machine as it was while the points ran (a VM's speed drifts over minutes);
3. `simulate FILE --set cluster.profile=DIR/profile.yaml --defaults real` predicts them
   from the calibration alone, the fields the file leaves unset as run-real ran them
   (`DIR/sim/`): nothing measured of the runs of step 2 reaches the simulator, only
   the single-worker processes and the probes measured beside them;
4. `report DIR/sim DIR/real --out DIR` lays them side by side (`DIR/report.html` and
   `.md`).

With `--resume DIR` compare goes on where a compare into DIR stopped: the calibration is
kept where `DIR/profile.yaml` exists, run-real resumes `DIR/real/` (`--resume`), and
simulate resumes `DIR/sim/` unless run-real pooled new measurements into the profile (then
every prediction is made again); the report is written again.

Each step writes as compare's (`--written-by compare`: meta.json's `origin`, the page's
generator tag), and compare checks all three before the first starts: it replaces what
it wrote itself, and what another command wrote only with --force.

The simulator and the report run as their own commands (subprocesses): `real` never
imports `sim`, and `reports` reads files only. Bad input stops everything before any
process starts (exit 2); a step that fails stops the rest (exit 1). Ctrl-C, SIGTERM or
SIGHUP stop the step running, which stops its workers, before compare returns (130, 143,
129).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import time
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from commands.args import ArgumentParser, add_resume, out_dir_of, scenario_parser
from measured.profile import profiles_of
from results.files import claim, claim_output, origin, page_origin
from results.progress import resumable
from scenarios import UserError, load
from scenarios.loader import Scenario

from .checks import check_supported
from .cli import engine_of
from .interrupt import how_stopped, stopped_by_signals

#: seconds a step gets to stop its workers after Ctrl-C or SIGTERM before it is killed
STOP_S = 60.0


def build_parser() -> ArgumentParser:
    parser = scenario_parser(
        "compare",
        "Calibrate this machine, run the scenario for real, simulate it from the "
        "calibration, and write a report comparing the two.",
        "",
        ["compare scenarios/library/mlp-localhost.yaml"],
    )
    add_resume(parser)
    return parser


def _step(what: str, argv: list[str]) -> None:
    print(f"compare: {what}: {' '.join(argv[2:])}", file=sys.stderr)
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", *argv[1:]])
    try:
        code = child.wait()
    except KeyboardInterrupt:
        _stop(child)
        raise
    if code != 0:
        raise SystemExit(code if code in (1, 2, 129, 130, 143) else 1)
    print(f"compare: {what} took {time.perf_counter() - started:.0f} s", file=sys.stderr)


def _stop(child: subprocess.Popen[bytes]) -> None:
    """End a step on Ctrl-C or SIGTERM and wait until it has stopped its own workers. Ctrl-C
    reached the child too (one process group; it then ignores further signals), a SIGTERM
    to compare did not: pass one on. Killing the child at once (what `subprocess.call`
    does) would cut its cleanup short and leave its workers running."""
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def drift_warning(meta_path: Path) -> str | None:
    """One line when run-real found the machine changed between the calibration and the
    runs by more than the probe's noise (`real/calibrate/pool.py`, `drift`), else None."""
    try:
        moved = json.loads(meta_path.read_text()).get("machine_drift")
    except (OSError, ValueError):
        return None
    if not moved or not moved.get("changed"):
        return None
    first = moved["entries"][0]
    during = sum(first["runs_step_time_s"]) / len(first["runs_step_time_s"])
    return (
        f"the machine changed under the runs: single-worker compute took "
        f"{first['calibration_step_time_s'] * 1e3:.1f} ms per step at calibration and "
        f"{during * 1e3:.1f} ms beside the runs ({moved['drift']:+.0%} over all process "
        f"counts), beyond its noise ({moved['noise']:.0%}); the prediction error will "
        "carry that drift (the report shows it)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with stopped_by_signals():
        return _main(args)


def _main(args: Namespace) -> int:
    try:
        scenario: Scenario = load(args.scenario, args.sets, backend="real")
        profiles_of(scenario)  # a bad cluster.profile: refused before any work
        for point in scenario.points:
            check_supported(point.spec)
        out = out_dir_of(args, Path("runs") / scenario.name)
        if args.resume:  # run-real's directory, as run-real --resume checks it
            resumable(out / "real", scenario, "real", {"steps_form": "summary", "trace": False})
        # every directory compare writes, checked before the minutes of calibration: the
        # steps it starts check again, as compare's (--written-by)
        real_origin = origin("compare", scenario.name, True, engine_of(scenario))
        claim_output(out / "real", real_origin, args.force)
        claim_output(out / "sim", origin("compare", scenario.name, True), args.force)
        page = out / "report.html"
        claim(page, page_origin(page), origin("compare", None), args.force)
    except UserError as exc:
        print(f"compare: error: {exc}", file=sys.stderr)
        return 2
    sets = [item for s in args.sets for item in ("--set", s)]
    own = ["--written-by", "compare", *(["--force"] if args.force else [])]
    profile = (out / "profile.yaml").resolve()
    try:
        if args.resume and profile.is_file():
            print(f"compare: calibrate: kept {profile} (--resume)", file=sys.stderr)
        else:
            _step(
                "calibrate",
                ["", "real.cli", args.scenario, *sets, "--calibrate", "--out", str(profile)],
            )
        calibrated = _sha256(profile)
        real = ["--resume" if args.resume else "--out", str(out / "real")]
        _step(
            "run-real",
            ["", "real.cli", args.scenario, *sets, *real, "--recalibrate", str(profile), *own],
        )
        warning = drift_warning(out / "real" / "meta.json")
        if warning:
            print(f"compare: warning: {warning}", file=sys.stderr)
        # the simulation resumes only from the profile it started with: runs of run-real
        # pooled into it now make every point's prediction new
        same = args.resume and calibrated is not None and _sha256(profile) == calibrated
        _step(
            "simulate",
            [
                "",
                "sim.cli",
                args.scenario,
                *sets,
                "--set",
                f"cluster.profile={profile}",
                "--defaults",
                "real",
                "--resume" if same else "--out",
                str(out / "sim"),
                *own,
            ],
        )
        _step(
            "report",
            [
                "",
                "reports.cli",
                str(out / "sim"),
                str(out / "real"),
                "--out",
                str(out),
                *own,
            ],
        )
    except SystemExit as exc:
        return int(exc.code or 1)
    except KeyboardInterrupt as exc:
        why, code = how_stopped(exc)
        print(f"compare: {why}", file=sys.stderr)
        return code
    print(f"wrote {out}/report.html", file=sys.stderr)
    return 0


def _sha256(path: Path) -> str | None:
    """The sha256 of a file's bytes; None where it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
