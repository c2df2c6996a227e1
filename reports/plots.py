"""The report's plots, each drawn on its own matplotlib Figure and returned as PNG bytes.

No pyplot: a `Figure` renders through the Agg canvas without global state, so building a
report never opens a window or needs a display.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from scenarios import vocab

from .load import records
from .timeline import COMMUNICATION, MAX_WORKERS, Timeline

DPI = 96
PHASE_COLOURS = {
    vocab.COMPUTE: "#4c72b0",
    vocab.PUSH: "#dd8452",
    vocab.PULL: "#55a868",
    vocab.ALLREDUCE: "#c44e52",
    COMMUNICATION: "#c44e52",
    vocab.WAIT: "#b8b8b8",
    vocab.CHECKPOINT: "#8172b3",
    vocab.RECOVER: "#937860",
    vocab.FORWARD: "#64b5cd",
    vocab.BACKWARD: "#4c72b0",
    vocab.SEND: "#dd8452",
}
OTHER_COLOUR = "#da8bc3"
BACKEND_STYLE = {
    "sim": {"marker": "o", "linestyle": "-"},
    "real": {"marker": "s", "linestyle": "--"},
}

#: the breakdown's parts: (name, colour, share of training time from a results row)
BREAKDOWN = (
    ("compute", PHASE_COLOURS[vocab.COMPUTE], "compute_time_frac"),
    ("communication", PHASE_COLOURS[COMMUNICATION], "comm_time_frac"),
    ("wait", PHASE_COLOURS[vocab.WAIT], "wait_time_frac"),
    ("checkpoint", PHASE_COLOURS[vocab.CHECKPOINT], "checkpoint_time_s"),
    ("recovery", PHASE_COLOURS[vocab.RECOVER], "recovery_time_s"),
)


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def row_name(row: Mapping[str, object]) -> str:
    """A row's point in words (its id where the report has no name for it) and backend."""
    return f"{row.get('name') or row['point']} [{row['backend']}]"


def _colours(labels: Sequence[str]) -> dict[str, str]:
    cycle = [f"C{i}" for i in range(10)]
    return {label: cycle[i % len(cycle)] for i, label in enumerate(dict.fromkeys(labels))}


def scaling(frame: pd.DataFrame) -> bytes:
    """Throughput and scaling efficiency against workers: a line per strategy and backend,
    and dotted, each line's ideal scaling (linear from its fewest workers).

    Real points carry error bars of +-1 robust standard deviation of the step time (jitter)
    relative to its median, carried over to throughput; simulated points their interval
    where the results carry one (results.csv's throughput_low/high), else with
    replications their 95% confidence interval."""
    figure = Figure(figsize=(11, 4.2))
    ax_tp, ax_eff = figure.subplots(1, 2)
    colours = _colours(list(frame["label"]))
    for (label, backend), rows in frame.groupby(["label", "backend"], sort=False):
        rows = rows.sort_values("workers")
        x = rows["workers"].to_numpy()
        tp = rows["throughput_samples_per_s"].to_numpy()
        eff = rows["scaling_efficiency"].to_numpy()
        if backend == "real":
            p50 = rows["step_time_p50_s"].to_numpy()
            spread = np.divide(
                rows["step_time_jitter_s"].to_numpy(), p50, out=np.zeros(len(rows)), where=p50 > 0
            )
        elif "throughput_ci95_samples_per_s" in rows:
            ci = rows["throughput_ci95_samples_per_s"].fillna(0.0).to_numpy()
            spread = np.divide(ci, tp, out=np.zeros(len(rows)), where=tp > 0)
        else:
            spread = np.zeros(len(rows))
        below, above = _error_bars(
            tp, *_interval(rows, "throughput_low_samples_per_s", "throughput_high_samples_per_s"),
            tp * spread,
        )
        style = dict(
            color=colours[str(label)],
            capsize=3,
            label=f"{label} ({backend})",
            **BACKEND_STYLE[str(backend)],
        )
        ax_tp.errorbar(x, tp, yerr=[below, above], **style)  # type: ignore[arg-type]
        share = np.divide(eff, tp, out=np.zeros(len(rows)), where=tp > 0)
        ax_eff.errorbar(x, eff, yerr=[below * share, above * share], **style)  # type: ignore[arg-type]
        if len(x) > 1 and x[0] > 0:
            ideal = tp[0] * x / x[0]
            ax_tp.plot(x, ideal, color=colours[str(label)], linestyle=":", linewidth=1)
    (ideal_line,) = ax_tp.plot([], [], color="0.4", linestyle=":", linewidth=1)
    workers = frame["workers"]
    for ax in (ax_tp, ax_eff):
        if workers.max() >= 4 * max(workers.min(), 1):
            ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(set(workers)))
        ax.set_xticklabels([str(int(w)) for w in sorted(set(workers))])
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
    ax_tp.set_ylim(bottom=0)
    ax_tp.set_ylabel("throughput (samples/s)")
    ax_tp.set_title("Throughput")
    ax_eff.set_ylabel("scaling efficiency")
    ax_eff.set_title("Scaling efficiency")
    ax_eff.set_ylim(0, max(1.05, float(frame["scaling_efficiency"].max()) * 1.05))
    ax_eff.yaxis.set_major_formatter("{x:.0%}")
    ax_eff.legend(fontsize="small", loc="best")
    ax_tp.legend([ideal_line], ["ideal scaling"], fontsize="small", loc="upper left")
    return png(figure)


def _interval(rows: pd.DataFrame, low: str, high: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows' interval on one quantity, from its columns `low` and `high` (NaN where
    a row has none, or the results have no such columns)."""
    ends = [
        pd.to_numeric(rows[c], errors="coerce").to_numpy(float)
        if c in rows
        else np.full(len(rows), np.nan)
        for c in (low, high)
    ]
    return ends[0], ends[1]


def _error_bars(
    values: np.ndarray, low: np.ndarray, high: np.ndarray, otherwise: np.ndarray
) -> list[np.ndarray]:
    """Each value's error bar below and above it: to its interval's ends where it has
    one (`_interval`), else `otherwise` both ways."""
    known = np.isfinite(values) & np.isfinite(low) & np.isfinite(high)
    return [
        np.where(known, np.clip(values - low, 0.0, None), otherwise),
        np.where(known, np.clip(high - values, 0.0, None), otherwise),
    ]


def breakdown_shares(row: Mapping[str, float]) -> list[float]:
    """Compute, communication, wait, checkpoint, recovery as shares of training time.

    The first three are shares of worker time (results.csv's *_time_frac); checkpoint and
    recovery stall the whole job, so their times divide by the training time."""
    training = float(row["training_time_s"])
    shares = []
    for _, _, column in BREAKDOWN:
        value = float(row[column])
        if column.endswith("_s"):
            value = value / training if training > 0 else 0.0
        shares.append(max(0.0, value) if np.isfinite(value) else 0.0)
    return shares


def breakdown(frame: pd.DataFrame) -> bytes:
    """Where the time goes: one stacked bar per point and backend."""
    rows = records(frame)
    figure = Figure(figsize=(11, 1.2 + 0.32 * len(rows)))
    ax = figure.subplots()
    y = np.arange(len(rows))
    left = np.zeros(len(rows))
    shares = np.array([breakdown_shares(r) for r in rows]).reshape(len(rows), len(BREAKDOWN))
    for k, (name, colour, _) in enumerate(BREAKDOWN):
        ax.barh(y, shares[:, k], left=left, color=colour, label=name, height=0.7)
        left += shares[:, k]
    ax.set_yticks(y)
    ax.set_yticklabels([row_name(r) for r in rows], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("share of training time")
    ax.xaxis.set_major_formatter("{x:.0%}")
    ax.set_xlim(0, max(1.0, float(left.max()) if len(left) else 1.0))
    ax.legend(
        ncols=len(BREAKDOWN),
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        fontsize="small",
        frameon=False,
    )
    return png(figure)


def step_times(frame: pd.DataFrame, durations: Sequence[np.ndarray]) -> bytes:
    """Step-time distribution per point and backend: box p25-p75, whiskers p1-p99."""
    rows = records(frame)
    figure = Figure(figsize=(11, 1.2 + 0.32 * len(rows)))
    ax = figure.subplots()
    stats = []
    for row, d in zip(rows, durations, strict=True):
        d = d if len(d) else np.array([float(row["step_time_mean_s"])])
        p1, q1, med, q3, p99 = np.percentile(d * 1e3, [1, 25, 50, 75, 99])
        stats.append(
            {
                "label": row_name(row),
                "whislo": p1,
                "q1": q1,
                "med": med,
                "q3": q3,
                "whishi": p99,
                "mean": float(np.mean(d)) * 1e3,
                "fliers": [],
            }
        )
    ax.bxp(stats, orientation="horizontal", showmeans=True, widths=0.6)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize="small")
    ax.set_xlabel("step time (ms): box p25-p75, line p50, whiskers p1-p99, triangle mean")
    ax.grid(True, axis="x", alpha=0.3)
    return png(figure)


def staleness(frame: pd.DataFrame, values: Sequence[np.ndarray]) -> bytes:
    """Histogram of the staleness of every measured update, one panel per async point."""
    rows = records(frame)
    columns = min(3, len(rows))
    lines = -(-len(rows) // columns)
    figure = Figure(figsize=(11, 2.6 * lines))
    axes = np.atleast_1d(figure.subplots(lines, columns, squeeze=False)).ravel()
    for ax, row, v in zip(axes, rows, values, strict=False):
        top = int(v.max()) if len(v) else 0
        # one bar per staleness value, up to a hundred bars
        bins = np.arange(top + 2) - 0.5 if top < 100 else np.linspace(-0.5, top + 0.5, 101)
        ax.hist(v, bins=bins, color=PHASE_COLOURS[vocab.PUSH])
        ax.set_title(row_name(row), fontsize="small")
        ax.set_xlabel("staleness (updates)")
        ax.set_ylabel("updates")
    for ax in axes[len(rows) :]:
        ax.set_visible(False)
    figure.tight_layout()
    return png(figure)


def timeline(line: Timeline, title: str) -> bytes:
    """Gantt chart: a row per worker, compute above and communication/waiting below."""
    shown = min(line.workers, MAX_WORKERS) or 1
    figure = Figure(figsize=(11, 1.4 + 0.38 * shown))
    ax = figure.subplots()
    order = list(PHASE_COLOURS)  # the vocabulary's order, so every legend reads alike
    phases = sorted(set(line.phase), key=lambda p: (order.index(p) if p in order else 99, p))
    phase = np.array(line.phase, dtype=object)
    for name in phases:
        colour = PHASE_COLOURS.get(name, OTHER_COLOUR)
        mine = phase == name
        for lane in (0, 1):
            for worker in np.unique(line.worker[mine & (line.lane == lane)]):
                pick = mine & (line.lane == lane) & (line.worker == worker)
                b = (line.begin[pick] - line.start) * 1e3
                w = (line.finish[pick] - line.begin[pick]) * 1e3
                ax.broken_barh(
                    list(zip(b, w, strict=True)),
                    (worker + 0.45 * lane - 0.45, 0.42),
                    facecolors=colour,
                    edgecolor="white",
                    linewidth=0.4,
                )
    ax.set_ylim(shown - 0.5, -0.5)
    ax.set_yticks(range(shown))
    ax.set_yticklabels([f"worker {w}" for w in range(shown)], fontsize="small")
    ax.set_xlim(0, (line.end - line.start) * 1e3 or 1.0)
    ax.set_xlabel(f"ms from {line.start:.3f} s (from {line.source})")
    more = f"; first {shown} of {line.workers} workers" if line.workers > shown else ""
    ax.set_title(f"{title}{more}", fontsize="medium")
    handles = [Patch(color=PHASE_COLOURS.get(p, OTHER_COLOUR), label=p) for p in phases]
    if handles:
        ax.legend(
            handles=handles,
            ncols=len(handles),
            loc="lower center",
            bbox_to_anchor=(0.5, 1.08),
            fontsize="small",
            frameon=False,
        )
    return png(figure)


def curves(frame: pd.DataFrame, curves: Sequence[pd.DataFrame]) -> bytes:
    """The target metric against time and against samples trained: a line per point and
    backend (simulated solid, real dashed), each point one colour in both."""
    figure = Figure(figsize=(11, 4.2))
    ax_time, ax_samples = figure.subplots(1, 2)
    colours = _colours([str(p) for p in frame["point"]])
    metric = ""
    for row, curve in zip(records(frame), curves, strict=True):
        if curve.empty:
            continue
        first = curve[curve["replication"] == curve["replication"].min()].sort_values("step")
        metric = str(first["metric"].iloc[0])
        style = dict(color=colours[str(row["point"])], **BACKEND_STYLE[str(row["backend"])])
        ax_time.plot(first["time_s"], first["value"], label=row_name(row), **style)  # type: ignore[arg-type]
        ax_samples.plot(first["samples"], first["value"], **style)  # type: ignore[arg-type]
    for ax, x in ((ax_time, "time from the measured steps' start (s)"), (ax_samples, "samples")):
        ax.set_xlabel(x)
        ax.set_ylabel(f"held-out {metric}")
        ax.grid(True, alpha=0.3)
    ax_time.set_title("Against time")
    ax_samples.set_title("Against samples trained")
    ax_time.legend(fontsize="x-small", loc="best")
    return png(figure)


def time_to_target(frame: pd.DataFrame) -> bytes:
    """Time to target per point and backend, a simulated point's interval as an error
    bar where results.csv carries one (time_to_target_low_s, time_to_target_high_s);
    the fastest point to the target (star) and the point of highest throughput (diamond)
    of each backend marked."""
    figure = Figure(figsize=(11, 0.5 + 0.35 * len(frame)))
    ax = figure.subplots()
    points = list(dict.fromkeys(str(p) for p in frame["point"]))
    y = {p: i for i, p in enumerate(points)}
    for backend, rows in frame.groupby("backend", sort=False):
        shift = -0.2 if backend == "sim" else 0.2
        ys = [y[str(p)] + shift for p in rows["point"]]
        times = rows["time_to_target_s"].to_numpy(dtype=float)
        low, high = _interval(rows, "time_to_target_low_s", "time_to_target_high_s")
        xerr = _error_bars(times, low, high, np.zeros(len(rows)))
        known = np.isfinite(times) & np.isfinite(low) & np.isfinite(high)
        ax.barh(
            ys,
            np.nan_to_num(times),
            height=0.38,
            label=str(backend),
            color="C0" if backend == "sim" else "C1",
            xerr=xerr if known.any() else None,
            error_kw={"ecolor": "0.3", "capsize": 2, "lw": 0.8},
        )
        names = [str(p) for p in rows["point"]]
        if np.isfinite(times).any():
            best = int(np.nanargmin(times))
            ax.plot(times[best], y[names[best]] + shift, "k*", ms=12)
        fastest = int(np.argmax(rows["throughput_samples_per_s"].to_numpy(dtype=float)))
        ax.plot(0, y[names[fastest]] + shift, "kD", ms=7)
    words = dict(zip(frame["point"].astype(str), frame.get("name", frame["point"]).astype(str),
                     strict=True))  # fmt: skip
    ax.set_yticks(range(len(points)))
    ax.set_yticklabels([words[p] for p in points], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("time to target (s); bars on simulated points: their interval")
    ax.legend(fontsize="small", loc="best", title="* fastest to target, ◆ highest throughput")
    figure.tight_layout()
    return png(figure)


def memory(frame: pd.DataFrame, capacity: Sequence[float]) -> bytes:
    """Each point's peak device memory (GiB) as a bar, its device's capacity as a tick;
    a point that does not fit in red."""
    figure = Figure(figsize=(11, 0.6 + 0.32 * len(frame)))
    ax = figure.subplots()
    peaks = frame["peak_memory_bytes"].to_numpy(dtype=float) / 2**30
    fits = frame["fits"].to_numpy(dtype=bool)
    ys = np.arange(len(frame))
    colours = ["C0" if ok else "#c44e52" for ok in fits]
    ax.barh(ys, np.nan_to_num(peaks), height=0.6, color=colours)
    cap = np.asarray(capacity, dtype=float) / 2**30
    shown = np.isfinite(cap)
    ax.plot(cap[shown], ys[shown], "k|", ms=14, mew=2)
    ax.set_yticks(ys)
    ax.set_yticklabels([row_name(r) for r in records(frame)], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("GiB per device at its peak (tick: the device's memory)")
    return png(figure)
