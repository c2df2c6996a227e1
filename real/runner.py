"""Run every sweep point of a scenario for real and summarize it like the simulator does.

What runs: each strategy's jobs as its plug-in makes them (real/strategies/: synchronous
ring all-reduce with TensorFlow's MultiWorkerMirroredStrategy, one process per worker on
this host, RING collectives on CPU, NCCL on GPU; synchronous and asynchronous parameter
servers with ParameterServerStrategy; a pipeline's stages; independent trials, run by
`real/trials.py`), a single worker without a strategy, and the failures and stragglers a
scenario injects. What it cannot run as specified is refused before anything
starts (`real/checks.py`).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from costing import point_costs
from results.stats import combine
from scenarios import vocab
from scenarios.errors import NotModelledError
from scenarios.loader import Point, Scenario
from scenarios.sections.strategy import algorithm_column
from scenarios.spec import ScenarioSpec
from workloads.convergence import curve_frame
from workloads.schedule import schedule_of

from .checks import check_supported, require_gpu
from .failures import launch_with_failures
from .job import Job, Place, Training, Trial
from .launcher import GaveUp, Launcher, LaunchResult
from .spark.stage import SparkLauncher
from .strategies import strategy_of
from .summary import summarize, trace_of
from .trials import run_trials

#: seconds a collective may hang before TensorFlow aborts it (a hang is reported, never waited)
COLLECTIVE_TIMEOUT_S = 120


def jobs_for(spec: ScenarioSpec, workers: int | None = None) -> list[Job]:
    """The processes of a point's job (with `workers` workers in place of the point's), as
    its strategy's plug-in makes them (real/strategies/) from the point's place and
    training (`common_of`)."""
    plugin = strategy_of(spec.strategy)
    if plugin is None:
        raise NotModelledError(
            f"strategy.kind: {spec.strategy.kind}: not implemented yet by run-real"
        )
    return plugin.jobs(spec, *common_of(spec, workers))


def common_of(spec: ScenarioSpec, workers: int | None = None) -> tuple[Place, Training]:
    """What every process of a point's job (with `workers` workers in place of the
    point's) shares: its place (task 0 of the workers) and its training."""
    n = spec.workers if workers is None else workers
    place = Place(
        workers=n,
        device=spec.real.device,
        collective_timeout_s=COLLECTIVE_TIMEOUT_S,
        seed=spec.seed,
    )
    target = spec.training.target
    training = Training(
        keras=spec.model.keras.model_dump() if spec.model.keras else {},
        # scaled, warmed up and decayed as workloads/schedule.py says
        schedule=(rates := schedule_of(spec, n)),
        learning_rate=rates.peak,
        batch_per_worker=spec.training.batch_per_worker,
        warmup_steps=spec.training.warmup_steps,
        steps=spec.training.steps,
        data=spec.training.data,
        # evaluations and the target: none without `training.target`
        target=target,
        eval_every=spec.training.evaluation.every_steps if target is not None else 0,
        holdout=spec.training.holdout_samples if target is not None else 0,
    )
    return place, training


@dataclass
class RealPoint:
    point_id: str
    row: dict[str, Any]
    steps: pd.DataFrame
    trace: str | None = None
    # with real.repeats: each run's headline figures, in the order run
    runs: list[dict[str, float]] | None = None
    # real.engine: spark: the executor and host of each process
    placement: list[dict[str, Any]] | None = None
    curves: pd.DataFrame | None = None  # with a target: the metric at every evaluation
    target: str | None = None  # why the time-to-target columns are empty
    # a pipeline's stages' CPU samples (the first run's): (stage, host clock, CPU seconds)
    busy: list[tuple[int, float, float]] | None = None
    # meta.json's `costs`: which money and energy figures were known, and their sources
    costs: dict[str, Any] | None = None


_BASELINES: dict[str, float] = {}


def run_trials_point(point: Point) -> RealPoint:
    started = time.perf_counter()
    spec = point.spec
    trials = [job for job in jobs_for(spec) if isinstance(job, Trial)]
    figures, records, placement = run_trials(spec, trials)
    t0 = min(r.start for _, r in records)
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "real",
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": spec.strategy.kind,
        "algorithm": "",
        "sync": True,
        "workers": spec.workers,
        "servers": 0,
        "batch_per_worker": spec.training.batch_per_worker,
        "peak_learning_rate": schedule_of(spec).peak,
        "steps": spec.training.steps,
        **figures,
        **vocab.NO_DYNAMICS,
        "device": spec.real.device,
    }
    row["fits"] = True  # it ran; device memory is not measured on this path
    row["wall_time_s"] = time.perf_counter() - started
    frame = pd.DataFrame(
        {
            "point": point.id,
            "worker": 0,
            "step": [r.step for _, r in records],
            "warmup": [r.step < spec.training.warmup_steps for _, r in records],
            "start_s": [r.start - t0 for _, r in records],
            "compute_end_s": [r.compute_end - t0 for _, r in records],
            "comm_end_s": [r.end - t0 for _, r in records],
            "end_s": [r.end - t0 for _, r in records],
            "replication": 0,
            "generation": 0,
            "lost": False,
            "trial": [trial for trial, _ in records],
            "staleness": 0,
            "loss": [r.loss for _, r in records],
        }
    ).reindex(columns=list(vocab.STEP_COLUMNS) + ["loss"])
    return RealPoint(point.id, row, frame, placement=placement or None)


def launch_job(spec: ScenarioSpec, jobs: list[Job]) -> LaunchResult:
    """Run one job, without failures, on the scenario's engine."""
    if spec.real.engine == "spark":
        return SparkLauncher.of(spec, jobs).run()
    return Launcher(jobs, spec.real.timeout, spec.real.device).run()


def run_point(
    point: Point, repetition: int = 0, phase: Callable[[str], None] | None = None
) -> RealPoint:
    """One run of a point. With a target, run `repetition` of a repeated point shuffles
    and splits the data by the scenario's seed + `repetition`: how long training takes
    to a target varies from one shuffle to the next, and a mean over runs of one shuffle
    would measure that one shuffle. `phase` is told when the 1-worker baseline starts."""
    if point.spec.strategy.trains_alone:
        return run_trials_point(point)
    started = time.perf_counter()
    spec = point.spec
    if spec.training.target is not None and repetition:
        spec = spec.model_copy(update={"seed": spec.seed + repetition})
    launch = launch_with_failures(spec, jobs_for(spec))
    stats, frame = summarize(spec, launch)
    curve, why, busy = stats.pop("curve"), stats.pop("target_reason"), stats.pop("busy")
    key = repr(jobs_for(spec, 1))
    if not spec.real.baseline:
        base = math.nan  # no 1-worker run: no scaling efficiency
    elif key not in _BASELINES:
        if spec.workers == 1:
            _BASELINES[key] = stats["throughput_samples_per_s"]
        else:
            if phase is not None:
                phase("baseline (1 worker)")
            one = launch_job(spec, jobs_for(spec, 1))
            single = spec.model_copy(  # one worker alone: no backup workers either
                update={
                    "cluster": spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1}),
                    # (a pipeline alone: one stage, one micro-batch)
                    "strategy": spec.strategy.model_copy(
                        update={"backup_workers": 0, "stages": 1, "micro_batches": 1}
                    ),
                }
            )
            _BASELINES[key] = summarize(single, one)[0]["throughput_samples_per_s"]
    if spec.real.baseline:
        base = _BASELINES[key]
    row: dict[str, Any] = {
        "point": point.id,
        "backend": "real",
        "scenario": spec.name,
        "model": spec.model.name,
        "strategy": spec.strategy.kind,
        "algorithm": algorithm_column(spec.strategy),
        "sync": spec.strategy.sync,
        "workers": spec.workers,
        "servers": spec.strategy.parameter_servers,
        "batch_per_worker": spec.training.batch_per_worker,
        "peak_learning_rate": schedule_of(spec).peak,
        "steps": spec.training.steps,
        **stats,
        "scaling_efficiency": stats["throughput_samples_per_s"] / (spec.workers * base),
        "device": spec.real.device,
    }
    row["fits"] = True  # it ran; device memory is not measured on this path
    row["wall_time_s"] = time.perf_counter() - started
    frame.insert(0, "point", point.id)
    frame = frame.reindex(columns=list(vocab.STEP_COLUMNS) + ["loss"])
    frame = frame.sort_values(["step", "worker"], kind="stable", ignore_index=True)
    return RealPoint(
        point.id,
        row,
        frame,
        placement=launch.placement or None,
        curves=None
        if curve is None or spec.training.target is None
        else curve_frame(point.id, 0, spec.training.target.metric, curve),
        target=why,
        busy=busy or None,
    )


def run(
    scenario: Scenario,
    progress: Any = None,
    trace: bool = False,
    before: Callable[[Point, int], None] | None = None,
    phase: Callable[[str, str], None] | None = None,
) -> list[RealPoint]:
    """Check every point first (nothing starts if one is refused), then run them in turn;
    with `trace`, a Chrome trace of each point's measured steps; `before(point,
    repetition)` is called before each run (run-real --recalibrate measures there);
    `phase(point, what)` as each part of a point's run starts (`run 2 of 3`, `baseline
    (1 worker)`)."""
    for point in scenario.points:
        check_supported(point.spec)
    if any(p.spec.real.device == "gpu" for p in scenario.points):
        require_gpu()
    runs: dict[str, list[RealPoint]] = {p.id: [] for p in scenario.points}
    done: list[RealPoint] = []
    rounds = max(p.spec.real.repeats for p in scenario.points)
    for repetition in range(rounds):  # interleaved: a slow spell falls on every point alike
        for point in round_order(scenario.points, repetition):
            if repetition >= point.spec.real.repeats:
                continue
            if before is not None:
                before(point, repetition)
            told = None
            if phase is not None:
                phase(point.id, f"run {repetition + 1} of {point.spec.real.repeats}")
                told = functools.partial(phase, point.id)
            try:
                runs[point.id].append(run_point(point, repetition, told))
            except GaveUp as exc:  # what finished before it is written
                order = {p.id: i for i, p in enumerate(scenario.points)}
                exc.done, exc.point = sorted(done, key=lambda r: order[r.point_id]), point.id
                raise
            if repetition + 1 < point.spec.real.repeats:
                continue
            done.append(priced(point.spec, merge_repeats(runs[point.id])))
            if trace:  # of the first run
                first = done[-1].steps
                done[-1].trace = trace_of(
                    point.spec, point.id, first[first["replication"] == 0].copy(), done[-1].busy
                )
            if progress:
                progress(done[-1])
    order = {p.id: i for i, p in enumerate(scenario.points)}
    return sorted(done, key=lambda r: order[r.point_id])


def round_order(points: Sequence[Point], repetition: int) -> list[Point]:
    """The order of round `repetition` of the runs: the grid forward and backward in
    turn, starting one place later every two rounds. No point always runs first or last,
    or always after the same point (the runs and probes just before a run leave the
    machine in some state: that falls on every point in turn, not on one of them)."""
    start = (repetition // 2) % len(points) if points else 0
    turned = list(points[start:]) + list(points[:start])
    return turned[::-1] if repetition % 2 else turned


def priced(spec: ScenarioSpec, point: RealPoint) -> RealPoint:
    """`point` with its money and energy columns (costing/, as the simulator's) and
    meta.json's note of them."""
    money, point.costs = point_costs(spec, point.row)
    point.row.update(money)
    return point


def merge_repeats(runs: list[RealPoint]) -> RealPoint:
    """One point's repeated runs as one: the mean of every figure with 95% half-widths of
    the headline ones (`results.stats.combine`, as the simulator combines replications),
    `replications` the number of runs; the step records of all, `replication` the run."""
    frames = [run.steps.assign(replication=i) for i, run in enumerate(runs)]
    row = combine([run.row for run in runs]) if len(runs) > 1 else {**runs[0].row}
    # what the point is (workers, steps, ...) stays as it is: only measurements are averaged
    identity = vocab.RESULT_COLUMNS[: vocab.RESULT_COLUMNS.index("steps") + 1]
    row.update({k: runs[0].row[k] for k in (*identity, "device") if k in runs[0].row})
    row.setdefault("replications", 1)
    row["wall_time_s"] = sum(run.row["wall_time_s"] for run in runs)
    steps = pd.concat(frames, ignore_index=True)
    figures = [{key: float(run.row[key]) for key in RUN_FIGURES if key in run.row} for run in runs]
    curves = [
        run.curves.assign(replication=i) for i, run in enumerate(runs) if run.curves is not None
    ]
    placement = runs[0].placement
    if len(runs) > 1 and placement:  # each run's own, marked with the run
        placement = [dict(p, run=i) for i, run in enumerate(runs) for p in run.placement or []]
    return RealPoint(
        runs[0].point_id,
        row,
        steps,
        runs=figures if len(runs) > 1 else None,
        placement=placement,
        curves=pd.concat(curves, ignore_index=True) if curves else None,
        target=next((run.target for run in runs if run.target), None),
        busy=runs[0].busy,
    )


#: per run of a repeated point, what meta.json's `runs` keeps
RUN_FIGURES = (
    "step_time_mean_s",
    "throughput_samples_per_s",
    "training_time_s",
    "time_to_target_s",
)
