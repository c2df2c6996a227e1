"""Flows of the compiled parameter-server engine (`loop.py`) before and after
the network (`net.py`): a flow waiting for the instant it starts at, as
`FlowNetwork` batches the flows that start together, and the flows done counted against
their transfers.
"""

from __future__ import annotations

from numba import njit

from sim.network.unmanaged import bare, stable_sort

from .calendar import (
    BATCH,
    LASTINSTANT,
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


@bare
def _home(slot_of, at):  # type: ignore[no-untyped-def]
    """Where the instant `at` is looked for first in the table `slot_of`."""
    k = int(at * 1048576.0)  # microsecond-ish buckets; equal instants probe on
    return (k ^ (k >> 11) ^ (k >> 23)) & (slot_of.shape[1] - 1)


@bare
def instant_slot(slot_of, at):  # type: ignore[no-untyped-def]
    """The slot of the instant `at` (-1: none): `slot_of` is an open-addressing table,
    its row 0 the instants and row 1 their slots (-1: empty), its size a power of two
    more than the slots there are."""
    mask = slot_of.shape[1] - 1
    i = _home(slot_of, at)
    while slot_of[1, i] >= 0:
        if slot_of[0, i] == at:
            return int(slot_of[1, i])
        i = (i + 1) & mask
    return -1


@bare
def instant_add(slot_of, at, s):  # type: ignore[no-untyped-def]
    """The instant `at` (not in the table) with its slot s."""
    mask = slot_of.shape[1] - 1
    i = _home(slot_of, at)
    while slot_of[1, i] >= 0:
        i = (i + 1) & mask
    slot_of[0, i] = at
    slot_of[1, i] = s


@bare
def instant_drop(slot_of, at):  # type: ignore[no-untyped-def]
    """The instant `at` out of the table; the entries after it in its run move back to
    where a lookup finds them (deletion by backward shift, no tombstones)."""
    mask = slot_of.shape[1] - 1
    i = _home(slot_of, at)
    while slot_of[0, i] != at or slot_of[1, i] < 0:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if slot_of[1, j] < 0:
            break
        home = _home(slot_of, slot_of[0, j])
        # the entry at j may fill the hole at i unless its home lies in (i, j]
        if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
            slot_of[0, i] = slot_of[0, j]
            slot_of[1, i] = slot_of[1, j]
            i = j
    slot_of[1, i] = -1.0


@bare
def started(s, slot_of, slotf, c):  # type: ignore[no-untyped-def]
    """The instant of slot s has come: out of the table, and no longer the last."""
    instant_drop(slot_of, slotf[1, s])
    if c[LASTINSTANT] == s:
        c[LASTINSTANT] = -1


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
    s = c[LASTINSTANT]  # a transfer's flows mostly start together: looked up once
    if s < 0 or slotf[1, s] != at:
        s = instant_slot(slot_of, at)
    if s < 0:
        if c[NSFREE] == 0:
            raise RuntimeError("more start instants than the compiled engine made room for")
        s = slots[SFREE, c[NSFREE] - 1]
        c[NSFREE] -= 1
        instant_add(slot_of, at, s)
        slotf[1, s] = at
        slots[SHEAD, s] = p
        slots[STAIL, s] = p
        schedule(heap, seq, now + (at - now), NORMAL, START, s, 0)
    else:
        slots[PNEXT, slots[STAIL, s]] = p
        slots[STAIL, s] = p
    c[LASTINSTANT] = s


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
