"""Lay runs side by side: one scenario, points paired by id, prediction errors, Kendall tau.

Pairing rule: a report is about one scenario. Its directories may hold any backends, but
every results.csv must name the same scenario, and a (backend, point) may appear in one
directory only. A simulated and a real row of the same point id form a pair, and they must
describe the same configuration (model, strategy, workers, ...), or the comparison would
be meaningless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from results.stats import t95
from scenarios.errors import UserError
from scenarios.sections.strategy import serves_parameters

from .intervals import inside, number, runs_of
from .load import Run, records

#: results.csv columns that a simulated and a real row of one point must share
IDENTITY_COLUMNS = (
    "model",
    "strategy",
    "algorithm",
    "sync",
    "workers",
    "servers",
    "batch_per_worker",
    "steps",
)

#: sweep paths already in a strategy label, or that only set the number of workers
_LABELLED_PATHS = {
    "cluster.hosts",
    "cluster.devices_per_host",
    "strategy.kind",
    "strategy.algorithm",
    "strategy.servers",
    "strategy.sync",
}


def combine(runs: Sequence[Run]) -> pd.DataFrame:
    """All results rows of one scenario, with `source` (index into runs) and `label`."""
    first = runs[0]
    seen: dict[tuple[str, str], Run] = {}
    for run in runs:
        if run.scenario != first.scenario:
            raise UserError(
                f"{run.results_path}: column 'scenario' is {run.scenario!r} but "
                f"{first.results_path} is {first.scenario!r}; a report compares runs of one "
                f"scenario"
            )
        for backend, point in zip(run.results["backend"], run.results["point"], strict=True):
            other = seen.get((backend, point))
            if other is not None:
                raise UserError(
                    f"{run.results_path}: column 'point': {backend} point {point!r} is also in "
                    f"{other.results_path}; give each backend's result once"
                )
            seen[(backend, point)] = run
    frame = pd.concat(
        [run.results.assign(source=i) for i, run in enumerate(runs)], ignore_index=True
    )
    _check_pairs(frame, runs)
    frame["label"] = series_labels(frame, [run.meta for run in runs])
    return frame


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b)
    return bool(a == b)


def _check_pairs(frame: pd.DataFrame, runs: Sequence[Run]) -> None:
    sim = frame[frame["backend"] == "sim"].set_index("point")
    real = frame[frame["backend"] == "real"].set_index("point")
    for point in real.index.intersection(sim.index):
        s, r = sim.loc[point], real.loc[point]
        for column in IDENTITY_COLUMNS:
            if column == "steps" and _targeted(s) and _targeted(r):
                continue  # a run to a target stops where it meets it: its steps differ
            if not _same(s[column], r[column]):
                raise UserError(
                    f"{runs[int(r['source'])].results_path}: column '{column}' of point "
                    f"{point!r} is {_show(r[column])} but {_show(s[column])} in "
                    f"{runs[int(s['source'])].results_path}; sim and real must run the same "
                    f"configuration"
                )


def _targeted(row: Mapping[Any, Any]) -> bool:
    """Whether a row trained to a target (its final metric is measured only then)."""
    return math.isfinite(number(row, "final_metric"))


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


def strategy_label(row: Mapping[str, Any]) -> str:
    """'allreduce/ring', 'ps x4', 'independent', with ' async' for asynchronous runs."""
    strategy = str(row["strategy"])
    if serves_parameters(strategy):
        label = f"ps x{_show(float(row['servers']))}"
    elif row["algorithm"]:
        label = f"{strategy}/{row['algorithm']}"
    else:
        label = strategy
    return label if row["sync"] else f"{label} async"


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{path}."))
        else:
            out[path] = value
    return out


def sweep_values(metas: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """point id -> flattened sweep values, from meta.json's `points` (first one wins)."""
    out: dict[str, dict[str, Any]] = {}
    for meta in metas:
        points = meta.get("points")
        if not isinstance(points, list):
            continue
        for p in points:
            if isinstance(p, Mapping) and isinstance(p.get("values"), Mapping):
                out.setdefault(str(p.get("id")), _flatten(p["values"]))
    return out


def series_labels(frame: pd.DataFrame, metas: Sequence[Mapping[str, Any]]) -> list[str]:
    """One label per row naming its configuration apart from the number of workers.

    The strategy label, plus every swept value that differs between points and is not
    already said (`every_steps=25`), so that the points of one label differ only in workers
    and the label is the same for a point's simulated and real rows."""
    values = sweep_values(metas)
    points = [values.get(p, {}) for p in dict.fromkeys(frame["point"])]
    paths = dict.fromkeys(k for v in points for k in v if k not in _LABELLED_PATHS)
    varying = [k for k in paths if len({repr(v.get(k, "\0absent")) for v in points}) > 1]
    labels = []
    for row in records(frame):
        mine = values.get(row["point"], {})
        extra = [f"{k.rsplit('.', 1)[-1]}={mine[k]}" for k in varying if k in mine]
        labels.append(" ".join([strategy_label(row), *extra]))
    return labels


def kendall_tau_b(
    x: Sequence[float], y: Sequence[float], y_resolution: Sequence[float] | None = None
) -> float | None:
    """Kendall's tau-b rank correlation of two paired samples, ties counted (Kendall 1945).

    tau_b = (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)), n0 = n(n-1)/2.
    With `y_resolution` (per pair of samples, the smallest difference of y that the
    measurement tells apart), two y closer than that are a tie: a pair the measurement
    cannot order is neither concordant nor discordant.
    None when it is undefined: fewer than two pairs, or one sample all ties."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    if a.shape != b.shape:
        raise ValueError("kendall_tau_b needs samples of the same length")
    n = len(a)
    if n < 2:
        return None
    i, j = np.triu_indices(n, k=1)  # every unordered pair once; O(n^2), n is a sweep's size
    dx = np.sign(a[i] - a[j])
    dy = np.sign(b[i] - b[j])
    if y_resolution is not None:
        resolution = np.asarray(y_resolution, dtype=float)
        if resolution.shape != dx.shape:
            raise ValueError("y_resolution needs one value per pair, n(n-1)/2 of them")
        dy[np.abs(b[i] - b[j]) <= resolution] = 0
    n0 = n * (n - 1) / 2
    ties_x = float(np.sum(dx == 0))
    ties_y = float(np.sum(dy == 0))
    denominator = math.sqrt((n0 - ties_x) * (n0 - ties_y))
    if denominator == 0:
        return None
    return float(np.sum(dx * dy)) / denominator


def ordered_pairs(
    x: Sequence[float], y: Sequence[float], y_resolution: Sequence[float]
) -> tuple[int, int, int, int]:
    """(concordant, discordant, apart, all) over the pairs of points whose y differ by
    more than their resolution (`resolution`): how many of the pairs the measurement
    orders x orders the same way, the other way, how many it orders, and how many pairs
    there are. A tie in x among them counts as neither. Pairs row-major, i < j."""
    a = np.asarray(x, dtype=float)
    b = np.asarray(y, dtype=float)
    gaps = np.asarray(y_resolution, dtype=float)
    i, j = np.triu_indices(len(a), k=1)
    if gaps.shape != i.shape:
        raise ValueError("y_resolution needs one value per pair, n(n-1)/2 of them")
    apart = np.abs(b[i] - b[j]) > gaps
    agree = np.sign(a[i] - a[j]) * np.sign(b[i] - b[j])
    return (
        int(np.sum(apart & (agree > 0))),
        int(np.sum(apart & (agree < 0))),
        int(np.sum(apart)),
        len(i),
    )


def run_to_run_noise(
    rows: pd.DataFrame,
    column: str = "throughput_samples_per_s",
    half_width: str = "throughput_ci95_samples_per_s",
) -> tuple[float, int] | None:
    """Pooled relative standard deviation of one run's `column` (throughput unless told),
    from real rows repeated (`replications` >= 2, their 95% half-widths `half_width`):
    (sigma, degrees of freedom), or None without repeated rows. Each row's sd =
    half-width x sqrt(R) / t95(R - 1); the pool is the root of the dof-weighted mean of
    (sd / mean)^2."""
    if "replications" not in rows or half_width not in rows or column not in rows:
        return None
    squares, dof = 0.0, 0
    for row in rows.to_dict(orient="records"):
        runs = runs_of(row)
        half, mean = row[half_width], row[column]
        if runs < 2 or not (math.isfinite(half) and mean > 0):
            continue
        sd = half * math.sqrt(runs) / t95(runs - 1)
        squares += (runs - 1) * (sd / mean) ** 2
        dof += runs - 1
    return (math.sqrt(squares / dof), dof) if dof else None


def resolution(
    means: Sequence[float], runs: Sequence[int], noise: tuple[float, int]
) -> list[float]:
    """Per pair (i < j, row-major), the smallest difference of two real means the runs
    tell apart at 95%: t95(dof) x sigma x sqrt(m_i^2 / R_i + m_j^2 / R_j), sigma the pooled
    relative run-to-run noise (`run_to_run_noise`)."""
    sigma, dof = noise
    m = np.asarray(means, dtype=float)
    r = np.asarray(runs, dtype=float)
    i, j = np.triu_indices(len(m), k=1)
    return list(t95(dof) * sigma * np.sqrt(m[i] ** 2 / r[i] + m[j] ** 2 / r[j]))


def relative_error(sim: float, real: float) -> float:
    """(sim - real) / real: positive when the simulator predicts more than reality."""
    return (sim - real) / real if real else math.nan


def mape(errors: Sequence[float]) -> float | None:
    """Mean absolute percentage error (in percent) of relative errors; None if none."""
    finite = [abs(e) for e in errors if math.isfinite(e)]
    return 100.0 * sum(finite) / len(finite) if finite else None


@dataclass(frozen=True)
class TargetAgreement:
    """How well the simulator predicted the real time to target (points where both
    reached it): the MAPE, and the pairs of points the real runs tell apart (their
    means differ by more than `resolution`, from the pooled run-to-run noise of time to
    target) with how many of them the simulator orders as the runs do."""

    points: int
    one_sided: int  # points that reached it on one backend only
    mape: float | None  # percent
    noise: tuple[float, int] | None  # (relative sd of one run, degrees of freedom)
    concordant: int
    discordant: int
    apart: int
    pairs: int


@dataclass(frozen=True)
class Agreement:
    """How well the simulator predicted the real runs of one scenario."""

    pairs: pd.DataFrame  # one row per point with both backends
    mape_step_time: float | None  # percent
    mape_throughput: float | None  # percent
    tau: float | None  # Kendall tau-b of throughput ranks, sim vs real
    target: TargetAgreement | None = None  # where the points have a time to target
    order: PairOrder | None = None  # the throughput pairs the runs tell apart


@dataclass(frozen=True)
class PairOrder:
    """The pairs of points whose real throughputs the runs tell apart at 95%
    (`resolution`, from the pooled run-to-run noise), and how the simulator orders them."""

    noise: tuple[float, int]  # one run's relative sd, its degrees of freedom
    concordant: int
    discordant: int
    apart: int
    pairs: int


def throughput_order(pairs: pd.DataFrame, real: pd.DataFrame) -> PairOrder | None:
    """`PairOrder` of the points' throughputs; None where no real point was repeated."""
    noise = run_to_run_noise(real)
    both = pairs[np.isfinite(pairs[["sim_throughput", "real_throughput"]].to_numpy(float)).all(1)]
    if noise is None or len(both) < 2:
        return None
    means = list(both["real_throughput"])
    gaps = resolution(means, list(both["real_runs"]), noise)
    concordant, discordant, apart, count = ordered_pairs(list(both["sim_throughput"]), means, gaps)
    return PairOrder(noise, concordant, discordant, apart, count)


PAIR_COLUMNS = (
    "point",
    "label",
    "workers",
    "sim_step_time_s",
    "real_step_time_s",
    "step_time_error",
    "sim_throughput",
    "real_throughput",
    "throughput_error",
    "real_runs",
    "real_throughput_ci95",
    "sim_time_to_target_s",
    "real_time_to_target_s",
    "time_to_target_error",
    "real_time_to_target_ci95_s",
    "interval_low",
    "interval_high",
    "inside",
)


def target_agreement(pairs: pd.DataFrame, real: pd.DataFrame) -> TargetAgreement | None:
    """The time-to-target agreement of `pairs` (agreement's), None where no point reached
    a target on either backend. The noise pools the real rows' repeats."""
    finite = np.isfinite(
        pairs[["sim_time_to_target_s", "real_time_to_target_s"]].to_numpy(float)
    ).reshape(-1, 2)
    if not finite.any():
        return None
    both = pairs[finite.all(axis=1)]
    noise = run_to_run_noise(real, "time_to_target_s", "time_to_target_ci95_s")
    concordant = discordant = apart = 0
    count = len(both) * (len(both) - 1) // 2
    if noise is not None and len(both) >= 2:
        means = list(both["real_time_to_target_s"])
        gaps = resolution(means, list(both["real_runs"]), noise)
        concordant, discordant, apart, count = ordered_pairs(
            list(both["sim_time_to_target_s"]), means, gaps
        )
    return TargetAgreement(
        points=len(both),
        one_sided=int(np.sum(finite.sum(axis=1) == 1)),
        mape=mape(list(both["time_to_target_error"])),
        noise=noise,
        concordant=concordant,
        discordant=discordant,
        apart=apart,
        pairs=count,
    )


def agreement(frame: pd.DataFrame) -> Agreement:
    """Prediction errors of every point that has a simulated and a real row."""
    sim = frame[frame["backend"] == "sim"].set_index("point")
    real = frame[frame["backend"] == "real"].set_index("point")
    rows = []
    both = [p for p in real.index if p in sim.index]
    noise = run_to_run_noise(real.loc[both])  # one run's, pooled over the repeated points
    for point in both:
        s, r = sim.loc[point], real.loc[point]
        rows.append(
            {
                "point": point,
                "label": r["label"],
                "workers": int(r["workers"]),
                "sim_step_time_s": float(s["step_time_mean_s"]),
                "real_step_time_s": float(r["step_time_mean_s"]),
                "step_time_error": relative_error(s["step_time_mean_s"], r["step_time_mean_s"]),
                "sim_throughput": float(s["throughput_samples_per_s"]),
                "real_throughput": float(r["throughput_samples_per_s"]),
                "throughput_error": relative_error(
                    s["throughput_samples_per_s"], r["throughput_samples_per_s"]
                ),
                "real_runs": runs_of(r),
                "real_throughput_ci95": float(r.get("throughput_ci95_samples_per_s", math.nan)),
                "sim_time_to_target_s": number(s, "time_to_target_s"),
                "real_time_to_target_s": number(r, "time_to_target_s"),
                "time_to_target_error": relative_error(
                    number(s, "time_to_target_s"), number(r, "time_to_target_s")
                ),
                "real_time_to_target_ci95_s": number(r, "time_to_target_ci95_s"),
                **inside(s, r, noise),
            }
        )
    pairs = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    throughputs = pairs[["sim_throughput", "real_throughput"]].to_numpy(dtype=float)
    ranked = pairs[np.isfinite(throughputs).all(axis=1)]
    return Agreement(
        pairs=pairs,
        mape_step_time=mape(list(pairs["step_time_error"])),
        mape_throughput=mape(list(pairs["throughput_error"])),
        tau=kendall_tau_b(list(ranked["sim_throughput"]), list(ranked["real_throughput"])),
        target=target_agreement(pairs, real.loc[[p for p in pairs["point"]]]),
        order=throughput_order(pairs, real.loc[[p for p in pairs["point"]]]),
    )
