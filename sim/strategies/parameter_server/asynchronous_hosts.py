"""Asynchronous parameter servers with host aggregation (`AsyncHostAggregatedTraining`):
MXNet's `dist_async` on machines of several devices.

MXNet's KVStore sums the values pushed to one key from a machine's devices before it
pushes the sum ("KVStore first sums all of these values, and then pushes the aggregated
value", KVStore API), and under `dist_async` "the weights are updated whenever gradients
are received from any machine" (KVStore, `dist_async`). So a host's devices run each
iteration together, as in the synchronous host aggregation (`hosts.py`): the
host's first device pulls every group for the host and broadcasts it down the host's
chain, every device computes, each group's gradients are reduced up the chain once every
device has them, and the first device pushes them. Across hosts nothing waits: once all
of a host's push has arrived it is applied as one update of the host's devices' batches
(`StrategySpec.averaged`), its staleness the updates applied since the host's pull; the
SSP bound and the evaluation barrier count the hosts' iterations and closures. The
chief's host writes the checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import simpy

from scenarios import vocab
from scenarios.errors import NotModelledError
from sim.engine.training import PerStep, Process, Worker

from .asynchronous import AsynchronousTraining
from .hosts import broadcast_pulls, compute_on_host, reduce_push

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


@dataclass
class HostIteration:
    """One host's iteration: each group broadcast to its devices, the update applied,
    its staleness, and the spans of its pulls and pushes."""

    broadcast: list[simpy.Event]
    applied: simpy.Event
    staleness: int = 0
    pull_span: list[float] = field(default_factory=list)
    push_span: list[float] = field(default_factory=list)


class AsyncHostAggregatedTraining(AsynchronousTraining):
    """Asynchronous parameter servers whose members are hosts: a server group, the
    dataflow, an update per host push; the SSP bound and the evaluation barrier."""

    def __init__(self, sim: Simulation, start_step: int):
        if sim.spec.failures:
            raise NotModelledError(
                "failures: asynchronous parameter servers with local_aggregation and "
                "failures are not modelled"
            )
        super().__init__(sim, start_step)
        self.devices = sim.topology.devices_per_host
        # per iteration and host x group, every device of the host has its gradients
        self.ready = PerStep(sim.env, self.devices)
        # per (iteration, host): the host's iteration, once its first device started it
        self.started: dict[tuple[int, int], simpy.Event] = {}
        self.iterations_of: dict[tuple[int, int], HostIteration] = {}

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, env = self.sim, self.sim.env
        host, local = divmod(worker.index, self.devices)
        key = (step, host)
        started = self.started.setdefault(key, env.event())
        if local == 0:
            if self.barrier is not None:
                yield from self.barrier.admit(worker, step)
            if self.bound is not None:
                yield from self.bound.admit(worker, step)
            self.iterations_of[key] = self._host_iteration(step, host)
            started.succeed()
        else:
            yield started
            worker.step_start = env.now  # the host's devices start together
        iteration = self.iterations_of[key]
        yield from compute_on_host(
            self.dataflow, self.ready, worker, step, host, iteration.broadcast
        )
        yield iteration.applied
        worker.staleness = iteration.staleness
        worker.spans = [
            (vocab.PULL, iteration.pull_span[0], iteration.pull_span[1]),
            (vocab.PUSH, iteration.push_span[0], iteration.push_span[1]),
        ]
        if local == self.devices - 1:
            self.started.pop(key, None)
            self.iterations_of.pop(key, None)
            groups = len(self.dataflow.groups)  # this host's counters, not the others'
            self.ready.drop(step, range(host * groups, (host + 1) * groups))
        if worker.index == 0:  # the chief writes checkpoints; it alone stalls
            yield from sim.async_checkpoint()

    def _host_iteration(self, step: int, host: int) -> HostIteration:
        """Start a host's iteration: its pulls, each group broadcast down the chain, and
        each group reduced up it and pushed once every device has its gradients; once
        the whole push has arrived, the update."""
        sim, env, dataflow = self.sim, self.sim.env, self.dataflow
        first = host * self.devices
        iteration = HostIteration([env.event() for _ in dataflow.groups], env.event())
        iteration.pull_span[:] = [env.now, env.now]
        iteration.push_span[:] = [env.now, env.now]
        version = sim.completed

        def pull_all() -> Process:
            yield from self.servers.dispatch()
            pulls = dataflow.pull(first)
            yield from broadcast_pulls(self, dataflow, first, pulls, iteration.broadcast)
            iteration.pull_span[1] = env.now

        def reduce_push_apply() -> Process:
            yield from reduce_push(
                dataflow, self.ready, step, host, _uncounted, iteration.push_span
            )
            yield from self.servers.apply()  # the closure's own update on the servers
            iteration.staleness = sim.completed - version
            sim.apply_update()
            for d in range(first, first + self.devices):
                self.iterations[d] = step + 1
            if self.bound is not None:
                self.bound.release()
            if self.barrier is not None:
                self.barrier.applied()
            iteration.applied.succeed()

        self.spawn(pull_all())
        self.spawn(reduce_push_apply())
        return iteration


def _uncounted(*_: object, **__: object) -> None:
    """Asynchronous pushes: each applies on arrival, none is counted towards a round."""
