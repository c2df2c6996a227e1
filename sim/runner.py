"""Simulate every sweep point of a scenario, in order or in parallel, and gather results.

Scaling efficiency needs the 1-worker throughput of the same point: the runner simulates
that point again on one host with one device (same model, device, strategy and seed; the
1-worker run's worker 0 draws the same jitter as worker 0 of the full run).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from results.stats import combine
from results.steps import summary as step_summary
from scenarios import vocab
from scenarios.dynamics import RandomFailure
from scenarios.loader import Point, Scenario
from scenarios.profile import Profile, load_profile
from scenarios.spec import ScenarioSpec
from scenarios.strategy import algorithm_column
from workloads.convergence import curve_frame
from workloads.pipeline import fits_line, memory_summary
from workloads.schedule import schedule_of

from .convergence import eval_time, run_columns, target_columns, target_curve, timed_steps
from .failures import daly_interval, young_interval
from .metrics import summarize
from .simulation import Simulation
from .strategies import strategy_of


@dataclass
class PointResult:
    point_id: str
    row: dict[str, Any]
    steps: pd.DataFrame
    trace: str | None = None
    checkpointing: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None  # which numbers came from cluster.profile
    curves: pd.DataFrame | None = None  # the target metric at every evaluation
    target: str | None = None  # why the time-to-target columns are empty
    memory: dict[str, Any] = field(default_factory=dict)  # workloads.pipeline.memory_summary
    #: meta.json's `timed_steps`: how many measured steps were timed (`all`, or a number,
    #: the rest extended at their mean), of how many, and why (convergence.timed_steps)
    timed: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    scenario: Scenario
    points: list[PointResult] = field(default_factory=list)

    @property
    def results(self) -> pd.DataFrame:
        from results.files import results_frame

        return results_frame([p.row for p in self.points])

    @property
    def steps(self) -> pd.DataFrame:
        frames = [p.steps for p in self.points]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    @property
    def traces(self) -> dict[str, str]:
        return {p.point_id: p.trace for p in self.points if p.trace is not None}

    @property
    def curves(self) -> pd.DataFrame | None:
        """curves.csv, or None where no point has a target."""
        frames = [p.curves for p in self.points if p.curves is not None]
        if not frames:
            return None
        return pd.concat(frames, ignore_index=True).reindex(columns=list(vocab.CURVE_COLUMNS))

    @property
    def memory(self) -> dict[str, dict[str, Any]]:
        """meta.json's `memory`: each point's device memory (workloads/pipeline.py)."""
        return {p.point_id: p.memory for p in self.points}

    @property
    def unfit(self) -> list[str]:
        """One warning line per point that does not fit its devices."""
        return [
            fits_line(p.point_id, p.memory) for p in self.points if p.memory.get("fits") is False
        ]

    @property
    def timed(self) -> dict[str, dict[str, Any]]:
        """meta.json's `timed_steps`: per point, the measured steps timed and why."""
        return {p.point_id: p.timed for p in self.points if p.timed}

    @property
    def targets(self) -> dict[str, str]:
        """meta.json's `targets`: per point whose time to target is empty, why."""
        return {p.point_id: p.target for p in self.points if p.target is not None}


_BASELINES: dict[str, float] = {}  # per process: points of a sweep often share one


def baseline_throughput(spec: ScenarioSpec, profile: Profile | None = None) -> float:
    """Simulated throughput of the same point on one worker (first replication)."""
    single = one_worker(spec)
    key = single.model_dump_json() + (profile.model_dump_json() if profile else "")
    if key not in _BASELINES:
        outcome = Simulation(single, profile=profile).run()
        _BASELINES[key] = float(summarize(single, outcome)["throughput_samples_per_s"])
    return _BASELINES[key]


def one_worker(spec: ScenarioSpec) -> ScenarioSpec:
    """The same point on a single worker (one host, one device), without failures.

    Failures and stragglers named by worker index cannot apply to one worker; jitter and
    transient hiccups of worker 0 stay as they are.
    """
    cluster = spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1})
    stragglers = spec.stragglers.model_copy(update={"slow": ()})
    strategy = strategy_of(spec.strategy).baseline(spec.strategy)
    checkpoint = spec.checkpoint.model_copy(update={"every_steps": None})
    sim = spec.sim.model_copy(update={"replications": 1})
    return spec.model_copy(
        update={
            "cluster": cluster,
            "stragglers": stragglers,
            "strategy": strategy,
            "failures": (),
            "checkpoint": checkpoint,
            "sim": sim,
        }
    )


def checkpoint_advice(spec: ScenarioSpec, sim: Simulation, step_time: float) -> dict[str, Any]:
    """Young/Daly optimal checkpoint intervals beside the one the scenario uses."""
    advice: dict[str, Any] = {
        "failure_free_step_time_s": step_time,
        "checkpoint_cost_s": sim.checkpoint_cost,
        "checkpoint_bytes": sim.checkpoint_bytes,
        "every_steps": spec.checkpoint.every_steps,
        "interval_used_s": spec.checkpoint.every_steps * step_time
        if spec.checkpoint.every_steps
        else None,
    }
    rates = [1.0 / f.random.mtbf_per_host for f in spec.failures if isinstance(f, RandomFailure)]
    if rates:
        hosts = sim.topology.hosts + sim.topology.dedicated_servers
        mtbf = 1.0 / (hosts * sum(rates))
        advice.update(
            {
                "system_mtbf_s": mtbf,
                "young_interval_s": young_interval(sim.checkpoint_cost, mtbf),
                "daly_interval_s": daly_interval(sim.checkpoint_cost, mtbf),
                "daly_interval_steps": daly_interval(sim.checkpoint_cost, mtbf) / step_time
                if step_time > 0
                else None,
            }
        )
    return advice


def _identity(spec: ScenarioSpec) -> dict[str, Any]:
    strategy = spec.strategy
    return {
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": strategy.kind,
        "algorithm": algorithm_column(strategy),
        "sync": strategy.sync,
        "workers": spec.workers,
        "servers": strategy.parameter_servers,
        "batch_per_worker": spec.training.batch_per_worker,
        "peak_learning_rate": schedule_of(spec).peak,
    }


#: called with the point's id, the steps simulated in it so far (all replications) and
#: the simulated time of the replication running
StepProgress = Callable[[str, int, float], None]


def simulated_steps(point: Point) -> int:
    """The steps (updates) the engine simulates for a point, all replications together:
    what `StepProgress` counts to."""
    spec = point.spec
    timed, _ = timed_steps(spec)
    measured = spec.training.steps if timed is None else timed
    return spec.sim.replications * (spec.training.warmup_steps + measured)


def simulate_point(
    point: Point,
    trace: bool = False,
    steps: str = vocab.STEPS_SUMMARY,
    progress: StepProgress | None = None,
) -> PointResult:
    """Simulate one point (its replications and its 1-worker baseline) into result rows;
    a point whose devices cannot hold it gets its memory and `fits` false, no timings.
    `steps`: steps.csv's form (`summary`, one row per step; `all`, one per worker-step);
    `progress`: told of the steps done every so often (sim.simulation.PROGRESS_CALLS)."""
    started = time.perf_counter()
    spec = point.spec
    memory = memory_summary(spec)
    if memory["fits"] is False:
        untimed = {
            "point": point.id,
            "backend": "sim",
            **_identity(spec),
            "steps": spec.training.steps,
            "peak_memory_bytes": memory["peak_memory_bytes"],
            "fits": False,
            "wall_time_s": time.perf_counter() - started,
        }
        header = vocab.STEP_COLUMNS if steps == vocab.STEPS_ALL else vocab.STEP_SUMMARY_COLUMNS
        return PointResult(point.id, untimed, pd.DataFrame(columns=list(header)), memory=memory)
    rows = []
    frames = []
    trace_text = None
    advice: dict[str, Any] = {}
    calibration = None
    curves = []
    why = None
    timed = timed_spec(spec)
    cut, cut_why = timed_steps(spec)
    timed_note = {
        "timed": "all" if cut is None else cut,
        "measured": spec.training.steps,
        "why": cut_why,
    }
    per_replication = timed.training.warmup_steps + timed.training.steps
    profile = point.profile
    if profile is None and spec.cluster.profile is not None:
        profile = load_profile(spec.cluster.profile)
    for replication in range(spec.sim.replications):
        told = None
        if progress is not None:
            offset = replication * per_replication

            def told(done: int, now: float, offset: int = offset) -> None:
                progress(point.id, offset + done, now)

        sim = Simulation(
            timed,
            trace=trace and replication == 0,
            replication=replication,
            profile=point.profile,
            progress=told,
        )
        calibration = sim.costs.summary(timed)
        outcome = sim.run()
        rows.append(summarize(timed, outcome))
        forward_s = float(sim.costs.compute.forward_s.sum())
        curve = target_curve(spec, outcome, forward_s, profile)
        columns, reason = target_columns(spec, curve)
        rows[-1].update(columns)
        evaluation_s = eval_time(spec, forward_s, profile)
        rows[-1].update(run_columns(spec, timed.training.steps, rows[-1], curve, evaluation_s))
        why = why or reason
        if curve is not None:
            metric = spec.training.target.metric if spec.training.target else ""
            curves.append(curve_frame(point.id, replication, metric, curve))
        if steps == vocab.STEPS_ALL:
            frames.append(_steps_frame(point.id, replication, timed, outcome))
        else:
            frames.append(_steps_summary(point.id, replication, timed, outcome))
        if replication == 0:
            first = rows[0]
            # failure-free step time, by the accounting identity of training time
            free = (
                first["training_time_s"]
                - first["lost_work_time_s"]
                - first["recovery_time_s"]
                - first["checkpoint_time_s"]
            ) / spec.training.steps
            advice = checkpoint_advice(spec, sim, free)
            if trace:
                trace_text = outcome.tracer.dumps(
                    {"scenario": spec.name, "point": point.id, "backend": "sim", "seed": spec.seed}
                )
    stats = combine(rows) if len(rows) > 1 else {**rows[0], "replications": 1}
    base = baseline_throughput(timed, point.profile)
    strategy = spec.strategy
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "sim",
        **_identity(spec),
        "steps": spec.training.steps,
        **stats,
        "scaling_efficiency": stats["throughput_samples_per_s"] / (spec.workers * base)
        if base > 0
        else 0.0,
        "network_model": spec.sim.network_model,
        "placement": strategy.placement if strategy.parameter_servers else "",
        "partition": strategy.partition if strategy.parameter_servers else "",
    }
    row["peak_memory_bytes"] = memory["peak_memory_bytes"]
    row["fits"] = True
    row["wall_time_s"] = time.perf_counter() - started
    return PointResult(
        point.id,
        row,
        pd.concat(frames, ignore_index=True),
        trace_text,
        advice,
        calibration,
        pd.concat(curves, ignore_index=True) if curves else None,
        why if spec.training.target is not None else None,
        memory,
        timed_note,
    )


def timed_spec(spec: ScenarioSpec) -> ScenarioSpec:
    """The point as the event engine times it: the measured steps `timed_steps` gives."""
    timed, _ = timed_steps(spec)
    if timed is None:
        return spec
    return spec.model_copy(
        update={
            "training": spec.training.model_copy(update={"steps": timed}),
            "sim": spec.sim.model_copy(update={"timed_steps": timed}),  # the part timed
        }
    )


def _steps_frame(point_id: str, replication: int, spec: ScenarioSpec, outcome: Any) -> pd.DataFrame:
    records = outcome.records
    step = records.column("step")
    frame = pd.DataFrame(
        {
            "point": point_id,
            "worker": records.column("worker"),
            "step": step,
            "warmup": step < spec.training.warmup_steps,
            "start_s": records.column("start"),
            "compute_end_s": records.column("compute_end"),
            "comm_end_s": records.column("comm_end"),
            "end_s": records.column("end"),
            "replication": replication,
            "generation": records.column("generation"),
            "trial": records.column("trial"),
            "staleness": records.column("staleness"),
        }
    )
    # a step done again after a restart: the earlier attempt was lost
    frame["lost"] = frame.duplicated(["worker", "step", "trial"], keep="last")
    if spec.strategy.counts_updates:
        frame["warmup"] = False  # asynchronous: warm-up counts updates, not iterations
    frame = frame.reindex(columns=list(vocab.STEP_COLUMNS))
    return frame.sort_values(["step", "worker", "trial"], kind="stable", ignore_index=True)


def _steps_summary(
    point_id: str, replication: int, spec: ScenarioSpec, outcome: Any
) -> pd.DataFrame:
    """steps.csv's summary rows of one replication, from the records a piece at a time
    (results/steps.py): no per-worker table is built."""
    warmup = spec.training.warmup_steps
    asynchronous = spec.strategy.counts_updates
    names = ("step", "generation", "trial", "start", "compute_end", "comm_end", "end", "staleness")

    def pieces() -> Any:
        for piece in outcome.records.chunks(names):
            step = piece["step"]
            yield {
                "step": step,
                "generation": piece["generation"],
                "trial": piece["trial"],
                # asynchronous: warm-up counts updates, not iterations
                "warmup": np.zeros(len(step), dtype=bool) if asynchronous else step < warmup,
                "start_s": piece["start"],
                "compute_end_s": piece["compute_end"],
                "comm_end_s": piece["comm_end"],
                "end_s": piece["end"],
                "staleness": piece["staleness"],
            }

    return step_summary(pieces(), point_id, replication)


def run(
    scenario: Scenario,
    jobs: int = 1,
    trace: bool = False,
    progress: Callable[[PointResult], None] | None = None,
    steps: str = vocab.STEPS_SUMMARY,
    within: StepProgress | None = None,
) -> RunResult:
    """Simulate all points; `jobs` > 1 runs them in parallel processes, `sim.engine: spark`
    as Spark tasks on `real.spark`'s master (the same results either way). `progress` is
    told of every point done; `within`, of the steps done inside a point, where the
    points run here one at a time; `steps`: steps.csv's form (`summary` or `all`)."""
    if steps not in vocab.STEPS_FORMS:
        raise ValueError(f"steps: {steps!r}, not one of {vocab.STEPS_FORMS}")
    result = RunResult(scenario)
    points = list(scenario.points)
    if points and points[0].spec.sim.engine == "spark":
        result.points = _on_spark(points, trace, steps)
        for done in result.points:
            if progress:
                progress(done)
        return result
    if jobs <= 1 or len(points) <= 1:
        for point in points:
            done = simulate_point(point, trace, steps, within)
            result.points.append(done)
            if progress:
                progress(done)
        return result
    finished: dict[int, PointResult] = {}
    with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(simulate_point, p, trace, steps): p.index for p in points}
        for future in cf.as_completed(futures):
            done = future.result()
            finished[futures[future]] = done
            if progress:
                progress(done)
    result.points = [finished[p.index] for p in points]
    return result


def _on_spark(points: list[Point], trace: bool, steps: str) -> list[PointResult]:
    """Every point a Spark task; the results in the points' order."""
    from engines.spark import session

    settings = points[0].spec.real.spark
    sc = session(settings.master, settings.conf).sparkContext
    rdd = sc.parallelize(points, len(points))
    return list(rdd.map(functools.partial(simulate_point, trace=trace, steps=steps)).collect())
