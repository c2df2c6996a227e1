"""Host aggregation on the compiled parameter-server engine (`loop.py`): what a host does
between its pulls' arrival and its pushes, computed once the last pull is in.

With `local_aggregation` on hosts of D devices a member of the job is a host
(`sim/strategies/parameter_server/hosts.py`): its first device pulls every group for its
devices and sends each down the host's chain of devices, every device computes, each
group's gradients are reduced up the chain, one group after another from the last, and
the first device pushes each once it is reduced. The chain crosses the devices' ports
alone, which no transfer between hosts crosses, and in a step every broadcast is in
before any device runs its backward and every reduce ends before the host's next step
starts. So what happens inside the host depends on its pulls' arrivals and its devices'
draws only, and the rest of the job depends on it through the pushes' starts only: the
engine moves the host's pulls on the network and, once the last has arrived, `host_step`
gives the rest, as the event engine's processes would:

* the broadcasts: each group's starts (D - 1) fabric latencies after its pull arrived,
  its bytes on every hop of the chain at once; the broadcasts in flight share every hop
  alike, each at the hop's rate / their count (max-min fair): a processor-sharing queue,
  whose flows are done, as `FlowNetwork`'s, when a rounding sliver is left;
* each device's forward, group by group once that group's broadcast is in (all of them
  first without `overlap`), its hiccup on the first group, then its backward from the
  last group; a group is ready once every device has its gradients (after its whole
  backward without `overlap`);
* the reduces, one after another from the last group: each starts once its group is
  ready and the reduce before it is done, its bytes moving alone at the hop's rate after
  (D - 1) latencies.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .net import clock_resolution, sliver

# the rows of a host's scratch (groups wide): each broadcast's start, bytes left, rounding
# sliver, state (`PENDING`, `MOVING`, `DONE`) and end, each group's ready time
BSTART, BLEFT, BTOL, BSTATE, BDONE, GREADY = range(6)
N_SCRATCH = 6
PENDING, MOVING, DONE = 0.0, 1.0, 2.0


@njit(cache=True)
def _broadcasts(arrived, nbytes, hop_start, rate, scratch):  # type: ignore[no-untyped-def]
    """Each group's broadcast down the chain, started `hop_start` after its pull
    `arrived`: the end of each into scratch[BDONE]. Returns the last end."""
    groups = nbytes.shape[0]
    start, left, tol = scratch[BSTART], scratch[BLEFT], scratch[BTOL]
    state, done = scratch[BSTATE], scratch[BDONE]
    for g in range(groups):
        start[g] = arrived[g] + hop_start
        state[g] = PENDING
    pending, moving = groups, 0
    last, wake, share = 0.0, np.inf, rate
    while pending > 0 or moving > 0:
        begins = np.inf
        for g in range(groups):
            if state[g] == PENDING and start[g] < begins:
                begins = start[g]
        now = min(begins, wake)
        if moving > 0 and now - last > 0:  # FlowNetwork._advance
            for g in range(groups):
                if state[g] == MOVING:
                    left[g] -= share * (now - last)
        last = now
        if begins <= wake:  # FlowNetwork._start: the flows that start now join
            for g in range(groups):
                if state[g] == PENDING and start[g] == now:
                    pending -= 1
                    if nbytes[g] <= 0:  # latency only: done on arrival
                        state[g], done[g] = DONE, now
                    else:
                        state[g], left[g], tol[g] = MOVING, nbytes[g], sliver(nbytes[g])
                        moving += 1
        else:  # FlowNetwork._complete: those with a rounding sliver left are done
            resolution = clock_resolution(now)
            for g in range(groups):
                if state[g] == MOVING and (left[g] <= tol[g] or left[g] <= share * resolution):
                    state[g], done[g] = DONE, now
                    moving -= 1
        wake = np.inf  # FlowNetwork._reschedule
        if moving > 0:
            share = rate / moving
            dt = np.inf
            for g in range(groups):
                if state[g] == MOVING:
                    dt = min(dt, left[g] / share)
            wake = now + max(dt, 0.0)
    end = -np.inf
    for g in range(groups):
        end = max(end, done[g])
    return end


@njit(cache=True)
def host_step(h, t0, step, devices, overlap, latency, rate, arrived, compute, jitter,  # type: ignore[no-untyped-def]
              scratch, reduced, dev):
    """Host h's step (its devices h D .. h D + D - 1), begun at `t0`, its pulls in at
    `arrived` (by group): each group's reduce's end into `reduced` (by group), each
    device's compute end and stall into dev[0], dev[1]. Returns the broadcasts' end (the
    pulls' span ends there) and the time the last group is ready (the pushes' span
    starts there). latency, rate: a hop's; compute: each group's forward (0) and
    backward (1) seconds and bytes (2); jitter: each device's factors (0) and delays (1)
    by step."""
    nbytes = compute[2]
    groups = nbytes.shape[0]
    hop_start = (devices - 1) * latency
    pulled = _broadcasts(arrived, nbytes, hop_start, rate, scratch)
    done, ready = scratch[BDONE], scratch[GREADY]
    for g in range(groups):
        ready[g] = -np.inf
    for d in range(devices):
        w = h * devices + d
        factor, delay = jitter[0, w, step], jitter[1, w, step]
        t, stall = t0, 0.0
        if not overlap:  # every broadcast first
            stall += pulled - t
            t = pulled
        for g in range(groups):
            if done[g] > t:
                stall += done[g] - t
                t = done[g]
            x = compute[0, g] * factor + delay
            delay = 0.0
            if x > 0:
                t = t + x
        for g in range(groups - 1, -1, -1):
            x = compute[1, g] * factor + 0.0
            if x > 0:
                t = t + x
            if overlap:
                ready[g] = max(ready[g], t)
        if not overlap:
            for g in range(groups):
                ready[g] = max(ready[g], t)
        dev[0, w] = t
        dev[1, w] = stall
    previous = -np.inf
    for g in range(groups - 1, -1, -1):
        begins = max(ready[g], previous) + hop_start
        reduced[g] = begins + nbytes[g] / rate if nbytes[g] > 0 else begins
        previous = reduced[g]
    return pulled, ready[groups - 1]
