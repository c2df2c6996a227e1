"""Parameter servers: synchronous (with backup workers) and asynchronous (with SSP).

Variables (`ModelSpec.variables`: kernel and bias of each layer, in creation order, where
the model's builder is known; else one per layer) are spread over the shards by
`partition`; each shard sits on a host of its own (`dedicated`) or on a worker host's CPU
(`colocated`). Round-robin over variables is TensorFlow's own placement: with two servers
an MLP's kernels all land on the first and its biases on the second.

Synchronous: after backward every worker pushes each shard its part; a step's update is
applied once N - b workers' gradients have arrived (b = `backup_workers`, Chen et al.
2016); gradients that arrive later are dropped and counted; workers then pull every
shard. With `local_aggregation` the devices of a host first reduce over the host link to
the host's first device, which pushes and pulls for all of them and broadcasts back
(tf_cnn_benchmarks' distributed_replicated); the update then needs the pushes of
ceil((N - b) / D) hosts.

Asynchronous: a worker pulls, computes, pushes; each push is applied when it arrives and
counts one update. The staleness of a push is the number of updates applied between the
worker's pull and its push. With `staleness: k` (stale synchronous parallel, Ho et al.
2013) a worker may start its iteration i only when every other live worker has finished
iteration i - k - 1: it never runs more than k iterations ahead of the slowest.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from scenarios import vocab

from .simulation import Simulation, Span
from .training import Events, PerStep, Process, Training, Worker


def partition(params: np.ndarray, shards: int, how: str) -> np.ndarray:
    """Parameters held by each shard.

    round_robin: whole variables to shards in turn, in creation order (TF's
    replica_device_setter, and ParameterServerStrategy without a partitioner); greedy:
    each whole variable, in creation order, to the shard holding the fewest parameters so
    far (TF's GreedyLoadBalancingStrategy); sliced: every variable split evenly over all
    shards (a fixed-shards partitioner).
    """
    load = np.zeros(shards)
    variables = [p for p in params if p > 0]
    if how == "sliced":
        load += sum(variables) / shards
    elif how == "round_robin":
        for i, p in enumerate(variables):
            load[i % shards] += p
    elif how == "greedy":
        for p in variables:
            load[int(np.argmin(load))] += p
    else:
        raise ValueError(f"unknown partition {how!r}")
    return load


class ParameterServerTraining(Training):
    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec.strategy
        topo = sim.topology
        load = partition(np.array(sim.spec.model.variables()), spec.servers, spec.partition)
        nbytes = load * sim.compute.bytes_per_param
        if spec.placement == "dedicated":
            nodes = [topo.server(j) for j in range(spec.servers)]
        else:
            nodes = [topo.host_cpu(j % topo.hosts) for j in range(spec.servers)]
        # shards that hold nothing take no part
        self.shards = [(node, b) for node, b in zip(nodes, nbytes, strict=True) if b > 0]
        self.total_bytes = float(nbytes.sum())
        self.sync = spec.sync
        self.local = spec.local_aggregation and topo.devices_per_host > 1
        self.devices = topo.devices_per_host
        needed = sim.workers - spec.backup_workers
        if self.local:
            needed = math.ceil(needed / self.devices)
        self.pushed = PerStep(sim.env, needed)  # keyed by shard
        self.updated = Events(sim.env)  # per step: update applied (and checkpoint written)
        self.global_step = start_step  # the step whose update is pending (sync)
        self.host_ready = PerStep(sim.env, self.devices)  # keyed by host
        self.host_done = Events(sim.env)
        self.host_spans: dict[tuple[int, int, int], list[Span]] = {}
        # async: iterations completed per worker, and SSP waiters
        self.iterations = [0] * sim.workers
        self.down: set[int] = set()
        self.bound = spec.staleness
        self.waiting: list[tuple[int, int, simpy.Event]] = []
        costs = sim.costs.servers
        self.dispatch_s = costs.dispatch_s  # a closure reaches its worker
        # the update of the whole model on the servers, one coordinator call: it ends a
        # synchronous round
        self.update_s = costs.update_s
        # without closures measured (below), a pull or push is a call of its own: it pays
        # a call's fixed cost beyond its message's latency
        self.setup_s = costs.call_s
        # on the calibrated machine, a closure's pull and push each take what the closure
        # probes measured alone (the model's variables move several at once, faster than
        # the transfer probe's one tensor), and closures in flight at once share the
        # host's cores as transfers do, by their bytes (`_closure_flow`)
        self.closure_s = costs.closure_s
        # without them, an asynchronous closure's update after its push: the update
        # call's ops without the call
        self.apply_s = costs.apply_s
        self.workers = [Worker(self, w) for w in range(sim.workers)]
        if self.sync:
            self.spawn(self.coordinate())

    # -- synchronous ---------------------------------------------------------------------

    def coordinate(self) -> Process:
        """Apply each step's update once enough gradients are in; write checkpoints."""
        sim, env = self.sim, self.sim.env
        try:
            for step in range(self.start_step, sim.total_steps):
                yield env.all_of([self.pushed(step, j).event for j in range(len(self.shards))])
                if self.update_s:  # the coordinator's call that applies the update
                    yield env.timeout(self.update_s)
                yield from sim.end_of_step(step)
                self.global_step = step + 1
                self.updated(step).succeed()
        except simpy.Interrupt:
            return

    def next_step(self, worker: Worker, step: int) -> int:
        # a worker whose gradients were dropped catches up with the job
        return max(step + 1, self.global_step) if self.sync else step + 1

    def resume_step(self, worker: Worker, step: int) -> int:
        return max(step, self.global_step) if self.sync else self.iterations[worker.index]

    def first_step(self, worker: Worker) -> int:
        return self.start_step if self.sync else 0

    def push(self, node: int, step: int, member: int, worker: Worker) -> list[simpy.Event]:
        """Send every shard its part of the gradients; count them as they arrive."""
        net = self.sim.network
        events = []
        dropped = [False]

        def arrived(_: Any, j: int) -> None:
            if self.generation != self.sim.generation:
                return  # a push of a stopped generation
            if not self.pushed(step, j).arrive(member) and not dropped[0]:
                dropped[0] = True
                self.sim.dropped_gradients += 1

        if self.closure_s is not None:  # one flow for every shard's part
            event = self._closure_flow(node, self.closure_s[1])
            for j in range(len(self.shards)):
                event.callbacks.append(functools.partial(arrived, j=j))
            events.append(event)
        else:
            for j, (shard, nbytes) in enumerate(self.shards):
                event = net.transfer(node, shard, nbytes, setup=self.setup_s)
                event.callbacks.append(functools.partial(arrived, j=j))
                events.append(event)
        worker.inflight = events
        return events

    def pull(self, node: int, worker: Worker) -> simpy.Event:
        if self.closure_s is not None:
            event = self._closure_flow(node, self.closure_s[0])
        else:
            event = self.sim.network.transfers(
                [(shard, node) for shard, _ in self.shards],
                [nbytes for _, nbytes in self.shards],
                setup=self.setup_s,
            )
        worker.inflight = [event]
        return event

    def _closure_flow(self, node: int, alone_s: float) -> simpy.Event:
        """A closure's pull or push, which alone takes `alone_s` (the closure probe's
        time): the model's bytes moved as one flow on the host's cores, after a wait for
        the rest of the probe's time (its round trips). Beside other flows in flight on
        the host the bytes share the cores and slow as they do; the round trips do not.
        A probe time shorter than the bytes take at the cores' rate is all flow (sized to
        take that time alone)."""
        route = self.sim.topology.cores_route(node)
        rate = self.sim.topology.narrowest(route)
        moving_s = min(alone_s, self.total_bytes / rate)
        waiting = dataclasses.replace(route, latency=route.latency + alone_s - moving_s)
        return self.sim.network.flow(waiting, moving_s * rate)

    def exchange(
        self, node: int, step: int, member: int, worker: Worker
    ) -> Generator[Any, Any, list[Span]]:
        """Push, wait for the step's update, pull."""
        env = self.sim.env
        start = env.now
        yield env.all_of(self.push(node, step, member, worker))
        pushed = env.now
        yield self.updated(step)
        pull_start = env.now
        if self.dispatch_s:  # the next step's closure reaches the worker
            yield env.timeout(self.dispatch_s)
        yield self.pull(node, worker)
        worker.inflight = []
        spans: list[Span] = [(vocab.PUSH, start, pushed), (vocab.PULL, pull_start, env.now)]
        return spans

    def run_step(self, worker: Worker, step: int) -> Process:
        if not self.sync:
            yield from self.run_async(worker, step)
            return
        env, net = self.sim.env, self.sim.network
        yield from self.compute(worker, step)
        if not self.local:
            worker.spans = yield from self.exchange(worker.index, step, worker.index, worker)
            return
        host, local = divmod(worker.index, self.devices)
        if local != 0:
            self.host_ready(step, host).arrive(local)
            yield self.host_done((step, host))
            worker.spans = self.host_spans.pop((step, host, local), [])
            return
        # the host's first device: reduce in the host, exchange for all, broadcast back
        self.host_ready(step, host).arrive(local)
        yield self.host_ready(step, host).event
        first = worker.index
        chain = [(first + i + 1, first + i) for i in range(self.devices - 1)]
        start = env.now
        yield net.transfers(chain, self.total_bytes, messages=self.devices - 1)
        spans: list[Span] = [(vocab.PUSH, start, env.now)]
        spans += yield from self.exchange(first, step, host, worker)
        start = env.now
        yield net.transfers([(b, a) for a, b in chain], self.total_bytes, messages=self.devices - 1)
        spans.append((vocab.PULL, start, env.now))
        worker.spans = spans
        for i in range(1, self.devices):
            self.host_spans[(step, host, i)] = spans
        self.host_done((step, host)).succeed()

    # -- asynchronous ----------------------------------------------------------------------

    def fail_worker(self, worker: int, downtime: float) -> None:
        self.down.add(worker)
        self.sim.env.timeout(downtime).callbacks.append(lambda _e: self._back(worker))
        self._release()
        super().fail_worker(worker, downtime)

    def _back(self, worker: int) -> None:
        self.down.discard(worker)

    def _release(self) -> None:
        """Wake SSP waiters whose slowest live peer has caught up."""
        still = []
        for worker, iteration, event in self.waiting:
            if self._may_start(worker, iteration):
                event.succeed()
            else:
                still.append((worker, iteration, event))
        self.waiting = still

    def _may_start(self, worker: int, iteration: int) -> bool:
        if self.bound is None:
            return True
        others = [n for w, n in enumerate(self.iterations) if w != worker and w not in self.down]
        return not others or iteration - min(others) <= self.bound

    def run_async(self, worker: Worker, iteration: int) -> Process:
        sim, env = self.sim, self.sim.env
        me = worker.index
        if not self._may_start(me, iteration):
            gate = env.event()
            self.waiting.append((me, iteration, gate))
            wait_start = env.now
            yield gate
            sim.tracer.span(me, vocab.WAIT, wait_start, env.now, step=iteration)
            worker.step_start = env.now  # the wait lies between iterations
        pull_start = env.now
        version = sim.completed
        if self.dispatch_s:  # the closure reaches the worker
            yield env.timeout(self.dispatch_s)
        yield self.pull(me, worker)
        pulled = env.now
        yield from self.compute(worker, iteration)
        push_start = env.now
        yield env.all_of(self.push_async(me, worker))
        worker.inflight = []
        if self.apply_s:  # the closure's own update on the servers
            yield env.timeout(self.apply_s)
        worker.staleness = sim.completed - version
        worker.spans = [(vocab.PULL, pull_start, pulled), (vocab.PUSH, push_start, env.now)]
        sim.apply_update()
        self.iterations[me] = iteration + 1
        self._release()
        if me == 0:  # the chief writes checkpoints; it alone stalls
            yield from sim.async_checkpoint()

    def push_async(self, node: int, worker: Worker) -> list[simpy.Event]:
        if self.closure_s is not None:  # push and update, one flow for every shard's part
            events = [self._closure_flow(node, self.closure_s[1])]
        else:
            net = self.sim.network
            events = [
                net.transfer(node, shard, nbytes, setup=self.setup_s)
                for shard, nbytes in self.shards
            ]
        worker.inflight = events
        return events
