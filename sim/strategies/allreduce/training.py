"""Data parallelism with all-reduce: synchronous, or asynchronous with bounded staleness.

Every worker hands each gradient bucket to one communication stream as its backward makes
it ready; the stream reduces the buckets in order, each once all workers have handed it in
(a collective cannot start before its last participant). Synchronous: a worker's step ends
when its step's last collective ends. Asynchronous (`sync: false`): a worker goes on to
step t+1 as soon as step t's backward is done, and only waits for the averaged gradients
of step t - s (s = `staleness`, default 1): it applies gradients at most s steps late.
In-graph replication (one client driving a host's devices) on the calibrated machine
reduces each bucket in the measured time of the all-reduce among one process's devices;
elsewhere it is the same collective over the host's fabric.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from scenarios import vocab
from sim.engine.outcome import Span
from sim.engine.training import Events, PerStep, Process, Training, Worker
from sim.network.collectives import ALGORITHMS

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class AllreduceTraining(Training):
    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec.strategy
        self.lag = 0 if spec.sync else (1 if spec.staleness is None else spec.staleness)
        self.buckets = sim.compute.buckets(spec.fusion_buffer, spec.overlap)
        self.algorithm = ALGORITHMS[spec.algorithm]
        self.ranks = list(range(sim.workers))
        self.ready = PerStep(sim.env, sim.workers)
        self.done = Events(sim.env)
        self.spans: dict[int, list[Span]] = {}
        self.workers = [Worker(self, w) for w in self.ranks]
        self.spawn(self.communicate())

    def communicate(self) -> Process:
        sim, env = self.sim, self.sim.env
        try:
            for step in range(self.start_step, sim.total_steps):
                spans: list[Span] = []
                for bucket in self.buckets:
                    yield self.ready(step, bucket.index).event
                    start = env.now
                    yield from self.reduce(bucket.nbytes)
                    spans.append((vocab.ALLREDUCE, start, env.now))
                yield from self.after_reducing(spans)
                self.ready.drop(step)
                self.spans[step] = spans
                yield from sim.end_of_step(step)
                self.done(step).succeed()
        except simpy.Interrupt:
            return

    def reduce(self, nbytes: float) -> Process:
        """One bucket's collective: the all-reduce."""
        sim = self.sim
        # in graph on the calibrated machine: the measured all-reduce among one process's
        # devices, which crosses no process
        in_graph_s = sim.costs.in_graph_s(nbytes)
        if in_graph_s is not None:
            yield sim.env.timeout(in_graph_s)
        else:
            yield from self.algorithm(sim.network, self.ranks, nbytes, sim.costs.collective)

    def after_reducing(self, spans: list[Span]) -> Process:
        """What a step does once its last bucket is reduced, before the step ends: here
        nothing (every worker applies the averaged gradients itself)."""
        yield from ()

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, env = self.sim, self.sim.env
        factor = sim.compute_factor(worker.index, step)
        if self.lag:  # gradients of earlier steps not applied yet when this one starts
            worker.staleness = sum(
                1
                for j in range(max(self.start_step, step - self.lag), step)
                if not self.done(j).triggered
            )
        hiccup = sim.compute_delay(worker.index, step)
        if hiccup > 0:
            yield env.timeout(hiccup)
        elapsed = 0.0
        for bucket in self.buckets:
            yield from sim.busy(worker, bucket.ready_s - elapsed, factor)
            elapsed = bucket.ready_s
            self.ready(step, bucket.index).arrive(worker.index)
        yield from sim.busy(worker, sim.compute.step_s - elapsed, factor)
        worker.compute_end = env.now
        need = step - self.lag  # the collective this worker must see applied before going on
        if need >= self.start_step:
            yield self.done(need)
            worker.spans = self.spans[need]
        else:
            worker.spans = []
