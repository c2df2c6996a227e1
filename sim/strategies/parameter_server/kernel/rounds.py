"""The synchronous rounds (`SyncRounds.coordinate`) and the asynchronous evaluation
barrier's coordinator of the compiled parameter-server engine (`loop.py`), and
the waiters they let go.
"""

from __future__ import annotations

from numba import njit

from .calendar import (
    BOUNDARY,
    CHECKPOINTS,
    COUNTED,
    EVALUATE,
    EVALUATED,
    GATE_OPEN,
    GLOBALSTEP,
    INIT_ROUNDS,
    NORMAL,
    OPENED,
    ROUND,
    ROUND_TIMER,
    ROUNDSTEP,
    SCOUNT,
    UPDATED,
    schedule,
)


@njit(cache=True)
def coordinate(kind, step, b, now, shards, ints, times, c, steps, totals, step_ends,  # type: ignore[no-untyped-def]
               heap, seq):
    """The rounds' process (SyncRounds.coordinate): its start (`INIT_ROUNDS`), a shard's
    counter of a step (`COUNTED`), every one's (`ROUND`), the update's call and the
    checkpoint (`ROUND_TIMER`, b: 1, 2)."""
    every, update_s, checkpoint_s = ints[2], times[2], times[3]
    phase = -1  # -1: waits for a step's counters
    if kind == INIT_ROUNDS:
        step = -1
        phase = 3
    elif kind == COUNTED:
        steps[SCOUNT, step] += 1
        if step == c[ROUNDSTEP] and steps[SCOUNT, step] == shards:
            schedule(heap, seq, now, NORMAL, ROUND, step, 0)
    elif kind == ROUND:
        phase = 0
    else:
        phase = b
    if phase == 0:
        if update_s:
            schedule(heap, seq, now + update_s, NORMAL, ROUND_TIMER, step, 1)
            phase = -1
        else:
            phase = 1
    if phase == 1:
        done = step + 1
        if every and done % every == 0:
            schedule(heap, seq, now + checkpoint_s, NORMAL, ROUND_TIMER, step, 2)
            phase = -1
        else:
            phase = 2
    if phase == 2:
        if every and (step + 1) % every == 0:
            c[CHECKPOINTS] += 1
            totals[6] = step + 1
            totals[7] = now
        step_ends[step] = now
        c[GLOBALSTEP] = step + 1
        schedule(heap, seq, now, NORMAL, UPDATED, step, 0)
        phase = 3
    if phase == 3 and step + 1 < step_ends.shape[0]:
        c[ROUNDSTEP] = step + 1
        if steps[SCOUNT, c[ROUNDSTEP]] == shards:
            schedule(heap, seq, now, NORMAL, ROUND, c[ROUNDSTEP], 0)


@njit(cache=True)
def evaluation(kind, now, ints, times, c, heap, seq):  # type: ignore[no-untyped-def]
    """The coordinator's evaluation behind the barrier: its start (`EVALUATE`) and end
    (`EVALUATED`: the next boundary, and the open gate's waiters let go)."""
    if kind == EVALUATE:
        schedule(heap, seq, now + times[4], NORMAL, EVALUATED, 0, 0)
    else:
        c[BOUNDARY] += ints[6]
        if c[GATE_OPEN] >= 0:
            schedule(heap, seq, now, NORMAL, OPENED, c[GATE_OPEN], 0)
            c[GATE_OPEN] = -1


@njit(cache=True, inline="always")
def waiters(head, nxt, i, resume):  # type: ignore[no-untyped-def]
    """Queue i's workers, in the order they came, into resume; returns how many."""
    n_resume = 0
    w = head[i]
    while w >= 0:
        resume[n_resume] = w
        n_resume += 1
        w = nxt[w]
    return n_resume
