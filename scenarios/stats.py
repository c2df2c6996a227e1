"""Step-time statistics both backends report the same way (STYLE.md rule 14).

Mean, p50, p99 and jitter = 1.4826 x median absolute deviation (the standard deviation for
normal data, robust to the outliers that stragglers make), as tf_cnn_benchmarks reports.
"""

from __future__ import annotations

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
