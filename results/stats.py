"""Step-time statistics both backends report the same way (STYLE.md rule 14).

Mean, p50, p99 and jitter = 1.4826 x median absolute deviation (the standard deviation for
normal data, robust to the outliers that stragglers make), as tf_cnn_benchmarks reports.
Repetitions of a point (simulated replications, repeated real runs) are combined by
`combine` into means with 95% confidence half-widths (Student's t).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def robust_jitter(x: np.ndarray) -> float:
    """1.4826 x median absolute deviation."""
    if len(x) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def step_stats(durations: np.ndarray) -> dict[str, float]:
    """`step_time_{mean,p50,p99,jitter}_s` of measured step durations (seconds)."""
    if not len(durations):
        durations = np.zeros(1)
    return {
        "step_time_mean_s": float(np.mean(durations)),
        "step_time_p50_s": float(np.percentile(durations, 50)),
        "step_time_p99_s": float(np.percentile(durations, 99)),
        "step_time_jitter_s": robust_jitter(durations),
    }


# Student's t, two-sided 95%, by degrees of freedom (1..30); 1.96 beyond
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


def combine(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean of each figure over replications, with 95% half-widths of the headline ones."""
    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [r[key] for r in rows]
        if isinstance(values[0], bool) or not isinstance(values[0], int | float):
            out[key] = values[0]
        elif key == "max_staleness":
            out[key] = max(values)
        else:
            out[key] = float(np.mean(values))
    n = len(rows)
    for key, ci in (
        ("step_time_mean_s", "step_time_mean_ci95_s"),
        ("throughput_samples_per_s", "throughput_ci95_samples_per_s"),
        ("training_time_s", "training_time_ci95_s"),
        ("time_to_target_s", "time_to_target_ci95_s"),
    ):
        if key not in rows[0]:
            continue
        samples = np.array([r[key] for r in rows], dtype=float)
        out[ci] = float(t95(n - 1) * samples.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    out["replications"] = n
    return out
