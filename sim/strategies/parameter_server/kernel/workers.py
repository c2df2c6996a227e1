"""A worker of the compiled parameter-server engine (`loop.py`): a state
machine (`W_*`, in `calendar.py`) run until it waits for something, as its
SimPy process runs until it yields: its step's start (`steps.py`), pulls,
forward and backward by group, pushes, update and record. With host aggregation the
worker is a host: once its pulls are in, `host_pulled` gives when each group is reduced
(`hosts.py`) and it pushes each then, in place of forward and backward. The loop and
the states run for every step or group are inlined into `run`'s loop (the forward and
backward in the loop itself); the rarer ones are calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .calendar import (
    NETBYTES,
    NORMAL,
    PUSH,
    PUSHED,
    SUPDATED,
    TIMER,
    W_ADMITTED,
    W_APPLY,
    W_BACKWARD,
    W_BACKWARD_DONE,
    W_BARRIER,
    W_BEGIN,
    W_BOUND,
    W_CHECKPOINTED,
    W_COMPUTED,
    W_DISPATCH,
    W_FORWARD,
    W_GATE,
    W_PREVIOUS,
    W_PULLED,
    W_PULLS,
    W_PUSHED,
    W_RECORD,
    WAITNEXT,
    WAWAITED,
    WCOMPUTED,
    WDELAY,
    WG,
    WHEAD,
    WPULL0,
    WPULL1,
    WPUSH0,
    WPUSH1,
    WPUSHED,
    WPUSHES,
    WS,
    WSTALL,
    WSTEP,
    WTAIL,
    WWAITED,
    XJ,
    XLEFT,
    schedule,
)
from .flows import add_flow
from .hosts import host_step
from .steps import (
    apply_update,
    begin_step,
    checkpointed,
    dispatch,
    may_dispatch,
    pass_barrier,
    record_step,
    wait_in,
)
from .transfers import new_transfer, start_pulls


@njit(cache=True, inline="always")
def push_and_wait(w, now, overlap, call_s, parts, latency, inter, wi, wf, fl,  # type: ignore[no-untyped-def]
                  c, slots, slotf, slot_of, heap, seq):
    """A group's backward computed (its push, with overlap), or every group's (every
    push, without): each group's push (ServerGroup.push), a transfer per shard; then the
    next backward, or the wait for every push to arrive (all_of(pushes), at once if they
    all have). Returns whether the worker waits."""
    state = wi[WS, w]
    if state == W_COMPUTED:
        wf[WCOMPUTED, w] = now
        first_g, last_g = parts.shape[0] - 1, -1
        if overlap:
            first_g = -1  # pushed as backward went
        else:
            wf[WPUSH0, w] = now
    else:
        first_g, last_g = wi[WG, w], wi[WG, w] - 1
        if not overlap:
            first_g = -1
        elif np.isnan(wf[WPUSH0, w]):
            wf[WPUSH0, w] = now
    g = first_g
    while g > last_g:
        for j in range(parts.shape[1]):
            size = parts[g, j]
            if size <= 0:
                continue
            slot = new_transfer(PUSH, w, g, c, slots)
            slots[XJ, slot] = j
            slots[XLEFT, slot] = 1
            wi[WPUSHES, w] += 1
            if inter[1, w, j]:
                fl[NETBYTES] += size
            at = (now + call_s) + latency[1, w, j]
            add_flow(w, j, PUSH, size, slot, at, now, slots, slotf, c, slot_of, heap, seq)
        g -= 1
    if state == W_BACKWARD_DONE:
        wi[WG, w] -= 1
        wi[WS, w] = W_BACKWARD
        return False
    wi[WS, w] = W_PUSHED
    if wi[WPUSHED, w] == wi[WPUSHES, w]:
        schedule(heap, seq, now, NORMAL, PUSHED, w, 0)
    else:
        wi[WAWAITED, w] = True
    return True


@njit(cache=True, inline="always")
def pushed(w, step, now, ints, times, wi, wf, steps, heap, seq):  # type: ignore[no-untyped-def]
    """Every push arrived: asynchronous, its own update; synchronous, the wait for the
    step's update. Returns whether the worker waits."""
    wf[WPUSH1, w] = now
    if ints[4] != 0:
        wi[WS, w] = W_APPLY
        if times[2]:
            schedule(heap, seq, now + times[2], NORMAL, TIMER, w, 0)
            return True
        return False
    wi[WS, w] = W_RECORD
    if not steps[SUPDATED, step]:
        wait_in(w, steps[WHEAD], steps[WTAIL], wi[WAITNEXT], step)
        return True
    return False


@njit(cache=True)
def host_pulled(w, step, devices, overlap, times, compute, jitter, wi, wf, hosted):  # type: ignore[no-untyped-def]
    """Host w's pulls are all in (`hosts.py`): `host_step` gives when each group is
    reduced to its first device, which pushes each then, as a worker pushes each group
    after its backward (`W_BACKWARD` from the last group). hosted: the hosts' pulls'
    arrival and reduces' end by group, their devices' compute end and stall, scratch."""
    pull_at, reduced, dev, scratch = hosted
    pulled, ready = host_step(w, wf[WPULL0, w], step, devices, overlap, times[5], times[6],
                              pull_at[w], compute, jitter, scratch, reduced[w], dev)
    wf[WPULL1, w] = pulled
    wf[WPUSH0, w] = ready
    wi[WG, w] = compute.shape[1] - 1
    wi[WS, w] = W_BACKWARD


@njit(cache=True, inline="always")
def resume_worker(w, now, ints, times, parts, latency, inter, compute, jitter,  # type: ignore[no-untyped-def]
                  parts_of_shard, totals, step_ends, rec_int, rec, c, fl, wi, wf, steps, slots,
                  slotf, slot_of, parts_left, pull_triggered, pulled_after, hosted, heap, seq):
    """Runs worker w until it waits again. latency, inter: a pull's (0) and a push's
    (1) latency and whether it leaves the host, per worker and shard; compute: each
    group's forward (0) and backward (1) seconds and bytes (2); jitter: factors (0) and
    delays (1); hosted: with host aggregation (`host_pulled`), the hosts' state."""
    overlap, asynchronous, devices = ints[3] != 0, ints[4] != 0, ints[9]
    reduced, dev = hosted[1], hosted[2]
    while True:
        state = wi[WS, w]
        step = wi[WSTEP, w]
        waits = False
        if state == W_BEGIN:
            begin_step(w, step, now, ints, c, fl, wi, wf, totals)
        elif state == W_BARRIER:
            waits = pass_barrier(w, now, ints[6], c, wi, wf, steps)
        elif state == W_BOUND:
            waits = may_dispatch(w, step, ints, c, wi, steps)
        elif state in (W_PREVIOUS, W_ADMITTED, W_DISPATCH):
            waits = dispatch(w, state, now, times[1], c, wi, wf, heap, seq)
        elif state == W_PULLS:
            waits = start_pulls(w, step, now, overlap, ints, times[0], parts, latency, inter,
                                jitter, parts_of_shard, parts_left, pull_triggered,
                                pulled_after, wi, wf, fl, c, slots, slotf, slot_of, heap, seq)
        elif state == W_GATE and devices > 1:
            host_pulled(w, step, devices, overlap, times, compute, jitter, wi, wf, hosted)
        elif state == W_GATE:
            wf[WSTALL, w] += now - wf[WWAITED, w]
            wi[WS, w] = W_FORWARD
        elif state in (W_FORWARD, W_PULLED):
            g = wi[WG, w]
            if state == W_FORWARD:
                if g == compute.shape[1]:
                    wf[WPULL1, w] = now
                    wi[WG, w] = g - 1
                    wi[WS, w] = W_BACKWARD
                    continue
                wf[WWAITED, w] = now
                wi[WS, w] = W_PULLED
                if not pull_triggered[w, g]:
                    return
            wf[WSTALL, w] += now - wf[WWAITED, w]
            x = compute[0, g] * jitter[0, w, step] + wf[WDELAY, w]
            wf[WDELAY, w] = 0.0
            wi[WG, w] = g + 1
            wi[WS, w] = W_FORWARD
            if x > 0:
                schedule(heap, seq, now + x, NORMAL, TIMER, w, 0)
                return
        elif state == W_BACKWARD:
            g = wi[WG, w]
            if g < 0:
                wi[WS, w] = W_COMPUTED
                continue
            wi[WS, w] = W_BACKWARD_DONE
            if devices > 1:  # a host: group g reduced to its first device
                schedule(heap, seq, reduced[w, g], NORMAL, TIMER, w, 0)
                return
            x = compute[1, g] * jitter[0, w, step] + 0.0
            if x > 0:
                schedule(heap, seq, now + x, NORMAL, TIMER, w, 0)
                return
        elif state in (W_BACKWARD_DONE, W_COMPUTED):
            waits = push_and_wait(w, now, overlap or devices > 1, times[0], parts, latency,
                                  inter, wi, wf, fl, c, slots, slotf, slot_of, heap, seq)
        elif state == W_PUSHED:
            waits = pushed(w, step, now, ints, times, wi, wf, steps, heap, seq)
        elif state == W_APPLY:
            waits = apply_update(w, step, now, ints, times, c, fl, wi, wf, step_ends,
                                 totals, dev, rec_int, rec, heap, seq)
        elif state == W_CHECKPOINTED:
            checkpointed(w, now, c, wi, totals)
        elif state == W_RECORD:
            waits = record_step(w, step, now, asynchronous, devices, dev, c, wi, wf, rec_int,
                                rec, step_ends.shape[0], jitter.shape[2])
        else:
            waits = True
        if waits:
            return
