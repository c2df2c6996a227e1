"""Parameter servers on a compiled engine: the event engine's model, in numba.

The event engine (`sync.py` or `asynchronous.py` over `dataflow.py` and the
flow network) spends its time on SimPy events and the Python around them: about 70 per
worker-step. Here the
same job runs in one compiled loop (`kernel/loop.py`) with its own calendar, which replays what
those SimPy processes do, event for event:

* each worker's step: the closure's dispatch, one pull per group of layers (a flow from
  every shard holding part of it), the forward pass group by group once each group has
  arrived (all of them first without `overlap`), the backward pass group by group from the
  output, each group's push to its shards as backward produces it (after backward without
  `overlap`), then the step's update;
* synchronous, each step's round: a shard's counter fires once N - b workers' gradients
  have all arrived there (b = `backup_workers`; later ones are dropped and counted), the
  update once every shard's has, then the checkpoint where one is due; a worker whose
  pushes were late takes up the job's next step, its flows still in flight meanwhile;
* asynchronous: each worker's push, once all of it has arrived, is applied as an update
  of its own (after the closure's own update call), with its staleness; with the SSP
  bound a worker waits to start an iteration more than `staleness` ahead of the slowest
  other; behind the evaluation barrier (a target the engine holds the job for) closures
  go out only up to the next evaluation, which runs once their updates are in; the
  chief writes the checkpoints; the run stops at the last update;
* the flow network: the flows in flight share the links max-min fairly, as
  `FlowNetwork`'s solve shares them whenever flows start or end, but computed without
  solving for every flow on every event (`kernel/net.py`): a link whose fair
  share is the least of its flows' links runs as a processor-sharing queue, and only
  the flows no such link holds are filled (`sim.network.flowkernel.fill`); flows that start at
  the same instant start as one batch, and a flow is done when a rounding sliver is
  left, exactly as `FlowNetwork` does.
* synchronously without backup workers, where no link carries both pulls and pushes,
  the pulls of every step after the first arrive when the first step's did after their
  start: the engine moves the first step's pulls on the network and replays their
  arrivals (`_replays_pulls` says why that is exact);
* with `local_aggregation` on hosts of several devices the members are the hosts, each
  pulling and pushing from its first device (`hosts.py`, `asynchronous_hosts.py`):
  the engine moves a host's pulls and pushes on the network, and what happens inside
  the host in between (its chain's broadcasts, its devices' compute, its reduces)
  depends on nothing else, so it is computed in closed form once the host's last pull
  is in (`kernel/hosts.py`); each device gets its record.

Events at the same instant run in SimPy's order (time, then urgency, then the order they
were scheduled), and every time is computed with the event engine's additions (the
queues' shares and virtual clocks: to rounding), so both engines give the same records
to rounding; the tests compare them on random jobs
(tests/test_ps_lockstep.py, tests/test_ps_lockstep_hosts.py: a host's devices' records
of a step come in the order the host's do, where the event engine writes them in the
order the devices finished computing).

`eligible` says what runs here: parameter servers on the flow network, synchronous with
`sync_scope: step` or asynchronous, host aggregation included but for synchronous
backup workers (a late host's reduce may then still cross its chain while it broadcasts
its next step), without failures, a trace or a calibration profile. Everything else
runs on the event engine. Large jobs of the class `replica.py` names run,
under `sim.timing: auto`, as copies of a replica of part of the cluster, timed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim.engine.convergence import held_by_engine
from sim.engine.outcome import SimulationOutcome
from sim.engine.training import Process

from . import replica
from .dataflow import Dataflow, server_parts
from .hosts import aggregated

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

    from .spans import Joined


def eligible(sim: Simulation) -> bool:
    """Whether `run` gives this point's results (otherwise the event engine does)."""
    spec = sim.spec
    strategy = spec.strategy
    servers = sim.costs.servers
    return (
        (strategy.sync_scope == "step" or not strategy.sync)
        and not (aggregated(sim) > 1 and strategy.sync and strategy.backup_workers)
        and spec.sim.network_model == "flow"
        and spec.cluster.profile is None
        and sim.compute_rate is None
        and servers.closure_s is None
        and not spec.failures
        and not sim.tracer.enabled
    )


def run(sim: Simulation) -> SimulationOutcome:
    """Every step of every worker, on the compiled engine: exactly, or on a replica of
    1 / k of the cluster (`replica.py`) where that bounded engine applies."""
    k = replica.factor(sim)
    if k > 1:
        small = replica.replica(sim, k)
        rec_int, rec, step_ends, totals = _timed(small)
        if replica.holds(sim, small, rec, step_ends):
            arrays = replica.expand(
                rec_int, rec, step_ends, totals, k, small.workers, sim.total_steps,
                sim.spec.strategy.sync,
            )  # fmt: skip
            return _outcome(sim, *arrays, engine=replica.NAME)
    return _outcome(sim, *_timed(sim))


def _timed(sim: Simulation) -> Joined:
    """The compiled engine's records (worker, step, staleness; start, compute end,
    communication end, end, exposed communication, stall), step ends and totals."""
    # numba: only the runs here load it
    from sim.network import flowkernel

    from . import spans
    from .kernel import loop

    topo = sim.topology
    # the server group and the groups a step moves, as the event engine makes them
    servers, dataflow = server_parts(sim, _no_processes)
    # the members: the workers, or the hosts where their devices aggregate first
    devices = aggregated(sim)
    n, total = sim.workers // devices, sim.total_steps
    shards = len(servers.nodes)
    groups = dataflow.groups
    parts = np.array([g.nbytes for g in groups], dtype=float).reshape(len(groups), shards)
    # each group's bytes down and up a host's chain, added as `hosts.py` adds them
    chain_bytes = np.array([sum(g.nbytes) for g in groups], dtype=float)
    pull_paths, pull_latency, pull_inter, push_paths, push_latency, push_inter = _routes(
        sim, servers.nodes, devices
    )
    capacity = topo.capacity
    if servers.ceiling is not None:
        capacity, pull_paths, push_paths = _connections(
            capacity, servers.ceiling, servers.nodes, pull_paths, pull_inter, push_paths,
            push_inter,
        )
    times, ints = _settings(
        sim, dataflow, _replays_pulls(sim, pull_paths, push_paths), devices
    )
    forward_s = np.array([g.forward_s for g in groups], dtype=float)
    backward_s = np.array([g.backward_s for g in groups], dtype=float)
    # the flows in flight at once: a worker's pulls or pushes of one step (with backup
    # workers, a late worker's pushes still move while it runs the next step)
    flows = shards * len(groups) if sim.spec.strategy.backup_workers else np.count_nonzero(parts)

    def kernel(
        factors: np.ndarray, delays: np.ndarray, ints: np.ndarray, steps: int
    ) -> spans.SpanResult:
        """`steps` steps (asynchronously, updates) from time zero: the records written
        (-1: a worker went past its factors), the records, step ends and totals."""
        # a record per worker-step; asynchronously, per update (the run stops at the
        # last); a host's records are its devices'
        room = (n * steps if sim.spec.strategy.sync else steps + n) * devices
        rec_int = np.zeros((room, 3), dtype=np.int64)
        rec = np.zeros((room, 6))
        totals = spans.new_totals()
        step_ends = np.full(steps, np.nan)
        work = flowkernel.scratch(len(capacity), 2 * n * int(flows) + 1, pull_paths.shape[2])
        rows = loop.run(
            capacity, pull_paths, pull_latency, pull_inter, push_paths, push_latency,
            push_inter, parts, forward_s, backward_s, chain_bytes, factors, delays, times,
            ints, rec_int, rec, step_ends, totals, work,
        )  # fmt: skip
        return rows, rec_int, rec, step_ends, totals

    if sim.spec.strategy.sync:  # a worker's step is the job's: in spans, on threads
        # a span's memory: its arrays, about 1.3 kB per flow that may be in flight (a
        # second span at once adds 222 MB at 1,024 workers x 189 parts), 72 B a record
        span_bytes = 1300.0 * n * int(flows) + 72.0 * n * total
        return spans.run(sim, ints, kernel, span_bytes)
    # asynchronously, a worker's own count of steps, drawn for twice the even share and,
    # should a worker outrun that, again for twice as many
    drawn = min(total, 2 * -(-total // n) + 16)
    while True:
        rows, rec_int, rec, step_ends, totals = kernel(
            sim.stragglers.factors(sim.workers, drawn),
            sim.stragglers.delays(sim.workers, drawn),
            ints,
            total,
        )
        if rows >= 0:
            break
        drawn = min(total, 2 * drawn)
    return rec_int[:rows], rec[:rows], step_ends, totals


def _routes(sim: Simulation, nodes: list[int], devices: int) -> tuple[np.ndarray, ...]:
    """Each member's pull from and push to each shard (a host's: its first device's):
    the links (padded with -1), the latency and whether it crosses hosts, as the kernel
    takes them."""
    topo = sim.topology
    n, shards = sim.workers // devices, len(nodes)

    def by_member(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, ...]:
        paths, latency, inter = topo.routes(pairs)
        return paths.reshape(n, shards, -1), latency.reshape(n, shards), inter.reshape(n, shards)

    pulls = by_member([(shard, m * devices) for m in range(n) for shard in nodes])
    pushes = by_member([(m * devices, shard) for m in range(n) for shard in nodes])
    return (*pulls, *pushes)


def _chain(sim: Simulation, devices: int) -> tuple[float, float]:
    """A hop of a host's chain (`hosts.py`): its latency and bytes/s, alike for every hop
    (each device's ports; 0, 0 without host aggregation)."""
    if devices == 1:
        return 0.0, 0.0
    topo = sim.topology
    hops = [topo.route(d + 1, d) for d in range(devices - 1)]
    hops += [topo.route(d, d + 1) for d in range(devices - 1)]
    rates = {topo.narrowest(hop) for hop in hops}
    latencies = {hop.latency for hop in hops}
    assert len(rates) == 1 and len(latencies) == 1, "a host's chain hops differ"
    return latencies.pop(), rates.pop()


def _connections(
    capacity: np.ndarray,
    ceiling: float,
    nodes: list[int],
    pull_paths: np.ndarray,
    pull_inter: np.ndarray,
    push_paths: np.ndarray,
    push_inter: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The links with one more per direction of each worker's TCP connection to each
    server node (`ceiling` bytes/s; shards on one node share it), and the routes between
    hosts with it at their end, as `FlowNetwork` adds a transfer's connection."""
    n = pull_paths.shape[0]
    _, node_of = np.unique(np.asarray(nodes), return_inverse=True)
    servers = int(node_of.max()) + 1
    per_direction = n * servers
    pair = np.arange(n)[:, None] * servers + node_of[None, :]
    routes = []
    for d, (paths, inter) in enumerate(((pull_paths, pull_inter), (push_paths, push_inter))):
        extra = np.where(inter, len(capacity) + d * per_direction + pair, -1)
        routes.append(np.concatenate([paths, extra[:, :, None]], axis=2))
    added = np.concatenate([capacity, np.full(2 * per_direction, ceiling)])
    return added, routes[0], routes[1]


def _replays_pulls(sim: Simulation, pull_paths: np.ndarray, push_paths: np.ndarray) -> bool:
    """Whether every step's pulls arrive as the first step's do, after their start.

    Synchronously without backup workers every worker waits for the previous step's
    update, so all start their pulls at one instant, none in flight from the step
    before, and a step's pushes start after their worker's pulls are all in. Where no
    link carries both pulls and pushes, a pull's flows share links with the same pulls
    at every step and with nothing else: with the same bytes, routes and start, they
    arrive at the same time after it, and the engine moves the first step's only."""
    strategy = sim.spec.strategy
    if not strategy.sync or strategy.backup_workers:
        return False
    pulls = np.unique(pull_paths[pull_paths >= 0])
    pushes = np.unique(push_paths[push_paths >= 0])
    return not np.intersect1d(pulls, pushes).size


def _settings(
    sim: Simulation, dataflow: Dataflow, replay: bool, devices: int
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's seconds and rates: server call, dispatch, update (synchronous;
    asynchronous: a closure's own update, after its push), checkpoint, evaluation, a
    host's chain hop's latency and bytes/s; and integers: members a round waits for,
    warm-up steps, checkpoint interval (0: none), overlap (0 / 1), asynchronous (0 / 1),
    the SSP bound (-1: none), the updates between evaluations behind the barrier (0:
    none; their seconds: times[4]), whether every step's pulls after the first replay
    its (0 / 1), the rule the network's queues follow (`kernel/queues.py`: SHARE_RULE,
    BUDGET_RULE), the devices a member aggregates (1: none; `kernel/hosts.py`)."""
    strategy = sim.spec.strategy
    costs = sim.costs.servers
    update_s = costs.update_s if strategy.sync else costs.apply_s
    # the SSP bound in iterations, as AsynchronousTraining takes it
    bound = strategy.max_iterations_ahead
    if bound is None:
        bound = strategy.staleness
    # asynchronous: the coordinator's evaluations behind a barrier, where it holds them
    every_evaluation = sim.spec.training.evaluation.every_steps or 0
    if strategy.sync or not held_by_engine(sim.spec):
        every_evaluation = 0
    times = np.array(
        [
            costs.call_s,
            costs.dispatch_s,
            update_s,
            sim.costs.checkpoint_s,
            sim.costs.evaluation_s,
            *_chain(sim, devices),
        ]
    )
    ints = np.array(
        [
            sim.workers // devices - strategy.backup_workers,
            sim.warmup,
            sim.checkpoint_every or 0,
            int(dataflow.overlap),
            int(not strategy.sync),
            -1 if bound is None else bound,
            every_evaluation,
            int(replay),
            _rule(sim),
            devices,
        ],
        dtype=np.int64,
    )
    return times, ints


#: the fewest servers a synchronous step's pushes spread over for its queues to follow
#: the budget rule (`kernel/budget.py`): below, the share rule's residual flows
#: cost less than keeping promises over servers with thousands of flows each
BUDGET_FROM_SERVERS = 16


def _rule(sim: Simulation) -> int:
    """The rule the network's queues follow (both give the max-min rates; they differ
    in cost, docs/performance.md): budgets where synchronous steps drain many servers,
    shares elsewhere."""
    from sim.strategies.parameter_server.kernel.queues import BUDGET_RULE, SHARE_RULE  # numba

    sync = sim.spec.strategy.sync
    many = sim.spec.strategy.servers >= BUDGET_FROM_SERVERS
    return BUDGET_RULE if sync and many else SHARE_RULE


def _outcome(
    sim: Simulation,
    rec_int: np.ndarray,
    rec: np.ndarray,
    step_ends: np.ndarray,
    totals: np.ndarray,
    engine: str = "ps-lockstep",
) -> SimulationOutcome:
    """The kernel's records, step ends and totals, put where the event engine puts them
    (`engine`: the name meta.json's `engines` gives it)."""
    measure_time, measure_bytes, network_bytes, dropped, dropped_measured = totals[:5]
    checkpoints, last_held, last_time = totals[5:]
    sim.records.extend(
        worker=rec_int[:, 0],
        step=rec_int[:, 1],
        start=rec[:, 0],
        compute_end=rec[:, 1],
        comm_end=rec[:, 2],
        end=rec[:, 3],
        comm_s=rec[:, 4],
        generation=0,
        staleness=rec_int[:, 2],
        stall=rec[:, 5],
    )
    total = sim.total_steps
    sim.step_ends[:] = step_ends
    sim.completed = total
    sim.checkpoints = int(checkpoints)
    for _ in range(sim.checkpoints):  # the event engine's sum
        sim.checkpoint_time += sim.costs.checkpoint_s
    if sim.checkpoints:
        sim.last_checkpoint = (int(last_held), float(last_time))
    sim.network.bytes_on_network = network_bytes
    for step in range(total):
        sim.report(step + 1, float(step_ends[step]))
    if sim.measure_start is None and not np.isnan(measure_time):
        sim.measure_start = (float(measure_time), float(measure_bytes))
    return sim.uninterrupted(network_bytes, engine, int(dropped), int(dropped_measured))


def _no_processes(_: Process) -> simpy.Process:
    raise AssertionError("the compiled engine starts no SimPy process")
