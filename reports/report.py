"""Build a report from result directories: the data and the plots, ready to render.

`build(dirs)` reads and checks every directory first (one scenario, points paired by id;
see compare.py), so that bad input is refused before anything is drawn or written.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scenarios import vocab
from scenarios.point_ids import describe, names_apart

from . import plots
from .compare import Agreement, agreement, combine
from .load import Run, load_run, read_trace, records
from .timeline import Timeline, from_steps, from_trace, window

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plot:
    """One embedded image: `key` names it in the page (id), `png` holds its bytes."""

    key: str
    title: str
    png: bytes
    caption: str = ""


@dataclass
class Report:
    scenario: str
    runs: list[Run]
    frame: pd.DataFrame  # every results row, with source (index into runs) and label
    agreement: Agreement
    plots: dict[str, Plot] = field(default_factory=dict)
    timelines: list[Plot] = field(default_factory=list)
    #: each point's name in words (`scenarios.point_ids`), by its id
    names: dict[str, str] = field(default_factory=dict)

    @property
    def asynchronous(self) -> pd.DataFrame:
        return self.frame[~self.frame["sync"].astype(bool)]


def capacity_of(run: Run, point: str) -> float:
    """The device memory a point's run had (meta.json `memory`), NaN where not given."""
    memory = run.meta.get("memory")
    entry = memory.get(point) if isinstance(memory, dict) else None
    value = entry.get("capacity_bytes") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, int | float) else math.nan


def _measured(steps: pd.DataFrame) -> pd.DataFrame:
    return steps[~steps["warmup"] & ~steps["lost"]]


def step_durations(run: Run, point: str) -> np.ndarray:
    """Every measured worker-step's duration (end - start), seconds (from a summary
    steps.csv, each step's mean over the workers)."""
    rows = _measured(run.steps_of(point))
    durations = (rows["end_s"] - rows["start_s"]).to_numpy()
    return durations[np.isfinite(durations)]


def staleness_values(run: Run, point: str) -> np.ndarray:
    values = _measured(run.steps_of(point))["staleness"].to_numpy()
    return values[np.isfinite(values)]


def point_names(runs: Sequence[Run]) -> dict[str, str]:
    """Each point's name in words, from its resolved scenario in meta.json; where two
    points would share a name, each keeps its id beside it."""
    named: dict[str, str] = {}
    for run in runs:
        points = run.meta.get("points")
        for point in points if isinstance(points, list) else []:
            resolved = point.get("resolved") if isinstance(point, dict) else None
            if isinstance(resolved, dict) and "id" in point:
                named.setdefault(str(point["id"]), describe(resolved))
    return names_apart(named, str)


def load_runs(directories: Sequence[str | Path]) -> list[Run]:
    return [load_run(d) for d in directories]


def build(directories: Sequence[str | Path], timelines: bool = True) -> Report:
    """Read, check, compare and draw; raises UserError on bad or mismatched inputs."""
    runs = load_runs(directories)
    frame = combine(runs)
    names = point_names(runs)
    frame["name"] = [names.get(str(p), str(p)) for p in frame["point"]]
    report = Report(runs[0].scenario, runs, frame, agreement(frame), names=names)
    rows = records(frame)
    # read every trace before drawing anything, so that a broken one is refused at once
    lines = [timeline_of(runs[r["source"]], str(r["point"])) for r in rows] if timelines else []
    report.plots["scaling"] = Plot(
        "scaling",
        "Throughput and scaling efficiency",
        plots.scaling(frame),
        "One line per strategy; simulated solid, real dashed, dotted the ideal scaling "
        "(linear from the line's fewest workers). Error bars on real points: the step-time "
        "jitter (1.4826 x MAD) relative to the median step time; on simulated points, their "
        "interval where the results carry one (throughput_low/high_samples_per_s).",
    )
    report.plots["breakdown"] = Plot(
        "breakdown",
        "Where the time goes",
        plots.breakdown(frame),
        "Compute, communication and wait as shares of worker time; checkpoint and recovery "
        "as shares of training time (they stall the whole job).",
    )
    report.plots["step-times"] = Plot(
        "step-times",
        "Step-time distributions",
        plots.step_times(frame, [step_durations(runs[r["source"]], r["point"]) for r in rows]),
        "Per worker-step durations of measured steps (steps.csv; where it holds a row per "
        "step, the mean over the workers of each step).",
    )
    asynchronous = report.asynchronous
    if not asynchronous.empty:
        report.plots["staleness"] = Plot(
            "staleness",
            "Staleness of asynchronous updates",
            plots.staleness(
                asynchronous,
                [staleness_values(runs[r["source"]], r["point"]) for r in records(asynchronous)],
            ),
            "Updates applied between a worker's read of the parameters and its update.",
        )
    if any(run.curves is not None for run in runs):
        report.plots["curves"] = Plot(
            "curves",
            "The target metric as training goes",
            plots.curves(frame, [curve_of(runs[r["source"]], str(r["point"])) for r in rows]),
            "Held-out metric at every evaluation (curves.csv; the first replication or "
            "run); simulated solid, real dashed.",
        )
        report.plots["time-to-target"] = Plot(
            "time-to-target",
            "Time to target",
            plots.time_to_target(frame),
            "Per point and backend; a point that did not reach the target has no bar. "
            "The time from the start of the measured steps to the end of the evaluation "
            "that met the target: the steps' time to it plus the evaluations' until then "
            "(a whole run's time is training_time_s + evaluation_time_s).",
        )
    if np.isfinite(frame["peak_memory_bytes"].to_numpy(dtype=float)).any():
        capacity = [capacity_of(runs[r["source"]], str(r["point"])) for r in rows]
        report.plots["memory"] = Plot(
            "memory",
            "Device memory",
            plots.memory(frame, capacity),
            "Per point, the most one device holds at once (weights, gradients, optimizer "
            "slot, activations, buffers), against the device's memory (the tick); red: "
            "does not fit, not timed.",
        )
    for row, (line, source) in zip(rows if timelines else [], lines, strict=True):
        if not row["fits"]:
            continue  # not timed: nothing to draw
        name = plots.row_name(row)
        key = f"timeline-{row['source']}-{row['backend']}-{row['point']}"
        report.timelines.append(Plot(key, name, plots.timeline(line, name), f"from {source}"))
    return report


def curve_of(run: Run, point: str) -> pd.DataFrame:
    """The curves.csv rows of one point (none where the run wrote none)."""
    if run.curves is None:
        return pd.DataFrame(columns=list(vocab.CURVE_COLUMNS))
    return run.curves[run.curves["point"] == point]


def timeline_of(run: Run, point: str) -> tuple[Timeline, str]:
    """The point's timeline window and the file it came from (its trace, else steps.csv)."""
    steps = run.steps_of(point)
    bounds = window(steps)
    trace = run.traces.get(point)
    if trace is not None:
        return from_trace(read_trace(trace), bounds), trace.name
    source = "steps.csv"
    if run.steps_form == vocab.STEPS_SUMMARY:
        source += " (a row per step: the mean worker)"
    return from_steps(steps, bounds or (0.0, 0.0)), source
