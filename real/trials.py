"""Independent trials for real: one single-worker training process per trial, at most as
many at once as there are slots, first come first served in the order of the grid (the
classic Spark `launch(map_fun, args_dict)` pattern, one task per combination).

A trial value for `batch_per_worker`, `steps` or `learning_rate` changes that trial's
training; other hyperparameters are passed along (`trial` in the job) and change nothing
the backend can run today.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from typing import Any

import numpy as np

from scenarios.spec import ScenarioSpec
from scenarios.stats import step_stats
from scenarios.trials import trial_grid

from .launcher import Launcher, LaunchResult, RunError


def trial_jobs(spec: ScenarioSpec, base: dict[str, Any]) -> list[dict[str, Any]]:
    jobs = []
    for index, params in enumerate(trial_grid(dict(spec.strategy.trials or {}))):
        job = dict(base, index=0, workers=1, trial=index, hyperparameters=params)
        for key in ("batch_per_worker", "steps", "learning_rate"):
            if key in params:
                job[key] = params[key]
        jobs.append(job)
    return jobs


def run_trials(spec: ScenarioSpec, base: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """Run every trial on `spec.workers` slots; return the row's figures and the records."""
    jobs = trial_jobs(spec, base)
    deadline = time.monotonic() + spec.real.timeout
    active: set[Launcher] = set()
    lock = threading.Lock()
    stopping = threading.Event()

    def one(job: dict[str, Any]) -> tuple[float, float, LaunchResult]:
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
    first = min(o[0] for o in outcomes)
    makespan = max(o[1] for o in outcomes) - first
    busy = sum(o[1] - o[0] for o in outcomes)
    records = []
    durations = []
    samples = 0
    for job, (_, _, result) in zip(jobs, outcomes, strict=True):
        for r in result.of("step"):
            r = dict(r, trial=job["trial"])
            records.append(r)
            if r["step"] >= job["warmup_steps"]:
                durations.append(r["end"] - r["start"])
                samples += job["batch_per_worker"]
    figures = {
        **step_stats(np.array(durations)),
        "samples_trained": samples,
        "throughput_samples_per_s": samples / makespan,
        "compute_time_frac": busy / (spec.workers * makespan),
        "comm_time_frac": 0.0,
        "wait_time_frac": 1 - busy / (spec.workers * makespan),
        "training_time_s": makespan,
        "trials": len(jobs),
        "makespan_s": makespan,
        "trials_per_hour": len(jobs) / makespan * 3600,
        "slot_utilization": busy / (spec.workers * makespan),
        # measured trial times include each process's start-up
        "scaling_efficiency": busy / (spec.workers * makespan),
    }
    return figures, records
