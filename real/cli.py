"""`run-real FILE [--out DIR | --resume DIR] [--set PATH=VALUE ...] [--trace] [--calibrate |
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

from commands.args import add_resume, add_steps, out_dir_of, scenario_parser
from engines.spark import security
from measured.profile import dump_profile, load_profile, profiles_of
from results.files import claim_output, origin, provenance, write_atomic
from results.progress import Finished, Progress, by_key, finished
from results.steps import summary_of
from scenarios import UserError, load, vocab
from scenarios.loader import Point, Scenario

from . import runner
from .calibrate import measure as calibrate
from .calibrate import pool
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
    add_resume(parser)
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
    progress: Progress | None = None
    try:
        scenario = load(args.scenario, sets, backend="real")
        profiles_of(scenario)  # a bad cluster.profile: refused before any work
        for line in scenario.warnings:
            print(f"run-real: warning: {line}", file=sys.stderr)
        if args.calibrate:
            if args.recalibrate or args.resume:
                flag = "--recalibrate" if args.recalibrate else "--resume"
                raise UserError(f"{flag}: not with --calibrate (which writes a profile)")
            return _calibrate(scenario, args)
        recalibrate = _Recalibration(args) if args.recalibrate else None
        progress = _progress_of(args, scenario, recalibrate, started)
        todo = progress.remaining(scenario)
        if args.resume and not args.quiet:
            print(f"run-real: {progress.resumed(scenario)}", file=sys.stderr)
        say = _progress(args.quiet)
        kept = progress

        def point_done(point: RealPoint) -> None:
            say(point)
            kept.add(record_of(point, args.steps))

        phases = Phases() if not args.quiet and sys.stderr.isatty() else None
        try:
            if todo.points:
                runner.run(todo, point_done, trace=args.trace, before=recalibrate, phase=phases)
        finally:
            if phases is not None:
                phases.stop()
    except UserError as exc:
        print(f"run-real: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # GaveUp too: the points finished before it are kept
        line = f"run-real: failed: {exc}"
        if progress is not None and progress.done:
            point = exc.point if isinstance(exc, GaveUp) else None
            progress.flush(extra={"incomplete": {"point": point, "reason": str(exc)}})
            line += (
                f"; wrote {progress.out_dir}/ ({len(progress.done)} of "
                f"{len(progress.order)} points)"
            )
        print(line, file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        why, code = how_stopped(exc)
        kept_line = "nothing written"
        if progress is not None and progress.done:
            progress.flush()
            out = progress.out_dir
            kept_line = (
                f"{len(progress.done)} finished points kept in {out}/ "
                f"(--resume {out} runs the rest)"
            )
        print(f"run-real: {why}; every worker stopped, {kept_line}", file=sys.stderr)
        return code
    progress.flush(complete=True)
    if not args.quiet:
        print(f"wrote {progress.out_dir}/ ({len(progress.done)} points)")
    if recalibrate is not None:
        recalibrate.write()
    return 0


def _progress_of(
    args: argparse.Namespace,
    scenario: Scenario,
    recalibrate: _Recalibration | None,
    started: float,
) -> Progress:
    """The run's result directory as its points finish (with --resume, holding the
    points done there already); raises UserError where it holds another run's results
    (`--resume`) or another command's (`claim_output`)."""
    out_dir = out_dir_of(args, Path("runs") / scenario.name / "real")
    written_by = origin(
        args.written_by or "run-real",
        scenario.name,
        calibrated=recalibrate is not None,
        engine=engine_of(scenario),
    )
    cwd = os.getcwd()

    def meta_of(records: list[Finished]) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "wall_time_s": time.perf_counter() - started,
            "cwd": cwd,
            "origin": written_by,
            # which money and energy figures were known, and their sources
            "costs": by_key(records, "costs"),
        }
        if recalibrate is not None:  # how far the machine moved since the calibration
            moved = recalibrate.drift()
            if moved is not None:
                extra["machine_drift"] = moved
        # real.repeats: every run's own figures, beside the means in results.csv;
        # real.engine: spark: where each process ran; why a point's time-to-target
        # columns are empty
        for key in ("runs", "placement", "targets"):
            if by_key(records, key):
                extra[key] = by_key(records, key)
        real = scenario.points[0].spec.real
        if real.engine == "spark":  # whether its Spark session authenticated
            extra["spark"] = security(real.spark.master)
        return extra

    progress = Progress(
        out_dir,
        scenario,
        provenance(scenario, "real"),
        steps_header(args.steps),
        meta_of,
        {"steps_form": args.steps, "trace": args.trace},
    )
    if args.resume:  # a directory of another run: refused in its own words first
        progress.resume(scenario, "real")
    claim_output(out_dir, written_by, args.force)
    return progress


def steps_header(form: str) -> list[str]:
    """steps.csv's columns in a form (`summary` or `all`): run-real adds `loss`."""
    columns = vocab.STEP_COLUMNS if form == vocab.STEPS_ALL else vocab.STEP_SUMMARY_COLUMNS
    return [*columns, "loss"]


def record_of(point: RealPoint, form: str) -> Finished:
    """A point run for real as its result files hold it (`form`: steps.csv's)."""
    steps = summary_of(point.steps) if form == vocab.STEPS_SUMMARY else point.steps
    meta: dict[str, Any] = {}
    for key, value in (
        ("runs", point.runs),
        ("placement", point.placement),
        ("costs", point.costs),
        ("targets", point.target),
    ):
        if value is not None and (value or key == "costs"):
            meta[key] = value
    curves = None if point.curves is None else point.curves.reindex(columns=vocab.CURVE_COLUMNS)
    return finished(point.point_id, point.row, steps, steps_header(form), curves, point.trace, meta)


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
    per round of repeats; when every run is done they are pooled into the profile, and
    each round's figures kept beside the pooled ones (`real/calibrate/pool.py`)."""

    def __init__(self, args: argparse.Namespace):
        self.path = Path(args.recalibrate)
        self.profile = load_profile(self.path, "--recalibrate")  # bad: one line, exit 2
        self.quiet = args.quiet
        self.done: set[tuple[tuple[Any, ...], int]] = set()
        self.rounds: dict[int, pool.Measured] = {}

    def __call__(self, point: Point, repetition: int) -> None:
        into = self.rounds.setdefault(repetition, pool.Measured())
        key = calibrate.compute_key(point.spec)
        if (key, repetition) not in self.done:
            self.done.add((key, repetition))
            entry = calibrate.measure_compute(point.spec, key[3], key[4])
            into.compute.append(entry)
            self._say(calibrate.describe_compute(entry))
        for probe in calibrate.probes_of(point.spec):
            if (probe, repetition) not in self.done:
                self.done.add((probe, repetition))
                self._say(calibrate.measure_probe(probe, point.spec, into))

    @property
    def measured(self) -> pool.Measured:
        """Every round's measurements together."""
        return pool.together(self.rounds.values())

    def _say(self, lines: str) -> None:
        if not self.quiet:
            for line in lines.splitlines():
                print(f"recalibrate: {line}", file=sys.stderr)

    def drift(self) -> dict[str, Any] | None:
        return pool.drift(self.profile, self.measured.compute)

    def write(self) -> None:
        measured = self.measured
        if not measured:  # every point was done already (--resume): nothing new
            return
        rounds = [self.rounds[r] for r in sorted(self.rounds)]
        kept = pool.rounds_of(self.profile, rounds)
        folded = pool.fold(self.profile, measured).model_copy(update={"rounds": kept})
        write_atomic(self.path, dump_profile(folded))
        if not self.quiet:
            print(
                f"wrote {self.path} ({len(measured)} measurements pooled in, "
                f"{len(folded.rounds)} rounds kept)",
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
