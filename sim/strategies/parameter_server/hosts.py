"""Host aggregation (`HostAggregation`): the devices of a host reduce their gradients over
the host link to the host's first device, which pushes and pulls for all of them and
broadcasts back (tf_cnn_benchmarks' distributed_replicated). With synchronous rounds
(`HostAggregatedTraining`) an update then needs the pushes of ceil((N - b) / D) hosts.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import simpy

from scenarios import vocab
from sim.engine.training import PerStep, Process, Training, Worker

from .dataflow import Counted, Dataflow
from .servers import ServerGroup
from .sync import SynchronousTraining, SyncRounds

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

#: a host's round: each group broadcast to its devices; the spans of its pulls and pushes
Round = tuple[list[simpy.Event], list[float], list[float]]


def aggregated(sim: Simulation) -> int:
    """The devices whose gradients a member of the job aggregates: a host's, with
    `local_aggregation` on hosts of several devices (the members are then the hosts),
    else 1 (the members are the workers)."""
    devices = sim.topology.devices_per_host
    return devices if sim.spec.strategy.local_aggregation and devices > 1 else 1


class HostAggregation:
    """Each host's round of one step: one pull and one push of every group for the host's
    devices, run by its first device over a synchronous round."""

    def __init__(
        self, training: Training, servers: ServerGroup, dataflow: Dataflow, rounds: SyncRounds
    ):
        self.sim = training.sim
        self.training = training
        self.spawn = training.spawn
        self.servers = servers
        self.dataflow = dataflow
        self.rounds = rounds
        self.devices = self.sim.topology.devices_per_host
        # per step and host x group, every device has its gradients
        self.host_ready = PerStep(self.sim.env, self.devices)
        # per (step, host), the round of pulls and pushes its first device runs
        self.host_rounds: dict[tuple[int, int], Round] = {}

    def run_step(self, worker: Worker, step: int) -> Process:
        """The host's first device pulls for the host and broadcasts each group over the
        host link, every device computes, and each group's gradients, once every device
        of the host has them, are reduced to the first device, which pushes them for the
        host (`host_round`)."""
        sim, rounds, dataflow = self.sim, self.rounds, self.dataflow
        yield from rounds.await_previous(worker, step)
        host = worker.index // self.devices
        key = (step, host)
        if key not in self.host_rounds:
            self.host_rounds[key] = self.host_round(step, host)
        ahead = (step + 1, host)
        if rounds.per_variable and step + 1 < sim.total_steps and ahead not in self.host_rounds:
            # the next step's groups are pulled as soon as their updates are in
            self.host_rounds[ahead] = self.host_round(step + 1, host)
        broadcast, pull_span, push_span = self.host_rounds[key]
        yield from compute_on_host(dataflow, self.host_ready, worker, step, host, broadcast)
        yield from rounds.await_update(step)
        worker.spans = [
            (vocab.PULL, pull_span[0], pull_span[1]),
            (vocab.PUSH, push_span[0], push_span[1]),
        ]
        self.host_rounds.pop(key, None)

    def host_round(self, step: int, host: int) -> Round:
        """Start a host's round: every group pulled by the host's first device and
        broadcast down the host's chain (events: each group broadcast), and each group
        reduced up the chain and pushed once every device has its gradients. The spans
        (start, end) of the pulls and pushes fill in as they happen."""
        env, dataflow = self.sim.env, self.dataflow
        first = host * self.devices
        broadcast = [env.event() for _ in dataflow.groups]
        pull_span = [env.now, env.now]
        push_span = [env.now, env.now]
        counted = self.rounds.counter(step, host)

        def pull_all() -> Process:
            yield from self.servers.dispatch()
            pulls = dataflow.pull(first, self.rounds.pull_after(step))
            yield from broadcast_pulls(self.training, dataflow, first, pulls, broadcast)
            pull_span[1] = env.now

        self.spawn(pull_all())
        self.spawn(reduce_push(dataflow, self.host_ready, step, host, counted, push_span))
        return broadcast, pull_span, push_span


class HostAggregatedTraining(SynchronousTraining):
    """Synchronous parameter servers whose rounds count hosts: a server group, the
    dataflow, synchronous rounds, and host aggregation."""

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        # the workers started above run their first step once the simulation runs, after this
        self.hosts = HostAggregation(self, self.servers, self.dataflow, self.rounds)

    def needed(self) -> int:
        """The hosts' pushes that end a round: ceil((N - b) / D)."""
        devices = self.sim.topology.devices_per_host
        return math.ceil(super().needed() / devices)

    def run_step(self, worker: Worker, step: int) -> Process:
        yield from self.hosts.run_step(worker, step)


def compute_on_host(
    dataflow: Dataflow,
    ready: PerStep,
    worker: Worker,
    step: int,
    host: int,
    broadcast: list[simpy.Event],
) -> Process:
    """One device of a host computes its step: forward as each group's broadcast arrives,
    backward group by group, each group counted at `ready` (the step's host x group)
    once the device has its gradients (after backward, without `overlap`)."""
    sim = dataflow.sim
    local = worker.index % sim.topology.devices_per_host
    factor = sim.compute_factor(worker.index, step)
    delay = sim.compute_delay(worker.index, step)
    stall = yield from dataflow.forward(worker, broadcast, factor, delay)
    groups = len(dataflow.groups)
    for g in reversed(range(groups)):
        yield from sim.busy(worker, dataflow.groups[g].backward_s, factor)
        if dataflow.overlap:
            ready(step, host * groups + g).arrive(local)
    worker.compute_end = sim.env.now
    worker.stall = stall
    if not dataflow.overlap:
        for g in reversed(range(groups)):
            ready(step, host * groups + g).arrive(local)


def _chain(first: int, devices: int) -> list[tuple[int, int]]:
    """A host's devices from its last to its first, one hop each (reduce direction)."""
    return [(first + i + 1, first + i) for i in range(devices - 1)]


def broadcast_pulls(
    training: Training,
    dataflow: Dataflow,
    first: int,
    pulls: list[simpy.Event],
    broadcast: list[simpy.Event],
) -> Process:
    """Each group pulled to the host's first device sent down the host's chain (its
    event of `broadcast` fired at the end); done once every group is broadcast."""
    sim = dataflow.sim
    devices = sim.topology.devices_per_host
    down = [(b, a) for a, b in _chain(first, devices)]

    def spread(pulled: simpy.Event, nbytes: float, done: simpy.Event) -> Process:
        yield pulled
        yield sim.network.transfers(down, nbytes, messages=devices - 1)
        done.succeed()

    moved = [
        training.spawn(spread(pulled, sum(g.nbytes), done))
        for pulled, g, done in zip(pulls, dataflow.groups, broadcast, strict=True)
    ]
    yield sim.env.all_of(moved)


def reduce_push(
    dataflow: Dataflow,
    ready: PerStep,
    step: int,
    host: int,
    counted: Counted,
    push_span: list[float],
) -> Process:
    """Each group, once every device of the host has its gradients, reduced up the chain
    to the first device and pushed from there (each arrival `counted`); done once all of
    the push has arrived. `push_span` gets the push's start and end."""
    sim, env = dataflow.sim, dataflow.sim.env
    devices = sim.topology.devices_per_host
    first = host * devices
    chain = _chain(first, devices)
    groups = len(dataflow.groups)
    pushes: list[simpy.Event] = []
    started = False
    for g in reversed(range(groups)):
        yield ready(step, host * groups + g).event
        if not started:
            push_span[0], started = env.now, True
        yield sim.network.transfers(chain, sum(dataflow.groups[g].nbytes), messages=devices - 1)
        pushes += dataflow.push(first, g, counted, env.all_of(pushes))
    yield env.all_of(pushes)
    push_span[1] = env.now
