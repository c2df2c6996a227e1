"""Pooling later measurements into a profile (`run-real --recalibrate`).

A shared machine's speed drifts over minutes, and a probe that a calibration runs once (the
transfer, the all-reduce, the coordinator, a model's update and closures) can differ from
one calibration to the next by more than the runs it predicts do. Measured again beside the
runs, in every round of `real.repeats`, and pooled with the calibration's own measurement,
each number is a mean over the same minutes as the runs' means.

How each kind pools, the calibration's own measurement counting as one of them:

- compute entries: the step time is the mean over every step measured (each measurement
  weighted by its steps); p10, p90 and start-up the mean of the measurements';
- fits (transfer, exchange, each all-reduce process count): at each message size, the mean
  of the measurements' medians, fitted again (`measurements` counts them);
- messages and coordinator: the mean of each median, samples summed;
- updates and closures: per model, dtype and servers, the mean of each figure, weighted by
  the calls timed.

A key the profile lacks is added; what was not measured again stays as it was. Each
round's own figures are kept besides (`rounds_of`: the profile's `rounds`, round 0 the
calibration's figures of the same probes), so that a prediction can be made from each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from measured.profile import (
    CLOSURES,
    CLOSURES_CPU,
    CollectiveFit,
    ComputeEntry,
    Coordinator,
    Fit,
    Messages,
    Profile,
    Round,
    UpdateEntry,
)

T = TypeVar("T")
P = TypeVar("P", Messages, Coordinator, UpdateEntry)


@dataclass
class Measured:
    """What was measured again, in the order measured."""

    compute: list[ComputeEntry] = field(default_factory=list)
    transfer: list[Fit] = field(default_factory=list)
    exchange: list[Fit] = field(default_factory=list)
    messages: list[Messages] = field(default_factory=list)
    allreduce: list[CollectiveFit] = field(default_factory=list)
    in_graph: list[CollectiveFit] = field(default_factory=list)
    coordinator: list[Coordinator] = field(default_factory=list)
    updates: list[UpdateEntry] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(len(getattr(self, name)) for name in self.__dataclass_fields__)


def together(rounds: Iterable[Measured]) -> Measured:
    """Several rounds' measurements as one, in their order."""
    merged = Measured()
    for r in rounds:
        for name in merged.__dataclass_fields__:
            getattr(merged, name).extend(getattr(r, name))
    return merged


def fold(profile: Profile, later: Measured) -> Profile:
    """The profile with `later` pooled in (module docstring)."""
    transfer = pool_fits(_with(profile.transfer, later.transfer))
    exchange = pool_fits(_with(profile.exchange, later.exchange))
    messages = _pool_messages(_with(profile.messages, later.messages))
    coordinator = _pool_coordinator(_with(profile.coordinator, later.coordinator))
    # SI floats already: copy rather than validate (validation wants unit strings)
    return fold_compute(profile, later.compute).model_copy(
        update={
            "transfer": transfer,
            "exchange": exchange,
            "messages": messages,
            "coordinator": coordinator,
            "allreduce": _by_key(
                [*profile.allreduce, *later.allreduce], lambda f: f.workers, _pool_collective
            ),
            "in_graph": _by_key(
                [*profile.in_graph, *later.in_graph], lambda f: f.workers, _pool_collective
            ),
            "updates": _by_key(
                [*profile.updates, *later.updates],
                lambda u: (u.model, u.dtype, u.servers),
                _pool_updates,
            ),
        }
    )


def fold_compute(profile: Profile, entries: Iterable[ComputeEntry]) -> Profile:
    """The profile with later measurements of its compute entries pooled in: per key, the
    step time is the mean over every step measured (each measurement weighted by its
    steps), p10, p90 and start-up the mean of the measurements'; a key the profile lacks
    is added."""
    compute = _by_key([*profile.compute, *entries], lambda e: e.key, _pool_compute)
    return profile.model_copy(update={"compute": compute})


def _pool_compute(group: list[ComputeEntry]) -> ComputeEntry:
    steps = sum(e.steps for e in group)
    weights = [e.steps for e in group] if steps else [1] * len(group)
    return group[0].model_copy(
        update={
            "step_time": float(np.average([e.step_time for e in group], weights=weights)),
            "p10": _mean([e.p10 for e in group]),
            "p90": _mean([e.p90 for e in group]),
            "steps": steps,
            "startup": _mean([e.startup for e in group]),
        }
    )


def rounds_of(profile: Profile, rounds: Sequence[Measured]) -> list[Round]:
    """The profile's rounds with `rounds` (each what one round of runs measured again)
    added, each as one `Round`; a profile without rounds gets round 0 first: its own
    figures of the probes the rounds measured (the calibration: call this before pooling
    the rounds into it)."""
    measured = [r for r in rounds if r]
    if not measured:
        return list(profile.rounds)
    first = [] if profile.rounds else [_as_measured(profile, measured)]
    return [*profile.rounds, *first, *(_round_of(r) for r in measured)]


def _round_of(measured: Measured) -> Round:
    """One round's measurements, a key measured twice pooled into one."""
    return Round(
        compute=_by_key(measured.compute, lambda e: e.key, _pool_compute),
        transfer=pool_fits(measured.transfer),
        exchange=pool_fits(measured.exchange),
        messages=_pool_messages(measured.messages),
        allreduce=_by_key(measured.allreduce, lambda f: f.workers, _pool_collective),
        in_graph=_by_key(measured.in_graph, lambda f: f.workers, _pool_collective),
        coordinator=_pool_coordinator(measured.coordinator),
        updates=_by_key(measured.updates, lambda u: u.key, _pool_updates),
    )


def _as_measured(profile: Profile, rounds: Sequence[Measured]) -> Round:
    """The profile's figures of what `rounds` measured again: its round 0."""
    again = together(rounds)
    compute = {e.key for e in again.compute}
    collectives = {f.workers for f in again.allreduce}
    in_graph = {f.workers for f in again.in_graph}
    updates = {u.key for u in again.updates}
    return Round(
        compute=[e for e in profile.compute if e.key in compute],
        transfer=profile.transfer if again.transfer else None,
        exchange=profile.exchange if again.exchange else None,
        messages=profile.messages if again.messages else None,
        allreduce=[f for f in profile.allreduce if f.workers in collectives],
        in_graph=[f for f in profile.in_graph if f.workers in in_graph],
        coordinator=profile.coordinator if again.coordinator else None,
        updates=[u for u in profile.updates if u.key in updates],
    )


def fit_alpha_beta(points: Iterable[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Least-squares time = alpha + bytes / beta over (bytes, seconds) points.

    Returns (alpha, beta, r2, worst relative residual). alpha is clipped at 0 (a negative
    intercept means latency is below what the points resolve)."""
    data = np.asarray(list(points), dtype=float)
    x, y = data[:, 0], data[:, 1]
    slope, intercept = np.polyfit(x, y, 1)
    slope = max(float(slope), 1e-18)
    intercept = max(float(intercept), 0.0)
    predicted = intercept + slope * x
    total = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - predicted) ** 2)) / total if total > 0 else 1.0
    worst = float(np.max(np.abs(predicted - y) / y))
    return intercept, 1.0 / slope, r2, worst


def pool_fits(fits: Sequence[Fit]) -> Fit | None:
    """Several measurements of one fit as one: at each size, the mean of their medians,
    fitted again. Fits stored without their points (older profiles) cannot be pooled:
    with any such, the first is kept as it was."""
    if not fits:
        return None
    if len(fits) == 1 or any(not f.points for f in fits):
        return fits[0]
    sizes: dict[float, list[float]] = {}
    for f in fits:
        for p in f.points:
            sizes.setdefault(p.bytes, []).append(p.time)
    means = sorted((b, float(np.mean(t))) for b, t in sizes.items())
    alpha, beta, r2, worst = fit_alpha_beta(means)
    points = [fits[0].points[0].model_copy(update={"bytes": b, "time": t}) for b, t in means]
    return fits[0].model_copy(
        update={
            "latency": alpha,
            "bandwidth": beta,
            "r2": r2,
            "max_rel_residual": worst,
            "points": points,
            "measurements": sum(f.measurements for f in fits),
        }
    )


def _pool_collective(fits: list[CollectiveFit]) -> CollectiveFit:
    pooled = pool_fits(fits)
    assert isinstance(pooled, CollectiveFit)
    return pooled


def _pool_messages(group: list[Messages]) -> Messages | None:
    return _pool_means(group, ("first", "chained")) if group else None


def _pool_coordinator(group: list[Coordinator]) -> Coordinator | None:
    return _pool_means(group, ("dispatch", "call", "queued")) if group else None


def _pool_updates(group: list[UpdateEntry]) -> UpdateEntry:
    weighted = all(u.samples for u in group)
    return _pool_means(group, ("time", "p10", "p90", *CLOSURES, *CLOSURES_CPU), weighted)


def _pool_means(group: list[P], names: tuple[str, ...], weighted: bool = False) -> P:
    """The group as its first, each of `names` the mean of the measurements that have it
    (weighted by their `samples` if `weighted`), `samples` summed."""
    weights = [x.samples if weighted else 1 for x in group]

    def mean(name: str) -> float | None:
        present = [(getattr(x, name), w) for x, w in zip(group, weights, strict=True)]
        present = [(v, w) for v, w in present if v is not None]
        if not present:
            return None
        return float(np.average([v for v, _ in present], weights=[w for _, w in present]))

    update: dict[str, Any] = {name: mean(name) for name in names}
    update["samples"] = sum(x.samples for x in group)
    return group[0].model_copy(update=update)


def _with(first: T | None, later: list[T]) -> list[T]:
    return ([] if first is None else [first]) + later


def _by_key(items: list[T], key: Callable[[T], Any], pool: Callable[[list[T]], T]) -> list[T]:
    """Items grouped by key (first seen first), each group pooled into one."""
    groups: dict[Any, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return [pool(group) for group in groups.values()]


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


#: z of the 90th percentile of a normal distribution: (p90 - p10) / (2 Z90) estimates sigma
Z90 = 1.2816
#: the least a mean step time is taken to vary by from one run to the next, unmeasured:
#: docs/validation.md measured one run's throughput to vary by 7-14% from run to run on a
#: shared 2-core VM (pooled over repeated points); a drift below this is not reported as
#: a change of the machine
RUN_TO_RUN_NOISE = 0.10


def drift(profile: Profile, later: Sequence[ComputeEntry]) -> dict[str, Any] | None:
    """How far the machine moved between the calibration and the runs, from the probe
    measured at both times: the single-worker compute of each process count.

    `drift` is the step-time-weighted mean over the keys measured at both times of
    (mean later step time / calibration step time - 1). `noise` is what the probe's mean
    varies by anyway: the relative standard deviation between later measurements of one
    key where a key was measured more than once (runs in rounds, `real.repeats`), the
    spread of the calibration's own steps ((p90 - p10) / (2 x 1.2816) / mean), and no less
    than RUN_TO_RUN_NOISE. The machine `changed` when |drift| exceeds the noise. None when
    no key was measured at both times."""
    calibrated = {e.key: e for e in profile.compute}
    groups: dict[tuple[Any, ...], list[ComputeEntry]] = {}
    for e in later:
        if e.key in calibrated:
            groups.setdefault(e.key, []).append(e)
    if not groups:
        return None
    entries, drifts, weights = [], [], []
    spreads = [RUN_TO_RUN_NOISE]
    for key, group in groups.items():
        before = calibrated[key]
        during = [e.step_time for e in group]
        rel = float(np.mean(during)) / before.step_time - 1
        drifts.append(rel)
        weights.append(before.step_time)
        if len(during) > 1:
            spreads.append(float(np.std(during, ddof=1) / np.mean(during)))
        if before.p10 is not None and before.p90 is not None:
            spreads.append((before.p90 - before.p10) / (2 * Z90) / before.step_time)
        entries.append(
            {
                "model": before.model,
                "batch_per_worker": before.batch_per_worker,
                "processes": before.processes,
                "calibration_step_time_s": before.step_time,
                "runs_step_time_s": during,
                "drift": rel,
            }
        )
    value = float(np.average(drifts, weights=weights))
    noise = max(spreads)
    return {
        "probe": "single-worker compute step time, at calibration and beside the runs",
        "drift": value,
        "noise": noise,
        "changed": abs(value) > noise,
        "entries": entries,
    }
