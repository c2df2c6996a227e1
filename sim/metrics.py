"""From worker-step records to one results row (SCENARIO.md, "Result files").

Honest timing (STYLE.md rule 14): warm-up steps are dropped; step times are the intervals
between consecutive global step ends; mean, p50, p99 and jitter = 1.4826 x MAD.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scenarios.spec import ScenarioSpec

from .simulation import SimulationOutcome


def robust_jitter(x: np.ndarray) -> float:
    """1.4826 x median absolute deviation: the standard deviation for normal data."""
    if len(x) == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(x - np.median(x))))


def summarize(spec: ScenarioSpec, outcome: SimulationOutcome) -> dict[str, Any]:
    """Step-time statistics, throughput and where the time went, for measured steps."""
    warmup, steps = spec.training.warmup_steps, spec.training.steps
    workers = spec.workers
    rec = np.array(
        [(r.worker, r.step, r.start, r.compute_end, r.end, r.comm_s) for r in outcome.records],
        dtype=float,
    )
    step_of = rec[:, 1].astype(int)
    ends = np.full(warmup + steps, -np.inf)
    np.maximum.at(ends, step_of, rec[:, 4])
    begin = outcome.measure_start
    measured_ends = ends[warmup:]
    durations = np.diff(np.concatenate([[begin], measured_ends]))
    training_time = float(measured_ends[-1] - begin)
    measured = rec[step_of >= warmup]
    busy = workers * training_time
    compute = float(np.sum(measured[:, 3] - measured[:, 2]))
    comm = float(np.sum(measured[:, 5]))
    samples = workers * spec.training.batch_per_worker * steps
    return {
        "step_time_mean_s": float(np.mean(durations)),
        "step_time_p50_s": float(np.percentile(durations, 50)),
        "step_time_p99_s": float(np.percentile(durations, 99)),
        "step_time_jitter_s": robust_jitter(durations),
        "throughput_samples_per_s": samples / training_time if training_time > 0 else 0.0,
        "compute_time_frac": compute / busy if busy > 0 else 0.0,
        "comm_time_frac": comm / busy if busy > 0 else 0.0,
        # the rest: waiting for other workers, inside a step or between steps
        "wait_time_frac": max(0.0, 1.0 - (compute + comm) / busy) if busy > 0 else 0.0,
        "bytes_on_network": outcome.bytes_on_network,
        "training_time_s": training_time,
    }
