"""Synchronous parameter servers on the compiled engine in spans of steps, the spans on
threads of their own (`lockstep.py` prepares the job).

Synchronously without backup workers, a step ends with the update every worker waits
for: no flow is in flight, no worker computes, the rounds wait for the next step's
counters. That is the state a run starts from, at a later time, so a run of T steps is
its spans of steps run one after another, each from time zero and then moved to where
the span before it ended (its steps, times and checkpoints moved, its bytes added).
A span takes its steps' columns of the jitter drawn for the run, what is left of the
warm-up (the span holding the first measured step gives the measurement's start), and
the checkpoint interval: spans begin at a multiple of it, so checkpoints fall where the
run's do.

The spans depend on the scenario only (its steps and checkpoint interval: `spans`), not
on the machine, so a scenario gives the same results anywhere; the machine decides how
many run at once: one per core (numba lets go of the GIL in the kernel), as many as
its available memory holds (each span's kernel has arrays of its own). Moving a span's
times rounds them apart from a single run's in their last bits; the records equal the
event engine's to 1e-9 relative all the same (tests/test_ps_spans.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: the fewest steps a span has: each span moves its first step's pulls on the network
#: (later steps replay them) and makes its own arrays, about a step's work
SPAN_STEPS = 50
#: the most spans a run is cut into (each one's first step and arrays are work a single
#: run does once; how many run at once is the machine's: `threads`)
MOST_SPANS = 8

#: a kernel call's records written, records (rec_int, rec), step ends and totals
SpanResult = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
#: a run's records (rec_int, rec), step ends and totals
Joined = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, int], SpanResult]


def spans(sim: Simulation) -> list[tuple[int, int]]:
    """The spans (first step, steps) the run's steps are cut into: one where a step
    may end with flows in flight (backup workers) or the run is asynchronous."""
    strategy = sim.spec.strategy
    total = sim.total_steps
    if not strategy.sync or strategy.backup_workers:
        return [(0, total)]
    count = min(MOST_SPANS, total // SPAN_STEPS)
    every = sim.checkpoint_every or 1
    starts = [0]
    for i in range(1, count):
        first = i * total // count // every * every
        if first > starts[-1]:
            starts.append(first)
    ends = [*starts[1:], total]
    return [(first, end - first) for first, end in zip(starts, ends, strict=True)]


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def available() -> float:
    """Bytes of memory the machine has available (Linux's MemAvailable; inf elsewhere)."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("inf")


def threads(count: int, span_bytes: float) -> int:
    """How many spans run at once: one per core, as many as the memory available holds
    (at least one)."""
    fit = available() / span_bytes  # inf where the memory available is unknown
    return int(max(1, min(count, cores(), fit)))


def run(
    sim: Simulation, ints: np.ndarray, kernel: Kernel, span_bytes: float
) -> Joined:
    """The run's records (rec_int, rec), step ends and totals, as one kernel call over
    every step gives them, from `kernel(factors, delays, ints, steps)` over each span
    (returns rows written, rec_int, rec, step_ends, totals); `span_bytes`: the memory
    a span's kernel takes."""
    n, total, warmup = sim.workers, sim.total_steps, sim.warmup
    factors, delays = sim.stragglers.factors(n, total), sim.stragglers.delays(n, total)
    cut = spans(sim)

    def one(span: tuple[int, int]) -> SpanResult:
        first, steps = span
        mine = ints.copy()
        mine[1] = max(warmup - first, 0)
        columns = slice(first, first + steps)
        return kernel(
            np.ascontiguousarray(factors[:, columns]),
            np.ascontiguousarray(delays[:, columns]),
            mine,
            steps,
        )

    at_once = threads(len(cut), span_bytes)
    if at_once == 1:
        results = [one(span) for span in cut]
    else:
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            results = list(pool.map(one, cut))
    return _joined(cut, results, warmup)


def new_totals() -> np.ndarray:
    """A run's totals before it starts (`sim.strategies.parameter_server.kernel.loop.run`
    lists them): all 0, the measurement's start unknown (NaN)."""
    totals = np.zeros(8)
    totals[0] = np.nan
    return totals


def _joined(
    cut: list[tuple[int, int]], results: list[SpanResult], warmup: int
) -> Joined:
    """The spans' records, step ends and totals, each moved to where its span starts."""
    totals = new_totals()
    start = 0.0  # where the span starts: the end of the one before
    rec_ints, recs, ends = [], [], []
    for (first, steps), (rows, rec_int, rec, step_ends, got) in zip(cut, results, strict=True):
        rec_int, rec = rec_int[:rows], rec[:rows]
        rec_int[:, 1] += first
        rec[:, :4] += start  # start, compute end, communication end, end
        step_ends += start
        if first <= warmup < first + steps:  # the measurement starts in this span
            totals[0], totals[1] = got[0] + start, got[1] + totals[2]
        totals[2:6] += got[2:6]  # bytes on the network, dropped, of them measured, checkpoints
        if got[5]:  # the last checkpoint: steps it holds, when
            totals[6], totals[7] = got[6] + first, got[7] + start
        rec_ints.append(rec_int)
        recs.append(rec)
        ends.append(step_ends)
        start = float(step_ends[-1])
    return np.concatenate(rec_ints), np.concatenate(recs), np.concatenate(ends), totals
