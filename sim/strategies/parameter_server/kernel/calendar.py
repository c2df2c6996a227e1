"""The calendar of the compiled parameter-server engine (`loop.py`): what its
entries are, how one is scheduled, and where its state lives.

An entry is (time, urgency, order scheduled, kind, two arguments), kept in a binary heap
by its first three, as SimPy keeps its queue: `heap` is two arrays, the entries' times
and their ints (columns `HU`..`HB`), with the heap's size in `seq[1]` (`seq[0]`: the next
entry's order), so that scheduling allocates nothing.

The state is a few packed arrays, each row one quantity: the counters `c` (int64) and
`fl` (float64), the workers' ints `wi` and floats `wf` (rows x workers), the waiting
flows, the instants they start at, the transfers and the free slots of each `slots`
(int64, rows x slots) with the flows' bytes and the instants' times `slotf`, and each
step's round state and the evaluation barrier's gates `steps`. The handlers take the
arrays they use, never the whole state. numba counts a reference for every array a
function is given or slices, inlined (`inline="always"`) or not, with an atomic
operation on the array's memory record; `run` hands the handlers arrays without that
record (`sim/network/unmanaged.py`), so each count is a test of a null pointer, and the
calendar and the network are compiled without numba's runtime (`bare`): they count
nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim.network.unmanaged import bare

# what an entry of the calendar is (SimPy: an event being processed)
INIT = 0  # a worker's process starts (SimPy's Initialize, urgent)
INIT_ROUNDS = 1  # the rounds' process starts
START = 2  # the flows that start at one instant (FlowNetwork._start); a: its slot
WAKE = 3  # the first flow in flight may be done (FlowNetwork._complete): the one
# pending wake-up, kept beside the heap (`fl[WAKE_AT]`, its order `c[WAKESEQ]`)
BATCH = 4  # a transfer's flows have all arrived (its event); a: its batch slot
TIMER = 5  # a worker's timeout: dispatch, a forward or backward group
GATE = 6  # without overlap: every pull of a worker's step has arrived (all_of)
PUSHED = 7  # every push of a worker's step has arrived (all_of)
COUNTED = 8  # a shard's counter of a step (a: step, b: shard) has enough workers
ROUND = 9  # every shard's counter of a step (all_of); a: step
ROUND_TIMER = 10  # a step's update call (b = 1), then its checkpoint (b = 2)
UPDATED = 11  # a step's update is applied; a: step
FINISHED = 12  # asynchronous: the last update is in (the run stops there)
ADMITTED = 13  # asynchronous: the SSP bound lets a waiting worker start its iteration
EVALUATE = 14  # asynchronous: the coordinator's evaluation starts (urgent, a process)
EVALUATED = 15  # ... and is done
OPENED = 16  # the barrier's gate opens: its waiters resume; a: the gate

URGENT = 0
NORMAL = 1

PULL = 0
PUSH = 1

# a worker's state: where its process resumes
W_BEGIN = 0  # a step begins
W_PREVIOUS = 1  # resumed by the previous step's update
W_DISPATCH = 2  # the closure's dispatch
W_PULLS = 3  # its pulls start
W_GATE = 4  # resumed: every pull arrived (without overlap, or a host's)
W_FORWARD = 5  # the forward of group g, once it has arrived
W_PULLED = 6  # resumed: group g's pull arrived
W_FORWARD_DONE = 7  # group g's forward computed
W_BACKWARD = 8  # the backward of group g (a host: its reduce)
W_BACKWARD_DONE = 9  # group g's backward computed (a host: reduced): its push
W_COMPUTED = 10  # forward and backward done
W_PUSHED = 11  # resumed: every push arrived
W_RECORD = 12  # resumed: the step's update is applied
W_DONE = 13
W_APPLY = 14  # asynchronous: the closure's own update applied
W_CHECKPOINTED = 15  # asynchronous: the chief's checkpoint written
W_ADMITTED = 16  # asynchronous: resumed: the SSP bound let it start
W_BARRIER = 17  # asynchronous: the evaluation barrier lets its closure out, or not
W_BOUND = 18  # asynchronous: the SSP bound lets it start, or not

# the counters `c`: flows in flight, the order the wake-up was scheduled in, free waiting flows,
# free instants, free transfers, the next transfer's order, SSP waiters, the update count
# of the next evaluation, closures let out, the open gate (-1: none), gates made, the step
# whose counters the rounds wait for, the global step, updates applied (asynchronous),
# the updates the last checkpoint holds, measuring (0 / 1), dropped gradients, of them in
# measured steps, checkpoints, records written, whether a worker went past the steps
# drawn for it (0 / 1), the pulls' phase (PULLS_*), the instant a flow last joined (-1:
# none, or started since)
(NFLOWS, WAKESEQ, NPFREE, NSFREE, NBFREE, NEXTID, NSSP, BOUNDARY, DISPATCHED, GATE_OPEN,
 GATES, ROUNDSTEP, GLOBALSTEP, COMPLETED, LASTHELD, MEASURED, DROPPED, DROPPEDM,
 CHECKPOINTS, ROWS, SHORT, PULLS, LASTINSTANT) = range(23)
N_COUNTERS = 23
# the pulls' phase: every pull moved on the network; the first step's moved and each
# worker's groups' arrival after its pulls' start recorded; every later step's arrivals
# replayed from that record (`sim/strategies/parameter_server/lockstep.py` says when a
# step's pulls may be)
PULLS_MOVED, PULLS_RECORDED, PULLS_REPLAYED = 0, 1, 2
# `fl`: when the flows' bytes left were last brought up to date, bytes on the network,
# the pending wake-up's time (inf: none)
LAST, NETBYTES, WAKE_AT = 0, 1, 2
# `wi`, a worker's ints: its state, step, group, pushes started in the step, of them
# arrived, whether the step's all_of(pushes) exists, pulls arrived, dropped (0 / 1),
# updates before its pull (asynchronous), staleness, iterations finished (SSP), the SSP
# waiters in order (by position, not worker) and the iteration each waits to start, the
# next worker waiting for the same update, the next waiting at the same gate, whether a
# host's devices but its first have recorded its step (before the chief's checkpoint)
(WS, WSTEP, WG, WPUSHES, WPUSHED, WAWAITED, WPULLS, WDROPPED, WVERSION, WSTALE, WITER,
 SSPW, SSPIT, WAITNEXT, GATENEXT, WRECORDED) = range(16)
N_WI = 16
# `wf`, a worker's floats: the step's start, its pulls' start and end, its pushes' start
# (nan: none yet) and end, its compute's end, its stall, when it began to wait, the
# hiccup still to add (to the first forward group)
WSTART, WPULL0, WPULL1, WPUSH0, WPUSH1, WCOMPUTED, WSTALL, WWAITED, WDELAY = range(9)
N_WF = 9
# `slots`: a flow waiting for its start: its worker, shard, direction, batch slot, and the
# next one starting at the same instant (its bytes: `slotf[0]`); an instant flows start
# at: its first and last waiting flow (its time: `slotf[1]`); a transfer (`transfers`
# call): its order of creation, flows left, direction, worker, group, shard; the free
# slots of waiting flows, instants and transfers (their counts in `c`)
PW, PJ, PDIR, PBATCH, PNEXT, SHEAD, STAIL = range(7)
XID, XLEFT, XDIR, XW, XG, XJ = range(7, 13)
PFREE, SFREE, BFREE = 13, 14, 15
# `steps`, a step's: counters processed, update processed (0 / 1), first and last worker
# waiting for its update; an evaluation gate's first and last waiting worker
SCOUNT, SUPDATED, WHEAD, WTAIL, GHEAD, GTAIL = range(6)


# the calendar's ints: an entry's urgency, order scheduled, kind and arguments
HU, HSEQ, HKIND, HA, HB = range(5)


@bare
def _before(t, u, s, ht, hi, i):  # type: ignore[no-untyped-def]
    """Whether (t, u, s) comes before the calendar's entry i."""
    if t != ht[i]:
        return t < ht[i]
    if u != hi[i, HU]:
        return u < hi[i, HU]
    return s < hi[i, HSEQ]


@bare
def _put(ht, hi, i, t, u, s, kind, a, b):  # type: ignore[no-untyped-def]
    ht[i] = t
    hi[i, HU] = u
    hi[i, HSEQ] = s
    hi[i, HKIND] = kind
    hi[i, HA] = a
    hi[i, HB] = b


@bare
def _move(ht, hi, to, i):  # type: ignore[no-untyped-def]
    _put(ht, hi, to, ht[i], hi[i, HU], hi[i, HSEQ], hi[i, HKIND], hi[i, HA], hi[i, HB])


@bare
def schedule(heap, seq, t, urgency, kind, a, b):  # type: ignore[no-untyped-def]
    ht, hi = heap
    i = seq[1]
    if i == ht.shape[0]:
        raise RuntimeError("more calendar entries than the compiled engine made room for")
    seq[1] = i + 1
    order = seq[0]
    seq[0] += 1
    while i > 0:
        parent = (i - 1) // 2
        if not _before(t, urgency, order, ht, hi, parent):
            break
        _move(ht, hi, i, parent)
        i = parent
    _put(ht, hi, i, t, urgency, order, kind, a, b)


@bare
def next_entry(heap, seq, c, fl):  # type: ignore[no-untyped-def]
    """(time, kind, a, b) of the calendar's next entry, taken out of it: the heap's first
    or the pending wake-up, whichever SimPy's order puts first; kind -1: none left."""
    ht, hi = heap
    n = seq[1]
    if fl[WAKE_AT] < np.inf and (n == 0 or _before(fl[WAKE_AT], NORMAL, c[WAKESEQ], ht, hi, 0)):
        now = fl[WAKE_AT]
        fl[WAKE_AT] = np.inf
        return now, WAKE, 0, 0
    if n == 0:
        return 0.0, -1, 0, 0
    now, kind, a, b = ht[0], hi[0, HKIND], hi[0, HA], hi[0, HB]
    n -= 1
    seq[1] = n
    if n > 0:
        # the last entry sifted down from the top
        t, u, s = ht[n], hi[n, HU], hi[n, HSEQ]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and _before(ht[child + 1], hi[child + 1, HU],
                                         hi[child + 1, HSEQ], ht, hi, child):
                child += 1
            if _before(t, u, s, ht, hi, child):
                break
            _move(ht, hi, i, child)
            i = child
        _move(ht, hi, i, n)
    return now, kind, a, b


@njit(cache=True)
def may_start(wi, worker, iteration, bound):  # type: ignore[no-untyped-def]
    """StalenessBound.may_start: no more than `bound` iterations ahead of the slowest
    other worker's finished ones."""
    slowest = -1
    for w in range(wi.shape[1]):
        if w != worker and (slowest < 0 or wi[WITER, w] < slowest):
            slowest = wi[WITER, w]
    return slowest < 0 or iteration - slowest <= bound
