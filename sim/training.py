"""Training strategies: who computes, who communicates with whom, and when a step ends.

Entities are plain classes that start their processes in `__init__` (STYLE.md rule 1):
`Worker` runs `train_loop`; `AllreduceTraining` runs the shared communication stream
(`communicate`); `ParameterServerTraining` holds the shards that count pushes and release
pulls. Every worker-step ends in one `Simulation.record` call.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from scenarios import vocab

from .collectives import ALGORITHMS
from .simulation import Simulation, Span

Process = Generator[Any, Any, None]


class _Counter:
    """An event that fires when `expected` arrivals have been counted."""

    __slots__ = ("event", "left")

    def __init__(self, env: simpy.Environment, expected: int):
        self.event = env.event()
        self.left = expected
        if expected <= 0:
            self.event.succeed()

    def arrive(self, *_: Any) -> None:
        self.left -= 1
        if self.left == 0:
            self.event.succeed()


class _PerStep:
    """Counters created on first use, one per (step, key)."""

    def __init__(self, env: simpy.Environment, expected: int):
        self.env = env
        self.expected = expected
        self._counters: dict[tuple[int, int], _Counter] = {}

    def __call__(self, step: int, key: int = 0) -> _Counter:
        counter = self._counters.get((step, key))
        if counter is None:
            counter = self._counters[(step, key)] = _Counter(self.env, self.expected)
        return counter

    def drop(self, step: int) -> None:
        for key in [k for k in self._counters if k[0] == step]:
            del self._counters[key]


# ------------------------------------------------------------------ allreduce


class AllreduceTraining:
    """Synchronous data parallelism with an all-reduce per gradient bucket.

    Every worker hands each bucket to one communication stream as its backward makes it
    ready; the stream reduces the buckets in order, each once all workers have handed it
    in (a collective cannot start before its last participant), and a step ends for all
    when the last bucket's collective ends.
    """

    def __init__(self, sim: Simulation):
        self.sim = sim
        spec = sim.spec.strategy
        self.buckets = sim.compute.buckets(spec.fusion_buffer, spec.overlap)
        self.algorithm = ALGORITHMS[spec.algorithm]
        self.ranks = list(range(sim.workers))
        self.ready = _PerStep(sim.env, sim.workers)
        self.step_done: dict[int, simpy.Event] = {}
        self.spans: dict[int, list[Span]] = {}
        self.workers = [Worker(sim, w, self) for w in self.ranks]
        self.process = sim.env.process(self.communicate())

    def done(self, step: int) -> simpy.Event:
        event = self.step_done.get(step)
        if event is None:
            event = self.step_done[step] = self.sim.env.event()
        return event

    def communicate(self) -> Process:
        env, net = self.sim.env, self.sim.network
        for step in range(self.sim.total_steps):
            spans: list[Span] = []
            for bucket in self.buckets:
                yield self.ready(step, bucket.index).event
                start = env.now
                yield from self.algorithm(net, self.ranks, bucket.nbytes)
                spans.append((vocab.ALLREDUCE, start, env.now))
            self.ready.drop(step)
            self.spans[step] = spans
            self.done(step).succeed()

    def run_step(self, worker: Worker, step: int, factor: float) -> Process:
        env = self.sim.env
        elapsed = 0.0
        for bucket in self.buckets:
            gap = (bucket.ready_s - elapsed) * factor
            if gap > 0:
                yield env.timeout(gap)
            elapsed = bucket.ready_s
            self.ready(step, bucket.index).arrive()
        tail = (self.sim.compute.step_s - elapsed) * factor
        if tail > 0:
            yield env.timeout(tail)
        worker.compute_end = env.now
        yield self.done(step)
        worker.spans = self.spans[step]


# ------------------------------------------------------------------ parameter server


def partition(params: np.ndarray, shards: int, how: str) -> np.ndarray:
    """Parameters held by each shard.

    round_robin: whole variables to shards in turn, in creation order (TF's
    replica_device_setter); greedy: each whole variable, in creation order, to the shard
    holding the fewest parameters so far (TF's GreedyLoadBalancingStrategy); sliced: every
    variable split evenly over all shards (a fixed-shards partitioner).
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


class ParameterServerTraining:
    """Synchronous parameter servers: push gradients, shards aggregate and update, pull.

    A shard applies its update once every pusher's gradients have arrived (backup workers
    come with the simulator's dynamics); workers then pull the new parameters of every
    shard. With `local_aggregation` the devices of a host first reduce over the host link
    to the host's first device, which pushes and pulls for all of them and broadcasts the
    result back (tf_cnn_benchmarks' distributed_replicated).
    """

    def __init__(self, sim: Simulation):
        self.sim = sim
        spec = sim.spec.strategy
        topo = sim.topology
        load = partition(sim.compute.params, spec.servers, spec.partition)
        nbytes = load * sim.compute.bytes_per_param
        if spec.placement == "dedicated":
            nodes = [topo.server(j) for j in range(spec.servers)]
        else:
            nodes = [topo.host_cpu(j % topo.hosts) for j in range(spec.servers)]
        # shards that hold nothing take no part
        self.shards = [(node, b) for node, b in zip(nodes, nbytes, strict=True) if b > 0]
        self.total_bytes = float(nbytes.sum())
        self.local = spec.local_aggregation and topo.devices_per_host > 1
        self.devices = topo.devices_per_host
        pushers = topo.hosts if self.local else sim.workers
        self.pushed = _PerStep(sim.env, pushers)  # keyed by shard
        self.host_ready = _PerStep(sim.env, self.devices)  # keyed by host
        self.host_done: dict[tuple[int, int], simpy.Event] = {}
        self.host_spans: dict[tuple[int, int, int], list[Span]] = {}
        self.workers = [Worker(sim, w, self) for w in range(sim.workers)]

    def _host_done(self, step: int, host: int) -> simpy.Event:
        key = (step, host)
        event = self.host_done.get(key)
        if event is None:
            event = self.host_done[key] = self.sim.env.event()
        return event

    def exchange(self, node: int, step: int) -> Generator[Any, Any, list[Span]]:
        """Push to every shard, wait for the updates, pull from every shard."""
        env, net = self.sim.env, self.sim.network
        start = env.now
        pushes = []
        for j, (shard, nbytes) in enumerate(self.shards):
            event = net.transfer(node, shard, nbytes)
            event.callbacks.append(self.pushed(step, j).arrive)
            pushes.append(event)
        yield env.all_of(pushes)
        pushed = env.now
        yield env.all_of([self.pushed(step, j).event for j in range(len(self.shards))])
        pull_start = env.now
        yield net.transfers(
            [(shard, node) for shard, _ in self.shards], [nbytes for _, nbytes in self.shards]
        )
        spans: list[Span] = [(vocab.PUSH, start, pushed), (vocab.PULL, pull_start, env.now)]
        return spans

    def run_step(self, worker: Worker, step: int, factor: float) -> Process:
        env, net = self.sim.env, self.sim.network
        compute = self.sim.compute.step_s * factor
        if compute > 0:
            yield env.timeout(compute)
        worker.compute_end = env.now
        if not self.local:
            worker.spans = yield from self.exchange(worker.index, step)
            return
        host, local = divmod(worker.index, self.devices)
        if local != 0:
            self.host_ready(step, host).arrive()
            yield self._host_done(step, host)
            worker.spans = self.host_spans.pop((step, host, local))
            return
        # the host's first device: reduce in the host, exchange for all, broadcast back
        self.host_ready(step, host).arrive()
        yield self.host_ready(step, host).event
        first = worker.index
        chain = [(first + i + 1, first + i) for i in range(self.devices - 1)]
        start = env.now
        yield net.transfers(chain, self.total_bytes, messages=self.devices - 1)
        reduced = env.now
        spans: list[Span] = [(vocab.PUSH, start, reduced)]
        spans += yield from self.exchange(first, step)
        start = env.now
        yield net.transfers([(b, a) for a, b in chain], self.total_bytes, messages=self.devices - 1)
        spans.append((vocab.PULL, start, env.now))
        worker.spans = spans
        for i in range(1, self.devices):
            self.host_spans[(step, host, i)] = spans
        self._host_done(step, host).succeed()


# ------------------------------------------------------------------ workers


class Worker:
    """One worker (one device): computes its batch, then communicates as the strategy says."""

    def __init__(self, sim: Simulation, index: int, training: Any):
        self.sim = sim
        self.index = index
        self.training = training
        self.compute_end = 0.0
        self.spans: list[Span] = []
        self.process = sim.env.process(self.train_loop())

    def train_loop(self) -> Process:
        sim, env = self.sim, self.sim.env
        factors = sim.jitter[self.index]
        for step in range(sim.total_steps):
            sim.begin_step(step)
            start = env.now
            yield from self.training.run_step(self, step, float(factors[step]))
            sim.record(self.index, step, start, self.compute_end, env.now, self.spans)


TRAININGS: dict[str, Callable[[Simulation], Any]] = {
    "allreduce": AllreduceTraining,
    "parameter_server": ParameterServerTraining,
}
