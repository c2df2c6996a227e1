"""The compiled engine of parameter servers (numba): `run`, used by `sim/ps_lockstep.py`,
which says what it models and prepares its arrays.

One calendar holds what SimPy's queue would: entries (time, urgency, order scheduled,
kind, two arguments) in a heap. Processing an entry does what processing that SimPy
event does: the flow network's start of flows or check for completions, a transfer's
arrival (counted at its shard, resuming the worker that waits for it), a worker's
timeout, a round's counter, its update, or a step's update reaching the workers waiting
for it. A worker is a state machine (`_W_*`) run until it waits for something, as its
SimPy process runs until it yields.

Importing this module compiles nothing; `run` compiles on its first call (cached on disk).
numba's cache is invalidated by changes to this file only, not to what `run` compiles in
from another one (numba's "Notes on Caching"): after changing `sim.flowkernel.fill`,
touch this file too.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit
from numba import types as nbtypes
from numba.typed import Dict

from .flowkernel import fill

# what an entry of the calendar is (SimPy: an event being processed)
_INIT = 0  # a worker's process starts (SimPy's Initialize, urgent)
_INIT_ROUNDS = 1  # the rounds' process starts
_START = 2  # the flows that start at one instant (FlowNetwork._start); a: its slot
_WAKE = 3  # the first flow in flight may be done (FlowNetwork._complete); a: token
_BATCH = 4  # a transfer's flows have all arrived (its event); a: its batch slot
_TIMER = 5  # a worker's timeout: dispatch, a forward or backward group
_GATE = 6  # without overlap: every pull of a worker's step has arrived (all_of)
_PUSHED = 7  # every push of a worker's step has arrived (all_of)
_COUNTED = 8  # a shard's counter of a step (a: step, b: shard) has enough workers
_ROUND = 9  # every shard's counter of a step (all_of); a: step
_ROUND_TIMER = 10  # a step's update call (b = 1), then its checkpoint (b = 2)
_UPDATED = 11  # a step's update is applied; a: step
_FINISHED = 12  # asynchronous: the last update is in (the run stops there)
_ADMITTED = 13  # asynchronous: the SSP bound lets a waiting worker start its iteration
_EVALUATE = 14  # asynchronous: the coordinator's evaluation starts (urgent, a process)
_EVALUATED = 15  # ... and is done
_OPENED = 16  # the barrier's gate opens: its waiters resume; a: the gate

_URGENT = 0
_NORMAL = 1

# a worker's state: where its process resumes
_W_BEGIN = 0  # a step begins
_W_PREVIOUS = 1  # resumed by the previous step's update
_W_DISPATCH = 2  # the closure's dispatch
_W_PULLS = 3  # its pulls start
_W_GATE = 4  # resumed: every pull arrived (without overlap)
_W_FORWARD = 5  # the forward of group g, once it has arrived
_W_PULLED = 6  # resumed: group g's pull arrived
_W_FORWARD_DONE = 7  # group g's forward computed
_W_BACKWARD = 8  # the backward of group g
_W_BACKWARD_DONE = 9  # group g's backward computed: its push
_W_COMPUTED = 10  # forward and backward done
_W_PUSHED = 11  # resumed: every push arrived
_W_RECORD = 12  # resumed: the step's update is applied
_W_DONE = 13
_W_APPLY = 14  # asynchronous: the closure's own update applied
_W_CHECKPOINTED = 15  # asynchronous: the chief's checkpoint written
_W_ADMITTED = 16  # asynchronous: resumed: the SSP bound let it start
_W_BARRIER = 17  # asynchronous: the evaluation barrier lets its closure out, or not
_W_BOUND = 18  # asynchronous: the SSP bound lets it start, or not


@njit(cache=True)
def _may_start(iterations, worker, iteration, bound):  # type: ignore[no-untyped-def]
    """StalenessBound.may_start: no more than `bound` iterations ahead of the slowest
    other worker's finished ones."""
    slowest = -1
    for w in range(iterations.shape[0]):
        if w != worker and (slowest < 0 or iterations[w] < slowest):
            slowest = iterations[w]
    return slowest < 0 or iteration - slowest <= bound


_PULL = 0
_PUSH = 1


@njit(cache=True)
def _schedule(heap, seq, t, urgency, kind, a, b):  # type: ignore[no-untyped-def]
    heapq.heappush(heap, (t, urgency, seq[0], kind, a, b))
    seq[0] += 1


@njit(cache=True)
def run(  # type: ignore[no-untyped-def]  # noqa: C901, PLR0912, PLR0915
    capacity,
    pull_paths,
    pull_latency,
    pull_inter,
    push_paths,
    push_latency,
    push_inter,
    parts,
    forward_s,
    backward_s,
    factors,
    delays,
    times,
    ints,
    rec_int,
    rec,
    step_ends,
    totals,
    work,
):
    """The job from its start to every worker's last step; returns the records written.

    pull_paths, push_paths: (workers, shards, max path) links of each worker's route
    from and to each shard, with their latency and whether they leave the host; parts:
    (groups, shards) bytes; forward_s, backward_s: each group's compute; factors,
    delays: (workers, steps) jitter x slowness and hiccups; times: call, dispatch,
    update (synchronous; asynchronous: a closure's own update, after its push),
    checkpoint seconds; ints: workers a round needs, warm-up steps, checkpoint interval
    (0: none), overlap (0 / 1), asynchronous (0 / 1), the SSP bound (-1: none), the
    updates between evaluations behind the barrier (0: none; their seconds: times[4]).

    Asynchronous (AsynchronousTraining): each worker pulls, computes and pushes in a
    loop of its own, each push applied as one update once all of it has arrived, the
    chief writing checkpoints; with the SSP bound a worker starts an iteration only
    within `bound` of the slowest other's finished ones (StalenessBound); with the
    evaluation barrier closures go out only up to the next evaluation, which starts
    once its updates are in (EvaluationBarrier); no rounds; the run stops at the last
    update, as `Simulation.run` stops there.

    Writes the records into rec_int (worker, step, staleness) and rec (start,
    compute_end, comm_end, end, comm_s, stall), each step's (update's) end into
    step_ends, and into totals: the measurement's start (time, bytes on the network),
    bytes on the network, dropped gradients, those of measured steps, checkpoints, the
    last checkpoint (steps it holds, time).
    """
    n, shards, width = pull_paths.shape
    groups = parts.shape[0]
    total = step_ends.shape[0]
    call_s, dispatch_s, update_s, checkpoint_s = times[0], times[1], times[2], times[3]
    needed, warmup, every, overlap = ints[0], ints[1], ints[2], ints[3] != 0
    asynchronous = ints[4] != 0
    bound = ints[5]
    evaluate_every = ints[6]
    evaluation_s = times[4]

    # -- the flows in flight (FlowNetwork's arrays) and those waiting for their start
    most = 2 * n * shards * groups + 16
    f_paths = np.full((most, width), -1, dtype=np.int64)
    f_left = np.zeros(most)
    f_rate = np.zeros(most)
    f_tol = np.zeros(most)
    f_batch = np.zeros(most, dtype=np.int64)  # batch slot
    n_flows = 0
    last = 0.0  # when the flows' bytes left were last brought up to date
    token = 0
    # a flow waiting for its start: its worker, shard, direction, bytes, batch slot, and the
    # next one starting at the same instant
    p_w = np.zeros(most, dtype=np.int64)
    p_j = np.zeros(most, dtype=np.int64)
    p_dir = np.zeros(most, dtype=np.int64)
    p_size = np.zeros(most)
    p_batch = np.zeros(most, dtype=np.int64)
    p_next = np.full(most, -1, dtype=np.int64)
    p_free = np.arange(most - 1, -1, -1).astype(np.int64)
    n_p_free = most
    # the instants flows start at: the slot of each, its flows (first, last), its time
    slot_of = Dict.empty(key_type=nbtypes.float64, value_type=nbtypes.int64)
    s_head = np.full(most, -1, dtype=np.int64)
    s_tail = np.full(most, -1, dtype=np.int64)
    s_time = np.zeros(most)
    s_free = np.arange(most - 1, -1, -1).astype(np.int64)
    n_s_free = most
    # a transfer (`transfers` call): its order of creation, flows left, direction, worker,
    # group, shard
    b_id = np.zeros(most, dtype=np.int64)
    b_left = np.zeros(most, dtype=np.int64)
    b_dir = np.zeros(most, dtype=np.int64)
    b_w = np.zeros(most, dtype=np.int64)
    b_g = np.zeros(most, dtype=np.int64)
    b_j = np.zeros(most, dtype=np.int64)
    b_free = np.arange(most - 1, -1, -1).astype(np.int64)
    n_b_free = most
    next_id = 0
    network_bytes = 0.0

    # -- the workers
    w_state = np.full(n, _W_BEGIN, dtype=np.int64)
    w_step = np.zeros(n, dtype=np.int64)
    w_g = np.zeros(n, dtype=np.int64)
    w_start = np.zeros(n)
    w_pull_start = np.zeros(n)
    w_pull_end = np.zeros(n)
    w_push_start = np.full(n, np.nan)
    w_push_end = np.zeros(n)
    w_compute_end = np.zeros(n)
    w_stall = np.zeros(n)
    w_waited = np.zeros(n)
    w_delay = np.zeros(n)  # the hiccup still to add (to the first forward group)
    w_pushes = np.zeros(n, dtype=np.int64)  # pushes started in the step
    w_pushed = np.zeros(n, dtype=np.int64)  # of them arrived
    w_pushes_awaited = np.zeros(n, dtype=np.bool_)  # the step's all_of(pushes) exists
    w_pulls_in = np.zeros(n, dtype=np.int64)  # pulls arrived (processed)
    w_dropped = np.zeros(n, dtype=np.bool_)
    w_version = np.zeros(n, dtype=np.int64)  # asynchronous: updates before its pull
    w_staleness = np.zeros(n, dtype=np.int64)
    iterations = np.zeros(n, dtype=np.int64)  # SSP: iterations finished per worker
    ssp_w = np.zeros(n, dtype=np.int64)  # SSP: the workers waiting, in order, and
    ssp_it = np.zeros(n, dtype=np.int64)  # the iteration each waits to start
    n_ssp = 0
    # the evaluation barrier: the update count of the next evaluation, closures let out,
    # and each gate's waiters in the order they came (the open gate: -1 if none)
    boundary = evaluate_every
    dispatched = 0
    gate = -1
    gates = 0
    gate_head = np.full(total + n + 2, -1, dtype=np.int64)
    gate_tail = np.full(total + n + 2, -1, dtype=np.int64)
    gate_next = np.full(n, -1, dtype=np.int64)
    pull_triggered = np.zeros((n, groups), dtype=np.bool_)
    parts_left = np.zeros((n, shards), dtype=np.int64)  # parts of a push not arrived
    parts_of_shard = np.zeros(shards, dtype=np.int64)
    for j in range(shards):
        for g in range(groups):
            if parts[g, j] > 0:
                parts_of_shard[j] += 1
    # workers waiting for a step's update, in the order they began to
    wait_head = np.full(total, -1, dtype=np.int64)
    wait_tail = np.full(total, -1, dtype=np.int64)
    wait_next = np.full(n, -1, dtype=np.int64)

    # -- the rounds
    members = np.zeros((total, shards), dtype=np.int64)
    counter_fired = np.zeros((total, shards), dtype=np.bool_)
    counters_in = np.zeros(total, dtype=np.int64)  # counters of the step processed
    updated = np.zeros(total, dtype=np.bool_)  # the step's update processed
    round_step = -1  # the step whose counters the rounds' process waits for
    global_step = 0
    completed = 0  # asynchronous: updates applied
    last_held = 0  # the steps (updates) the last checkpoint holds
    measured = False
    dropped = 0
    dropped_measured = 0
    checkpoints = 0
    rows = 0

    heap = [(0.0, 0, 0, 0, 0, 0)]
    heap.pop()
    seq = np.zeros(1, dtype=np.int64)
    for w in range(n):
        _schedule(heap, seq, 0.0, _URGENT, _INIT, w, 0)
    if not asynchronous:
        _schedule(heap, seq, 0.0, _URGENT, _INIT_ROUNDS, 0, 0)
    resume = np.empty(n, dtype=np.int64)
    finished_slots = np.empty(most, dtype=np.int64)
    finished_ids = np.empty(most, dtype=np.int64)

    while len(heap) > 0:
        now, _, _, kind, a, b = heapq.heappop(heap)
        n_resume = 0
        if kind == _FINISHED:
            break
        if kind == _INIT:
            resume[0] = a
            n_resume = 1
        elif kind in (_START, _WAKE):
            if kind == _WAKE and a != token:
                continue  # superseded by a later rate change
            # bring the bytes left up to date (FlowNetwork._advance)
            dt = now - last
            if dt > 0 and n_flows > 0:
                for f in range(n_flows):
                    f_left[f] -= f_rate[f] * dt
            last = now
            n_done = 0
            if kind == _START:
                slot = a
                del slot_of[s_time[slot]]
                p = s_head[slot]
                while p >= 0:
                    j = p_j[p]
                    w = p_w[p]
                    if p_dir[p] == _PULL:
                        for k in range(width):
                            f_paths[n_flows, k] = pull_paths[w, j, k]
                    else:
                        for k in range(width):
                            f_paths[n_flows, k] = push_paths[w, j, k]
                    f_left[n_flows] = p_size[p]
                    f_tol[n_flows] = p_size[p] * 1e-9 + 1e-9
                    f_batch[n_flows] = p_batch[p]
                    n_flows += 1
                    nxt = p_next[p]
                    p_free[n_p_free] = p
                    n_p_free += 1
                    p = nxt
                s_free[n_s_free] = slot
                n_s_free += 1
            else:
                # done: less than a rounding sliver left, or less time left than the clock
                # can resolve now (FlowNetwork._complete)
                scale = max(abs(now), 1.0)
                resolution = 4 * (np.nextafter(scale, np.inf) - scale)
                kept = 0
                for f in range(n_flows):
                    if f_left[f] <= f_tol[f] or f_left[f] <= f_rate[f] * resolution:
                        finished_slots[n_done] = f_batch[f]
                        finished_ids[n_done] = b_id[f_batch[f]]
                        n_done += 1
                    else:
                        if kept != f:
                            for k in range(width):
                                f_paths[kept, k] = f_paths[f, k]
                            f_left[kept] = f_left[f]
                            f_tol[kept] = f_tol[f]
                            f_batch[kept] = f_batch[f]
                        kept += 1
                n_flows = kept
            if n_done > 0:
                # count them against their transfers, in the order the transfers were
                # made; a transfer whose flows have all arrived fires (np.unique's order)
                order = np.argsort(finished_ids[:n_done], kind="mergesort")
                for i in range(n_done):
                    slot = finished_slots[order[i]]
                    b_left[slot] -= 1
                    if b_left[slot] == 0:
                        if b_dir[slot] == _PULL:
                            pull_triggered[b_w[slot], b_g[slot]] = True
                        _schedule(heap, seq, now, _NORMAL, _BATCH, slot, 0)
            # new rates, and a wake-up at the first completion (FlowNetwork._reschedule)
            token += 1
            if n_flows > 0:
                first = fill(f_paths, n_flows, capacity, f_left, f_rate, work)
                _schedule(heap, seq, now + max(first, 0.0), _NORMAL, _WAKE, token, 0)
        elif kind == _BATCH:
            slot = a
            w = b_w[slot]
            if b_dir[slot] == _PULL:
                g = b_g[slot]
                w_pulls_in[w] += 1
                if not overlap and w_pulls_in[w] == groups:
                    _schedule(heap, seq, now, _NORMAL, _GATE, w, 0)
                if overlap and w_state[w] == _W_PULLED and w_g[w] == g:
                    resume[0] = w
                    n_resume = 1
            elif not asynchronous:
                # the push's part is counted at its shard (SyncRounds.counter)
                j = b_j[slot]
                step = w_step[w]
                parts_left[w, j] -= 1
                if parts_left[w, j] == 0:
                    if counter_fired[step, j]:
                        if not w_dropped[w]:
                            w_dropped[w] = True
                            dropped += 1
                            if step >= warmup:
                                dropped_measured += 1
                    else:
                        members[step, j] += 1
                        if members[step, j] >= needed:
                            counter_fired[step, j] = True
                            _schedule(heap, seq, now, _NORMAL, _COUNTED, step, j)
            if b_dir[slot] == _PUSH:
                w_pushed[w] += 1
                if w_pushes_awaited[w] and w_pushed[w] == w_pushes[w]:
                    _schedule(heap, seq, now, _NORMAL, _PUSHED, w, 0)
            b_free[n_b_free] = slot
            n_b_free += 1
        elif kind in (_TIMER, _GATE, _PUSHED, _ADMITTED):
            resume[0] = a
            n_resume = 1
        elif kind == _EVALUATE:
            _schedule(heap, seq, now + evaluation_s, _NORMAL, _EVALUATED, 0, 0)
        elif kind == _EVALUATED:
            boundary += evaluate_every
            if gate >= 0:
                _schedule(heap, seq, now, _NORMAL, _OPENED, gate, 0)
                gate = -1
        elif kind == _OPENED:
            w = gate_head[a]
            while w >= 0:
                resume[n_resume] = w
                n_resume += 1
                w = gate_next[w]
        elif kind == _UPDATED:
            updated[a] = True
            w = wait_head[a]
            while w >= 0:
                resume[n_resume] = w
                n_resume += 1
                w = wait_next[w]
        else:
            # the rounds' process (SyncRounds.coordinate)
            step = a
            phase = -1  # -1: waits for a step's counters
            if kind == _INIT_ROUNDS:
                step = -1
                phase = 3
            elif kind == _COUNTED:
                counters_in[step] += 1
                if step == round_step and counters_in[step] == shards:
                    _schedule(heap, seq, now, _NORMAL, _ROUND, step, 0)
            elif kind == _ROUND:
                phase = 0
            else:
                phase = b
            if phase == 0:
                if update_s:
                    _schedule(heap, seq, now + update_s, _NORMAL, _ROUND_TIMER, step, 1)
                    phase = -1
                else:
                    phase = 1
            if phase == 1:
                done = step + 1
                if every and done % every == 0:
                    _schedule(heap, seq, now + checkpoint_s, _NORMAL, _ROUND_TIMER, step, 2)
                    phase = -1
                else:
                    phase = 2
            if phase == 2:
                if every and (step + 1) % every == 0:
                    checkpoints += 1
                    totals[6] = step + 1
                    totals[7] = now
                step_ends[step] = now
                global_step = step + 1
                _schedule(heap, seq, now, _NORMAL, _UPDATED, step, 0)
                phase = 3
            if phase == 3 and step + 1 < total:
                round_step = step + 1
                if counters_in[round_step] == shards:
                    _schedule(heap, seq, now, _NORMAL, _ROUND, round_step, 0)

        # -- the workers resumed by this entry, each until it waits again
        for r in range(n_resume):
            w = resume[r]
            while True:
                state = w_state[w]
                step = w_step[w]
                if state == _W_BEGIN:
                    # Simulation.begin_step, then SyncRounds.await_previous
                    if not asynchronous and not measured and step >= warmup:
                        measured = True
                        totals[0] = now
                        totals[1] = network_bytes
                    w_start[w] = now
                    w_stall[w] = 0.0
                    w_state[w] = _W_BARRIER if asynchronous else _W_DISPATCH
                elif state == _W_BARRIER:
                    # EvaluationBarrier.admit: none past the next evaluation till it is done
                    w_state[w] = _W_BOUND
                    if evaluate_every and dispatched >= boundary:
                        if gate < 0:
                            gate = gates
                            gates += 1
                        gate_next[w] = -1
                        if gate_tail[gate] < 0:
                            gate_head[gate] = w
                        else:
                            gate_next[gate_tail[gate]] = w
                        gate_tail[gate] = w
                        w_state[w] = _W_BARRIER
                        break
                    if evaluate_every:
                        w_start[w] = now  # after a wait, the step starts now
                        dispatched += 1
                elif state == _W_BOUND:
                    w_state[w] = _W_DISPATCH
                    if bound >= 0 and not _may_start(iterations, w, step, bound):
                        ssp_w[n_ssp] = w
                        ssp_it[n_ssp] = step
                        n_ssp += 1
                        w_state[w] = _W_ADMITTED
                        break
                    if not asynchronous and step > 0 and not updated[step - 1]:
                        w_state[w] = _W_PREVIOUS
                        wait_next[w] = -1
                        if wait_tail[step - 1] < 0:
                            wait_head[step - 1] = w
                        else:
                            wait_next[wait_tail[step - 1]] = w
                        wait_tail[step - 1] = w
                        break
                elif state in (_W_PREVIOUS, _W_ADMITTED):
                    w_start[w] = now
                    w_state[w] = _W_DISPATCH
                elif state == _W_DISPATCH:
                    w_version[w] = completed
                    w_pull_start[w] = now
                    w_state[w] = _W_PULLS
                    if dispatch_s:
                        _schedule(heap, seq, now + dispatch_s, _NORMAL, _TIMER, w, 0)
                        break
                elif state == _W_PULLS:
                    # every group's pull (ServerGroup.pull): one transfer each
                    for g in range(groups):
                        pull_triggered[w, g] = False
                    w_pulls_in[w] = 0
                    w_pushes[w] = 0
                    w_pushed[w] = 0
                    w_pushes_awaited[w] = False
                    w_dropped[w] = False
                    w_push_start[w] = np.nan
                    for j in range(shards):
                        parts_left[w, j] = parts_of_shard[j]
                    for g in range(groups):
                        slot = b_free[n_b_free - 1]
                        n_b_free -= 1
                        b_id[slot] = next_id
                        next_id += 1
                        b_dir[slot] = _PULL
                        b_w[slot] = w
                        b_g[slot] = g
                        flows = 0
                        moved = 0.0
                        for j in range(shards):
                            if parts[g, j] > 0:
                                flows += 1
                                if pull_inter[w, j]:
                                    moved += parts[g, j]
                        b_left[slot] = flows
                        if flows == 0:  # nothing to move: done at once
                            pull_triggered[w, g] = True
                            _schedule(heap, seq, now, _NORMAL, _BATCH, slot, 0)
                            continue
                        network_bytes += moved
                        # the flows by start time, each instant once (np.unique's order)
                        base = now + call_s
                        for j in range(shards):
                            if parts[g, j] <= 0:
                                continue
                            at = base + pull_latency[w, j]
                            p = p_free[n_p_free - 1]
                            n_p_free -= 1
                            p_w[p] = w
                            p_j[p] = j
                            p_dir[p] = _PULL
                            p_size[p] = parts[g, j]
                            p_batch[p] = slot
                            p_next[p] = -1
                            if at not in slot_of:
                                s = s_free[n_s_free - 1]
                                n_s_free -= 1
                                slot_of[at] = s
                                s_time[s] = at
                                s_head[s] = p
                                s_tail[s] = p
                                _schedule(heap, seq, now + (at - now), _NORMAL, _START, s, 0)
                            else:
                                s = slot_of[at]
                                p_next[s_tail[s]] = p
                                s_tail[s] = p
                    w_delay[w] = delays[w, step]
                    w_g[w] = 0
                    if overlap:
                        w_state[w] = _W_FORWARD
                    else:
                        w_waited[w] = now
                        w_state[w] = _W_GATE
                        break
                elif state == _W_GATE:
                    w_stall[w] += now - w_waited[w]
                    w_state[w] = _W_FORWARD
                elif state == _W_FORWARD:
                    g = w_g[w]
                    if g == groups:
                        w_pull_end[w] = now
                        w_g[w] = groups - 1
                        w_state[w] = _W_BACKWARD
                        continue
                    if not pull_triggered[w, g]:
                        w_waited[w] = now
                        w_state[w] = _W_PULLED
                        break
                    w_state[w] = _W_PULLED
                    # the group's forward at once (falls through to _W_PULLED's compute)
                    w_waited[w] = now
                    continue
                elif state == _W_PULLED:
                    g = w_g[w]
                    w_stall[w] += now - w_waited[w]
                    x = forward_s[g] * factors[w, step] + w_delay[w]
                    w_delay[w] = 0.0
                    w_g[w] = g + 1
                    w_state[w] = _W_FORWARD
                    if x > 0:
                        _schedule(heap, seq, now + x, _NORMAL, _TIMER, w, 0)
                        break
                elif state == _W_BACKWARD:
                    g = w_g[w]
                    if g < 0:
                        w_state[w] = _W_COMPUTED
                        continue
                    x = backward_s[g] * factors[w, step] + 0.0
                    w_state[w] = _W_BACKWARD_DONE
                    if x > 0:
                        _schedule(heap, seq, now + x, _NORMAL, _TIMER, w, 0)
                        break
                elif state in (_W_BACKWARD_DONE, _W_COMPUTED):
                    if state == _W_COMPUTED:
                        w_compute_end[w] = now
                        first_g, last_g = groups - 1, -1
                        if overlap:
                            first_g = -1  # pushed as backward went
                        else:
                            w_push_start[w] = now
                    else:
                        first_g, last_g = w_g[w], w_g[w] - 1
                        if not overlap:
                            first_g = -1
                        elif np.isnan(w_push_start[w]):
                            w_push_start[w] = now
                    # each group's push (ServerGroup.push): a transfer per shard
                    g = first_g
                    while g > last_g:
                        for j in range(shards):
                            size = parts[g, j]
                            if size <= 0:
                                continue
                            slot = b_free[n_b_free - 1]
                            n_b_free -= 1
                            b_id[slot] = next_id
                            next_id += 1
                            b_dir[slot] = _PUSH
                            b_w[slot] = w
                            b_g[slot] = g
                            b_j[slot] = j
                            b_left[slot] = 1
                            w_pushes[w] += 1
                            if push_inter[w, j]:
                                network_bytes += size
                            at = (now + call_s) + push_latency[w, j]
                            p = p_free[n_p_free - 1]
                            n_p_free -= 1
                            p_w[p] = w
                            p_j[p] = j
                            p_dir[p] = _PUSH
                            p_size[p] = size
                            p_batch[p] = slot
                            p_next[p] = -1
                            if at not in slot_of:
                                s = s_free[n_s_free - 1]
                                n_s_free -= 1
                                slot_of[at] = s
                                s_time[s] = at
                                s_head[s] = p
                                s_tail[s] = p
                                _schedule(heap, seq, now + (at - now), _NORMAL, _START, s, 0)
                            else:
                                s = slot_of[at]
                                p_next[s_tail[s]] = p
                                s_tail[s] = p
                        g -= 1
                    if state == _W_BACKWARD_DONE:
                        w_g[w] -= 1
                        w_state[w] = _W_BACKWARD
                        continue
                    # every push arrived (all_of(pushes), at once if they all have)
                    w_state[w] = _W_PUSHED
                    if w_pushed[w] == w_pushes[w]:
                        _schedule(heap, seq, now, _NORMAL, _PUSHED, w, 0)
                    else:
                        w_pushes_awaited[w] = True
                    break
                elif state == _W_PUSHED:
                    w_push_end[w] = now
                    if asynchronous:
                        w_state[w] = _W_APPLY
                        if update_s:
                            _schedule(heap, seq, now + update_s, _NORMAL, _TIMER, w, 0)
                            break
                        continue
                    w_state[w] = _W_RECORD
                    if not updated[step]:
                        wait_next[w] = -1
                        if wait_tail[step] < 0:
                            wait_head[step] = w
                        else:
                            wait_next[wait_tail[step]] = w
                        wait_tail[step] = w
                        break
                elif state == _W_APPLY:
                    # Simulation.apply_update, then the chief's checkpoint if one is due
                    w_staleness[w] = completed - w_version[w]
                    if completed < total:
                        step_ends[completed] = now
                        completed += 1
                        if not measured and completed >= warmup:
                            measured = True
                            totals[0] = now
                            totals[1] = network_bytes
                        if completed >= total:
                            _schedule(heap, seq, now, _NORMAL, _FINISHED, 0, 0)
                    iterations[w] = step + 1
                    if bound >= 0:
                        # StalenessBound.release: wake the waiters now within the bound
                        kept = 0
                        for i in range(n_ssp):
                            if _may_start(iterations, ssp_w[i], ssp_it[i], bound):
                                _schedule(heap, seq, now, _NORMAL, _ADMITTED, ssp_w[i], 0)
                            else:
                                ssp_w[kept] = ssp_w[i]
                                ssp_it[kept] = ssp_it[i]
                                kept += 1
                        n_ssp = kept
                    if evaluate_every and completed == boundary:
                        # EvaluationBarrier.applied: the evaluation starts (a process)
                        _schedule(heap, seq, now, _URGENT, _EVALUATE, 0, 0)
                    w_state[w] = _W_RECORD
                    if w == 0 and every and completed // every > last_held // every:
                        w_g[w] = completed  # the updates the checkpoint holds
                        w_state[w] = _W_CHECKPOINTED
                        _schedule(heap, seq, now + checkpoint_s, _NORMAL, _TIMER, w, 0)
                        break
                elif state == _W_CHECKPOINTED:
                    checkpoints += 1
                    last_held = w_g[w]
                    totals[6] = last_held
                    totals[7] = now
                    w_state[w] = _W_RECORD
                elif state == _W_RECORD:
                    # Simulation.record: the pull and push spans, exposed beyond compute
                    end = now
                    compute_end = w_compute_end[w]
                    pull_start, pull_end = w_pull_start[w], w_pull_end[w]
                    push_start, push_end = w_push_start[w], w_push_end[w]
                    if np.isnan(push_start):
                        push_start = end
                    exposed = 0.0
                    exposed += max(0.0, min(pull_end, end) - max(pull_start, compute_end))
                    exposed += max(0.0, min(push_end, end) - max(push_start, compute_end))
                    rec_int[rows, 0] = w
                    rec_int[rows, 1] = step
                    rec_int[rows, 2] = w_staleness[w]
                    rec[rows, 0] = w_start[w]
                    rec[rows, 1] = compute_end
                    rec[rows, 2] = max(pull_end, push_end)
                    rec[rows, 3] = end
                    rec[rows, 4] = exposed + w_stall[w]
                    rec[rows, 5] = w_stall[w]
                    rows += 1
                    following = step + 1 if asynchronous else max(step + 1, global_step)
                    if following >= total:
                        w_state[w] = _W_DONE
                        break
                    w_step[w] = following
                    w_state[w] = _W_BEGIN
                else:
                    break

    totals[2] = network_bytes
    totals[3] = dropped
    totals[4] = dropped_measured
    totals[5] = checkpoints
    return rows
