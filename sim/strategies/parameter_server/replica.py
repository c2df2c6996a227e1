"""Asynchronous parameter servers on a replica of the cluster: the bounded engine.

Under dedicated servers, the links that carry the flows of several hosts are the servers'
NICs and the switch core (`Topology.shared_by_hosts`); every other link a flow crosses
belongs to one host. Take k copies of a job of N / k workers whose shared links have 1 / k
of their capacity, each copy's workers drawing the same compute times: max-min fairness
gives every copy's flows the rates the small job's get, so the whole job runs as the small
one does, k times over. The replica runs that small job on the compiled engine, exactly,
and puts its records down k times (worker w of the replica's N / k is also worker
w + N / k, w + 2 N / k, ...; their updates land at its instants, its staleness k times
over, the bytes k times over).

The whole job's workers draw their compute times independently, so it is not exact: its
error against the exact engine (throughput, step-time mean and p99) is measured on large
random jobs, the bundled scenarios and the benchmark's cases (`tools/bounded_error.py`,
docs/performance.md). It runs only where the replica keeps `REPLICA_WORKERS` workers
or more, asynchronously, without a staleness bound, persistent stragglers, a target,
checkpoints or failures (which couple a worker to the slowest, to its own index, or to
the run's clock), and without an oversubscribed core (one link every flow crosses,
where the measured error went past the bound); `sim.timing: exact` times every
worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: the fewest workers a replica keeps
REPLICA_WORKERS = 256
#: the engine's name in meta.json's `engines`
NAME = "ps-lockstep-replica"


def factor(sim: Simulation) -> int:
    """k: the copies the job is made of (1: none, the exact engine times it). The largest
    divisor of the hosts whose replica keeps at least `REPLICA_WORKERS` workers."""
    spec = sim.spec
    strategy = spec.strategy
    if (
        spec.sim.timing == "exact"
        or strategy.sync
        or strategy.staleness is not None
        or strategy.max_iterations_ahead is not None
        or strategy.placement != "dedicated"
        or spec.cluster.network.oversubscription > 1
        or spec.stragglers.slow
        or spec.training.target is not None
        or sim.checkpoint_every
        or spec.failures
    ):
        return 1
    hosts, devices = spec.cluster.hosts, spec.cluster.devices_per_host
    copies = [k for k in range(2, hosts + 1) if hosts % k == 0]
    return max((k for k in copies if hosts // k * devices >= REPLICA_WORKERS), default=1)


def replica(sim: Simulation, k: int) -> Simulation:
    """The small job: 1 / k of the hosts, ceil(updates / k) of the updates (of them,
    ceil(warm-up / k) warm-up), timed exactly, its shared links at 1 / k."""
    spec = sim.spec
    training = spec.training
    warmup = -(-training.warmup_steps // k)
    total = -(-sim.total_steps // k)
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


def expand(
    rec_int: np.ndarray,
    rec: np.ndarray,
    step_ends: np.ndarray,
    totals: np.ndarray,
    k: int,
    workers: int,
    total: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replica's records (`rec_int`: worker, iteration, staleness; `rec`: the
    times), update times and totals (measure start, its bytes, bytes on the network,
    ...), for the whole job of k x `workers` workers and `total` updates: each record
    and update k times, the copies of the last updates past `total` left out."""
    copies = np.tile(np.arange(k), len(rec_int))
    ints = np.repeat(rec_int, k, axis=0)
    ints[:, 0] += copies * workers
    ints[:, 2] *= k
    times = np.repeat(rec, k, axis=0)
    extra = k * len(step_ends) - total
    if extra:
        ints, times = ints[:-extra], times[:-extra]
    scaled = totals.copy()
    scaled[1:3] *= k
    return ints, times, np.repeat(step_ends, k)[:total], scaled
