"""What a worker of the compiled parameter-server engine (`loop.py`) does
around its step's compute: its start (`Simulation.begin_step`, the evaluation barrier,
the SSP bound, the previous step's update), its own update when asynchronous
(`Simulation.apply_update`, the chief's checkpoint) and its record (`Simulation.record`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .calendar import (
    ADMITTED,
    BOUNDARY,
    CHECKPOINTS,
    COMPLETED,
    DISPATCHED,
    EVALUATE,
    FINISHED,
    GATE_OPEN,
    GATENEXT,
    GATES,
    GHEAD,
    GLOBALSTEP,
    GTAIL,
    LASTHELD,
    MEASURED,
    NETBYTES,
    NORMAL,
    NSSP,
    ROWS,
    SHORT,
    SSPIT,
    SSPW,
    SUPDATED,
    TIMER,
    URGENT,
    W_ADMITTED,
    W_BARRIER,
    W_BEGIN,
    W_BOUND,
    W_CHECKPOINTED,
    W_DISPATCH,
    W_DONE,
    W_PREVIOUS,
    W_PULLS,
    W_RECORD,
    WAITNEXT,
    WCOMPUTED,
    WG,
    WHEAD,
    WITER,
    WPULL0,
    WPULL1,
    WPUSH0,
    WPUSH1,
    WRECORDED,
    WS,
    WSTALE,
    WSTALL,
    WSTART,
    WSTEP,
    WTAIL,
    WVERSION,
    may_start,
    schedule,
)


@njit(cache=True, inline="always")
def wait_in(w, head, tail, nxt, i):  # type: ignore[no-untyped-def]
    """Worker w joins the end of queue i (its first and last in head, tail; each
    worker's next in nxt)."""
    nxt[w] = -1
    if tail[i] < 0:
        head[i] = w
    else:
        nxt[tail[i]] = w
    tail[i] = w


@njit(cache=True, inline="always")
def begin_step(w, step, now, ints, c, fl, wi, wf, totals):  # type: ignore[no-untyped-def]
    """Simulation.begin_step: the measurement starts at the first step past warm-up."""
    asynchronous = ints[4] != 0
    if not asynchronous and not c[MEASURED] and step >= ints[1]:
        c[MEASURED] = True
        totals[0] = now
        totals[1] = fl[NETBYTES]
    wf[WSTART, w] = now
    wf[WSTALL, w] = 0.0
    wi[WS, w] = W_BARRIER if asynchronous else W_DISPATCH


@njit(cache=True)
def pass_barrier(w, now, evaluate_every, c, wi, wf, steps):  # type: ignore[no-untyped-def]
    """EvaluationBarrier.admit: none past the next evaluation till it is done; returns
    whether the worker waits at the gate."""
    wi[WS, w] = W_BOUND
    if evaluate_every and c[DISPATCHED] >= c[BOUNDARY]:
        if c[GATE_OPEN] < 0:
            c[GATE_OPEN] = c[GATES]
            c[GATES] += 1
        wait_in(w, steps[GHEAD], steps[GTAIL], wi[GATENEXT], c[GATE_OPEN])
        wi[WS, w] = W_BARRIER
        return True
    if evaluate_every:
        wf[WSTART, w] = now  # after a wait, the step starts now
        c[DISPATCHED] += 1
    return False


@njit(cache=True, inline="always")
def may_dispatch(w, step, ints, c, wi, steps):  # type: ignore[no-untyped-def]
    """The SSP bound, then SyncRounds.await_previous; returns whether the worker waits."""
    bound = ints[5]
    wi[WS, w] = W_DISPATCH
    if bound >= 0 and not may_start(wi, w, step, bound):
        wi[SSPW, c[NSSP]] = w
        wi[SSPIT, c[NSSP]] = step
        c[NSSP] += 1
        wi[WS, w] = W_ADMITTED
        return True
    if ints[4] == 0 and step > 0 and not steps[SUPDATED, step - 1]:
        wi[WS, w] = W_PREVIOUS
        wait_in(w, steps[WHEAD], steps[WTAIL], wi[WAITNEXT], step - 1)
        return True
    return False


@njit(cache=True, inline="always")
def dispatch(w, state, now, dispatch_s, c, wi, wf, heap, seq):  # type: ignore[no-untyped-def]
    """Resumed by the previous step's update or the SSP bound: the step starts now;
    then the closure's dispatch. Returns whether the worker waits for it."""
    if state != W_DISPATCH:
        wf[WSTART, w] = now
    wi[WVERSION, w] = c[COMPLETED]
    wf[WPULL0, w] = now
    wi[WS, w] = W_PULLS
    if dispatch_s:
        schedule(heap, seq, now + dispatch_s, NORMAL, TIMER, w, 0)
        return True
    return False


@njit(cache=True)
def checkpointed(w, now, c, wi, totals):  # type: ignore[no-untyped-def]
    """Asynchronous: the chief's checkpoint is written."""
    c[CHECKPOINTS] += 1
    c[LASTHELD] = wi[WG, w]
    totals[6] = c[LASTHELD]
    totals[7] = now
    wi[WS, w] = W_RECORD


@njit(cache=True)
def apply_update(w, step, now, ints, times, c, fl, wi, wf, step_ends, totals, dev, rec_int,  # type: ignore[no-untyped-def]
                 rec, heap, seq):
    """Asynchronous: Simulation.apply_update, then the chief's checkpoint if one is due;
    returns whether the worker waits for it. A host's devices but its chief record
    their step now (the chief's checkpoint stalls the chief alone)."""
    warmup, every, bound, evaluate_every = ints[1], ints[2], ints[5], ints[6]
    total = step_ends.shape[0]
    wi[WSTALE, w] = c[COMPLETED] - wi[WVERSION, w]
    if c[COMPLETED] < total:
        step_ends[c[COMPLETED]] = now
        c[COMPLETED] += 1
        if not c[MEASURED] and c[COMPLETED] >= warmup:
            c[MEASURED] = True
            totals[0] = now
            totals[1] = fl[NETBYTES]
        if c[COMPLETED] >= total:
            schedule(heap, seq, now, NORMAL, FINISHED, 0, 0)
    wi[WITER, w] = step + 1
    if bound >= 0:
        # StalenessBound.release: wake the waiters now within the bound
        kept = 0
        for i in range(c[NSSP]):
            if may_start(wi, wi[SSPW, i], wi[SSPIT, i], bound):
                schedule(heap, seq, now, NORMAL, ADMITTED, wi[SSPW, i], 0)
            else:
                wi[SSPW, kept] = wi[SSPW, i]
                wi[SSPIT, kept] = wi[SSPIT, i]
                kept += 1
        c[NSSP] = kept
    if evaluate_every and c[COMPLETED] == c[BOUNDARY]:
        # EvaluationBarrier.applied: the evaluation starts (a process)
        schedule(heap, seq, now, URGENT, EVALUATE, 0, 0)
    wi[WS, w] = W_RECORD
    if ints[9] > 1 and c[COMPLETED] >= total:
        # a host's devices record once its update's event is processed: after the
        # run's end, the last update's, at the same instant
        wi[WS, w] = W_DONE
        return True
    if w == 0 and every and c[COMPLETED] // every > c[LASTHELD] // every:
        if ints[9] > 1:
            write_records(w, step, now, 1, ints[9], ints[9], dev, c, wi, wf, rec_int, rec)
            wi[WRECORDED, w] = 1
        wi[WG, w] = c[COMPLETED]  # the updates the checkpoint holds
        wi[WS, w] = W_CHECKPOINTED
        schedule(heap, seq, now + times[3], NORMAL, TIMER, w, 0)
        return True
    return False


@njit(cache=True)
def write_records(w, step, now, first, last, devices, dev, c, wi, wf, rec_int, rec):  # type: ignore[no-untyped-def]
    """Simulation.record of worker w's step, or of a host's devices `first` .. `last` - 1
    (`devices` > 1), each with its compute end and stall (`dev`): the pull and push
    spans, exposed beyond compute."""
    rows = c[ROWS]
    if rows + last - first > rec.shape[0]:
        raise RuntimeError("more records than the compiled engine made room for")
    pull_start, pull_end = wf[WPULL0, w], wf[WPULL1, w]
    push_start, push_end = wf[WPUSH0, w], wf[WPUSH1, w]
    end = now
    if np.isnan(push_start):
        push_start = end
    for d in range(first, last):
        worker, compute_end, stall = w, wf[WCOMPUTED, w], wf[WSTALL, w]
        if devices > 1:
            worker = w * devices + d
            compute_end, stall = dev[0, worker], dev[1, worker]
        exposed = 0.0
        exposed += max(0.0, min(pull_end, end) - max(pull_start, compute_end))
        exposed += max(0.0, min(push_end, end) - max(push_start, compute_end))
        rec_int[rows, 0] = worker
        rec_int[rows, 1] = step
        rec_int[rows, 2] = wi[WSTALE, w]
        rec[rows, 0] = wf[WSTART, w]
        rec[rows, 1] = compute_end
        rec[rows, 2] = max(pull_end, push_end)
        rec[rows, 3] = end
        rec[rows, 4] = exposed + stall
        rec[rows, 5] = stall
        rows += 1
    c[ROWS] = rows


@njit(cache=True)
def record_step(w, step, now, asynchronous, devices, dev, c, wi, wf, rec_int, rec, total,  # type: ignore[no-untyped-def]
                drawn):
    """Simulation.record (a host's: of each of its devices not recorded yet), then the
    worker's next step (returns whether it has none). `drawn`: the steps whose factors
    and delays were drawn; a worker past them stops the run short (`c[SHORT]`)."""
    last = 1 if wi[WRECORDED, w] else devices
    wi[WRECORDED, w] = 0
    write_records(w, step, now, 0, last, devices, dev, c, wi, wf, rec_int, rec)
    following = step + 1 if asynchronous else max(step + 1, c[GLOBALSTEP])
    if following >= total:
        wi[WS, w] = W_DONE
        return True
    if following >= drawn:
        c[SHORT] = 1
        wi[WS, w] = W_DONE
        return True
    wi[WSTEP, w] = following
    wi[WS, w] = W_BEGIN
    return False
