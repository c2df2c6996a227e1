"""The transfers of the compiled parameter-server engine (`loop.py`): a
worker's pulls (`ServerGroup.pull`) made into flows that wait for their start, a new
transfer (pushes: `workers.py`), and a transfer's arrival (`BATCH`):
counted at its worker and, for a push of a synchronous step, at its shard's counter
(`SyncRounds.counter`). Every function here is inlined into `run`'s loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .calendar import (
    BATCH,
    BFREE,
    COUNTED,
    DROPPED,
    DROPPEDM,
    GATE,
    NBFREE,
    NETBYTES,
    NEXTID,
    NORMAL,
    PULL,
    PULLS,
    PULLS_RECORDED,
    PULLS_REPLAYED,
    PUSH,
    PUSHED,
    W_FORWARD,
    W_GATE,
    W_PULLED,
    WAWAITED,
    WDELAY,
    WDROPPED,
    WG,
    WPULL0,
    WPULLS,
    WPUSH0,
    WPUSHED,
    WPUSHES,
    WS,
    WSTEP,
    WWAITED,
    XDIR,
    XG,
    XID,
    XJ,
    XLEFT,
    XW,
    schedule,
)
from .flows import add_flow


@njit(cache=True, inline="always")
def new_transfer(direction, w, g, c, slots):  # type: ignore[no-untyped-def]
    """A free transfer slot, numbered in the order transfers are made."""
    if c[NBFREE] == 0:
        raise RuntimeError("more transfers than the compiled engine made room for")
    slot = slots[BFREE, c[NBFREE] - 1]
    c[NBFREE] -= 1
    slots[XID, slot] = c[NEXTID]
    c[NEXTID] += 1
    slots[XDIR, slot] = direction
    slots[XW, slot] = w
    slots[XG, slot] = g
    return slot


@njit(cache=True, inline="always")
def start_pulls(w, step, now, overlap, ints, call_s, parts, latency, inter, jitter,  # type: ignore[no-untyped-def]
                parts_of_shard, parts_left, pull_triggered, pulled_after, wi, wf, fl, c,
                slots, slotf, slot_of, heap, seq):
    """Every group's pull (ServerGroup.pull): one transfer each, a flow per shard, or
    past the first step where its pulls are replayed (`PULLS`), its arrival at the
    first step's time after the pulls' start; then the first forward, or (without
    overlap, or a host: `hosts.py`) the wait for every pull. Returns whether the worker
    waits."""
    groups, shards = parts.shape
    if c[PULLS] == PULLS_RECORDED and step > 0:
        c[PULLS] = PULLS_REPLAYED  # the first step's pulls have all arrived
    replayed = c[PULLS] == PULLS_REPLAYED
    for g in range(groups):
        pull_triggered[w, g] = False
    wi[WPULLS, w] = 0
    wi[WPUSHES, w] = 0
    wi[WPUSHED, w] = 0
    wi[WAWAITED, w] = False
    wi[WDROPPED, w] = False
    wf[WPUSH0, w] = np.nan
    for j in range(shards):
        parts_left[w, j] = parts_of_shard[j]
    for g in range(groups):
        slot = new_transfer(PULL, w, g, c, slots)
        flows = 0
        moved = 0.0
        for j in range(shards):
            if parts[g, j] > 0:
                flows += 1
                if inter[0, w, j]:
                    moved += parts[g, j]
        slots[XLEFT, slot] = flows
        if flows == 0:  # nothing to move: done at once
            pull_triggered[w, g] = True
            schedule(heap, seq, now, NORMAL, BATCH, slot, 0)
            continue
        fl[NETBYTES] += moved
        if replayed:
            schedule(heap, seq, wf[WPULL0, w] + pulled_after[w, g], NORMAL, BATCH, slot, 0)
            continue
        base = now + call_s
        for j in range(shards):
            if parts[g, j] <= 0:
                continue
            at = base + latency[0, w, j]
            add_flow(w, j, PULL, parts[g, j], slot, at, now, slots, slotf, c,
                     slot_of, heap, seq)
    wf[WDELAY, w] = jitter[1, w, step]
    wi[WG, w] = 0
    wi[WS, w] = W_FORWARD
    if overlap and ints[9] == 1:
        return False
    wf[WWAITED, w] = now
    wi[WS, w] = W_GATE
    return True


@njit(cache=True, inline="always")
def transfer_arrived(slot, now, ints, groups, wi, wf, c, slots, parts_left,  # type: ignore[no-untyped-def]
                     counter_fired, members, pull_triggered, pulled_after, pull_at, heap,
                     seq):
    """A transfer's flows have all arrived (`BATCH`); returns the worker it resumes,
    -1 if none: with overlap, the one waiting for this pull. A pull's arrival in the
    first step is recorded for the steps that replay it, and a host's every step for
    what it does with them (`hosts.py`)."""
    overlap, warmup, needed = ints[3] != 0 and ints[9] == 1, ints[1], ints[0]
    resumed = -1
    w = slots[XW, slot]
    if slots[XDIR, slot] == PULL:
        g = slots[XG, slot]
        pull_triggered[w, g] = True  # already, unless replayed
        pull_at[w, g] = now
        if c[PULLS] == PULLS_RECORDED:
            pulled_after[w, g] = now - wf[WPULL0, w]
        wi[WPULLS, w] += 1
        if not overlap and wi[WPULLS, w] == groups:
            schedule(heap, seq, now, NORMAL, GATE, w, 0)
        if overlap and wi[WS, w] == W_PULLED and wi[WG, w] == g:
            resumed = w
    elif ints[4] == 0:
        # the push's part is counted at its shard (SyncRounds.counter)
        j = slots[XJ, slot]
        step = wi[WSTEP, w]
        parts_left[w, j] -= 1
        if parts_left[w, j] == 0:
            if counter_fired[step, j]:
                if not wi[WDROPPED, w]:
                    wi[WDROPPED, w] = True
                    c[DROPPED] += 1
                    if step >= warmup:
                        c[DROPPEDM] += 1
            else:
                members[step, j] += 1
                if members[step, j] >= needed:
                    counter_fired[step, j] = True
                    schedule(heap, seq, now, NORMAL, COUNTED, step, j)
    if slots[XDIR, slot] == PUSH:
        wi[WPUSHED, w] += 1
        if wi[WAWAITED, w] and wi[WPUSHED, w] == wi[WPUSHES, w]:
            schedule(heap, seq, now, NORMAL, PUSHED, w, 0)
    slots[BFREE, c[NBFREE]] = slot
    c[NBFREE] += 1
    return resumed
