"""The interval a `compare` measurement should fall in about its calibrated prediction,
and whether it did (docs/simulator.md, "Intervals of a calibrated prediction")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from measured.errors import CALIBRATION, machine_error, t_95
from results.stats import t95


def number(row: Mapping[Any, Any], column: str) -> float:
    """A row's `column` as a float; nan where it is missing or no number."""
    value = row.get(column, math.nan)
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def runs_of(row: Mapping[Any, Any]) -> int:
    """How many runs a row's figures are the mean of (1 unless `replications` says more)."""
    value = row.get("replications", 1)
    try:
        runs = int(value)
    except (TypeError, ValueError):
        return 1
    return runs if runs >= 1 else 1


def measured_interval(
    sim: Mapping[Any, Any], real: Mapping[Any, Any], noise: tuple[float, int] | None = None
) -> tuple[float, float]:
    """Where the runs' mean throughput m should fall, at 90% (`measured.errors.LEVEL`),
    about a calibrated prediction p: m = p / (1 + e), the error e within
    mu +- t(0.95, nu) x sqrt(v (1 + 1/n) + c^2 / k + r^2 / R). Three parts:

    - the model's own error on this machine (`measured.errors.machine_error`, from `make
      validate`'s n points): mean mu, variance v beyond what those runs' noise explains;
    - the calibration's spread: c the relative standard deviation of the throughputs
      predicted from each of its k rounds (the probes measured again beside the runs,
      `throughput_calibration_sd_samples_per_s`), what the pooled calibration is
      uncertain by;
    - the runs' spread: r one run's relative standard deviation (`noise`, pooled over the
      report's repeated points by `run_to_run_noise`; without it, the point's own R
      runs', from their 95% half-width), what the runs' mean is uncertain by;

    nu their Welch-Satterthwaite degrees of freedom. (nan, nan) for a prediction not
    calibrated (`cluster.profile`: its interval is simulate's own) or where no part is
    known."""
    p = number(sim, "throughput_samples_per_s")
    name = str(sim.get("interval_class") or "")
    if not name.startswith(CALIBRATION) or not p > 0:
        return math.nan, math.nan
    parts: list[tuple[float, float]] = []  # (variance of the relative error, its dof)
    center = 0.0
    model = machine_error(str(sim.get("strategy", "")))
    if model is not None:
        center = model.mean
        parts.append((model.variance * (1 + 1 / model.figures), model.figures - 1))
    k = int(number(sim, "interval_figures")) if name == CALIBRATION else 0
    spread = number(sim, "throughput_calibration_sd_samples_per_s")
    if k >= 2 and math.isfinite(spread):
        parts.append(((spread / p) ** 2 / k, k - 1))
    runs = runs_of(real)
    half = number(real, "throughput_ci95_samples_per_s")
    mean = number(real, "throughput_samples_per_s")
    if noise is not None:
        parts.append((noise[0] ** 2 / runs, noise[1]))
    elif runs >= 2 and math.isfinite(half) and mean > 0:
        sd = half * math.sqrt(runs) / t95(runs - 1)
        parts.append(((sd / mean) ** 2 / runs, runs - 1))
    parts = [(v, d) for v, d in parts if v > 0]
    total = sum(v for v, _ in parts)
    if not parts:
        return math.nan, math.nan
    dof = total**2 / sum(v**2 / d for v, d in parts)
    width = t_95(max(1, math.floor(dof))) * math.sqrt(total)
    low = 1 + center + width
    high = 1 + center - width
    return p / low, (p / high if high > 0 else math.inf)


def inside(
    sim: Mapping[Any, Any], real: Mapping[Any, Any], noise: tuple[float, int] | None
) -> dict[str, Any]:
    """A pair's `measured_interval` and whether the runs' mean throughput fell inside
    it (None where it has none)."""
    low, high = measured_interval(sim, real, noise)
    mean = number(real, "throughput_samples_per_s")
    inside = bool(low <= mean <= high) if math.isfinite(low) else None
    return {"interval_low": low, "interval_high": high, "inside": inside}


def coverage(pairs: pd.DataFrame) -> tuple[int, int, float]:
    """(points inside their `measured_interval`, points with one, the intervals' mean
    width relative to the prediction)."""
    known = pairs[pairs["inside"].notna()]
    if known.empty:
        return 0, 0, math.nan
    width = (known["interval_high"] - known["interval_low"]) / known["sim_throughput"]
    return int(known["inside"].astype(bool).sum()), len(known), float(width.mean())
