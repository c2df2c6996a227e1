"""Simulate every sweep point of a scenario, in order or in parallel, and gather results.

Scaling efficiency needs the 1-worker throughput of the same point: the runner simulates
that point again on one host with one device (same model, device, strategy and seed; the
1-worker run's worker 0 draws the same jitter as worker 0 of the full run).
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from scenarios import vocab
from scenarios.loader import Point, Scenario
from scenarios.spec import ScenarioSpec

from .metrics import summarize
from .simulation import Simulation


@dataclass
class PointResult:
    point_id: str
    row: dict[str, Any]
    steps: pd.DataFrame
    trace: str | None = None


@dataclass
class RunResult:
    scenario: Scenario
    points: list[PointResult] = field(default_factory=list)

    @property
    def results(self) -> pd.DataFrame:
        from scenarios.results import results_frame

        return results_frame([p.row for p in self.points])

    @property
    def steps(self) -> pd.DataFrame:
        frames = [p.steps for p in self.points]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def traces(self) -> dict[str, str]:
        return {p.point_id: p.trace for p in self.points if p.trace is not None}


def one_worker(spec: ScenarioSpec) -> ScenarioSpec:
    """The same point on a single worker (one host, one device)."""
    cluster = spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1})
    return spec.model_copy(update={"cluster": cluster})


_BASELINES: dict[str, float] = {}  # per process: points of a sweep often share one


def baseline_throughput(spec: ScenarioSpec) -> float:
    """Simulated throughput of the same point on one worker."""
    single = one_worker(spec)
    key = single.model_dump_json()
    if key not in _BASELINES:
        outcome = Simulation(single).run()
        _BASELINES[key] = float(summarize(single, outcome)["throughput_samples_per_s"])
    return _BASELINES[key]


def simulate_point(point: Point, trace: bool = False) -> PointResult:
    """Simulate one point (and its 1-worker baseline) into a results row and step rows."""
    started = time.perf_counter()
    spec = point.spec
    sim = Simulation(spec, trace=trace)
    outcome = sim.run()
    stats = summarize(spec, outcome)
    base = baseline_throughput(spec)
    strategy = spec.strategy
    ps = strategy.kind == "parameter_server"
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "sim",
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": strategy.kind,
        "algorithm": strategy.algorithm if strategy.kind == "allreduce" else "",
        "sync": strategy.sync,
        "workers": spec.workers,
        "servers": strategy.servers if ps else 0,
        "batch_per_worker": spec.training.batch_per_worker,
        "steps": spec.training.steps,
        **stats,
        "scaling_efficiency": stats["throughput_samples_per_s"] / (spec.workers * base)
        if base > 0
        else 0.0,
        "max_staleness": 0,
        "mean_staleness": 0.0,
        "dropped_gradients": 0,
        "failures": 0,
        "lost_steps": 0,
        "recovery_time_s": 0.0,
        "checkpoint_time_s": 0.0,
        "network_model": spec.sim.network_model,
        "placement": strategy.placement if ps else "",
        "partition": strategy.partition if ps else "",
    }
    steps = pd.DataFrame(
        {
            "point": point.id,
            "worker": [r.worker for r in outcome.records],
            "step": [r.step for r in outcome.records],
            "warmup": [r.step < spec.training.warmup_steps for r in outcome.records],
            "start_s": [r.start for r in outcome.records],
            "compute_end_s": [r.compute_end for r in outcome.records],
            "comm_end_s": [r.comm_end for r in outcome.records],
            "end_s": [r.end for r in outcome.records],
        },
        columns=list(vocab.STEP_COLUMNS),
    ).sort_values(["step", "worker"], kind="stable", ignore_index=True)
    trace_text = None
    if trace:
        trace_text = outcome.tracer.dumps(
            {"scenario": spec.name, "point": point.id, "backend": "sim", "seed": spec.seed}
        )
    row["wall_time_s"] = time.perf_counter() - started
    return PointResult(point.id, row, steps, trace_text)


def run(
    scenario: Scenario,
    jobs: int = 1,
    trace: bool = False,
    progress: Callable[[PointResult], None] | None = None,
) -> RunResult:
    """Simulate all points; `jobs` > 1 runs them in parallel processes (same results)."""
    result = RunResult(scenario)
    points = list(scenario.points)
    if jobs <= 1 or len(points) <= 1:
        for point in points:
            done = simulate_point(point, trace)
            result.points.append(done)
            if progress:
                progress(done)
        return result
    finished: dict[int, PointResult] = {}
    with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(simulate_point, p, trace): p.index for p in points}
        for future in cf.as_completed(futures):
            done = future.result()
            finished[futures[future]] = done
            if progress:
                progress(done)
    result.points = [finished[p.index] for p in points]
    return result
