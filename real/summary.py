"""From one launch's records to the results row and steps of a point, the simulator's way
(`sim/engine/metrics.py`): warm-up dropped, step times between consecutive step ends (an
asynchronous parameter server's: one worker's whole iteration), throughput over the
measured window, where the time went; and the Chrome trace of what was measured."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from results.stats import step_stats
from results.trace import ChromeTracer
from scenarios import vocab
from scenarios.spec import ScenarioSpec
from workloads.convergence import to_target

from .launcher import LaunchResult
from .protocol import Busy, Checkpoint, Eval, Progressing, Ready, Round, Serving, Step


def trace_of(
    spec: ScenarioSpec,
    point_id: str,
    steps: pd.DataFrame,
    busy: list[tuple[int, float, float]] | None = None,
) -> str:
    """A Chrome trace of what was measured (the simulator's format): per worker, compute
    (step start to compute end) on one thread, then the exchange (all-reduce, or push
    under parameter servers) and any wait on the other; lost attempts and warm-up too. A
    pipeline's stages with CPU samples (`busy`): compute where the stage computed
    (`busy_spans`) within each of its steps, the bubble between."""
    tracer = ChromeTracer(spec.cluster.devices_per_host)
    exchange = vocab.PUSH if spec.strategy.serves_parameters else vocab.ALLREDUCE
    columns = ["worker", "step", "start_s", "compute_end_s", "comm_end_s", "end_s"]
    spans = {}
    if busy:
        for stage in sorted({b[0] for b in busy}):
            samples = sorted((t, cpu) for w, t, cpu in busy if w == stage)
            spans[stage] = busy_spans(samples)
    for w, step, start, computed, exchanged, end in steps[columns].itertuples(index=False):
        worker, at = int(w), int(step)
        if worker in spans:
            for began, ended in spans[worker]:
                began, ended = max(began, float(start)), min(ended, float(end))
                tracer.span(worker, vocab.COMPUTE, began, ended, step=at)
            continue
        tracer.span(worker, vocab.COMPUTE, float(start), float(computed), step=at)
        tracer.span(worker, exchange, float(computed), float(exchanged), comm=True, step=at)
        tracer.span(worker, vocab.WAIT, float(exchanged), float(end), comm=True, step=at)
    return tracer.dumps({"point": point_id, "backend": "real", "scenario": spec.name})


#: a sampling interval counts as computing where the process's CPU time grew by at least
#: this share of the clock's (one core: 1 when it computed throughout)
BUSY_SHARE = 0.5


def busy_spans(samples: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Where a one-core process computed: from samples (host clock, its CPU seconds) in
    time order, the runs of consecutive intervals over which its CPU time grew by at least
    `BUSY_SHARE` of the clock's, merged, as (start, end)."""
    out: list[tuple[float, float]] = []
    for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
        if t1 <= t0 or (c1 - c0) < BUSY_SHARE * (t1 - t0):
            continue
        if out and out[-1][1] == t0:
            out[-1] = (out[-1][0], t1)
        else:
            out.append((t0, t1))
    return out


def progress_index(record: Progressing) -> int:
    """Where a record stands in the job's progress: its global update (async parameter
    servers) or its step (round)."""
    update = record.update if isinstance(record, Step) else None
    return int(record.step if update is None else update)


def kept_steps(launch: LaunchResult) -> tuple[dict[int, int], list[Step]]:
    """Where each generation of the job resumed (its first step, round or update) and the
    step records that count. A job restarted from a checkpoint redoes the steps (rounds,
    updates) since: what an earlier generation did from the step the next one resumed at
    is lost."""
    resumed: dict[int, int] = {}
    for r in launch.records:
        if isinstance(r, Progressing):
            g = r.generation
            resumed[g] = min(resumed.get(g, 1 << 62), progress_index(r))
    records = [
        r
        for r in launch.of(Step)
        if not any(g > r.generation and first <= progress_index(r) for g, first in resumed.items())
    ]
    return resumed, records


def step_ends(
    records: list[Step],
    rounds: dict[int, Round],
    asynchronous: bool,
    count: int,
) -> np.ndarray:
    """When each of the first `count` steps ended (host clock): an asynchronous step is one
    update (one worker's batch), in order of completion; otherwise a step ends when its
    last worker's update ends, or (synchronous parameter servers) at its round's update."""
    if asynchronous:
        return np.sort(np.array([r.end for r in records]))[:count]
    ends = np.full(count, -np.inf)
    for r in records:
        if r.step < len(ends):
            ends[r.step] = max(ends[r.step], r.end)
    for step, round_ in rounds.items():
        if step < len(ends):
            ends[step] = round_.end
    return ends


def steps_frame(attempts: list[Step], records: list[Step], warmup: int, t0: float) -> pd.DataFrame:
    """steps.csv's rows (the point's column aside): every attempt at a step, times from
    `t0`, `lost` where it is not among the `records` that count."""
    kept = {id(r) for r in records}
    return pd.DataFrame(
        {
            "worker": [r.worker for r in attempts],
            "step": [r.step for r in attempts],
            "warmup": [r.step < warmup for r in attempts],
            "start_s": [r.start - t0 for r in attempts],
            "compute_end_s": [r.compute_end - t0 for r in attempts],
            "comm_end_s": [r.end - t0 for r in attempts],
            "end_s": [r.end - t0 for r in attempts],
            "replication": 0,
            "generation": [r.generation for r in attempts],
            "lost": [id(r) not in kept for r in attempts],
            "trial": -1,
            "staleness": [r.staleness for r in attempts],
            "loss": [r.loss for r in attempts],
        }
    )


def summarize(spec: ScenarioSpec, launch: LaunchResult) -> tuple[dict[str, Any], pd.DataFrame]:
    """A launch's results row (with `curve`, `target_reason` and `busy` for the caller
    to take out) and its steps."""
    warmup, steps, n = spec.training.warmup_steps, spec.training.steps, spec.workers
    attempts = launch.of(Step)
    resumed, records = kept_steps(launch)
    ready = launch.of(Ready)
    t0 = min(r.start for r in records)
    asynchronous = spec.strategy.counts_updates
    rounds = {r.step: r for r in launch.of(Round)}  # sync PS: a step ends at its update
    # a job with a target stops once it is met: the steps it ran, not the bound
    ran = len(records) if asynchronous else 1 + max([r.step for r in records] + list(rounds))
    warmup = min(warmup, ran - 1)  # (a target met within the warm-up: measure what ran)
    steps = min(steps, ran - warmup)
    ends = step_ends(records, rounds, asynchronous, warmup + steps)
    # what reached the model: one worker's batch an asynchronous update; each round
    # applies workers - backup_workers gradients; a pipeline step, a batch per copy
    samples = spec.samples_per_step * steps
    begin = ends[warmup - 1] if warmup else t0
    measured = ends[warmup:]
    finish = float(measured[-1])
    # the evaluations of the measured run, which the job waits for: the steps' time is
    # without them, so that the two add up to the run's (docs/scenarios.md)
    evaluations = [(r.start, r.end) for r in launch.of(Eval) if r.start >= begin]
    held = sum(end - start for start, end in evaluations if end <= finish)
    training_time = float(finish - begin - held)
    if asynchronous:
        window = [r for r in records if begin <= r.start and r.end <= finish]
        free = free_since(records, launch.of(Serving))
        durations = np.array([r.end - free[id(r)] for r in window])
    else:
        window = [r for r in records if r.step >= warmup]
        durations = np.diff(np.concatenate([[begin], measured]))
    compute = sum(r.compute_end - r.start for r in window)
    comm = sum(r.end - r.compute_end for r in window)
    busy = n * training_time
    staleness = [r.staleness for r in window] or [0]
    last = max(r.step for r in records)
    row: dict[str, Any] = {
        "steps": steps,
        **step_stats(durations),
        "samples_trained": samples,
        "throughput_samples_per_s": samples / training_time,
        "compute_time_frac": compute / busy,
        # all-reduce (or push) and update, including waiting (not separable from outside)
        "comm_time_frac": comm / busy,
        "wait_time_frac": max(0.0, 1 - (compute + comm) / busy),
        "bytes_on_network": 0.0,  # loopback: nothing crosses a NIC
        "max_staleness": int(max(staleness)),
        "mean_staleness": float(np.mean(staleness)),
        "dropped_gradients": sum(1 for r in window if r.dropped),
        "dropped_samples_per_s": sum(1 for r in window if r.dropped)
        * spec.training.batch_per_worker
        / training_time,
        "failures": launch.failures,
        "lost_steps": launch.lost_steps,
        "recovery_time_s": launch.recovery_time_s,
        "checkpoint_time_s": sum(r.end - r.start for r in launch.of(Checkpoint) if r.worker == 0),
        "training_time_s": training_time,
        "evaluation_time_s": float(sum(end - start for start, end in evaluations)),
        "startup_time_s": max(r.time for r in ready if r.generation == 0) - launch.launched,
        "final_loss": float(np.mean([r.loss for r in records if r.step == last])),
    }
    row.update(target_row(spec, launch, resumed, float(begin)))
    # a pipeline's stages' CPU samples, on the steps' clock (t0 the first step's start)
    row["busy"] = [
        (int(r.worker), float(t) - t0, float(cpu)) for r in launch.of(Busy) for t, cpu in r.samples
    ]
    return row, steps_frame(attempts, records, warmup, t0)


def curve_of(
    spec: ScenarioSpec, launch: LaunchResult, resumed: dict[int, int], t0: float
) -> dict[str, np.ndarray] | None:
    """The held-out metric at every evaluation (the simulator's `curve`), times from `t0`
    (the start of the measured steps), or None where the point has no target. An
    evaluation of a generation whose steps were lost to a restart is lost with them."""
    target = spec.training.target
    if target is None:
        return None
    evals = [
        r
        for r in launch.of(Eval)
        if not any(g > r.generation and first < r.step for g, first in resumed.items())
    ]
    evals = sorted(evals, key=lambda r: (r.step, r.end))
    evals = [r for i, r in enumerate(evals) if i + 1 == len(evals) or evals[i + 1].step != r.step]
    steps = np.array([r.step for r in evals], dtype=int)
    samples = steps * float(spec.samples_per_step)
    epoch = spec.training.epoch_samples
    return {
        "step": steps,
        "samples": samples,
        "epoch": samples / epoch if epoch else samples * np.nan,
        "time_s": np.array([r.end - t0 for r in evals], dtype=float),
        "value": np.array([getattr(r, target.metric) for r in evals], dtype=float),
    }


def target_row(
    spec: ScenarioSpec, launch: LaunchResult, resumed: dict[int, int], t0: float
) -> dict[str, Any]:
    """results.csv's time-to-target columns, `curve` (for curves.csv) and `target_reason`
    (for meta.json, where the columns are empty)."""
    curve = curve_of(spec, launch, resumed, t0)
    if curve is None:
        return {**dict.fromkeys(vocab.TARGET_COLUMNS, np.nan), "curve": None, "target_reason": None}
    target = spec.training.target
    assert target is not None
    columns, why = to_target(curve, target.metric, target.value)
    return {**columns, "curve": curve, "target_reason": why}


def free_since(records: list[Step], serving: list[Serving]) -> dict[int, float]:
    """When each asynchronous closure's worker became free for it (by `id` of its record):
    the end of the worker's previous closure, so that a step is the worker's whole
    iteration, the coordinator's dispatch included, as the simulator's is; or the closure's
    own start where nothing came just before it on that worker: its first, the first after
    a checkpoint's barrier (another `chunk`), after a restart of the job (another
    `generation`), or after the worker process was started again (a `serving` record of
    it between the two)."""
    rejoined = [(r.generation, r.index, r.time) for r in serving if r.role == "worker"]
    free: dict[int, float] = {}
    last: dict[int, Step] = {}
    for r in sorted(records, key=lambda r: (r.generation, r.end)):
        before = last.get(r.worker)
        free[id(r)] = r.start
        if (
            before is not None
            and before.generation == r.generation
            and before.chunk == r.chunk
            and before.end <= r.start
            and not any(
                g == r.generation and w == r.worker and before.end < t < r.start
                for g, w, t in rejoined
            )
        ):
            free[id(r)] = before.end
        last[r.worker] = r
    return free
