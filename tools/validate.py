"""`make validate`: the simulator against real runs on this machine.

For every scenario in `scenarios/validation/` this runs `compare` (calibrate this machine,
`run-real`, `simulate` from the calibration alone, `report`) into
`runs/validation/<name>/`, then writes `docs/validation.md`: per point the simulated and
real step time and throughput and their relative errors, the mean absolute percentage
error over the suite, Kendall's tau-b within each sweep, the machine and the date.

    python tools/validate.py [--reuse | --resimulate] [--only NAME ...] [--out FILE.md]

`--reuse` keeps result directories that already hold a report (to rewrite the document
without running again); `--resimulate` keeps the calibration and the real runs and runs
`simulate` and `report` again (after a change to the simulator: the prediction still sees
the calibration only). The section between the `analysis` markers of an existing
document is kept: it is written by hand, from the numbers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measured.errors import LOCALHOST_ERRORS  # noqa: E402
from measured.errors import table as errors_table  # noqa: E402
from reports.compare import (  # noqa: E402
    agreement,
    combine,
    kendall_tau_b,
    mape,
    ordered_pairs,
    resolution,
    run_to_run_noise,
)
from reports.intervals import coverage  # noqa: E402
from reports.load import load_run  # noqa: E402
from results.files import write_atomic  # noqa: E402

BEGIN, END = "<!-- analysis: begin -->", "<!-- analysis: end -->"
TARGET_PCT = 10.0


def run_compare(scenario: Path, out: Path) -> None:
    started = dt.datetime.now()
    code = subprocess.call(
        [sys.executable, "-m", "real.compare", str(scenario), "--out", str(out)], cwd=ROOT
    )
    if code != 0:
        raise SystemExit(f"validate: compare {scenario} failed (exit {code})")
    print(f"validate: {scenario.name} took {(dt.datetime.now() - started).seconds} s")


def resimulate(scenario: Path, out: Path) -> None:
    """Simulate from the stored calibration again (after a change to the simulator) and
    report against the stored real runs."""
    profile = (out / "profile.yaml").resolve()
    for argv in (
        [
            "sim.cli",
            str(scenario),
            "--set",
            f"cluster.profile={profile}",
            "--defaults",
            "real",  # the fields left unset as run-real ran them, as compare does
            "--out",
            str(out / "sim"),
            "--force",  # compare's simulation, made again on purpose
        ],
        ["reports.cli", str(out / "sim"), str(out / "real"), "--out", str(out), "--force"],
    ):
        if subprocess.call([sys.executable, "-m", *argv], cwd=ROOT) != 0:
            raise SystemExit(f"validate: {' '.join(argv)} failed")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}" if abs(x) < 10 else f"{x:+.0%}"


def _with_spread(row: Any) -> str:
    """A real throughput, with its 95% half-width over the runs where there are several."""
    mean, half = float(row["real_throughput"]), float(row["real_throughput_ci95"])
    runs = int(row["real_runs"])
    if runs < 2 or not math.isfinite(half):
        return f"{mean:,.0f}"
    return f"{mean:,.0f} ± {half:,.0f} ({runs} runs)"


def _with_interval(row: Any) -> str:
    """A predicted throughput, with the 90% interval its measurement should fall in."""
    low, high = float(row["interval_low"]), float(row["interval_high"])
    if not math.isfinite(low):
        return f"{row['sim_throughput']:,.0f}"
    return f"{row['sim_throughput']:,.0f} ({low:,.0f} to {high:,.0f})"


def _inside(value: Any) -> str:
    return "n/a" if value is None or value != value else "yes" if value else "**no**"


def _coverage_line(held: int, known: int, widths: list[float]) -> str:
    """The share of measurements inside their prediction's 90% interval, over the suite."""
    if not known:
        return "No point has an interval (the calibration measured once, the points run once)."
    return (
        f"**Coverage: {held} of {known} measurements ({held / known:.0%}) inside their "
        f"prediction's 90% interval** (the model's error on this machine, the "
        f"calibration's spread over its rounds and the runs' spread together: "
        f"docs/simulator.md, \"Intervals of a calibrated "
        f"prediction\"); the intervals are "
        f"{float(np.mean(widths)):.0%} of the prediction wide on average."
    )


def _errors_table(results: list[Any], noise: tuple[float, int], commit: str) -> str:
    """`measured/errors-localhost.yaml`: every point's throughput error with its kind,
    workers and runs, and the suite's pooled run-to-run noise (measured/errors.py,
    `machine_error`)."""
    rows = []
    for scenario, result, real in results:
        kinds = dict(zip(real.results["point"], real.results["strategy"], strict=True))
        for row in result.pairs.to_dict(orient="records"):
            rows.append(
                {
                    "scenario": scenario.stem,
                    "point": row["point"],
                    "kind": kinds[row["point"]],
                    "workers": int(row["workers"]),
                    "runs": int(row["real_runs"]),
                    "error": round(float(row["throughput_error"]), 4),
                }
            )
    header = (
        "The simulator's error on calibrated points of this machine: (simulated - measured) /\n"
        "measured throughput, one per point of `make validate` (docs/validation.md), with\n"
        "the strategy's kind, the workers and the real runs averaged; `noise` is one real "
        "run's\nrelative standard deviation pooled over the repeated points, on `dof` "
        f"degrees of freedom.\n{dt.date.today()}, commit {commit}; rewritten by `make "
        "validate`. Read by measured/errors.py\n(`machine_error`: docs/simulator.md, "
        '"Intervals of a calibrated prediction").'
    )
    return errors_table(rows, header, noise=round(noise[0], 4), dof=noise[1])


def _self_tau(real: Any) -> float | None:
    """Kendall tau-b of the real runs against themselves: the throughput ranking of one run
    of every point against another's (meta.json `runs`, mean over pairs of runs). What
    agreement the machine's noise allows: no prediction can rank more surely than this."""
    runs = real.meta.get("runs") or {}
    points = list(real.results["point"])
    if not points or any(len(runs.get(p, [])) < 2 for p in points):
        return None
    count = min(len(runs[p]) for p in points)
    taus = [
        kendall_tau_b(
            [runs[p][a]["throughput_samples_per_s"] for p in points],
            [runs[p][b]["throughput_samples_per_s"] for p in points],
        )
        for a in range(count)
        for b in range(a + 1, count)
    ]
    defined = [t for t in taus if t is not None]
    return float(np.mean(defined)) if defined else None


def _noise_paragraph(
    noise: tuple[float, int] | None,
    resolved: list[tuple[str, float | None, tuple[int, int, int, int], float | None]],
) -> str:
    if noise is None:
        return "Every point ran once (`real.repeats: 1`): the run-to-run noise is not measured."
    sigma, dof = noise
    parts = ", ".join(
        f"{name} {'n/a' if tau is None else f'{tau:.2f}'} ({apart} of {total} pairs apart, "
        f"{same} of them ordered by the simulator as by the runs, {other} the other way)"
        for name, tau, (same, other, apart, total), _ in resolved
    )
    selves = ", ".join(
        f"{name} {'n/a' if own is None else f'{own:.2f}'}" for name, _, _, own in resolved
    )
    return (
        f"Run-to-run noise of one real run's throughput, pooled over the repeated points "
        f"({dof} degrees of freedom): {100 * sigma:.1f}%. Two points count as ordered by "
        f"the real runs when their mean throughputs differ by more than t95 x that noise x "
        f"sqrt(m1^2/R1 + m2^2/R2); Kendall tau-b with the pairs closer than that as ties: "
        f"{parts}. The real runs ranked against each other (one run of every point against "
        f"another, Kendall tau-b; n/a where a run's figures were not kept): {selves}."
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="validate")
    parser.add_argument("--reuse", action="store_true", help="keep complete result directories")
    parser.add_argument(
        "--resimulate",
        action="store_true",
        help="keep the calibration and the real runs; simulate and report again",
    )
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", default=str(ROOT / "docs" / "validation.md"))
    args = parser.parse_args(argv)
    files = sorted((ROOT / "scenarios" / "validation").glob("*.yaml"))
    if args.only:
        files = [f for f in files if f.stem in args.only]
    sections, all_errors, all_step_errors, taus, above = [], [], [], [], []
    held = known = 0
    widths: list[float] = []
    machine: dict[str, object] = {}
    results = []
    for scenario in files:
        out = ROOT / "runs" / "validation" / scenario.stem
        if args.resimulate and (out / "real").is_dir():
            resimulate(scenario, out)
        elif not (args.reuse and (out / "report.html").is_file()):
            run_compare(scenario, out)
        profile = yaml.safe_load((out / "profile.yaml").read_text())
        machine = profile.get("machine", machine)
        real = load_run(out / "real")
        results.append((scenario, agreement(combine([load_run(out / "sim"), real])), real))
    # the machine's run-to-run noise, pooled over every repeated real point of the suite
    noise = run_to_run_noise(pd.concat([real.results for _, _, real in results]))
    resolved_taus = []
    for scenario, result, real in results:
        pairs = result.pairs
        all_errors += list(pairs["throughput_error"])
        all_step_errors += list(pairs["step_time_error"])
        inside, counted, width = coverage(pairs)
        held, known = held + inside, known + counted
        widths += [width] * counted
        taus.append((scenario.stem, result.tau))
        resolved = None
        if noise is not None:
            sims, means = list(pairs["sim_throughput"]), list(pairs["real_throughput"])
            gaps = resolution(means, list(pairs["real_runs"]), noise)
            resolved = kendall_tau_b(sims, means, gaps)
            order = ordered_pairs(sims, means, gaps)
            resolved_taus.append((scenario.stem, resolved, order, _self_tau(real)))
        lines = [
            f"### {scenario.stem} (`scenarios/validation/{scenario.name}`)",
            "",
            f"Throughput MAPE {result.mape_throughput:.1f}%, step-time MAPE "
            f"{result.mape_step_time:.1f}%, Kendall tau-b "
            + ("n/a" if result.tau is None else f"{result.tau:.2f}")
            + (
                ""
                if noise is None
                else ", over the pairs the real runs tell apart "
                + ("n/a" if resolved is None else f"{resolved:.2f}")
            )
            + f". Calibration: `runs/validation/{scenario.stem}/profile.yaml`.",
            "",
            "| point | configuration | workers | sim step | real step | error | sim samples/s "
            "(90% interval) | real samples/s | error | inside |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in pairs.to_dict(orient="records"):
            lines.append(
                f"| {row['point']} | {row['label']} | {row['workers']} "
                f"| {row['sim_step_time_s'] * 1e3:.1f} ms | {row['real_step_time_s'] * 1e3:.1f} ms "
                f"| {_pct(row['step_time_error'])} | {_with_interval(row)} "
                f"| {_with_spread(row)} | {_pct(row['throughput_error'])} "
                f"| {_inside(row['inside'])} |"
            )
            if abs(row["throughput_error"]) > TARGET_PCT / 100:
                above.append(f"{scenario.stem}: {row['point']} ({_pct(row['throughput_error'])})")
        sections.append("\n".join(lines))
    path = Path(args.out)
    kept = f"{BEGIN}\n(not written yet)\n{END}"
    if path.is_file():
        text = path.read_text()
        if BEGIN in text and END in text:
            kept = text[text.index(BEGIN) : text.index(END) + len(END)]
    overall = mape(all_errors)
    overall_step = mape(all_step_errors)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    doc = [
        "# Validation: the simulator against real runs on this machine",
        "",
        f"Made by `make validate` (`tools/validate.py`) on {dt.date.today().isoformat()}, "
        f"commit {commit}, on `{machine.get('hostname', '?')}`: {machine.get('cpus', '?')} "
        f"CPUs, {machine.get('platform', '?')}, TensorFlow {machine.get('tensorflow', '?')} "
        f"({machine.get('device', 'cpu')}).",
        "",
        "Each scenario of `scenarios/validation/` ran through `compare`: `run-real --calibrate` "
        "measured this machine (single-worker compute with P processes at once, one tensor "
        "moved between two processes at 1 KiB-32 MiB one way and both ways at once, small "
        "messages chained in one call, the parameter-server coordinator's round trips and "
        "the model's update and closures on its servers, "
        "the job relaunched after a kill), `run-real --recalibrate` ran every point "
        "(`real.repeats` times, interleaved, forward and backward in turn: the real figures "
        "are means over the runs) and, "
        "just before each of its runs, measured again what the point's simulation takes from "
        "the profile (its single-worker compute, the transfer, the 2-process all-reduce, the "
        "coordinator, the update and closures; each once per round of runs), pooled into the "
        "profile, and `simulate` predicted them from that calibration alone. "
        "Relative error is (sim - real) / real.",
        "",
        f"**Throughput MAPE over the suite: {overall:.1f}%** (target {TARGET_PCT:.0f}%); "
        f"step-time MAPE {overall_step:.1f}%. Kendall tau-b of the throughput ranking within "
        "each sweep: "
        + ", ".join(f"{n} {'n/a' if t is None else f'{t:.2f}'}" for n, t in taus)
        + ".",
        "",
        _coverage_line(held, known, widths),
        "",
        "Points above the target: " + ("; ".join(above) if above else "none") + ".",
        "",
        _noise_paragraph(noise, resolved_taus),
        "",
        "## Analysis",
        "",
        kept,
        "",
        "## Results",
        "",
        *("\n\n".join(sections).splitlines()),
        "",
    ]
    write_atomic(path, "\n".join(doc))
    if noise is not None and not args.only:  # the whole suite's errors, or none
        write_atomic(LOCALHOST_ERRORS, _errors_table(results, noise, commit))
    print(
        f"validate: throughput MAPE {overall:.1f}% over {len(all_errors)} points, "
        f"{held} of {known} inside their 90% intervals; wrote {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
