"""What each worker did and when, for the Gantt-style timeline of one point.

From `trace-<point>.json` when the run wrote one (every phase: compute, push, pull,
allreduce, wait, checkpoint, recover), otherwise from steps.csv (compute = start ->
compute end, communication = compute end -> communication end, wait = -> step end).
Only a window is kept, the first `MAX_STEPS` typical steps after warm-up on at most
`MAX_WORKERS` workers, so that a run of a million steps draws as fast as one of ten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from scenarios import vocab

MAX_STEPS = 12
MAX_WORKERS = 16
#: a trace without a steps.csv window shows its first events only
MAX_TRACE_EVENTS = 4000

#: lanes of a worker's row: compute above, communication (and waiting) below
COMPUTE_LANE, COMM_LANE = 0, 1
#: steps.csv's communication phase, named generically (the file does not say which)
COMMUNICATION = "communication"

_WORKER_THREAD = re.compile(r"worker (\d+)")


@dataclass(frozen=True)
class Timeline:
    """Spans in seconds: parallel arrays, one entry per span inside [start, end]."""

    worker: np.ndarray
    lane: np.ndarray
    phase: list[str]
    begin: np.ndarray
    finish: np.ndarray
    start: float
    end: float
    workers: int  # workers in the run
    source: str  # "trace" or "steps"

    def __len__(self) -> int:
        return len(self.phase)


def window(steps: pd.DataFrame) -> tuple[float, float] | None:
    """[start, end] of the first MAX_STEPS typical measured steps of one point's rows."""
    if steps.empty:
        return None
    measured = steps[~steps["warmup"] & ~steps["lost"]]
    rows = measured if not measured.empty else steps
    start = float(rows["start_s"].min())
    durations = (rows["end_s"] - rows["start_s"]).to_numpy()
    typical = float(np.median(durations)) if len(durations) else 0.0
    if typical <= 0:
        return start, float(rows["end_s"].max())
    return start, min(start + MAX_STEPS * typical, float(rows["end_s"].max()))


def from_steps(steps: pd.DataFrame, bounds: tuple[float, float]) -> Timeline:
    """Compute, communication and wait spans of one point's steps.csv rows in bounds."""
    start, end = bounds
    workers = int(steps["worker"].max()) + 1 if not steps.empty else 0
    rows = steps[
        (steps["end_s"] > start) & (steps["start_s"] < end) & (steps["worker"] < MAX_WORKERS)
    ]
    parts = (
        (vocab.COMPUTE, COMPUTE_LANE, "start_s", "compute_end_s"),
        (COMMUNICATION, COMM_LANE, "compute_end_s", "comm_end_s"),
        (vocab.WAIT, COMM_LANE, "comm_end_s", "end_s"),
    )
    worker, lane, phase, begin, finish = [], [], [], [], []
    for name, where, first, last in parts:
        b = np.clip(rows[first].to_numpy(), start, end)
        f = np.clip(rows[last].to_numpy(), start, end)
        keep = f > b
        worker.append(rows["worker"].to_numpy()[keep].astype(int))
        lane.append(np.full(int(keep.sum()), where))
        phase += [name] * int(keep.sum())
        begin.append(b[keep])
        finish.append(f[keep])
    return Timeline(
        np.concatenate(worker),
        np.concatenate(lane),
        phase,
        np.concatenate(begin),
        np.concatenate(finish),
        start,
        end,
        workers,
        "steps",
    )


def _threads(events: list[Any]) -> dict[tuple[str, str], tuple[int, int]]:
    """(pid, tid) -> (worker, lane) from the trace's thread_name metadata."""
    out = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "M" or e.get("name") != "thread_name":
            continue
        args = e.get("args")
        name = str(args.get("name", "")) if isinstance(args, dict) else ""
        match = _WORKER_THREAD.match(name)
        if match:
            lane = COMM_LANE if name.split()[-1] == "comm" else COMPUTE_LANE
            out[_thread(e)] = (int(match.group(1)), lane)
    return out


def _thread(event: dict[str, Any]) -> tuple[str, str]:
    """An event's (pid, tid), as text: a file may hold any JSON there, a list too."""
    return str(event.get("pid")), str(event.get("tid"))


def from_trace(document: dict[str, Any], bounds: tuple[float, float] | None) -> Timeline:
    """The complete ('X') events of a Chrome trace inside bounds (seconds).

    Threads named 'worker N compute' / 'worker N comm' (as both backends write them) give
    the worker and lane; unnamed threads are numbered in order of appearance."""
    events = document["traceEvents"]
    threads = _threads(events)
    spans = [
        e
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("ts"), int | float)
        and isinstance(e.get("dur"), int | float)
    ]
    if bounds is None:
        first = sorted(spans, key=lambda e: e["ts"])[:MAX_TRACE_EVENTS]
        bounds = (
            (min(e["ts"] for e in first) / 1e6, max((e["ts"] + e["dur"]) for e in first) / 1e6)
            if first
            else (0.0, 0.0)
        )
    start, end = bounds
    unnamed: dict[tuple[str, str], tuple[int, int]] = {}
    worker, lane, phase, begin, finish = [], [], [], [], []
    workers = 0
    for e in spans:
        key = _thread(e)
        where = threads.get(key)
        if where is None:
            where = unnamed.setdefault(key, (len(threads) + len(unnamed), COMPUTE_LANE))
        workers = max(workers, where[0] + 1)
        b, f = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
        if f <= start or b >= end or where[0] >= MAX_WORKERS:
            continue
        worker.append(where[0])
        lane.append(where[1])
        phase.append(str(e.get("name", "")))
        begin.append(max(b, start))
        finish.append(min(f, end))
    return Timeline(
        np.array(worker, dtype=int),
        np.array(lane, dtype=int),
        phase,
        np.array(begin, dtype=float),
        np.array(finish, dtype=float),
        start,
        end,
        workers,
        "trace",
    )
