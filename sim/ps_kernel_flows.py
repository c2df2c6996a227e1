"""The flow network of the compiled parameter-server engine (`sim/ps_kernel.py`), as
`FlowNetwork` does it: flows waiting for the instant they start at, their start, the
check for those done, and new max-min fair rates (`sim.flowkernel.fill`) with a wake-up
at the first completion. Every function here is inlined into `run`'s loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .flowkernel import fill
from .ps_kernel_calendar import (
    BATCH,
    LAST,
    NFLOWS,
    NORMAL,
    NPFREE,
    NSFREE,
    PBATCH,
    PDIR,
    PFREE,
    PJ,
    PNEXT,
    PULL,
    PW,
    SFREE,
    SHEAD,
    STAIL,
    START,
    TOKEN,
    WAKE,
    XDIR,
    XG,
    XID,
    XLEFT,
    XW,
    schedule,
)


@njit(cache=True, inline="always")
def add_flow(w, j, direction, size, slot, at, now, slots, slotf, c,  # type: ignore[no-untyped-def]
             slot_of, heap, seq):
    """A flow of transfer `slot` waits for its start at `at`: the instant's first one
    schedules it (the flows by start time, each instant once: np.unique's order)."""
    p = slots[PFREE, c[NPFREE] - 1]
    c[NPFREE] -= 1
    slots[PW, p] = w
    slots[PJ, p] = j
    slots[PDIR, p] = direction
    slotf[0, p] = size
    slots[PBATCH, p] = slot
    slots[PNEXT, p] = -1
    if at not in slot_of:
        s = slots[SFREE, c[NSFREE] - 1]
        c[NSFREE] -= 1
        slot_of[at] = s
        slotf[1, s] = at
        slots[SHEAD, s] = p
        slots[STAIL, s] = p
        schedule(heap, seq, now + (at - now), NORMAL, START, s, 0)
    else:
        s = slot_of[at]
        slots[PNEXT, slots[STAIL, s]] = p
        slots[STAIL, s] = p


@njit(cache=True, inline="always")
def start_flows(slot, pull_paths, push_paths, slots, slotf, c,  # type: ignore[no-untyped-def]
                slot_of, f_paths, f_left, f_tol, f_batch):
    """The flows waiting for the instant `slot` start (FlowNetwork._start)."""
    width = f_paths.shape[1]
    n_flows = c[NFLOWS]
    del slot_of[slotf[1, slot]]
    p = slots[SHEAD, slot]
    while p >= 0:
        j = slots[PJ, p]
        w = slots[PW, p]
        if slots[PDIR, p] == PULL:
            for k in range(width):
                f_paths[n_flows, k] = pull_paths[w, j, k]
        else:
            for k in range(width):
                f_paths[n_flows, k] = push_paths[w, j, k]
        f_left[n_flows] = slotf[0, p]
        f_tol[n_flows] = slotf[0, p] * 1e-9 + 1e-9
        f_batch[n_flows] = slots[PBATCH, p]
        n_flows += 1
        nxt = slots[PNEXT, p]
        slots[PFREE, c[NPFREE]] = p
        c[NPFREE] += 1
        p = nxt
    slots[SFREE, c[NSFREE]] = slot
    c[NSFREE] += 1
    c[NFLOWS] = n_flows


@njit(cache=True, inline="always")
def finish_flows(now, c, slots, f_paths, f_left, f_rate, f_tol, f_batch,  # type: ignore[no-untyped-def]
                 finished_slots, finished_ids):
    """Drops the flows done: less than a rounding sliver left, or less time left than
    the clock can resolve now (FlowNetwork._complete); returns how many, their transfers
    in finished_slots and those transfers' order of creation in finished_ids."""
    width = f_paths.shape[1]
    scale = max(abs(now), 1.0)
    resolution = 4 * (np.nextafter(scale, np.inf) - scale)
    n_done = 0
    kept = 0
    for f in range(c[NFLOWS]):
        if f_left[f] <= f_tol[f] or f_left[f] <= f_rate[f] * resolution:
            finished_slots[n_done] = f_batch[f]
            finished_ids[n_done] = slots[XID, f_batch[f]]
            n_done += 1
        else:
            if kept != f:
                for k in range(width):
                    f_paths[kept, k] = f_paths[f, k]
                f_left[kept] = f_left[f]
                f_tol[kept] = f_tol[f]
                f_batch[kept] = f_batch[f]
            kept += 1
    c[NFLOWS] = kept
    return n_done


@njit(cache=True, inline="always")
def network_event(now, kind, a, heap, seq, c, fl, pull_paths, push_paths, slots, slotf,  # type: ignore[no-untyped-def]
                  slot_of, f_paths, f_left, f_rate, f_tol, f_batch,
                  finished_slots, finished_ids, pull_triggered, capacity, work):
    """A start of flows (`START`, a: the instant's slot) or a check for completions
    (`WAKE`, a: its token, ignored if a later rate change superseded it)."""
    if kind == WAKE and a != c[TOKEN]:
        return
    # bring the bytes left up to date (FlowNetwork._advance)
    dt = now - fl[LAST]
    if dt > 0 and c[NFLOWS] > 0:
        for f in range(c[NFLOWS]):
            f_left[f] -= f_rate[f] * dt
    fl[LAST] = now
    n_done = 0
    if kind == START:
        start_flows(a, pull_paths, push_paths, slots, slotf, c, slot_of,
                    f_paths, f_left, f_tol, f_batch)
    else:
        n_done = finish_flows(now, c, slots, f_paths, f_left, f_rate, f_tol, f_batch,
                              finished_slots, finished_ids)
    if n_done > 0:
        # count them against their transfers, in the order the transfers were made; a
        # transfer whose flows have all arrived fires (np.unique's order)
        order = np.argsort(finished_ids[:n_done], kind="mergesort")
        for i in range(n_done):
            slot = finished_slots[order[i]]
            slots[XLEFT, slot] -= 1
            if slots[XLEFT, slot] == 0:
                if slots[XDIR, slot] == PULL:
                    pull_triggered[slots[XW, slot], slots[XG, slot]] = True
                schedule(heap, seq, now, NORMAL, BATCH, slot, 0)
    # new rates, and a wake-up at the first completion (FlowNetwork._reschedule)
    c[TOKEN] += 1
    if c[NFLOWS] > 0:
        first = fill(f_paths, c[NFLOWS], capacity, f_left, f_rate, work)
        schedule(heap, seq, now + max(first, 0.0), NORMAL, WAKE, c[TOKEN], 0)
