"""From worker-step records to one results row (docs/scenarios.md, "Result files").

Honest timing (STYLE.md rule 14): warm-up steps are dropped; step times are the intervals
between consecutive global step ends (asynchronous parameter servers: one worker's
iteration); mean, p50, p99 and jitter = 1.4826 x MAD. Replications are combined by
`combine` into means with 95% confidence half-widths (Student's t).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from results.stats import step_stats as _step_stats
from scenarios import vocab
from scenarios.spec import ScenarioSpec

from .outcome import SimulationOutcome


def measure_begin(spec: ScenarioSpec, outcome: SimulationOutcome) -> float:
    """When the measured steps begin: the global end of the warm-up steps (asynchronous
    parameter servers: when the warm-up's updates were applied)."""
    warmup = spec.training.warmup_steps
    if warmup and not spec.strategy.counts_updates:
        return float(outcome.step_ends[warmup - 1])
    return float(outcome.measure_start)


def summarize(spec: ScenarioSpec, outcome: SimulationOutcome) -> dict[str, Any]:
    """Step-time statistics, throughput and where the time went, for measured steps."""
    if spec.strategy.trains_alone:
        return summarize_trials(spec, outcome)
    warmup, steps = spec.training.warmup_steps, spec.training.steps
    workers = spec.workers
    batch = spec.training.batch_per_worker
    counts_updates = spec.strategy.counts_updates
    begin = measure_begin(spec, outcome)
    measured_ends = outcome.step_ends[warmup:]
    training_time = float(measured_ends[-1] - begin)
    finish = float(measured_ends[-1])
    # one pass over the records, a piece at a time (sums and extremes add up piece by
    # piece): a 65,536-worker run's records are 50 MB a field
    compute = comm = stale_sum = 0.0
    stale_max, stale_count = 0, 0
    whole_durations = []
    names = ("start", "compute_end", "end", "comm_s", "staleness", "stall", "idle")
    for piece in outcome.records.chunks(names):
        s, c, e = piece["start"], piece["compute_end"], piece["end"]
        keep = (e > begin + 1e-12) & (s < finish - 1e-12)
        s, c, e = s[keep], c[keep], e[keep]
        comm_s, stall_s, idle_s = piece["comm_s"][keep], piece["stall"][keep], piece["idle"][keep]
        # a step straddling an end of the window counts with its part inside it; the stall
        # (communication waited on before compute_end) is comm, spread over [start,
        # compute_end]
        before = np.maximum(c - s, 1e-300)
        inside_before = np.clip(c, begin, finish) - np.clip(s, begin, finish)
        share_before = np.clip(inside_before / before, 0.0, 1.0)
        stall = stall_s * share_before
        inside_compute = inside_before - stall - idle_s * share_before  # less a bubble
        after = np.maximum(e - c, 1e-300)
        inside_after = np.clip(e, begin, finish) - np.clip(c, begin, finish)
        inside_comm = (comm_s - stall_s) * np.clip(inside_after / after, 0.0, 1.0) + stall
        compute += float(np.sum(inside_compute))
        comm += float(np.sum(inside_comm))
        staleness = piece["staleness"][keep]
        if len(staleness):
            stale_max = max(stale_max, int(staleness.max()))
            stale_sum += float(staleness.astype(float).sum())
            stale_count += len(staleness)
        if counts_updates:  # a step is one worker's iteration
            whole = (piece["start"] >= begin - 1e-12) & (piece["end"] <= finish + 1e-12)
            whole_durations.append(piece["end"][whole] - piece["start"][whole])
    if counts_updates:  # a step is one worker's iteration
        durations = np.concatenate(whole_durations) if whole_durations else np.zeros(0)
    else:
        durations = np.diff(np.concatenate([[begin], measured_ends]))
    # what reached the model (an update of one worker's batch, asynchronous): with backup
    # workers, each update applies the first workers - backup_workers gradients; the rest
    # were computed and dropped
    samples = spec.samples_per_step * steps
    busy = workers * training_time
    stalled = outcome.checkpoint_time + outcome.recovery_time
    row: dict[str, Any] = {
        **_step_stats(durations),
        "samples_trained": samples,
        "throughput_samples_per_s": samples / training_time if training_time > 0 else 0.0,
        "compute_time_frac": compute / busy if busy > 0 else 0.0,
        "comm_time_frac": comm / busy if busy > 0 else 0.0,
        "wait_time_frac": max(0.0, 1.0 - (compute + comm) / busy - stalled / training_time)
        if busy > 0
        else 0.0,
        "bytes_on_network": outcome.bytes_on_network,
        "max_staleness": stale_max,
        "mean_staleness": stale_sum / stale_count if stale_count else 0.0,
        "dropped_gradients": outcome.dropped_gradients,
        "dropped_samples_per_s": outcome.dropped_measured * batch / training_time
        if training_time > 0
        else 0.0,
        "failures": outcome.failures,
        "lost_steps": outcome.lost_steps,
        "recovery_time_s": outcome.recovery_time,
        "checkpoint_time_s": outcome.checkpoint_time,
        "lost_work_time_s": outcome.lost_work_time,
        "checkpoints": outcome.checkpoints,
        "training_time_s": training_time,
    }
    return row


def summarize_trials(spec: ScenarioSpec, outcome: SimulationOutcome) -> dict[str, Any]:
    """Independent trials: makespan, trials per hour and slot utilisation."""
    trials = outcome.trials
    warmup = spec.training.warmup_steps
    measured = [r for r in outcome.records if r.step >= warmup]
    durations = np.array([r.end - r.start for r in measured])
    makespan = float(trials.makespan)
    samples = spec.training.batch_per_worker * len(measured)
    return {
        **_step_stats(durations),
        "samples_trained": samples,
        "throughput_samples_per_s": samples / makespan if makespan > 0 else 0.0,
        "compute_time_frac": trials.busy_time / (spec.workers * makespan) if makespan else 0.0,
        "comm_time_frac": 0.0,
        "wait_time_frac": 1 - trials.busy_time / (spec.workers * makespan) if makespan else 0.0,
        **vocab.NO_DYNAMICS,
        "lost_work_time_s": 0.0,
        "checkpoints": 0,
        "training_time_s": makespan,
        "trials": len(trials.grid),
        "makespan_s": makespan,
        "trials_per_hour": len(trials.grid) / makespan * 3600 if makespan else 0.0,
        "slot_utilization": trials.busy_time / (spec.workers * makespan) if makespan else 0.0,
    }
