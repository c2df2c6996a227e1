"""Parameter servers on a replica of part of the cluster: the bounded engine.

Under dedicated servers, the links that carry the flows of several hosts are the servers'
NICs and the switch core (`Topology.shared_by_hosts`); every other link a flow crosses
belongs to one host. Take k copies of a job of N / k workers whose shared links have 1 / k
of their capacity, each copy's workers drawing the same compute times: max-min fairness
gives every copy's flows the rates the small job's get, so the whole job runs as the small
one does, k times over. The replica runs that small job on the compiled engine, exactly,
and puts its records down k times (worker w of the replica's N / k is also worker
w + N / k, w + 2 N / k, ...; asynchronously their updates land at its instants, its
staleness k times over; the bytes k times over).

The whole job's workers draw their compute times independently, so it is not exact: its
error against the exact engine (throughput, step-time mean and p99) is measured on large
random jobs, the bundled scenarios and the benchmark's cases (`tools/bounded_error.py`,
docs/performance.md). It runs only where the replica keeps `REPLICA_WORKERS` workers or
more, without persistent stragglers, a target, checkpoints or failures (which tie a
worker to its own index or to the run's clock), host aggregation (its error was not
measured) and without an oversubscribed core (one
link every flow crosses, where the measured error went past the bound); asynchronously
without a staleness bound; synchronously without backup workers or hiccups, and where
its slowest worker stays as slow as the job's (`holds`). `sim.timing: exact` times
every worker.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from .hosts import aggregated

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: the fewest workers a replica keeps
REPLICA_WORKERS = 256
#: a synchronous replica's bound on its slowest worker's bias, of the step time (`holds`)
SYNC_BIAS = 0.002
#: the engine's name in meta.json's `engines`
NAME = "ps-lockstep-replica"


def factor(sim: Simulation) -> int:
    """k: the copies the job is made of (1: none, the exact engine times it). The largest
    divisor of the hosts whose replica keeps at least `REPLICA_WORKERS` workers."""
    spec = sim.spec
    strategy = spec.strategy
    if (
        spec.sim.timing == "exact"
        or strategy.placement != "dedicated"
        or spec.cluster.network.oversubscription > 1
        or spec.stragglers.slow
        or spec.training.target is not None
        or sim.checkpoint_every
        or spec.failures
        or aggregated(sim) > 1
    ):
        return 1
    if strategy.sync:  # a round waits for the slowest: no drops, no rare hiccups
        if strategy.backup_workers or spec.stragglers.transient is not None:
            return 1
    elif strategy.staleness is not None or strategy.max_iterations_ahead is not None:
        return 1
    hosts, devices = spec.cluster.hosts, spec.cluster.devices_per_host
    copies = [k for k in range(2, hosts + 1) if hosts % k == 0]
    return max((k for k in copies if hosts // k * devices >= REPLICA_WORKERS), default=1)


def replica(sim: Simulation, k: int) -> Simulation:
    """The small job: 1 / k of the hosts, timed exactly, its shared links at 1 / k; its
    steps the job's, or asynchronously ceil(updates / k) updates (of them, ceil(warm-up
    / k) warm-up)."""
    spec = sim.spec
    training = spec.training
    warmup, total = training.warmup_steps, sim.total_steps
    if not spec.strategy.sync:
        warmup, total = -(-warmup // k), -(-total // k)
    small = spec.model_copy(
        update={
            "cluster": spec.cluster.model_copy(update={"hosts": spec.cluster.hosts // k}),
            "training": training.model_copy(
                update={"warmup_steps": warmup, "steps": total - warmup}
            ),
            "sim": spec.sim.model_copy(update={"timing": "exact"}),
        }
    )
    copy = type(sim)(small, replication=sim.replication)
    shared = copy.topology.shared_by_hosts()
    copy.topology.capacity[shared] /= k
    return copy


def holds(sim: Simulation, small: Simulation, rec: np.ndarray, step_ends: np.ndarray) -> bool:
    """Whether the replica's steps stand for the job's. Asynchronously, always (its
    measured error). A synchronous step waits for the slowest of N workers' compute,
    the replica's for the slowest of N / k: the expected slowest of n lognormal factors
    (the jitter's and each device's own, sigma^2 = ln(1 + cv^2) each) is about
    exp(sigma z_n), z_n the normal's (n - 3/8) / (n + 1/4) quantile (Blom). The replica
    holds where that difference, times its mean compute, is at most `SYNC_BIAS` of its
    mean step time."""
    if not sim.spec.strategy.sync:
        return True
    stragglers = sim.spec.stragglers
    sigma = math.sqrt(math.log1p(stragglers.jitter**2) + math.log1p(stragglers.variability**2))
    if sigma == 0.0:
        return True

    compute = float(np.mean(rec[:, 1] - rec[:, 0] - rec[:, 5]))  # compute end - start - stall
    step = float(np.mean(np.diff(step_ends)))
    bias = compute * (slowest(sim.workers, sigma) - slowest(small.workers, sigma))
    return bias <= SYNC_BIAS * step


def slowest(n: int, sigma: float) -> float:
    """About the expected largest of n factors exp(sigma Z), Z standard normal."""
    return math.exp(sigma * NormalDist().inv_cdf((n - 0.375) / (n + 0.25)))


def expand(
    rec_int: np.ndarray,
    rec: np.ndarray,
    step_ends: np.ndarray,
    totals: np.ndarray,
    k: int,
    workers: int,
    total: int,
    sync: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replica's records (`rec_int`: worker, iteration, staleness; `rec`: the
    times), update times and totals (measure start, its bytes, bytes on the network,
    ...), for the whole job of k x `workers` workers and `total` updates: each record
    and update k times, the copies of the last updates past `total` left out (`sync`:
    each record k times, the steps the replica's)."""
    copies = np.tile(np.arange(k), len(rec_int))
    ints = np.repeat(rec_int, k, axis=0)
    ints[:, 0] += copies * workers
    ints[:, 2] *= k
    times = np.repeat(rec, k, axis=0)
    scaled = totals.copy()
    scaled[1:3] *= k
    if sync:
        return ints, times, step_ends, scaled
    extra = k * len(step_ends) - total
    if extra:
        ints, times = ints[:-extra], times[:-extra]
    return ints, times, np.repeat(step_ends, k)[:total], scaled
