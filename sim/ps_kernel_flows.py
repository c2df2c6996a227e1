"""Flows of the compiled parameter-server engine (`sim/ps_kernel.py`) before and after
the network (`sim/ps_kernel_net.py`): a flow waiting for the instant it starts at, as
`FlowNetwork` batches the flows that start together, and the flows done counted against
their transfers.
"""

from __future__ import annotations

from numba import njit

from .ps_kernel_calendar import (
    BATCH,
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
    XDIR,
    XG,
    XLEFT,
    XW,
    schedule,
)
from .ps_kernel_memory import bare, stable_sort


@njit(cache=True, inline="always")
def add_flow(w, j, direction, size, slot, at, now, slots, slotf, c,  # type: ignore[no-untyped-def]
             slot_of, heap, seq):
    """A flow of transfer `slot` waits for its start at `at`: the instant's first one
    schedules it (the flows by start time, each instant once: np.unique's order)."""
    if c[NPFREE] == 0:
        raise RuntimeError("more waiting flows than the compiled engine made room for")
    p = slots[PFREE, c[NPFREE] - 1]
    c[NPFREE] -= 1
    slots[PW, p] = w
    slots[PJ, p] = j
    slots[PDIR, p] = direction
    slotf[0, p] = size
    slots[PBATCH, p] = slot
    slots[PNEXT, p] = -1
    if at not in slot_of:
        if c[NSFREE] == 0:
            raise RuntimeError("more start instants than the compiled engine made room for")
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


@bare
def arrived(now, n_done, finished, slots, pull_triggered, heap, seq):  # type: ignore[no-untyped-def]
    """The flows done (their transfers in row 0 of `finished`, the transfers' order of
    creation in row 1) counted against their transfers, in the order the transfers were
    made; a transfer whose flows have all arrived fires (np.unique's order)."""
    # the places 0..n_done-1 by transfer order, stable (row 3: scratch)
    for i in range(n_done):
        finished[2, i] = i
    stable_sort(finished, 2, 3, n_done, finished[1])
    for i in range(n_done):
        slot = finished[0, finished[2, i]]
        slots[XLEFT, slot] -= 1
        if slots[XLEFT, slot] == 0:
            if slots[XDIR, slot] == PULL:
                pull_triggered[slots[XW, slot], slots[XG, slot]] = True
            schedule(heap, seq, now, NORMAL, BATCH, slot, 0)
