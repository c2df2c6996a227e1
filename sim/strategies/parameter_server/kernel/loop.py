"""The compiled engine of parameter servers (numba): `run`, used by
`sim/strategies/parameter_server/lockstep.py`, which says what it models and prepares its
arrays.

One calendar holds what SimPy's queue would: entries (time, urgency, order scheduled,
kind, two arguments) in a heap (`calendar.py`, which also says where the
state lives). Processing an entry does what processing that SimPy event does: the flow
network's start of flows or check for completions (`net.py`), a
transfer's arrival (counted at its shard, resuming the worker that waits for it:
`transfers.py`), a worker's timeout, a round's counter, its update, an
evaluation (`rounds.py`), or a step's update reaching the workers waiting
for it. A worker is a state machine (`workers.py`,
`steps.py`) run until it waits for something, as its SimPy process runs
until it yields.

Asynchronous (AsynchronousTraining): each worker pulls, computes and pushes in a loop of
its own, each push applied as one update once all of it has arrived, the chief writing
checkpoints; with the SSP bound a worker starts an iteration only within `bound` of the
slowest other's finished ones (StalenessBound); with the evaluation barrier closures go
out only up to the next evaluation, which starts once its updates are in
(EvaluationBarrier); no rounds; the run stops at the last update, as `Simulation.run`
stops there.

Importing this module compiles nothing; `run` compiles on its first call (cached on disk).
numba keys that cache by this file alone, not by what `run` compiles in from another one
(numba's "Notes on Caching"): `sim.network.unmanaged`, imported first, drops the caches
of every compiled module once any of their sources has changed.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim.network.unmanaged import unmanaged_all

from .calendar import (
    ADMITTED,
    BATCH,
    BFREE,
    BOUNDARY,
    CHECKPOINTS,
    DROPPED,
    DROPPEDM,
    EVALUATE,
    EVALUATED,
    FINISHED,
    GATE,
    GATE_OPEN,
    GATENEXT,
    GHEAD,
    INIT,
    INIT_ROUNDS,
    LASTINSTANT,
    N_COUNTERS,
    N_WF,
    N_WI,
    NBFREE,
    NETBYTES,
    NPFREE,
    NSFREE,
    OPENED,
    PFREE,
    PNEXT,
    PULLS,
    PULLS_MOVED,
    PULLS_RECORDED,
    PUSHED,
    ROUNDSTEP,
    ROWS,
    SFREE,
    SHORT,
    START,
    SUPDATED,
    TIMER,
    UPDATED,
    URGENT,
    WAITNEXT,
    WAKE,
    WHEAD,
    WPUSH0,
    XID,
    next_entry,
    schedule,
)
from .flows import arrived, started
from .hosts import N_SCRATCH
from .net import net_state, network_event, progress, start
from .rounds import coordinate, evaluation, waiters
from .transfers import transfer_arrived
from .workers import resume_worker


@njit(cache=True)
def new_state(n, shards, groups, total, parts, every, room, replay, devices):  # type: ignore[no-untyped-def]
    """The engine's state at the start (`calendar.py` names its rows),
    then the flows done (transfer, its order, and two rows to sort them by it), each
    worker's pulls arrived by group and parts of a push not arrived by shard, each
    step's members and counters fired by shard, each worker's groups' arrival after its
    pulls' start; with host aggregation (the workers are hosts of `devices` devices),
    each host's pulls' arrival and reduces' end by group, its devices' compute end and
    stall, and a host's scratch (`hosts.py`). `room`: the flows that may be in flight
    at once; `replay`: whether later steps' pulls replay the first's."""
    most = room + 16  # flows, waiting flows, instants, transfers
    c = np.zeros(N_COUNTERS, dtype=np.int64)
    c[NPFREE] = most
    c[NSFREE] = most
    c[NBFREE] = most
    c[BOUNDARY] = every
    c[GATE_OPEN] = -1
    c[LASTINSTANT] = -1
    c[ROUNDSTEP] = -1
    c[PULLS] = PULLS_RECORDED if replay else PULLS_MOVED
    wi = np.zeros((N_WI, n), dtype=np.int64)
    wi[WAITNEXT] = -1
    wi[GATENEXT] = -1
    wf = np.zeros((N_WF, n))
    wf[WPUSH0] = np.nan
    slots = np.zeros((16, most), dtype=np.int64)
    slots[PNEXT:XID] = -1
    for k in (PFREE, SFREE, BFREE):
        slots[k] = np.arange(most - 1, -1, -1)
    # the instants flows wait for, by time (`instant_slot`): at most half full
    size = 1
    while size < 2 * most:
        size *= 2
    instants = np.zeros((2, size))
    instants[1] = -1.0
    steps = np.zeros((6, total + n + 2), dtype=np.int64)
    steps[WHEAD:] = -1
    parts_of_shard = np.zeros(shards, dtype=np.int64)
    for j in range(shards):
        for g in range(groups):
            if parts[g, j] > 0:
                parts_of_shard[j] += 1
    return (c, np.array([0.0, 0.0, np.inf]), wi, wf, slots, np.zeros((2, most)),
            instants,
            steps, parts_of_shard, np.empty((4, most), dtype=np.int64),
            np.zeros((n, groups), dtype=np.bool_), np.zeros((n, shards), dtype=np.int64),
            np.zeros((total, shards), dtype=np.int64), np.zeros((total, shards), dtype=np.bool_),
            np.zeros((n, groups)), np.zeros((n, groups)), np.zeros((n, groups)),
            np.zeros((2, n * devices)), np.zeros((N_SCRATCH, groups)))


@njit(cache=True)
def model(pull_latency, pull_inter, push_latency, push_inter, forward_s, backward_s,  # type: ignore[no-untyped-def]
          chain_bytes, factors, delays):
    """The model's arrays stacked: a pull's and a push's latency and whether it
    leaves the host, each group's forward, backward and bytes (down and up a host's
    chain), the factors and delays."""
    latency = np.empty((2,) + pull_latency.shape)
    inter = np.empty((2,) + pull_inter.shape, dtype=pull_inter.dtype)
    compute = np.empty((3,) + forward_s.shape)
    jitter = np.empty((2,) + factors.shape)
    latency[0], latency[1], inter[0], inter[1] = pull_latency, push_latency, pull_inter, push_inter
    compute[0], compute[1], compute[2] = forward_s, backward_s, chain_bytes
    jitter[0], jitter[1] = factors, delays
    return latency, inter, compute, jitter


@njit(cache=True)
def begin(capacity, pull_paths, pull_latency, pull_inter, push_paths, push_latency,  # type: ignore[no-untyped-def]
          push_inter, parts, forward_s, backward_s, chain_bytes, factors, delays, ints,
          total, work):
    """The engine's state, its network's and its model's arrays, its calendar, and the
    calendar's counts with room for the workers an entry resumes, as `run` takes them."""
    n, shards = pull_paths.shape[:2]
    state = new_state(n, shards, parts.shape[0], total, parts, ints[6], work[8].shape[0],
                      ints[7] != 0, ints[9])
    most = state[4].shape[1]
    network = net_state(capacity, pull_paths, push_paths, state[8], most, ints[8])
    # the calendar's room: an entry per instant flows start at and per transfer arrived
    # (each at most `most`), a few per worker (its timeout or what it waits for), and
    # the counters of a step or two per shard
    room = 2 * most + 4 * n + 4 * shards + 64
    return (state, network, model(pull_latency, pull_inter, push_latency, push_inter,
                                  forward_s, backward_s, chain_bytes, factors, delays),
            (np.zeros(room), np.zeros((room, 5), dtype=np.int64)),
            (np.zeros(2, dtype=np.int64), np.empty(n, dtype=np.int64)))


@njit(cache=True)
def close(totals, c, fl):  # type: ignore[no-untyped-def]
    """The totals the run ends with; returns the records written (-1: too few drawn)."""
    totals[2] = fl[NETBYTES]
    totals[3] = c[DROPPED]
    totals[4] = c[DROPPEDM]
    totals[5] = c[CHECKPOINTS]
    return -1 if c[SHORT] else c[ROWS]


@njit(cache=True, nogil=True)
def run(capacity, pull_paths, pull_latency, pull_inter, push_paths, push_latency,  # type: ignore[no-untyped-def]
        push_inter, parts, forward_s, backward_s, chain_bytes, factors, delays, times, ints,
        rec_int, rec, step_ends, totals, work):
    """The job from its start to every worker's last step; returns the records written.

    pull_paths, push_paths: (workers, shards, max path) links of each worker's route
    from and to each shard, with their latency and whether they leave the host; parts:
    (groups, shards) bytes; forward_s, backward_s: each group's compute; chain_bytes:
    each group's bytes down and up a host's chain (host aggregation); factors, delays:
    (devices, steps) jitter x slowness and hiccups; times, ints: the job's seconds and
    settings, as `lockstep._settings` lists them (ints[9]: the devices a host aggregates,
    1: none; else the workers of the routes are hosts, each from its first device).

    Writes records (a host's: each device's) into rec_int (worker, step, staleness) and
    rec (start, compute_end, comm_end, end, comm_s, stall), step (update) ends into
    step_ends, and totals:
    the measurement's start (time, bytes on the network), bytes on the network, dropped
    gradients, those of measured steps, checkpoints, the last one (steps held, time)."""
    n, shards = pull_paths.shape[:2]
    groups = parts.shape[0]
    keep = begin(capacity, pull_paths, pull_latency, pull_inter, push_paths, push_latency,
                 push_inter, parts, forward_s, backward_s, chain_bytes, factors, delays,
                 ints, step_ends.shape[0], work)
    # all the loop hands around, unmanaged (`sim/network/unmanaged.py`); `keep` owns it
    state = unmanaged_all(keep[0])
    (c, fl, wi, wf, slots, slotf, slot_of, steps, parts_of_shard, finished, pull_triggered,
     parts_left, members, counter_fired, pulled_after, pull_at) = state[:16]
    hosted = state[15:]  # a host's pulls' arrival, reduces' end, devices, scratch
    finished_slots, finished_ids = finished[0], finished[1]
    net = unmanaged_all(keep[1])
    latency, inter, compute, jitter = unmanaged_all(keep[2])
    (capacity, pull_paths, push_paths, parts, times, ints, rec_int, rec, step_ends,
     totals) = unmanaged_all((capacity, pull_paths, push_paths, parts, times, ints, rec_int,
                              rec, step_ends, totals))
    work = unmanaged_all(work)
    heap, (seq, resume) = unmanaged_all(keep[3]), unmanaged_all(keep[4])
    for w in range(n):
        schedule(heap, seq, 0.0, URGENT, INIT, w, 0)
    if ints[4] == 0:
        schedule(heap, seq, 0.0, URGENT, INIT_ROUNDS, 0, 0)
    while True:
        now, kind, a, b = next_entry(heap, seq, c, fl)
        n_resume = 0
        if kind < 0 or kind == FINISHED or c[SHORT]:
            break
        if kind in (INIT, TIMER, GATE, PUSHED, ADMITTED):
            resume[0] = a
            n_resume = 1
        elif kind in (START, WAKE):
            progress(now, fl, net)
            if kind == START:
                started(a, slot_of, slotf, c)
                start(a, now, pull_paths, push_paths, slots, slotf, c, net)
            n_done = network_event(now, kind, seq, c, fl, slots, net, finished_slots,
                                   finished_ids, work)
            if n_done > 0:
                arrived(now, n_done, finished, slots, pull_triggered, heap, seq)
        elif kind == BATCH:
            resume[0] = transfer_arrived(a, now, ints, groups, wi, wf, c, slots, parts_left,
                                         counter_fired, members, pull_triggered,
                                         pulled_after, pull_at, heap, seq)
            n_resume = 1 if resume[0] >= 0 else 0
        elif kind in (EVALUATE, EVALUATED):
            evaluation(kind, now, ints, times, c, heap, seq)
        elif kind == OPENED:
            n_resume = waiters(steps[GHEAD], wi[GATENEXT], a, resume)
        elif kind == UPDATED:
            steps[SUPDATED, a] = True
            n_resume = waiters(steps[WHEAD], wi[WAITNEXT], a, resume)
        else:
            coordinate(kind, a, b, now, shards, ints, times, c, steps, totals, step_ends,
                       heap, seq)
        # the workers resumed by this entry, each until it waits again
        for r in range(n_resume):
            resume_worker(resume[r], now, ints, times, parts, latency, inter, compute, jitter,
                          parts_of_shard, totals, step_ends, rec_int, rec, c, fl, wi, wf,
                          steps, slots, slotf, slot_of,
                          parts_left, pull_triggered, pulled_after, hosted, heap, seq)
    # `keep` is alive until here
    return close(totals, c, fl) + 0 * keep[0][0].size
