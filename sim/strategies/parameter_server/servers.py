"""A job's parameter servers as one part (`ServerGroup`): the shards, the pulls from them and
the pushes to them, and what their calls and updates cost.

Each shard sits on a host of its own (`dedicated`) or on a worker host's CPU
(`colocated`, behind the host's CPU port: `Topology.host_cpu`). The group is the only
reader of the servers' costs (`sim.costs.ServerCosts`): a call's fixed cost, a closure's
dispatch, the synchronous update, an asynchronous closure's own update, and on the
calibrated machine the closures' measured pulls and pushes.

Without contention (the analytical network) transfers that share a path would not slow
each other: there a node's pulls, and its pushes, go one after another (`in_order`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import simpy

from sim.costs import ServerCosts
from sim.engine.training import Process

from .shards import Dealt

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: a transfer started in turn: (gate to wait for, if any; its start; its arrival's event)
Turn = tuple[simpy.Event | None, Callable[[], simpy.Event], simpy.Event]
Spawn = Callable[[Process], simpy.Process]


class ServerGroup:
    """The shards of the model's variables, each on its node (`nodes`), and their costs.

    `spawn` starts a process of the training that owns the group (a job restart stops
    it). Mode flags: `in_order` (the network has no contention), `closure_s` (the
    calibrated machine measured the closures)."""

    def __init__(
        self,
        sim: Simulation,
        spawn: Spawn,
        dealt: Dealt,
        placement: str,
        costs: ServerCosts,
    ):
        self.sim = sim
        self.spawn = spawn
        topo = sim.topology
        if placement == "dedicated":
            self.nodes = [topo.server(j) for j in dealt.shards]
        else:
            self.nodes = [topo.host_cpu(j % topo.hosts) for j in dealt.shards]
        self.total_bytes = dealt.total_bytes
        self.in_order = sim.spec.sim.network_model == "analytical"
        self.dispatch_s = costs.dispatch_s  # a closure reaches its worker
        # the update of the whole model on the servers, one call: it ends a synchronous round
        self.update_s = costs.update_s
        # a pull or push issued as a call of its own pays a call's fixed cost beyond its
        # messages' latency (on the calibrated machine without closures)
        self.call_s = costs.call_s
        # on the calibrated machine, a closure's pull and push each take what the closure
        # probes measured alone, and closures in flight at once share the host's cores as
        # transfers do, by their bytes (`closure_flow`)
        self.closure_s = costs.closure_s
        # without them, an asynchronous closure's update after its push
        self.apply_s = costs.apply_s
        # over TCP, the bytes/s one worker's connection to one server carries at most
        self.ceiling = costs.ceiling

    # -- what the servers' calls cost --------------------------------------------------------

    def dispatch(self) -> Process:
        """A closure reaches its worker."""
        if self.dispatch_s:
            yield self.sim.env.timeout(self.dispatch_s)

    def update(self) -> Process:
        """The call that applies a synchronous round's update on the servers."""
        if self.update_s:
            yield self.sim.env.timeout(self.update_s)

    def apply(self) -> Process:
        """An asynchronous closure's own update on the servers, after its push."""
        if self.apply_s:
            yield self.sim.env.timeout(self.apply_s)

    # -- moving the variables ----------------------------------------------------------------

    def pull(
        self,
        node: int,
        parts: Sequence[Sequence[float]],
        after: Sequence[simpy.Event] | None = None,
    ) -> list[simpy.Event]:
        """Each part's pull (its bytes on each shard) to `node`, one call per part: all
        started now, or each once its event of `after` fires (in order, one after
        another, without contention). Returns each part's arrival."""
        env, net = self.sim.env, self.sim.network

        def start(nbytes: Sequence[float]) -> simpy.Event:
            shards = zip(self.nodes, nbytes, strict=True)
            pairs = [(shard, node) for shard, b in shards if b > 0]
            sizes = [b for b in nbytes if b > 0]
            return net.transfers(pairs, sizes, setup=self.call_s, ceiling=self.ceiling)

        if not self.in_order and after is None:
            return [start(nbytes) for nbytes in parts]
        events = [env.event() for _ in parts]
        gates: Sequence[simpy.Event | None] = after or [None] * len(parts)
        turns: list[Turn] = [
            (gate, functools.partial(start, nbytes), done)
            for gate, nbytes, done in zip(gates, parts, events, strict=True)
        ]
        if self.in_order:
            self.spawn(self._in_turn(turns))
        else:
            for turn in turns:
                self.spawn(self._in_turn([turn]))
        return events

    def pull_shards(self, node: int, nbytes: Sequence[float]) -> list[simpy.Event]:
        """`nbytes` of each shard to `node`, one transfer per shard, all started now."""
        net = self.sim.network
        return [
            net.transfer(shard, node, b, setup=self.call_s, ceiling=self.ceiling)
            for shard, b in zip(self.nodes, nbytes, strict=True)
            if b > 0
        ]

    def push(
        self, node: int, nbytes: Sequence[float], after: simpy.Event | None = None
    ) -> list[tuple[int, simpy.Event]]:
        """`nbytes` from `node` to each shard, one transfer per shard; without contention
        each waits for `after` (the node's previous push) to arrive. Returns (shard,
        arrival) of each shard that receives anything."""
        net = self.sim.network
        out = []
        for j, (shard, b) in enumerate(zip(self.nodes, nbytes, strict=True)):
            if b <= 0:
                continue
            if self.in_order and after is not None and not after.triggered:
                event = self.sim.env.event()
                send = functools.partial(
                    net.transfer, node, shard, b, setup=self.call_s, ceiling=self.ceiling
                )
                self.spawn(self._in_turn([(after, send, event)]))
            else:
                event = net.transfer(node, shard, b, setup=self.call_s, ceiling=self.ceiling)
            out.append((j, event))
        return out

    def _in_turn(self, turns: list[Turn]) -> Process:
        """For each (gate, start, done) in turn: wait for the gate (if any), start the
        transfer, and fire `done` once it has arrived."""
        try:
            for gate, start, done in turns:
                if gate is not None:
                    yield gate
                yield start()
                done.succeed()
        except simpy.Interrupt:
            return

    def closure_flow(self, node: int, alone_s: float) -> simpy.Event:
        """A closure's pull or push, which alone takes `alone_s` (the closure probe's
        time): the model's bytes on the host's cores, beside the other flows in flight
        there, and the rest of the probe's time (its round trips) apart (`Network.closure`)."""
        return self.sim.network.closure(node, alone_s, self.total_bytes)
