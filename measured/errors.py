"""How far the simulator's predictions have been from measurements: the interval every
simulated point carries (`simulate`'s results.csv, `trainscale plan`).

Four tables, data files beside this module:

- `errors-published.yaml` (written by `make validate-published`) and `errors-llm.yaml`
  (`make validate-llm`): every published throughput figure's signed relative error,
  (simulated - published) / published, with what decides it (the strategy's kind, the
  network's protocol, where the communication runs: inside one host or between hosts,
  and the devices) and its source.
- `errors-localhost.yaml` (`make validate`): the throughput error of every calibrated
  point of the validation on this machine, with its kind and runs, and the runs' pooled
  noise: the model's own error in `compare`'s interval (`machine_error`).
- `errors-target.yaml`: the signed relative error of the updates to a target,
  (simulated - measured) / measured, over the points of the time-to-target validation
  (docs/validation.md).

A point's class is the most specific of (kind, protocol, where, scale band), (kind,
protocol, where), (kind, protocol) and (kind) that holds at least `CLASS_MIN` figures;
where even its kind holds fewer, every figure pooled (`all`). A point of a kind no figure
has, or on more than `SCALE_REACH` times the devices of its kind's largest figure, is
outside every validated range: it gets no interval, and the class says why.

The interval, at `LEVEL` (90%): the class's errors' mean +- t(0.95, n - 1) x their
standard deviation x sqrt(1 + 1/n), a prediction interval for one more figure of the
class (Student's t, the class's errors taken as draws of one distribution). It is
asymmetric about the prediction where the class's errors are: most classes' mean error is
positive (the simulator predicts faster than published). A time at throughput error e is
off by the factor 1 + e (a throughput predicted 5% high is a time 5% short: the truth is
the prediction x 1.05), a throughput by 1 / (1 + e), and a time to target by
(1 + e) / (1 + u) for the updates' error u (the updates' extremes).

A calibrated point (`cluster.profile`) is predicted from this machine's measurements, not
the catalog: its class is `calibration`, its interval the spread of the predictions made
from each round of its calibration (`calibrated`), where the calibration was measured more
than once (`run-real --recalibrate`, which `compare` runs).

`coverage()` tests the rule on the figures themselves, leaving each source out in turn:
the classes rebuilt without it, its figures checked against their intervals.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
PUBLISHED_ERRORS = HERE / "errors-published.yaml"
LLM_ERRORS = HERE / "errors-llm.yaml"
TARGET_ERRORS = HERE / "errors-target.yaml"
LOCALHOST_ERRORS = HERE / "errors-localhost.yaml"

#: the share of further figures an interval is meant to hold
LEVEL = 0.90
#: figures a class needs before its own errors make its interval
CLASS_MIN = 10
#: devices past a kind's largest figure, as a multiple of it, that no figure covers
SCALE_REACH = 2.0
#: scale bands (devices, upper ends)
BANDS = (8, 64, 512)
#: Student's t, 0.95 quantile (a two-sided 90% interval), by degrees of freedom (any
#: statistics table); between entries linear in 1/df, the normal's 1.645 beyond
T_95 = {
    1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
    9: 1.833, 10: 1.812, 11: 1.796, 12: 1.782, 13: 1.771, 14: 1.761, 15: 1.753,
    16: 1.746, 17: 1.740, 18: 1.734, 19: 1.729, 20: 1.725, 25: 1.708, 30: 1.697,
    40: 1.684, 60: 1.671, 120: 1.658,
}  # fmt: skip


def t_95(df: int) -> float:
    """Student's t 0.95 quantile for `df` degrees of freedom (`T_95`)."""
    if df in T_95:
        return T_95[df]
    known = sorted(T_95)
    if df > known[-1]:
        lo, hi, t_lo, t_hi = known[-1], math.inf, T_95[known[-1]], 1.645
    else:
        lo = max(k for k in known if k < df)
        hi = min(k for k in known if k > df)
        t_lo, t_hi = T_95[lo], T_95[hi]
    share = (1 / lo - 1 / df) / (1 / lo - (0 if hi == math.inf else 1 / hi))
    return t_lo + (t_hi - t_lo) * share


@dataclass(frozen=True)
class Figure:
    """One published figure's error and what decides it."""

    source: str
    kind: str
    protocol: str
    where: str  # inside (one host) | between (hosts)
    devices: int
    error: float
    scenario: str = ""

    @property
    def band(self) -> str:
        return band_of(self.devices)


def band_of(devices: int) -> str:
    """The scale band of a point of `devices` devices: 1-8, 9-64, 65-512, 513+."""
    low = 1
    for top in BANDS:
        if devices <= top:
            return f"{low}-{top}"
        low = top + 1
    return f"{low}+"


@dataclass(frozen=True)
class Point:
    """What decides a point's error: its kind, protocol, where it communicates, devices."""

    kind: str
    protocol: str
    where: str
    devices: int

    @classmethod
    def of(cls, spec: Any) -> Point:
        """A scenario point's (a `ScenarioSpec`)."""
        cluster = spec.cluster
        where = "inside" if cluster.hosts == 1 else "between"
        return cls(spec.strategy.kind, cluster.network.protocol, where, spec.workers)


@dataclass(frozen=True)
class Interval:
    """The factors a predicted time is multiplied by for the interval's ends, the class
    of figures they come from and how many; `low` and `high` nan where no figure covers
    the point (`name` says why)."""

    low: float
    high: float
    name: str
    figures: int
    to_target: bool = False
    unit: str = "published figures"  # what `figures` counts

    @property
    def known(self) -> bool:
        return not math.isnan(self.low)

    @property
    def basis(self) -> str:
        """The class in words: its name and how many figures back it."""
        if not self.known:
            return self.name
        basis = f"{self.name} ({self.figures} {self.unit})"
        return basis + (" x updates to target" if self.to_target else "")

    def around(self, value: float) -> tuple[float, float]:
        """The interval of a predicted time (or what grows with it: cost, energy)."""
        return value * self.low, value * self.high

    def of_throughput(self, value: float) -> tuple[float, float]:
        """The interval of a predicted throughput."""
        return value / self.high, value / self.low


@functools.cache
def figures() -> tuple[Figure, ...]:
    """Every published figure's error (both tables)."""
    found: list[Figure] = []
    for path in (PUBLISHED_ERRORS, LLM_ERRORS):
        if path.exists():
            found += [Figure(**row) for row in yaml.safe_load(path.read_text())["figures"]]
    return tuple(found)


@functools.cache
def _target_errors() -> tuple[float, ...]:
    data = yaml.safe_load(TARGET_ERRORS.read_text())
    return tuple(float(u) for u in data["updates_to_target"]["errors"])


def class_of(point: Point, pool: Sequence[Figure]) -> tuple[str, list[float]]:
    """The point's class among `pool`: its name and errors; ("", []) for a point outside
    every validated range, its name then saying why."""
    own = [f for f in pool if f.kind == point.kind]
    if not own:
        return f"unvalidated: no published figure of kind {point.kind}", []
    largest = max(f.devices for f in own)
    if point.devices > SCALE_REACH * largest:
        return (
            f"unvalidated: {point.devices} devices, beyond {SCALE_REACH:g}x the largest "
            f"{point.kind} figure's {largest}"
        ), []
    keys = (
        ("protocol", "where", "band"),
        ("protocol", "where"),
        ("protocol",),
        (),
    )
    mine = {"protocol": point.protocol, "where": point.where, "band": band_of(point.devices)}
    for names in keys:
        members = [f for f in own if all(getattr(f, n) == mine[n] for n in names)]
        if len(members) >= CLASS_MIN:
            return "/".join([point.kind, *(mine[n] for n in names)]), [f.error for f in members]
    return "all", [f.error for f in pool]


def bounds(errors: Sequence[float]) -> tuple[float, float]:
    """The `LEVEL` prediction interval of one more error of the class: mean +- t s
    sqrt(1 + 1/n)."""
    n = len(errors)
    mean = sum(errors) / n
    spread = math.sqrt(sum((e - mean) ** 2 for e in errors) / (n - 1)) if n > 1 else 0.0
    half = t_95(max(n - 1, 1)) * spread * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def interval_of(
    point: Point, to_target: bool = False, pool: Sequence[Figure] | None = None
) -> Interval:
    """The interval of a time predicted for `point` (from the tables, or from `pool`);
    to a target, widened by the updates' errors."""
    name, errors = class_of(point, figures() if pool is None else pool)
    if not errors:
        return Interval(math.nan, math.nan, name, 0, to_target)
    low, high = bounds(errors)
    low, high = 1 + low, 1 + high
    if to_target:
        updates = _target_errors()
        low, high = low / (1 + max(updates)), high / (1 + min(updates))
    return Interval(low, high, name, len(errors), to_target)


def interval(spec: Any, to_target: bool = False, rounds: Sequence[float] = ()) -> Interval:
    """The interval of a time predicted for a scenario point (a `ScenarioSpec`); a
    calibrated point's (`cluster.profile`) from its calibration's `rounds` instead
    (`calibrated`)."""
    if spec.cluster.profile is not None:
        return calibrated(rounds, to_target)
    return interval_of(Point.of(spec), to_target)


#: the class of a calibrated point
CALIBRATION = "calibration"


def calibrated(rounds: Sequence[float], to_target: bool = False) -> Interval:
    """The interval of a time predicted from a calibration whose probes were measured
    `len(rounds)` times (`Profile.rounds`): `rounds` the throughputs predicted from each
    measurement alone. Where one more measurement's prediction would fall, at `LEVEL`:
    the prediction x (1 +- t(0.95, k - 1) x their relative standard deviation x
    sqrt(1 + 1/k)). What it leaves out, the runs' own spread and the model's error on
    this machine, `compare` adds from the runs (reports/intervals.py, `measured_interval`).
    A calibration measured once has no spread to tell: no interval."""
    k = len(rounds)
    return spread_of(k, relative_sd(rounds) if k > 1 else math.nan, to_target)


def spread_of(k: int, relative: float, to_target: bool = False) -> Interval:
    """`calibrated`'s interval from the rounds' count k and the relative standard
    deviation of their predictions."""
    if k < 2 or not math.isfinite(relative):
        return Interval(
            math.nan,
            math.nan,
            f"{CALIBRATION}: measured once, its spread unknown (compare measures it again "
            "beside the runs)",
            max(k, 1),
            to_target,
            "calibration rounds",
        )
    half = t_95(k - 1) * relative * math.sqrt(1 + 1 / k)
    low, high = 1 / (1 + half), (1 / (1 - half) if half < 1 else math.inf)
    if to_target:
        updates = _target_errors()
        low, high = low / (1 + max(updates)), high / (1 + min(updates))
    return Interval(low, high, CALIBRATION, k, to_target, "calibration rounds")


def relative_sd(values: Sequence[float]) -> float:
    """The sample standard deviation of `values` over their mean."""
    mean = statistics.fmean(values)
    if len(values) < 2 or mean <= 0:
        return math.nan
    return statistics.stdev(values) / mean


def of_row(spec: Any, row: dict[str, Any], to_target: bool = False) -> Interval:
    """The interval of a simulated point from its spec and its results row: a calibrated
    point's from the rounds its row counts and their spread, any other's from the tables."""
    if spec.cluster.profile is None:
        return interval(spec, to_target)
    counted = _number(row.get("interval_figures"))
    k = int(counted) if math.isfinite(counted) else 0
    relative = _number(row.get("throughput_calibration_sd_samples_per_s")) / _number(
        row.get("throughput_samples_per_s")
    )
    return spread_of(k, relative, to_target)


@dataclass(frozen=True)
class MachineError:
    """The model's own error on calibrated points of this machine, from `make validate`'s
    points (`errors-localhost.yaml`): the class (the strategy's kind where it has at least
    `CLASS_MIN` points, else `all`), its points, their mean error, and the variance of the
    model's error: their errors' variance less what the runs' noise put into it then
    (the pooled noise squared over each point's runs, averaged), never below 0."""

    name: str
    figures: int
    mean: float
    variance: float


def machine_error(kind: str) -> MachineError | None:
    """`MachineError` of a calibrated point of `kind`; None without a table."""
    if not LOCALHOST_ERRORS.exists():
        return None
    data = yaml.safe_load(LOCALHOST_ERRORS.read_text())
    rows = data["figures"]
    own = [r for r in rows if r["kind"] == kind]
    members, name = (own, kind) if len(own) >= CLASS_MIN else (rows, "all")
    if len(members) < 2:
        return None
    errors = [float(r["error"]) for r in members]
    noise = statistics.fmean(float(data["noise"]) ** 2 / int(r["runs"]) for r in members)
    return MachineError(
        f"this machine's {name}",
        len(errors),
        statistics.fmean(errors),
        max(0.0, statistics.variance(errors) - noise),
    )


#: a to-target figure's column and its interval's (low, high) columns
_TO_TARGET = (
    ("time_to_target_s", "time_to_target_low_s", "time_to_target_high_s"),
    ("cost_to_target_usd", "cost_to_target_low_usd", "cost_to_target_high_usd"),
    ("energy_to_target_kwh", "energy_to_target_low_kwh", "energy_to_target_high_kwh"),
)


def columns(spec: Any, row: dict[str, Any], rounds: Sequence[float] = ()) -> dict[str, Any]:
    """A simulated point's interval columns (`vocab.INTERVAL_COLUMNS`) from its row (and,
    calibrated, the throughputs its calibration's rounds predict): empty ends where its
    figure is, or where no figure covers the point."""
    band = interval(spec, rounds=rounds)
    out: dict[str, Any] = {
        "interval_class": band.name,
        "interval_figures": band.figures,
        "interval_level": LEVEL,
    }
    throughput = _number(row.get("throughput_samples_per_s"))
    step = _number(row.get("step_time_mean_s"))
    low, high = band.of_throughput(throughput)
    out["throughput_low_samples_per_s"], out["throughput_high_samples_per_s"] = low, high
    out["step_time_low_s"], out["step_time_high_s"] = band.around(step)
    to_target = interval(spec, to_target=True, rounds=rounds)
    for figure, low_name, high_name in _TO_TARGET:
        out[low_name], out[high_name] = to_target.around(_number(row.get(figure)))
    spread = relative_sd(rounds) if len(rounds) > 1 else math.nan
    out["throughput_calibration_sd_samples_per_s"] = spread * throughput
    return out


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


@dataclass(frozen=True)
class Coverage:
    """Leave-one-source-out: each figure against the interval built without its source."""

    held: int  # figures inside their interval
    tested: int  # figures with an interval
    uncovered: int  # figures outside every validated range once their source is out
    misses: tuple[tuple[Figure, float, float], ...]  # (figure, low, high) of the misses
    width: float  # the intervals' mean width (high - low of the error)

    @property
    def share(self) -> float:
        return self.held / self.tested if self.tested else math.nan


def coverage(pool: Iterable[Figure] | None = None) -> Coverage:
    """How often a figure falls inside the interval its class gives once its source is
    left out of every class."""
    pool = tuple(figures() if pool is None else pool)
    held = tested = uncovered = 0
    misses = []
    widths = []
    for f in pool:
        others = [g for g in pool if g.source != f.source]
        band = interval_of(Point(f.kind, f.protocol, f.where, f.devices), pool=others)
        if not band.known:
            uncovered += 1
            continue
        low, high = band.low - 1, band.high - 1
        tested += 1
        widths.append(high - low)
        if low <= f.error <= high:
            held += 1
        else:
            misses.append((f, low, high))
    width = sum(widths) / len(widths) if widths else math.nan
    return Coverage(held, tested, uncovered, tuple(misses), width)


def table(rows: Iterable[dict[str, Any]], header: str, **fields: Any) -> str:
    """An errors table as its file holds it: the header's comment lines, `fields` (what
    the table holds besides its figures), then one figure a line."""
    comments = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    body = yaml.safe_dump(
        {**fields, "figures": list(rows)}, default_flow_style=None, sort_keys=False, width=10**6
    )
    return comments + body
