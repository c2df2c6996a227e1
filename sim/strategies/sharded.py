"""Sharded data parallelism (ZeRO, Rajbhandari et al. 2020; PyTorch's FSDP): every worker
computes its batch on the whole model, as under all-reduce, but the model's state is
divided among the N workers (`strategy.stage`), and so is the work of the update.

Stages 1 and 2 (optimizer state, and gradients, sharded): each gradient bucket is
reduce-scattered as backward makes it ready (worker i receives the sum of its 1/N), each
worker updates its shard, and the updated parameters are all-gathered once the last
bucket is reduced: a ring reduce-scatter and a ring all-gather move what one ring
all-reduce moves, 2(N-1)/N of the parameters per device (the paper's 2P, section 7).

Stage 3 (parameters sharded too): before each layer's forward, and again before its
backward, its parameters are all-gathered; after its backward its gradient is
reduce-scattered: 3(N-1)/N of the parameters per device (the paper's 3P). With
`overlap`, the gathers run on a stream of their own one layer ahead of the compute (FSDP's
prefetch) and the reduce-scatters on another beside the backward; without, each waits
for the one before it and the compute waits for each.

Gradient reduce-scatters are traced as `allreduce` (gradients reduced), parameter
all-gathers as `pull` (parameters fetched), the phases of the result files' vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from scenarios import vocab
from sim.engine.outcome import Span
from sim.engine.training import Events, PerStep, Process, Training, Worker
from sim.network.collectives import ring_all_gather, ring_reduce_scatter
from sim.strategies.allreduce.training import AllreduceTraining

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


def sharded_training(sim: Simulation, start_step: int) -> Training:
    """The training of `strategy.stage`: optimizer state and gradients sharded (1, 2), or
    the parameters too (3)."""
    if sim.spec.strategy.stage >= 3:
        return FullySharded(sim, start_step)
    return ShardedUpdate(sim, start_step)


class ShardedUpdate(AllreduceTraining):
    """ZeRO stages 1 and 2: the all-reduce's two halves with the update between them: each
    bucket reduce-scattered, and once the last is, the updated shards all-gathered."""

    def reduce(self, nbytes: float) -> Process:
        sim = self.sim
        yield from ring_reduce_scatter(sim.network, self.ranks, nbytes, sim.costs.collective)

    def after_reducing(self, spans: list[Span]) -> Process:
        sim = self.sim
        params = float(sim.compute.params.sum() * sim.compute.bytes_per_param)
        start = sim.env.now  # each worker updated its shard: gather the parameters
        yield from ring_all_gather(sim.network, self.ranks, params, sim.costs.collective)
        spans.append((vocab.PULL, start, sim.env.now))


class FullySharded(Training):
    """ZeRO stage 3 (FSDP): a layer's parameters gathered before its forward and its
    backward, its gradient reduce-scattered after."""

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        compute = sim.compute
        self.overlap = sim.spec.strategy.overlap
        self.layer_bytes = [float(p) * compute.bytes_per_param for p in compute.params]
        layers = range(len(self.layer_bytes))
        # the step's gathers in order: each layer before its forward, then before its
        # backward in reverse
        self.order = [*layers, *reversed(layers)]
        self.ranks = list(range(sim.workers))
        self.wanted = PerStep(sim.env, sim.workers)  # (step, gather): every worker ready
        self.gathered = Events(sim.env)  # (step, gather)
        self.computed = PerStep(sim.env, sim.workers)  # (step, layer): its gradients
        self.reduced = Events(sim.env)  # (step, layer)
        self.done = Events(sim.env)
        self.spans: dict[int, list[Span]] = {}
        self.workers = [Worker(self, w) for w in self.ranks]
        self.spawn(self.gather_parameters())
        self.spawn(self.reduce_gradients())

    def gather_parameters(self) -> Process:
        sim, env, net = self.sim, self.sim.env, self.sim.network
        costs = sim.costs.collective
        try:
            for step in range(self.start_step, sim.total_steps):
                spans = self.spans.setdefault(step, [])
                for k, layer in enumerate(self.order):
                    yield self.wanted(step, k).event
                    start = env.now
                    yield from ring_all_gather(net, self.ranks, self.layer_bytes[layer], costs)
                    spans.append((vocab.PULL, start, env.now))
                    self.gathered((step, k)).succeed()
                self.wanted.drop(step)
        except simpy.Interrupt:
            return

    def reduce_gradients(self) -> Process:
        sim, env, net = self.sim, self.sim.env, self.sim.network
        costs = sim.costs.collective
        try:
            for step in range(self.start_step, sim.total_steps):
                spans = self.spans.setdefault(step, [])
                for layer in reversed(range(len(self.layer_bytes))):
                    yield self.computed(step, layer).event
                    start = env.now
                    yield from ring_reduce_scatter(net, self.ranks, self.layer_bytes[layer], costs)
                    spans.append((vocab.ALLREDUCE, start, env.now))
                    self.reduced((step, layer)).succeed()
                self.computed.drop(step)
                yield from sim.end_of_step(step)
                self.done(step).succeed()
        except simpy.Interrupt:
            return

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, env, compute = self.sim, self.sim.env, self.sim.compute
        factor = sim.compute_factor(worker.index, step)
        hiccup = sim.compute_delay(worker.index, step)
        if hiccup > 0:
            yield env.timeout(hiccup)
        forwards = len(self.layer_bytes)
        self.wanted(step, 0).arrive(worker.index)
        for k, layer in enumerate(self.order):
            yield from self._wait(worker, self.gathered((step, k)))
            last = k + 1 == len(self.order)
            if self.overlap and not last:  # prefetch the next layer's parameters
                self.wanted(step, k + 1).arrive(worker.index)
            backward = k >= forwards
            seconds = compute.backward_s[layer] if backward else compute.forward_s[layer]
            yield from sim.busy(worker, float(seconds), factor)
            if backward:
                self.computed(step, layer).arrive(worker.index)
                if not self.overlap:
                    yield from self._wait(worker, self.reduced((step, layer)))
            if not self.overlap and not last:
                self.wanted(step, k + 1).arrive(worker.index)
        worker.compute_end = env.now
        yield self.done(step)
        worker.spans = self.spans[step]

    def _wait(self, worker: Worker, event: simpy.Event) -> Process:
        """Wait for a collective within the compute: the worker stalls on communication."""
        if not event.triggered:
            waited = self.sim.env.now
            yield event
            worker.stall += self.sim.env.now - waited
