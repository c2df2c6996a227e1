"""`simulate FILE [--out DIR | --resume DIR] [--set PATH=VALUE ...] [--trace] [--jobs N]`.

The command line owns the terminal: a progress bar over sweep points on stderr, a summary
table on stdout. Bad input is one line on stderr and exit status 2, with nothing written.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from commands.args import add_resume, add_steps, out_dir_of, scenario_parser
from measured.profile import profiles_of
from results.files import claim_output, origin, provenance, results_frame
from results.progress import Finished, Progress, by_key, finished, profile_hashes
from scenarios import UserError, load, vocab
from scenarios.sections.backends import AUTO_TIMED_STEPS
from scenarios.sections.strategy import serves_parameters, trains_alone
from workloads.pipeline import fits_line

from .costs.explain import run_summary
from .engine.convergence import timed_steps
from .runner import PointResult, run, simulated_steps
from .strategies.parameter_server import replica


def build_parser() -> argparse.ArgumentParser:
    parser = scenario_parser(
        "simulate",
        "Predict how a training scenario scales, with a discrete-event simulation.",
        "sim",
        [
            "simulate scenarios/library/mlp-localhost.yaml",
            "simulate scenarios/library/allreduce-algorithms.yaml --set training.steps=10 --trace",
            "simulate scenarios/library/overlap-and-fusion.yaml --jobs 2 --out runs/overlap",
            "simulate scenarios/library/mlp-localhost.yaml --resume runs/mlp-localhost/sim",
        ],
    )
    parser.add_argument("--trace", action="store_true", help="write a Chrome trace per point")
    parser.add_argument(
        "--jobs", metavar="N", type=int, default=1, help="simulate N points in parallel (default 1)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    add_steps(parser)
    add_resume(parser)
    parser.add_argument(
        "--defaults",
        choices=["sim", "real"],
        default="sim",
        help="fill the fields the scenario leaves unset as this backend runs them (real: as "
        "run-real does, e.g. all-reduce without overlap; compare passes it)",
    )
    parser.add_argument(
        "--engine",
        choices=["local", "spark"],
        help="simulate the points here (local) or as Spark tasks (spark): sets sim.engine",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help="the Spark master the points run on: sets real.spark.master, and sim.engine to spark",
    )
    return parser


class StepBar:
    """The progress bar on stderr (shown on a terminal only): the steps simulated, all
    points and replications together, so that a long point moves it too; its postfix
    says the point and the simulated time reached."""

    def __init__(self, scenario: Any):
        from tqdm import tqdm

        self.points = list(scenario.points)
        self.total = {p.id: simulated_steps(p) for p in self.points}
        self.before: dict[str, int] = {}  # steps of the points before each, in order
        count = 0
        for p in self.points:
            self.before[p.id] = count
            count += self.total[p.id]
        self.finished = 0  # steps of the points done (any order: --jobs)
        self.bar = tqdm(
            total=count,
            unit="step",
            unit_scale=True,
            desc=scenario.name,
            file=sys.stderr,
            disable=None,
            leave=False,
        )

    def steps_done(self, point: str, done: int, now: float) -> None:
        """Within a point (points one at a time): `done` of its steps at `now` s."""
        self.bar.set_postfix_str(f"{point}, simulated {now:,.4g} s", refresh=False)
        self._to(self.before[point] + min(done, self.total[point]))

    def point_done(self, done: PointResult) -> None:
        self.finished += self.total[done.point_id]
        self.bar.set_postfix_str(f"{done.point_id} done", refresh=False)
        self._to(self.finished)

    def _to(self, count: int) -> None:
        if count > self.bar.n:
            self.bar.update(count - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def timed_notes(points: Sequence[Any]) -> list[str]:
    """One line where `sim.timed_steps: auto` cuts long runs to a target: which points
    time how many of their steps, and how to time every one."""
    cut = []
    for p in points:
        timed, why = timed_steps(p.spec)
        if timed is not None and p.spec.sim.timed_steps == "auto":
            cut.append(f"{p.id} ({timed:,} of {p.spec.training.steps:,})")
    if not cut:
        return []
    return [
        f"timing the first measured steps of {', '.join(cut)} and the rest at their mean "
        "step time (a run to a target longer than "
        f"{AUTO_TIMED_STEPS:,} steps, sim.timed_steps: auto); "
        "--set sim.timed_steps=all times every step"
    ]


def replica_note(points: Sequence[str]) -> str:
    """The line naming the points a replica of part of their cluster timed."""
    return (
        f"timed {', '.join(points)} on a replica of part of the cluster, a bounded engine "
        "(large parameter-server jobs; its measured error: "
        "docs/performance.md); --set sim.timing=exact times every worker"
    )


def table_notes(results: pd.DataFrame) -> list[str]:
    """What the table's `measured` column means, where the points count differently."""
    records = results.to_dict(orient="records")
    kinds = {vocab.counts_updates(r) for r in records if not trains_alone(r["strategy"])}
    trained = [float(r["samples_trained"]) for r in records if not trains_alone(r["strategy"])]
    if len(kinds) < 2 or max(trained) <= 1.05 * min(trained):
        return []
    return [
        "measured: asynchronous parameter servers count training.steps in updates (one "
        "worker's batch each, all workers together), the others in steps of every worker; "
        "set training.samples instead of training.steps to compare them at equal samples"
    ]


def _given(value: Any) -> bool:
    """A table cell's value is there: not None, not NaN."""
    return value is not None and value == value


def _extra_columns(records: list[dict[Any, Any]]) -> list[tuple[str, str, str]]:
    """The summary's columns for features in use: (header, column, format)."""
    extra: list[tuple[str, str, str]] = []  # (header, column, format)
    if any(not r["sync"] for r in records):
        extra += [
            ("max stale (updates)", "max_staleness", "{:.0f}"),
            ("mean stale (updates)", "mean_staleness", "{:.2f}"),
        ]
    if any(r["dropped_gradients"] for r in records):
        extra.append(("dropped", "dropped_gradients", "{:.0f}"))
    if any(r["failures"] for r in records):
        extra += [("failures", "failures", "{:.1f}"), ("lost steps", "lost_steps", "{:.1f}")]
    if any(r["checkpoint_time_s"] for r in records):
        extra.append(("ckpt time", "checkpoint_time_s", "{:.1f} s"))
    if any(r["failures"] or r["checkpoint_time_s"] for r in records):
        extra.append(("train time", "training_time_s", "{:.1f} s"))
    if any(trains_alone(r["strategy"]) for r in records):
        extra += [("makespan", "makespan_s", "{:.1f} s"), ("trials/h", "trials_per_hour", "{:.1f}")]
    if any(r.get("replications", 1) > 1 for r in records):
        extra.append(("± 95%", "throughput_ci95_samples_per_s", "{:,.0f}"))
    if any(_given(r.get(c)) for r in records for c in ("time_to_target_s", "final_metric")):
        extra += [  # a target is set: empty where a point did not reach it
            ("time to target", "time_to_target_s", "{:,.1f} s"),
            ("epochs to target", "epochs_to_target", "{:,.2f}"),
            ("samples to target", "samples_to_target", "{:,.0f}"),
        ]
    if any(_given(r.get("cost_usd")) for r in records):  # priced: money and energy
        extra += [("cost", "cost_usd", "{:,.2f} USD"), ("energy", "energy_kwh", "{:,.3g} kWh")]
        if any(_given(r.get("cost_to_target_usd")) for r in records):
            extra.append(("cost to target", "cost_to_target_usd", "{:,.2f} USD"))
    if any(_given(r.get("peak_learning_rate")) for r in records):
        extra.append(("peak lr", "peak_learning_rate", "{:.4g}"))
    return extra


def _interval_cells(r: Mapping[Any, Any]) -> list[str]:
    """A point's throughput interval and the class it comes from, with how many published
    figures back it; a point no figure covers says so."""
    name = str(r.get("interval_class") or "")
    low = float(r.get("throughput_low_samples_per_s") or math.nan)
    high = float(r.get("throughput_high_samples_per_s") or math.nan)
    if name.startswith("unvalidated") or not _given(low):
        return ["none", name.removeprefix("unvalidated: ") or "not timed"]
    return [f"{low:,.0f} to {high:,.0f}", f"{name} ({int(r['interval_figures'])})"]


def summary_table(results: pd.DataFrame) -> str:
    """The terminal summary: one line per point; columns for features in use."""
    records = results.to_dict(orient="records")
    headers = [
        "point",
        "workers",
        "strategy",
        "measured",
        "samples",
        "step time",
        "samples/s",
        "scaling eff",
        "comm share",
    ]
    extra = _extra_columns(records)
    headers += [h for h, _, _ in extra]
    intervals = "interval_class" in results.columns
    if intervals:
        headers += [f"samples/s {float(records[0]['interval_level']):.0%}", "from"]
    rows: list[list[str]] = []
    for r in records:
        strategy = str(r["strategy"])
        if serves_parameters(strategy):
            strategy = f"ps x{r['servers']} {r['placement']}/{r['partition']}"
        elif isinstance(r["algorithm"], str) and r["algorithm"]:
            strategy = f"{strategy}/{r['algorithm']}"
        if not r["sync"]:
            strategy += " async"
        cells = [
            str(r["point"]),
            str(r["workers"]),
            strategy,
            vocab.measured_steps(r),
            f"{float(r['samples_trained']):,.0f}",
            f"{float(r['step_time_mean_s']) * 1e3:.1f} ms",
            f"{float(r['throughput_samples_per_s']):,.0f}",
            f"{float(r['scaling_efficiency']):.1%}",
            f"{float(r['comm_time_frac']):.1%}",
        ]
        if r.get("fits") is False:  # not timed: its memory says why
            peak = float(r["peak_memory_bytes"]) / 2**30
            cells[4:] = ["", f"does not fit ({peak:.3g} GiB)", "", "", ""]
        for _, column, fmt in extra:
            value = r.get(column)
            cells.append(fmt.format(float(value)) if value == value and value is not None else "")
        if intervals:
            cells += _interval_cells(r)
        rows.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in (0, 2) else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(row) for row in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    progress: Progress | None = None
    try:
        scenario, profiles, out_dir, written_by = _prepare(args)
        progress = _progress_of(args, scenario, out_dir, written_by, started)
        todo = progress.remaining(scenario)
        if args.resume and not args.quiet:
            print(f"simulate: {progress.resumed(scenario)}", file=sys.stderr)
        if not args.quiet:
            for line in timed_notes(todo.points):
                print(f"simulate: {line}", file=sys.stderr)
        bar = None if args.quiet else StepBar(todo)
        kept = progress
        copied: list[str] = []

        def point_done(done: PointResult) -> None:
            if bar is not None:
                bar.point_done(done)
            if done.engine == replica.NAME:
                copied.append(done.point_id)
            kept.add(record_of(done, args.steps))

        run(
            todo,
            jobs=args.jobs,
            trace=args.trace,
            progress=point_done,
            steps=args.steps,
            within=bar.steps_done if bar else None,
            profiles=profiles,
        )
        if bar is not None:
            bar.close()
        if copied and not args.quiet:
            print(f"simulate: {replica_note(copied)}", file=sys.stderr)
    except UserError as exc:
        print(f"simulate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"simulate: interrupted; {_kept(progress)}", file=sys.stderr)
        return 130
    progress.flush(complete=True)
    _finish(args, progress, out_dir)
    return 0


def _prepare(args: argparse.Namespace) -> tuple[Any, Any, Path, dict[str, Any]]:
    """The scenario, its profiles, the output directory and the origin the run writes
    as; raises UserError on bad input."""
    if args.jobs < 1:
        raise UserError(f"--jobs: must be at least 1, got {args.jobs}")
    sets = list(args.sets)
    if args.engine or args.master:
        sets.append(f"sim.engine={args.engine or 'spark'}")
    if args.master:
        if args.engine == "local":
            raise UserError("--master: a Spark master, with --engine local")
        sets.append(f"real.spark.master={args.master}")
    scenario = load(args.scenario, sets, backend=args.defaults)
    profiles = profiles_of(scenario)  # a bad cluster.profile: refused before any work
    for line in scenario.warnings:
        print(f"simulate: warning: {line}", file=sys.stderr)
    out_dir = out_dir_of(args, Path("runs") / scenario.name / "sim")
    # simulate's results do not depend on where its points ran: no engine
    written_by = origin(
        args.written_by or "simulate",
        scenario.name,
        calibrated=any(p.spec.cluster.profile for p in scenario.points),
    )
    return scenario, profiles, out_dir, written_by


def _progress_of(
    args: argparse.Namespace,
    scenario: Any,
    out_dir: Path,
    written_by: dict[str, Any],
    started: float,
) -> Progress:
    """The run's result directory as its points finish; with --resume, holding the
    points done there already. Raises UserError where the directory holds another
    run's results (`--resume`) or another command's (`claim_output`)."""
    cwd = os.getcwd()

    def meta_of(records: list[Finished]) -> dict[str, Any]:
        extra: dict[str, Any] = {
            "wall_time_s": time.perf_counter() - started,
            "jobs": args.jobs,
            "cwd": cwd,
            "origin": written_by,
        }
        for key in ("checkpointing", "memory", "timed_steps", "engines", "costs"):
            extra[key] = by_key(records, key)
        targets = by_key(records, "targets")
        if targets:
            extra["targets"] = targets
        calibrated = by_key(records, "calibration")
        if calibrated:
            extra["calibration"] = run_summary(calibrated)
        return extra

    progress = Progress(
        out_dir,
        scenario,
        provenance(scenario, "sim"),
        steps_header(args.steps),
        meta_of,
        {"steps_form": args.steps, "trace": args.trace, **_profiles(scenario)},
    )
    if args.resume:  # a directory of another run: refused in its own words first
        progress.resume(scenario, "sim")
    claim_output(out_dir, written_by, args.force)
    return progress


def _profiles(scenario: Any) -> dict[str, Any]:
    """meta.json's `profiles` where points are calibrated: each profile's sha256, so
    that a run resumes only with the numbers it started with."""
    hashes = profile_hashes(scenario)
    return {"profiles": hashes} if hashes else {}


def steps_header(form: str) -> tuple[str, ...]:
    """steps.csv's columns in a form (`summary` or `all`)."""
    return vocab.STEP_COLUMNS if form == vocab.STEPS_ALL else vocab.STEP_SUMMARY_COLUMNS


def record_of(done: PointResult, form: str) -> Finished:
    """A simulated point as its result files hold it (`form`: steps.csv's)."""
    meta: dict[str, Any] = {
        "checkpointing": done.checkpointing,
        "memory": done.memory,
        "costs": done.costs,
    }
    if done.timed:
        meta["timed_steps"] = done.timed
    if done.row.get("fits") is not False:
        meta["engines"] = done.engine
    if done.target is not None:
        meta["targets"] = done.target
    if done.calibration:
        meta["calibration"] = done.calibration
    curves = None if done.curves is None else done.curves.reindex(columns=vocab.CURVE_COLUMNS)
    return finished(
        done.point_id, done.row, done.steps, steps_header(form), curves, done.trace, meta
    )


def _kept(progress: Progress | None) -> str:
    """What an interrupted run leaves: the points it finished, written, or nothing."""
    if progress is None or not progress.done:
        return "nothing written"
    progress.flush()
    out = progress.out_dir
    return f"{len(progress.done)} finished points kept in {out}/ (--resume {out} runs the rest)"


def _finish(args: argparse.Namespace, progress: Progress, out_dir: Path) -> None:
    """The warnings of a finished run and, unless --quiet, its summary table."""
    records = progress.records
    for record in records:
        memory = record.meta.get("memory") or {}
        if memory.get("fits") is False:
            print(f"simulate: warning: {fits_line(record.point_id, memory)}", file=sys.stderr)
    calibrated = by_key(records, "calibration")
    if calibrated:
        for line in run_summary(calibrated)["not_found"]:
            print(f"simulate: warning: {line}", file=sys.stderr)
    if not args.quiet:
        results = results_frame([r.row for r in records])
        print(summary_table(results))
        for note in table_notes(results):
            print(f"\n{note}")
        print(f"\nwrote {out_dir}/ ({len(results)} points)")


if __name__ == "__main__":
    sys.exit(main())
