"""Asynchronous updates on a server group (`AsynchronousTraining`), with two optional parts:
the SSP bound (`StalenessBound`) and the evaluation barrier (`EvaluationBarrier`).

A worker pulls, computes, pushes; each worker's push is applied when all of it has
arrived and counts one update. The staleness of a push is the number of updates applied
between the worker's pull and its push. With `staleness: k` (stale synchronous parallel,
Ho et al. 2013) a worker may start its iteration i only when every other live worker has
finished iteration i - k - 1: it never runs more than k iterations ahead of the slowest.
With a target held by the engine, run-real's coordinator schedules the closures up to the
next evaluation, waits for them all, evaluates, then schedules more (a barrier).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import simpy

from scenarios import vocab
from sim.engine.convergence import held_by_engine
from sim.engine.training import Process, Training, Worker

from .dataflow import server_parts

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class StalenessBound:
    """Stale synchronous parallel: no live worker starts an iteration more than `bound`
    ahead of the slowest other live worker's finished ones (`iterations`)."""

    def __init__(self, env: simpy.Environment, bound: int, iterations: list[int]):
        self.env = env
        self.bound = bound
        self.iterations = iterations  # iterations completed per worker (shared, updated)
        self.down: set[int] = set()
        self.waiting: list[tuple[int, int, simpy.Event]] = []

    def admit(self, worker: Worker, iteration: int) -> Process:
        """Wait, if `worker` runs too far ahead, until its slowest peer has caught up."""
        me, env = worker.index, self.env
        if self.may_start(me, iteration):
            return
        gate = env.event()
        self.waiting.append((me, iteration, gate))
        wait_start = env.now
        yield gate
        worker.sim.tracer.span(me, vocab.WAIT, wait_start, env.now, step=iteration)
        worker.step_start = env.now  # the wait lies between iterations

    def may_start(self, worker: int, iteration: int) -> bool:
        others = [n for w, n in enumerate(self.iterations) if w != worker and w not in self.down]
        return not others or iteration - min(others) <= self.bound

    def release(self) -> None:
        """Wake waiters whose slowest live peer has caught up."""
        still = []
        for worker, iteration, event in self.waiting:
            if self.may_start(worker, iteration):
                event.succeed()
            else:
                still.append((worker, iteration, event))
        self.waiting = still

    def fail(self, worker: int, downtime: float) -> None:
        """A worker is down for `downtime` seconds: the others do not wait for it."""
        self.down.add(worker)
        self.env.timeout(downtime).callbacks.append(lambda _e: self.down.discard(worker))
        self.release()


class EvaluationBarrier:
    """Run-real's coordinator: closures dispatched up to the next evaluation (every
    `every` updates), then none until the evaluation (`seconds`) is done."""

    def __init__(self, sim: Simulation, every: int, seconds: float):
        self.sim = sim
        self.every = every
        self.seconds = seconds
        self.boundary = every  # the update count of the next evaluation
        self.dispatched = 0  # closures started
        self.gate: simpy.Event | None = None  # workers waiting for the evaluation

    def admit(self, worker: Worker, iteration: int) -> Process:
        """Dispatch `worker`'s closure, once the evaluation before it is done."""
        env = self.sim.env
        if self.dispatched >= self.boundary:
            # no closure left before the evaluation: idle until it is done
            wait_start = env.now
            while self.dispatched >= self.boundary:
                if self.gate is None:
                    self.gate = env.event()
                yield self.gate
            self.sim.tracer.span(worker.index, vocab.WAIT, wait_start, env.now, step=iteration)
            worker.step_start = env.now  # the wait lies between iterations
        self.dispatched += 1

    def applied(self) -> None:
        """An update is in: the evaluation starts once every closure before it is."""
        if self.sim.completed == self.boundary:
            self.sim.env.process(self.evaluate())

    def evaluate(self) -> Process:
        """The coordinator's evaluation behind the barrier, then the next chunk."""
        yield self.sim.env.timeout(self.seconds)
        self.boundary += self.every
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.succeed()


class AsynchronousTraining(Training):
    """Asynchronous parameter servers: a server group, each worker's dataflow, every push
    applied as an update; the SSP bound and the evaluation barrier where the scenario has
    them."""

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec.strategy
        self.servers, self.dataflow = server_parts(self.sim, self.spawn)
        self.iterations = [0] * sim.workers  # iterations completed per worker
        # the SSP bound in iterations (the contract calls it staleness)
        bound = spec.staleness if spec.max_iterations_ahead is None else spec.max_iterations_ahead
        self.bound = None if bound is None else StalenessBound(sim.env, bound, self.iterations)
        self.barrier: EvaluationBarrier | None = None
        every = sim.spec.training.evaluation.every_steps
        if held_by_engine(sim.spec) and every:
            self.barrier = EvaluationBarrier(sim, every, sim.costs.evaluation_s)
        self.workers = [Worker(self, w) for w in range(sim.workers)]

    def first_step(self, worker: Worker) -> int:
        return 0

    def resume_step(self, worker: Worker, step: int) -> int:
        return self.iterations[worker.index]

    def fail_worker(self, worker: int, downtime: float) -> None:
        if self.bound is not None:
            self.bound.fail(worker, downtime)
        super().fail_worker(worker, downtime)

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, me = self.sim, worker.index
        if self.barrier is not None:
            yield from self.barrier.admit(worker, step)
        if self.bound is not None:
            yield from self.bound.admit(worker, step)
        version = sim.completed
        worker.spans = yield from self.dataflow.iterate(worker, step, me, _uncounted, self._pulls)
        worker.inflight = []
        yield from self.servers.apply()  # the closure's own update on the servers
        worker.staleness = sim.completed - version
        sim.apply_update()
        self.iterations[me] = step + 1
        if self.bound is not None:
            self.bound.release()
        if self.barrier is not None:
            self.barrier.applied()
        if me == 0:  # the chief writes checkpoints; it alone stalls
            yield from sim.async_checkpoint()

    def _pulls(self, node: int, step: int) -> list[simpy.Event]:
        return self.dataflow.pull(node)


def _uncounted(_: Any, j: int, g: int = 0) -> None:
    """Asynchronous pushes: each applies on arrival, none is counted towards a round."""
