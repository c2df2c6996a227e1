"""A worker's step against a server group as TensorFlow's dataflow runs it (`Dataflow`).

A step moves the model in groups of consecutive layers (`Group`): each group's variables,
split by shard, are one pull and one push per shard. With `overlap: true` (the default)
every pull starts when the step starts, a layer's forward starts once its group has
arrived, and a group's gradients go to their shards as soon as backward has produced
them. With `overlap: false` the worker pulls everything before its forward and pushes
everything after its backward. The groups are the variables one by one (`fusion_buffer`
not given: TensorFlow sends each variable on its own), merged into at most `MAX_GROUPS`
groups of about equal bytes at every scale; or buckets of `fusion_buffer` bytes where it
is given.

On the calibrated machine with closures measured (`ServerCosts.closure_s`) a step is one
closure: its pull and its push each take what the closure probes measured alone, the
model's bytes sharing the host's cores with everything else in flight
(`ServerGroup.closure_flow`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import simpy

from scenarios import vocab
from sim.engine.outcome import Span
from sim.engine.training import Process, Worker

from .servers import ServerGroup, Spawn
from .shards import MAX_GROUPS, Dealt, deal, groups_of

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: counts a push's arrival at shard j of group g (`counted(event, j=shard, g=group)`)
Counted = Callable[..., None]
#: the pulls of a node's step: (node, step) -> each group's arrival
Pulls = Callable[[int, int], list[simpy.Event]]


class Dataflow:
    """The groups a step moves and one node's pull, compute and push of them (one mode
    flag: `overlap`)."""

    def __init__(self, sim: Simulation, servers: ServerGroup, dealt: Dealt):
        self.sim = sim
        self.servers = servers
        spec = sim.spec.strategy
        compute = sim.compute
        layer_bytes = dealt.by_part(range(len(compute.params)), len(compute.params))
        # a calibration profile measured run-real's closures, which move the whole model
        # in one call each way: there a step pulls it all, computes, and pushes it all
        calibrated = sim.costs.whole_model_closures
        explicit = "fusion_buffer" in spec.model_fields_set
        min_bytes = spec.fusion_buffer if explicit else dealt.total_bytes / MAX_GROUPS
        if calibrated:
            min_bytes = float("inf")
        self.groups = groups_of(compute.forward_s, compute.backward_s, layer_bytes, min_bytes)
        self.parts = [group.nbytes for group in self.groups]
        self.overlap = spec.overlap and not calibrated

    def pull(self, node: int, after: list[simpy.Event] | None = None) -> list[simpy.Event]:
        """Every group's pull to `node` (each once its event of `after` fires)."""
        return self.servers.pull(node, self.parts, after)

    def push(
        self, node: int, g: int, counted: Counted, after: simpy.Event | None = None
    ) -> list[simpy.Event]:
        """Group g's gradients from `node` to its shards, each counted as it arrives."""
        events = []
        for j, event in self.servers.push(node, self.parts[g], after):
            event.callbacks.append(functools.partial(counted, j=j, g=g))
            events.append(event)
        return events

    def iterate(
        self, worker: Worker, step: int, node: int, counted: Counted, pulls_of: Pulls
    ) -> Generator[Any, Any, list[Span]]:
        """One pull, compute and push of the model by `node` for `worker`'s step; returns
        the pull and push spans. The pulls are `pulls_of(node, step)`; each push's
        arrival at a shard is counted with `counted`."""
        sim, env = self.sim, self.sim.env
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        pull_start = env.now
        yield from self.servers.dispatch()  # the step's closure reaches the worker
        if self.servers.closure_s is not None:
            yield from self._closure(worker, node, factor, delay, counted)
            return worker.spans
        pulls = pulls_of(node, step)
        worker.inflight = list(pulls)
        pulled_all = env.all_of(pulls)
        stall = yield from self.forward(worker, pulls, factor, delay)
        pull_end = env.now if pulled_all.triggered else None
        pushes: list[simpy.Event] = []
        push_start = None
        for g in reversed(range(len(self.groups))):
            yield from sim.busy(worker, self.groups[g].backward_s, factor)
            if self.overlap:
                push_start = env.now if push_start is None else push_start
                pushes += self.push(node, g, counted, env.all_of(pushes))
        worker.compute_end = env.now
        worker.stall = stall
        if not self.overlap:
            push_start = env.now
            for g in reversed(range(len(self.groups))):
                pushes += self.push(node, g, counted, env.all_of(pushes))
        worker.inflight += pushes
        if pull_end is None:
            yield pulled_all
            pull_end = env.now
        yield env.all_of(pushes)
        return [
            (vocab.PULL, pull_start, pull_end),
            (vocab.PUSH, push_start if push_start is not None else env.now, env.now),
        ]

    def forward(
        self, worker: Worker, arrivals: list[simpy.Event], factor: float, delay: float
    ) -> Generator[Any, Any, float]:
        """The forward pass group by group, each once its group's parameters have arrived
        (`arrivals`; all of them first without overlap). Returns the seconds it waited."""
        sim, env = self.sim, self.sim.env
        stall = 0.0
        gates = [] if self.overlap else [env.all_of(arrivals)]
        for gate in gates:
            waited = env.now
            yield gate
            stall += env.now - waited
        for group, arrived in zip(self.groups, arrivals, strict=True):
            if not arrived.triggered:
                waited = env.now
                yield arrived
                stall += env.now - waited
            yield from sim.busy(worker, group.forward_s, factor, delay)
            delay = 0.0
        return stall

    def _closure(
        self, worker: Worker, node: int, factor: float, delay: float, counted: Counted
    ) -> Process:
        """A step as one closure on the calibrated machine: its pull, the compute, its push
        (each part of the push counted at every shard as it arrives)."""
        sim, env, servers = self.sim, self.sim.env, self.servers
        assert servers.closure_s is not None
        pull_start = env.now
        pull = servers.closure_flow(node, servers.closure_s[0])
        worker.inflight = [pull]
        yield pull
        pulled = env.now
        worker.stall = pulled - pull_start
        yield from sim.busy(worker, sim.compute.step_s, factor, delay)
        worker.compute_end = env.now
        push_start = env.now
        push = servers.closure_flow(node, servers.closure_s[1])
        for j in range(len(servers.nodes)):
            for group in self.groups:
                if group.nbytes[j] > 0:
                    push.callbacks.append(functools.partial(counted, j=j))
        worker.inflight = [push]
        yield push
        worker.spans = [(vocab.PULL, pull_start, pulled), (vocab.PUSH, push_start, env.now)]


def server_parts(sim: Simulation, spawn: Spawn) -> tuple[ServerGroup, Dataflow]:
    """The strategy's server group (the model's variables dealt to `strategy.servers`
    shards, its processes started by `spawn`) and the dataflow of the groups a step
    moves."""
    spec = sim.spec.strategy
    compute = sim.compute
    dealt = deal(
        sim.spec.model.variables(),
        compute.params.tolist(),
        spec.servers,
        spec.partition,
        compute.bytes_per_param,
    )
    servers = ServerGroup(sim, spawn, dealt, spec.placement, sim.costs.servers)
    return servers, Dataflow(sim, servers, dealt)
