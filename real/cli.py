"""`run-real FILE [--out DIR] [--set PATH=VALUE ...] [--trace] [--calibrate |
--recalibrate PROFILE]`: the scenario, for real.

Every point runs as a local TensorFlow cluster on 127.0.0.1 and writes the same result
files as `simulate`, with `backend: real`. Bad input is one line and exit status 2 with
nothing started or written; a run that fails or times out is one line and exit status 1;
Ctrl-C, SIGTERM and SIGHUP end every child process before returning (exit 130, 143, 129).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from commands.args import add_steps, scenario_parser
from measured.profile import dump_profile, load_profile, profiles_of
from results.files import (
    claim_output,
    origin,
    provenance,
    results_frame,
    write_atomic,
    write_run,
)
from results.steps import summary_of
from scenarios import UserError, load, vocab
from scenarios.loader import Point, Scenario

from . import calibrate, pool, runner
from .interrupt import how_stopped, stopped_by_signals
from .launcher import GaveUp, RunError
from .runner import RealPoint


def build_parser() -> argparse.ArgumentParser:
    parser = scenario_parser(
        "run-real",
        "Run a training scenario for real with TensorFlow distributed training.",
        "real",
        [
            "run-real scenarios/library/mlp-localhost.yaml",
            "run-real scenarios/library/mlp-localhost.yaml --calibrate",
        ],
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    add_steps(parser)
    parser.add_argument(
        "--engine",
        choices=["local", "spark"],
        help="launch the processes here (local) or as a Spark barrier stage (spark): sets "
        "real.engine",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help="the Spark master (local[N], local-cluster[...], spark://host:port, yarn, "
        "k8s://...): sets real.spark.master, and real.engine to spark",
    )
    parser.add_argument(
        "--trace", action="store_true", help="write a Chrome trace of each point's measured steps"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="measure this machine (single-worker compute, transfers between processes, "
        "all-reduce) and write a profile for cluster.profile to --out "
        "(default runs/<name>/profile.yaml) instead of running the points",
    )
    parser.add_argument(
        "--recalibrate",
        metavar="PROFILE",
        help="before each run of a point, measure again, as --calibrate does, its "
        "single-worker compute and the probes its simulation uses (transfer, all-reduce, "
        "coordinator, update), once per round of repeats, and when every run is done pool "
        "these measurements into PROFILE (the calibration then sees the machine as the "
        "runs did)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with stopped_by_signals():
        return _main(args)


def _sets_of(args: argparse.Namespace) -> list[str] | None:
    """The `--set`s, with what `--engine` and `--master` set; None (and the error said)
    where they contradict each other."""
    sets = list(args.sets)
    if args.engine or args.master:
        sets.append(f"real.engine={args.engine or 'spark'}")
    if args.master:
        if args.engine == "local":
            print("run-real: error: --master: a Spark master, with --engine local", file=sys.stderr)
            return None
        sets.append(f"real.spark.master={args.master}")
    return sets


def _progress(quiet: bool) -> Callable[[object], None]:
    """What run-real says as each point is done: its workers, step time, throughput and
    start-up (or its trials); nothing when `quiet`."""

    def progress(point: object) -> None:
        if not quiet:
            row = point.row  # type: ignore[attr-defined]
            extra = (
                f", start-up {row['startup_time_s']:.1f} s"
                if "startup_time_s" in row
                else f", {row['trials']} trials in {row['makespan_s']:.1f} s"
            )
            print(
                f"{row['point']}: {row['workers']} workers, "
                f"step {row['step_time_mean_s'] * 1e3:.1f} ms, "
                f"{row['throughput_samples_per_s']:,.0f} samples/s{extra}",
                file=sys.stderr,
            )

    return progress


def _main(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    sets = _sets_of(args)
    if sets is None:
        return 2
    try:
        scenario = load(args.scenario, sets, backend="real")
        profiles_of(scenario)  # a bad cluster.profile: refused before any work
        for line in scenario.warnings:
            print(f"run-real: warning: {line}", file=sys.stderr)
        if args.calibrate:
            if args.recalibrate:
                raise UserError("--recalibrate: not with --calibrate (which writes a profile)")
            return _calibrate(scenario, args)
        recalibrate = _Recalibration(args) if args.recalibrate else None
        out_dir = Path(args.out) if args.out else Path("runs") / scenario.name / "real"
        if out_dir.exists() and not out_dir.is_dir():
            raise UserError(f"--out: {out_dir} exists and is not a directory")
        written_by = origin(
            args.written_by or "run-real",
            scenario.name,
            calibrated=recalibrate is not None,
            engine=engine_of(scenario),
        )
        claim_output(out_dir, written_by, args.force)
        progress = _progress(args.quiet)
        phases = Phases() if not args.quiet and sys.stderr.isatty() else None
        try:
            points = runner.run(
                scenario, progress, trace=args.trace, before=recalibrate, phase=phases
            )
        finally:
            if phases is not None:
                phases.stop()
    except UserError as exc:
        print(f"run-real: error: {exc}", file=sys.stderr)
        return 2
    except GaveUp as exc:  # the points finished before it are written, and said to be
        line = f"run-real: failed: {exc}"
        if exc.done:
            incomplete = {"point": exc.point, "reason": str(exc)}
            _write(
                out_dir,
                scenario,
                exc.done,
                started,
                recalibrate,
                written_by,
                args.steps,
                incomplete,
            )
            line += f"; wrote {out_dir}/ ({len(exc.done)} of {len(scenario.points)} points)"
        print(line, file=sys.stderr)
        return 1
    except RunError as exc:
        print(f"run-real: failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        why, code = how_stopped(exc)
        print(f"run-real: {why}; every worker stopped, nothing written", file=sys.stderr)
        return code
    _write(out_dir, scenario, points, started, recalibrate, written_by, args.steps)
    if not args.quiet:
        print(f"wrote {out_dir}/ ({len(points)} points)")
    if recalibrate is not None:
        recalibrate.write()
    return 0


def _write(
    out_dir: Path,
    scenario: Scenario,
    points: list[RealPoint],
    started: float,
    recalibrate: _Recalibration | None,
    written_by: dict[str, Any],
    steps_form: str = vocab.STEPS_SUMMARY,
    incomplete: dict[str, str] | None = None,
) -> None:
    """The result files of the points run; `steps_form`: steps.csv's (`summary` or
    `all`); `incomplete`: the point the run stopped at, and why (meta.json says so)."""
    results = results_frame([p.row for p in points])
    steps = pd.concat([p.steps for p in points], ignore_index=True)
    if steps_form == vocab.STEPS_SUMMARY:
        steps = summary_of(steps)
    meta = provenance(
        scenario,
        "real",
        {
            "wall_time_s": time.perf_counter() - started,
            "cwd": os.getcwd(),
            "origin": written_by,
            "steps_form": steps_form,
        },
    )
    if incomplete is not None:
        meta["incomplete"] = incomplete
    if recalibrate is not None:  # how far the machine moved since the calibration
        moved = recalibrate.drift()
        if moved is not None:
            meta["machine_drift"] = moved
    runs = {p.point_id: p.runs for p in points if p.runs}
    if runs:  # real.repeats: every run's own figures, beside the means in results.csv
        meta["runs"] = runs
    placement = {p.point_id: p.placement for p in points if p.placement}
    if placement:  # real.engine: spark: where each process ran
        meta["placement"] = placement
    meta["costs"] = {p.point_id: p.costs for p in points if p.costs is not None}
    targets = {p.point_id: p.target for p in points if p.target}
    if targets:  # why a point's time-to-target columns are empty
        meta["targets"] = targets
    traces = {p.point_id: p.trace for p in points if p.trace is not None}
    curves = [p.curves for p in points if p.curves is not None]
    write_run(
        out_dir,
        results,
        steps,
        meta,
        traces,
        pd.concat(curves, ignore_index=True) if curves else None,
    )


class Phases:
    """Progress within a point on a terminal: a line on stderr as each part of its run
    starts (`p1: run 2 of 3`, `p1: baseline (1 worker)`), and every HEARTBEAT_S seconds
    the time the part has taken so far (the workers do not report their steps while
    they run)."""

    HEARTBEAT_S = 30.0

    def __init__(self) -> None:
        self.what = ""
        self.since = time.perf_counter()
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._beat, daemon=True)
        self.thread.start()

    def __call__(self, point: str, what: str) -> None:
        with self.lock:
            self.what, self.since = f"{point}: {what}", time.perf_counter()
        print(f"run-real: {self.what}", file=sys.stderr, flush=True)

    def _beat(self) -> None:
        while not self.done.wait(self.HEARTBEAT_S):
            with self.lock:
                what, took = self.what, time.perf_counter() - self.since
            if what:
                print(f"run-real: {what}, {took:,.0f} s so far", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def engine_of(scenario: Scenario) -> str:
    """Where the points run (`local`, or `spark` and its master): meta.json's `origin`."""
    real = scenario.points[0].spec.real
    return "local" if real.engine == "local" else f"spark {real.spark.master}"


class _Recalibration:
    """run-real --recalibrate: before each run of a point, its compute and every probe its
    simulation takes numbers from (`calibrate.probes_of`) are measured again, each once
    per round of repeats; when every run is done they are pooled into the profile
    (`real/pool.py`)."""

    def __init__(self, args: argparse.Namespace):
        self.path = Path(args.recalibrate)
        self.profile = load_profile(self.path, "--recalibrate")  # bad: one line, exit 2
        self.quiet = args.quiet
        self.done: set[tuple[tuple[Any, ...], int]] = set()
        self.measured = pool.Measured()

    def __call__(self, point: Point, repetition: int) -> None:
        key = calibrate.compute_key(point.spec)
        if (key, repetition) not in self.done:
            self.done.add((key, repetition))
            entry = calibrate.measure_compute(point.spec, key[3], key[4])
            self.measured.compute.append(entry)
            self._say(calibrate.describe_compute(entry))
        for probe in calibrate.probes_of(point.spec):
            if (probe, repetition) not in self.done:
                self.done.add((probe, repetition))
                self._say(calibrate.measure_probe(probe, point.spec, self.measured))

    def _say(self, lines: str) -> None:
        if not self.quiet:
            for line in lines.splitlines():
                print(f"recalibrate: {line}", file=sys.stderr)

    def drift(self) -> dict[str, Any] | None:
        return pool.drift(self.profile, self.measured.compute)

    def write(self) -> None:
        folded = pool.fold(self.profile, self.measured)
        write_atomic(self.path, dump_profile(folded))
        if not self.quiet:
            print(
                f"wrote {self.path} ({len(self.measured)} measurements pooled in)",
                file=sys.stderr,
            )


def _calibrate(scenario: Scenario, args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path("runs") / scenario.name / "profile.yaml"
    if out.is_dir():
        raise UserError(f"--out: {out} is a directory; --calibrate writes a profile file")
    profile = calibrate.calibrate(scenario, None if not args.quiet else (lambda line: None))
    write_atomic(out, dump_profile(profile))
    if not args.quiet:
        print(f"wrote {out} (use it with cluster.profile: {out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
