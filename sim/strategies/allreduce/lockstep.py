"""Synchronous all-reduce in lockstep: one step of every worker computed as arrays.

In the common case the event engine (`training.py`) spends its time on per-worker
SimPy events that all do the same thing: every worker computes its buckets, one stream
reduces each bucket once the last worker handed it in, everyone waits for the step's last
collective. When nothing else touches the network and nothing interrupts the job, that
step is a closed recurrence over the workers (N of them, buckets b = 1..B in ready order):

    r[w, b]   = s[w] + d[w] + f[w] * ready_s[b]         (hiccup d, jitter x slowness f)
    c[w]      = s[w] + d[w] + f[w] * step_s             (compute_end)
    start[b]  = max(end[b - 1], max_w r[w, b]),  end[0] = the step's start
    end[b]    = start[b] + D(bytes[b])
    step_end  = end[B] (+ the checkpoint, when one is due)
    s'[w]     = max(step_end, c[w])                     (the next step's start)

D(bytes) is the collective's duration on an idle network: the same algorithm and network
code as the event engine (`sim/network/collectives.py`, `sim/network/backends.py`), run once
per bucket size on a network of its own. Only collectives use the network here, one at a
time, so the time a collective takes does not depend on when it starts.

`eligible` says when this applies: synchronous all-reduce with at least one gradient
bucket, compute that is plain time (no calibrated CPU cores shared with transfers), no
failures, no trace. The per-worker sums are done in the event engine's order (the same
floating-point additions), so both engines give the same results to rounding; the tests
compare them (tests/test_lockstep.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim.costs.compute import Bucket
from sim.engine.outcome import SimulationOutcome
from sim.network.backends import make_network
from sim.network.collectives import ALGORITHMS

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


def eligible(sim: Simulation) -> bool:
    """Whether `run` gives this point's results (otherwise the event engine does)."""
    spec = sim.spec
    strategy = spec.strategy
    return (
        sim.compute_rate is None
        and not spec.failures
        and not sim.tracer.enabled
        and bool(sim.compute.buckets(strategy.fusion_buffer, strategy.overlap))
    )


def collective_time(sim: Simulation, nbytes: float) -> tuple[float, float]:
    """Seconds one all-reduce of `nbytes` takes on the idle network, and the bytes it puts
    on the network between hosts. In graph on the calibrated machine: the measured
    all-reduce among one process's devices (training.py), nothing between hosts."""
    in_graph_s = sim.costs.in_graph_s(nbytes)
    if in_graph_s is not None:
        return in_graph_s, 0.0
    env = simpy.Environment()
    net = make_network(sim.spec.sim.network_model, env, sim.topology)
    algorithm = ALGORITHMS[sim.spec.strategy.algorithm]
    env.process(algorithm(net, list(range(sim.workers)), nbytes, sim.costs.collective))
    env.run()
    return env.now, net.bytes_on_network


def run(sim: Simulation) -> SimulationOutcome:
    """Every step of the run, a step at a time, each over all workers at once."""

    strategy = sim.spec.strategy
    n, total = sim.workers, sim.total_steps
    buckets = sim.compute.buckets(strategy.fusion_buffer, strategy.overlap)
    segments, tail, durations, step_bytes = step_shape(sim, buckets)
    factors = sim.stragglers.factors(n, total)
    delays = sim.stragglers.delays(n, total)

    start = np.zeros(n)
    workers = np.arange(n)  # one array, a view of it in every step's records
    step_end = 0.0
    network_bytes = 0.0
    for step in range(total):
        if sim.measure_start is None and step >= sim.warmup:
            sim.measure_start = (float(start.min()), network_bytes)
        f, d = factors[:, step], delays[:, step]
        # the stream is free once the last step ended
        spans, compute_end = step_spans(start, f, d, segments, tail, durations, step_end)
        network_bytes += step_bytes
        done = step + 1
        sim.completed = done
        step_end = checkpoint_if_due(sim, done, spans[-1][1])
        sim.step_ends[step] = step_end
        end = np.maximum(step_end, compute_end)
        sim.records.extend(
            worker=workers,
            step=step,
            start=start,
            compute_end=compute_end,
            comm_end=max(s[1] for s in spans),
            end=end,
            comm_s=exposed_communication(spans, compute_end, end, n),
            generation=0,
            staleness=0,
        )
        start = end
        sim.report(done, step_end)
    sim.network.bytes_on_network = network_bytes
    return sim.uninterrupted(network_bytes, "lockstep")


def step_shape(
    sim: Simulation, buckets: list[Bucket]
) -> tuple[list[float], float, list[float], float]:
    """What every step repeats: the seconds of compute before each bucket is ready (the
    segments the event engine sleeps), the compute after the last, each bucket's
    collective's seconds on the idle network, and the bytes a step puts between hosts."""
    timing: dict[float, tuple[float, float]] = {}
    for bucket in buckets:
        if bucket.nbytes not in timing:
            timing[bucket.nbytes] = collective_time(sim, bucket.nbytes)
    durations = [timing[b.nbytes][0] for b in buckets]
    step_bytes = sum(timing[b.nbytes][1] for b in buckets)
    segments, elapsed = [], 0.0
    for bucket in buckets:
        segments.append(bucket.ready_s - elapsed)
        elapsed = bucket.ready_s
    return segments, sim.compute.step_s - elapsed, durations, step_bytes


def step_spans(
    start: np.ndarray,
    f: np.ndarray,
    d: np.ndarray,
    segments: list[float],
    tail: float,
    durations: list[float],
    free: float,
) -> tuple[list[tuple[float, float]], np.ndarray]:
    """One step of every worker (started at `start`, hiccup `d`, slowness `f`): each
    bucket's collective (begin, end), begun once the stream is free (`free` at first) and
    the last worker handed the bucket in, and each worker's compute_end."""
    t = np.where(d > 0, start + d, start)
    coll_end = free
    spans = []
    for segment, duration in zip(segments, durations, strict=True):
        x = segment * f
        t = np.where(x > 0, t + x, t)
        begin = max(coll_end, float(t.max()))
        coll_end = begin + duration
        spans.append((begin, coll_end))
    x = tail * f
    return spans, np.where(x > 0, t + x, t)


def checkpoint_if_due(sim: Simulation, done: int, step_end: float) -> float:
    """The step's end after the checkpoint, where one is due after `done` steps (and the
    checkpoint counted on `sim`); `step_end` unchanged otherwise."""
    every = sim.checkpoint_every
    if every and done % every == 0:
        step_end += sim.costs.checkpoint_s
        sim.checkpoint_time += sim.costs.checkpoint_s
        sim.checkpoints += 1
        sim.last_checkpoint = (done, step_end)
    return step_end


def exposed_communication(
    spans: list[tuple[float, float]], compute_end: np.ndarray, end: np.ndarray, n: int
) -> np.ndarray:
    """Each worker's seconds of the step's collectives between its compute_end and its end:
    the communication its step waited for."""
    comm = np.zeros(n)
    for begin, finish in spans:
        comm = comm + np.maximum(0.0, np.minimum(finish, end) - np.maximum(begin, compute_end))
    return comm

