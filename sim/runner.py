"""Simulate every sweep point of a scenario, in order or in parallel, and gather results.

Scaling efficiency needs the 1-worker throughput of the same point (`baseline.py`).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from costing import point_costs
from measured import errors
from measured.profile import Profile, load_profile, profiles_of
from results.stats import combine
from scenarios import vocab
from scenarios.loader import Point, Scenario
from scenarios.sections.dynamics import RandomFailure
from scenarios.sections.strategy import algorithm_column
from scenarios.spec import ScenarioSpec
from workloads.convergence import curve_frame
from workloads.pipeline import fits_line, memory_summary
from workloads.schedule import schedule_of

from .baseline import baseline_throughput
from .engine.convergence import run_columns, target_columns, target_curve, timed_steps
from .engine.failures import daly_interval, young_interval
from .engine.metrics import summarize
from .engine.steps import steps_frame, steps_summary
from .simulation import Simulation, by_round


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
    #: meta.json's `engines`: the engine that timed the point (`SimulationOutcome.engine`)
    engine: str = "events"
    #: meta.json's `costs`: which money and energy figures were known, and their sources
    costs: dict[str, Any] = field(default_factory=dict)


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
    def engines(self) -> dict[str, str]:
        """meta.json's `engines`: per timed point, the engine that timed it."""
        return {p.point_id: p.engine for p in self.points if p.row.get("fits") is not False}

    @property
    def costs(self) -> dict[str, dict[str, Any]]:
        """meta.json's `costs`: per point, its money and energy figures' sources."""
        return {p.point_id: p.costs for p in self.points}

    @property
    def targets(self) -> dict[str, str]:
        """meta.json's `targets`: per point whose time to target is empty, why."""
        return {p.point_id: p.target for p in self.points if p.target is not None}


def checkpoint_advice(spec: ScenarioSpec, sim: Simulation, step_time: float) -> dict[str, Any]:
    """Young/Daly optimal checkpoint intervals beside the one the scenario uses."""
    cost = sim.costs.checkpoint_s
    advice: dict[str, Any] = {
        "failure_free_step_time_s": step_time,
        "checkpoint_cost_s": cost,
        "checkpoint_bytes": sim.costs.checkpoint_bytes,
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
                "young_interval_s": young_interval(cost, mtbf),
                "daly_interval_s": daly_interval(cost, mtbf),
                "daly_interval_steps": daly_interval(cost, mtbf) / step_time
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
    profile: Profile | None = None,
) -> PointResult:
    """Simulate one point (its replications and its 1-worker baseline) into result rows;
    a point whose devices cannot hold it gets its memory and `fits` false, no timings.
    `steps`: steps.csv's form (`summary`, one row per step; `all`, one per worker-step);
    `progress`: told of the steps done every so often (sim.engine.simulation.PROGRESS_CALLS);
    `profile`: the calibration profile `cluster.profile` names (`profiles_of`), read
    from the path when not given."""
    started = time.perf_counter()
    spec = point.spec
    memory = memory_summary(spec)
    if memory["fits"] is False:
        return _unfit_result(point, memory, steps, started)
    timed = timed_spec(spec)
    per_replication = timed.training.warmup_steps + timed.training.steps
    if profile is None and spec.cluster.profile is not None:
        profile = load_profile(spec.cluster.profile)
    runs = [
        _replicate(
            point,
            timed,
            replication,
            trace,
            steps,
            profile,
            _within(progress, point.id, replication * per_replication),
        )
        for replication in range(spec.sim.replications)
    ]
    rows = [run.row for run in runs]
    stats = combine(rows) if len(rows) > 1 else {**rows[0], "replications": 1}
    base = baseline_throughput(timed, profile)
    row = _point_row(point, stats, base)
    row["peak_memory_bytes"] = memory["peak_memory_bytes"]
    row["fits"] = True
    row["wall_time_s"] = time.perf_counter() - started
    money, costs = point_costs(spec, row)
    row.update(money)
    row.update(errors.columns(spec, row, by_round(timed, profile)))
    why = None
    for run in runs:  # the first replication's reason that says something
        why = why or run.why
    curves = [run.curve for run in runs if run.curve is not None]
    return PointResult(
        point.id,
        row,
        pd.concat([run.steps for run in runs], ignore_index=True),
        runs[0].trace,
        runs[0].advice,
        runs[-1].calibration,
        pd.concat(curves, ignore_index=True) if curves else None,
        why if spec.training.target is not None else None,
        memory,
        timed_note(spec),
        runs[0].engine,
        costs,
    )


def _unfit_result(point: Point, memory: dict[str, Any], steps: str, started: float) -> PointResult:
    """A point whose devices cannot hold it: its identity and memory, `fits` false, no
    timings, and steps.csv's header in the form asked for."""
    spec = point.spec
    untimed = {
        "point": point.id,
        "backend": "sim",
        **_identity(spec),
        "steps": spec.training.steps,
        "peak_memory_bytes": memory["peak_memory_bytes"],
        "fits": False,
        "wall_time_s": time.perf_counter() - started,
    }
    money, costs = point_costs(spec, untimed)
    untimed.update(money)
    header = vocab.STEP_COLUMNS if steps == vocab.STEPS_ALL else vocab.STEP_SUMMARY_COLUMNS
    frame = pd.DataFrame(columns=list(header))
    return PointResult(point.id, untimed, frame, memory=memory, costs=costs)


def timed_note(spec: ScenarioSpec) -> dict[str, Any]:
    """meta.json's `timed_steps` for a point: the measured steps timed (`all`, or a
    number), of how many, and why (convergence.timed_steps)."""
    cut, cut_why = timed_steps(spec)
    return {
        "timed": "all" if cut is None else cut,
        "measured": spec.training.steps,
        "why": cut_why,
    }


def _within(
    progress: StepProgress | None, point_id: str, offset: int
) -> Callable[[int, float], None] | None:
    """What a replication's Simulation tells of its steps, passed on as the point's:
    `offset` is the steps of the replications before it."""
    if progress is None:
        return None

    def told(done: int, now: float) -> None:
        progress(point_id, offset + done, now)

    return told


@dataclass
class _Replication:
    """One replication of a point, simulated: what the point's results gather of it."""

    row: dict[str, Any]  # summarize's, with the time-to-target and run columns
    steps: pd.DataFrame  # steps.csv's rows, in the form asked for
    curve: pd.DataFrame | None  # curves.csv's rows, where the point has a target curve
    why: str | None  # why its time-to-target columns are empty (target_columns)
    calibration: dict[str, Any] | None  # the cost model's summary (sim/costs)
    advice: dict[str, Any]  # the checkpoint advice; the first replication only
    trace: str | None  # the Chrome trace; the first replication only, when asked
    engine: str  # the engine that timed it


def _replicate(
    point: Point,
    timed: ScenarioSpec,
    replication: int,
    trace: bool,
    steps: str,
    profile: Profile | None,
    progress: Callable[[int, float], None] | None,
) -> _Replication:
    """Simulate one replication of `point` (`timed`: the point as the engine times it,
    `profile`: the calibration its target curve and evaluations read)."""
    spec = point.spec
    sim = Simulation(
        timed,
        trace=trace and replication == 0,
        replication=replication,
        profile=profile,
        progress=progress,
    )
    calibration = sim.costs.summary(timed)
    outcome = sim.run()
    row = summarize(timed, outcome)
    evaluation_s = sim.costs.evaluation_s
    curve = target_curve(spec, outcome, evaluation_s, profile)
    columns, why = target_columns(spec, curve)
    row.update(columns)
    row.update(run_columns(spec, timed.training.steps, row, curve, evaluation_s))
    curve_rows = None
    if curve is not None:
        metric = spec.training.target.metric if spec.training.target else ""
        curve_rows = curve_frame(point.id, replication, metric, curve)
    if steps == vocab.STEPS_ALL:
        frame = steps_frame(point.id, replication, timed, outcome)
    else:
        frame = steps_summary(point.id, replication, timed, outcome)
    advice: dict[str, Any] = {}
    trace_text = None
    if replication == 0:
        advice = checkpoint_advice(spec, sim, failure_free_step_time(row, spec.training.steps))
        if trace:
            trace_text = outcome.tracer.dumps(
                {"scenario": spec.name, "point": point.id, "backend": "sim", "seed": spec.seed}
            )
    return _Replication(
        row, frame, curve_rows, why, calibration, advice, trace_text, outcome.engine
    )


def failure_free_step_time(row: dict[str, Any], steps: int) -> float:
    """Seconds a measured step takes without failures, by the accounting identity of
    training time: training time less lost work, recovery and checkpoints, over `steps`."""
    return (
        row["training_time_s"]
        - row["lost_work_time_s"]
        - row["recovery_time_s"]
        - row["checkpoint_time_s"]
    ) / steps


def _point_row(point: Point, stats: dict[str, Any], base: float) -> dict[str, Any]:
    """results.csv's row of a point from its replications' statistics (`stats`) and its
    1-worker throughput (`base`), before its memory and wall time."""
    spec = point.spec
    strategy = spec.strategy
    return {
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


def run(
    scenario: Scenario,
    jobs: int = 1,
    trace: bool = False,
    progress: Callable[[PointResult], None] | None = None,
    steps: str = vocab.STEPS_SUMMARY,
    within: StepProgress | None = None,
    profiles: Mapping[str, Profile] | None = None,
) -> RunResult:
    """Simulate all points; `jobs` > 1 runs them in parallel processes, `sim.engine: spark`
    as Spark tasks on `real.spark`'s master (the same results either way). `progress` is
    told of every point done; `within`, of the steps done inside a point, where the
    points run here one at a time; `steps`: steps.csv's form (`summary` or `all`);
    `profiles`: the points' calibration profiles by point id (`profiles_of`, which reads
    them when not given)."""
    if steps not in vocab.STEPS_FORMS:
        raise ValueError(f"steps: {steps!r}, not one of {vocab.STEPS_FORMS}")
    if profiles is None:
        profiles = profiles_of(scenario)
    result = RunResult(scenario)
    points = list(scenario.points)
    if points and points[0].spec.sim.engine == "spark":
        result.points = _on_spark(points, profiles, trace, steps)
        for done in result.points:
            if progress:
                progress(done)
        return result
    if jobs <= 1 or len(points) <= 1:
        for point in points:
            done = simulate_point(point, trace, steps, within, profiles.get(point.id))
            result.points.append(done)
            if progress:
                progress(done)
        return result
    finished: dict[int, PointResult] = {}
    with cf.ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {
            pool.submit(simulate_point, p, trace, steps, None, profiles.get(p.id)): p.index
            for p in points
        }
        for future in cf.as_completed(futures):
            done = future.result()
            finished[futures[future]] = done
            if progress:
                progress(done)
    result.points = [finished[p.index] for p in points]
    return result


def _on_spark(
    points: list[Point], profiles: Mapping[str, Profile], trace: bool, steps: str
) -> list[PointResult]:
    """Every point a Spark task, its profile travelling with it; the results in the
    points' order."""
    from engines.spark import session

    settings = points[0].spec.real.spark
    sc = session(settings.master, settings.conf).sparkContext
    rdd = sc.parallelize([(p, profiles.get(p.id)) for p in points], len(points))
    task = functools.partial(_simulate_task, trace=trace, steps=steps)
    return list(rdd.map(task).collect())


def _simulate_task(task: tuple[Point, Profile | None], trace: bool, steps: str) -> PointResult:
    """One Spark task: a point and its calibration profile, simulated."""
    point, profile = task
    return simulate_point(point, trace, steps, profile=profile)
