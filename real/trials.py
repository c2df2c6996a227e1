"""Independent trials for real: one single-worker training process per trial, at most as
many at once as there are slots, first come first served in the order of the grid (the
classic Spark `launch(map_fun, args_dict)` pattern, one task per combination).

A trial value for `batch_per_worker`, `steps` or `learning_rate` changes that trial's
training; other hyperparameters are passed along (`trial` in the job) and change nothing
the backend can run today (real/strategies/independent.py makes the jobs).
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Any

import numpy as np

from results.stats import step_stats
from scenarios.spec import ScenarioSpec

from .job import Trial
from .launcher import Launcher, LaunchResult, RunError
from .protocol import Step
from .spark.stage import run_trials as on_spark


def run_trials(
    spec: ScenarioSpec, jobs: list[Trial]
) -> tuple[dict[str, Any], list[tuple[int, Step]], list[dict[str, Any]]]:
    """Run every trial's job (real/strategies/independent.py makes them) on `spec.workers`
    slots (on Spark: as many as its executors have); return the row's figures, the step
    records with the trial of each, and where each trial ran (Spark only)."""
    if spec.real.engine == "spark":
        settings = spec.real.spark
        outcomes = on_spark(
            jobs, spec.real.timeout, spec.real.device, settings.master, settings.conf
        )
        slots = _slots(outcomes)
    else:
        outcomes = _run_local(spec, jobs)
        slots = spec.workers
    placement = [p for _, _, result in outcomes for p in result.placement]
    return _figures(jobs, outcomes, slots), _records(jobs, outcomes), placement


def _slots(outcomes: list[tuple[float, float, LaunchResult]]) -> int:
    """The most trials that ran at once (Spark's slots as the search used them)."""
    events = sorted([(s, 1) for s, _, _ in outcomes] + [(e, -1) for _, e, _ in outcomes])
    running = most = 0
    for _, change in events:
        running += change
        most = max(most, running)
    return most


def _run_local(spec: ScenarioSpec, jobs: list[Trial]) -> list[tuple[float, float, LaunchResult]]:
    deadline = time.monotonic() + spec.real.timeout
    active: set[Launcher] = set()
    lock = threading.Lock()
    stopping = threading.Event()

    def one(job: Trial) -> tuple[float, float, LaunchResult]:
        if stopping.is_set():
            raise RunError("stopped")
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunError(f"real.timeout: the search took longer than {spec.real.timeout:g} s")
        launcher = Launcher([job], left, spec.real.device)
        with lock:
            active.add(launcher)
        try:
            started = time.time()
            result = launcher.run()
            return started, time.time(), result
        finally:
            with lock:
                active.discard(launcher)

    pool = cf.ThreadPoolExecutor(max_workers=spec.workers)
    try:
        futures = [pool.submit(one, job) for job in jobs]  # FIFO: first come first served
        outcomes = [f.result() for f in futures]
    except BaseException:
        stopping.set()
        with lock:
            for launcher in list(active):
                launcher.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _records(
    jobs: list[Trial], outcomes: list[tuple[float, float, LaunchResult]]
) -> list[tuple[int, Step]]:
    return [
        (job.trial, r)
        for job, (_, _, result) in zip(jobs, outcomes, strict=True)
        for r in result.of(Step)
    ]


def _figures(
    jobs: list[Trial], outcomes: list[tuple[float, float, LaunchResult]], slots: int
) -> dict[str, Any]:
    """Makespan, trials per hour, slot utilisation on `slots` slots, and the best trial:
    the lowest training loss at its last step."""
    first = min(o[0] for o in outcomes)
    makespan = max(o[1] for o in outcomes) - first
    busy = sum(o[1] - o[0] for o in outcomes)
    durations = []
    samples = 0
    final: dict[int, float] = {}
    for job, (_, _, result) in zip(jobs, outcomes, strict=True):
        steps = result.of(Step)
        for r in steps:
            if r.step >= job.warmup_steps:
                durations.append(r.end - r.start)
                samples += job.batch_per_worker
        if steps:
            final[job.trial] = float(max(steps, key=lambda r: r.step).loss)
    best = min(final, key=lambda t: final[t]) if final else -1
    return {
        **step_stats(np.array(durations)),
        "samples_trained": samples,
        "throughput_samples_per_s": samples / makespan,
        "compute_time_frac": busy / (slots * makespan),
        "comm_time_frac": 0.0,
        "wait_time_frac": 1 - busy / (slots * makespan),
        "training_time_s": makespan,
        "trials": len(jobs),
        "makespan_s": makespan,
        "trials_per_hour": len(jobs) / makespan * 3600,
        "slot_utilization": busy / (slots * makespan),
        # measured trial times include each process's start-up
        "scaling_efficiency": busy / (slots * makespan),
        "best_trial": best,
        "best_final_loss": final.get(best, float("nan")),
    }
