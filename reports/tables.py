"""The report's tables: a header and rows of cells per section (reports/render.py lays
them out as HTML and Markdown)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from scenarios import vocab

from .load import records
from .plots import BREAKDOWN, breakdown_shares
from .report import Report, capacity_of


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if math.isfinite(seconds) else ""


def _num(value: float) -> str:
    return f"{value:,.0f}" if math.isfinite(value) else ""


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


# ---------------------------------------------------------------------------- tables
# A table is a header and rows of cells; the first `text` columns align left.


Table = tuple[list[str], list[list[str]]]


#: the throughput error a prediction is held to (the project's MAPE target, per point here)
TARGET_ERROR = 0.10


def verdict(r: Mapping[str, Any]) -> str:
    """How a point's measured throughput stands: inside or outside its prediction's 90%
    interval where it has one (reports/intervals.py, `measured_interval`; outside marked
    with a cross, and coloured in the page); else against the per-point target or the
    runs' own 95% interval."""
    error, sim, real = r["throughput_error"], r["sim_throughput"], r["real_throughput"]
    if not math.isfinite(error):
        return "n/a"
    if r.get("inside") is not None and r["inside"] == r["inside"]:
        return "inside" if r["inside"] else "\u2717 outside"
    if abs(error) <= TARGET_ERROR:
        return f"within {TARGET_ERROR:.0%}"
    ci95 = r["real_throughput_ci95"]
    if math.isfinite(ci95) and abs(sim - real) <= ci95:
        return "within the runs' 95% interval"
    return f"\u2717 outside {TARGET_ERROR:.0%}"


def error_table(report: Report) -> Table:
    header = [
        "point",
        "configuration",
        "workers",
        "sim step",
        "real step",
        "step error",
        "sim samples/s (90% interval)",
        "real samples/s (95% interval)",
        "throughput error",
        "verdict",
    ]
    rows = [
        [
            str(r["point"]),
            str(r["label"]),
            str(r["workers"]),
            _ms(r["sim_step_time_s"]),
            _ms(r["real_step_time_s"]),
            _pct(r["step_time_error"], signed=True),
            _num(r["sim_throughput"])
            + (
                f" ({_num(r['interval_low'])} to {_num(r['interval_high'])})"
                if math.isfinite(r["interval_low"])
                else ""
            ),
            _num(r["real_throughput"])
            + (
                f" \u00b1 {_num(r['real_throughput_ci95'])} ({r['real_runs']:.0f} runs)"
                if math.isfinite(r["real_throughput_ci95"])
                else ""
            ),
            _pct(r["throughput_error"], signed=True),
            verdict(r),
        ]
        for r in records(report.agreement.pairs)
    ]
    return header, rows


def breakdown_table(report: Report) -> Table:
    header = ["point", "backend", *(name for name, _, _ in BREAKDOWN)]
    rows = [
        [str(r["point"]), str(r["backend"]), *(_pct(s) for s in breakdown_shares(r))]
        for r in records(report.frame)
    ]
    return header, rows


def step_table(report: Report) -> Table:
    header = ["point", "backend", "mean", "p50", "p99", "jitter"]
    rows = [
        [
            str(r["point"]),
            str(r["backend"]),
            _ms(r["step_time_mean_s"]),
            _ms(r["step_time_p50_s"]),
            _ms(r["step_time_p99_s"]),
            _ms(r["step_time_jitter_s"]),
        ]
        for r in records(report.frame)
    ]
    return header, rows


def staleness_table(report: Report) -> Table:
    header = ["point", "backend", "max staleness (updates)", "mean staleness (updates)"]
    rows = [
        [
            str(r["point"]),
            str(r["backend"]),
            f"{r['max_staleness']:.0f}",
            f"{r['mean_staleness']:.2f}",
        ]
        for r in records(report.asynchronous)
    ]
    return header, rows


def _target_time(row: Mapping[str, Any]) -> str:
    """A row's time to target, with its 95% half-width where it is a mean of runs."""
    text = f"{row['time_to_target_s']:.3g} s"
    half, runs = row.get("time_to_target_ci95_s", math.nan), row.get("replications", 1)
    if isinstance(half, float) and math.isfinite(half) and runs > 1:
        text += f" \u00b1 {half:.2g} ({runs:.0f} runs)"
    return text


def memory_table(report: Report) -> Table:
    """Per point and backend: the peak memory of a device, its capacity, whether it fits."""
    header = ["point", "backend", "peak memory per device", "device memory", "fits"]
    body = []
    for row in records(report.frame):
        peak = row["peak_memory_bytes"]
        cap = capacity_of(report.runs[int(row["source"])], str(row["point"]))
        body.append(
            [
                str(row["point"]),
                str(row["backend"]),
                f"{peak / 2**30:.3g} GiB" if math.isfinite(peak) else "not estimated",
                f"{cap / 2**30:.3g} GiB" if math.isfinite(cap) else "",
                "yes" if row["fits"] else "no: not timed",
            ]
        )
    return header, body


def target_table(report: Report) -> Table:
    """Time to target per point and backend, the fastest to it and the fastest in
    throughput of each backend marked."""
    frame = report.frame.reset_index(drop=True)
    marks: dict[int, list[str]] = {}
    for backend in dict.fromkeys(frame["backend"]):
        mine = np.flatnonzero((frame["backend"] == backend).to_numpy())
        times = frame["time_to_target_s"].to_numpy(dtype=float)[mine]
        if np.isfinite(times).any():
            marks.setdefault(int(mine[np.nanargmin(times)]), []).append("fastest to target")
        rates = frame["throughput_samples_per_s"].to_numpy(dtype=float)[mine]
        marks.setdefault(int(mine[np.argmax(rates)]), []).append("highest throughput")
    errors = {str(r["point"]): r["time_to_target_error"] for r in records(report.agreement.pairs)}
    header = [
        "point",
        "backend",
        "time to target",
        "error",
        "updates",
        "epochs",
        "final metric",
        "samples/s",
        "",
    ]
    body = []
    for i, row in enumerate(records(frame)):
        reached = row["time_to_target_s"] == row["time_to_target_s"]
        body.append(
            [
                str(row["point"]),
                str(row["backend"]),
                _target_time(row) if reached else "not reached",
                _pct(errors.get(str(row["point"]), math.nan), signed=True)
                if row["backend"] == "sim"
                else "",
                _num(row["steps_to_target"]) if reached else "",
                f"{row['epochs_to_target']:.3g}" if reached else "",
                f"{row['final_metric']:.4g}",
                _num(row["throughput_samples_per_s"]),
                ", ".join(marks.get(i, [])),
            ]
        )
    return header, body


def points_table(report: Report) -> Table:
    header = [
        "point",
        "backend",
        "configuration",
        "workers",
        "batch/worker",
        "measured",
        "samples trained",
        "step time",
        "samples/s",
        "scaling eff",
        "failures",
        "lost steps",
        "training time",
    ]
    rows = [
        [
            str(r["point"]),
            str(r["backend"]),
            str(r["label"]),
            f"{r['workers']:.0f}",
            f"{r['batch_per_worker']:.0f}",
            vocab.measured_steps(r),
            _num(r["samples_trained"]),
            _ms(r["step_time_mean_s"]),
            _num(r["throughput_samples_per_s"]),
            _pct(r["scaling_efficiency"]),
            f"{r['failures']:g}",
            f"{r['lost_steps']:g}",
            f"{r['training_time_s']:.2f} s",
        ]
        for r in records(report.frame)
    ]
    if report.frame["cost_usd"].notna().any():  # priced (cluster.price): money and energy
        header += ["cost", "energy"]
        for row, r in zip(rows, records(report.frame), strict=True):
            row += [_money(r["cost_usd"]), _energy(r["energy_kwh"])]
    if "interval_class" in report.frame.columns:  # simulated: each point's interval
        header += ["samples/s interval", "interval from"]
        for row, r in zip(rows, records(report.frame), strict=True):
            row += _interval(r)
    return header, rows


def _interval(r: dict[str, Any]) -> list[str]:
    """A simulated point's throughput interval and its class (with the published
    figures behind it); a measured point's none."""
    name = r.get("interval_class")
    if not isinstance(name, str) or not name:
        return ["", ""]
    low = float(r.get("throughput_low_samples_per_s") or math.nan)
    high = float(r.get("throughput_high_samples_per_s") or math.nan)
    if name.startswith("unvalidated") or low != low:
        return ["none", name]
    level = f"{100 * float(r['interval_level']):.0f}%"
    return [
        f"{_num(low)} to {_num(high)} ({level})",
        f"{name}, {float(r['interval_figures']):.0f} "
        + ("rounds" if name == "calibration" else "figures"),
    ]


def _money(usd: float) -> str:
    return "" if usd != usd else f"{usd:,.2f} USD"


def _energy(kwh: float) -> str:
    return "" if kwh != kwh else f"{kwh:.3g} kWh"
