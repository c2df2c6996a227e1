"""Synchronous rounds on a server group (`SyncRounds`), and the synchronous training that
composes them with its workers' dataflow (`SynchronousTraining`).

A step's update is applied once N - b members' gradients have reached every shard (b =
`backup_workers`, Chen et al. 2016), counted per shard (`sync_scope: step`) or per group
of layers (`sync_scope: variable`, ps-lite's per-key synchronisation: each group is then
updated, and pulled again, on its own); gradients that arrive later are dropped and
counted; the next step's pulls start once the update is applied. The members are the
workers, or the hosts with host aggregation (`hosts.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import simpy

from sim.engine.training import Events, PerStep, Process, Training, Worker

from .dataflow import Counted, Dataflow, server_parts
from .servers import ServerGroup

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class SyncRounds:
    """Each step's round: the members' pushes counted, the update applied, checkpoints
    written (one mode flag: `per_variable`, the variable scope)."""

    def __init__(self, training: Training, servers: ServerGroup, dataflow: Dataflow, needed: int):
        sim = training.sim
        self.sim = sim
        self.training = training
        self.servers = servers
        self.dataflow = dataflow
        self.start_step = training.start_step
        self.per_variable = sim.spec.strategy.sync_scope == "variable"
        # step scope: a step's gradients at each shard (keyed by shard); variable scope:
        # a step's gradients of each group (keyed by group), each then updated on its own
        self.pushed = PerStep(sim.env, needed)
        self.updated = Events(sim.env)  # per step: update applied (and checkpoint written)
        self.global_step = training.start_step  # the step whose update is pending
        # variable scope: a node's pulls of the next step, started while this one computes
        self.prefetched: dict[tuple[int, int], list[simpy.Event]] = {}

    def coordinate(self) -> Process:
        """Apply each step's update once enough gradients are in; write checkpoints."""
        sim, env = self.sim, self.sim.env
        groups = len(self.dataflow.groups)
        try:
            for step in range(self.start_step, sim.total_steps):
                # variable scope: each group is summed, and pulled, once its counter fires
                keys = range(groups if self.per_variable else len(self.servers.nodes))
                yield env.all_of([self.pushed(step, k).event for k in keys])
                yield from self.servers.update()
                yield from sim.end_of_step(step)
                self.global_step = step + 1
                self.updated(step).succeed()
        except simpy.Interrupt:
            return

    def next_step(self, step: int) -> int:
        # a worker whose gradients were dropped catches up with the job
        return max(step + 1, self.global_step)

    def resume_step(self, step: int) -> int:
        return max(step, self.global_step)

    def await_previous(self, worker: Worker, step: int) -> Process:
        """Step scope: the previous step's update, before its parameters are pulled."""
        if step > self.start_step and not self.per_variable:
            yield self.updated(step - 1)
            worker.step_start = self.sim.env.now

    def await_update(self, step: int) -> Process:
        """Step scope: this step's update (variable scope: the next pulls wait instead)."""
        if not self.per_variable:
            yield self.updated(step)

    def counter(self, step: int, member: int) -> Counted:
        """Count a member's gradients for `step` at each shard (variable scope: of each
        group), once all its parts there have arrived; gradients that come after the
        update are dropped and counted. Returns the callback of one part's arrival:
        `counted(event, j=shard, g=group)`."""
        groups, shards = self.dataflow.groups, len(self.servers.nodes)
        if self.per_variable:
            left = [sum(1 for b in g.nbytes if b > 0) for g in groups]
        else:
            left = [sum(1 for g in groups if g.nbytes[j] > 0) for j in range(shards)]
        dropped = [False]
        generation, sim = self.training.generation, self.sim

        def arrived(_: Any, j: int, g: int = 0) -> None:
            if generation != sim.generation:
                return  # a push of a stopped generation
            key = g if self.per_variable else j
            left[key] -= 1
            if left[key] == 0 and not self.pushed(step, key).arrive(member) and not dropped[0]:
                dropped[0] = True
                sim.dropped_gradients += 1
                sim.dropped_measured += step >= sim.warmup

        return arrived

    def pull_after(self, step: int) -> list[simpy.Event] | None:
        """Variable scope: each group's pull waits for that group's previous update."""
        if not (self.per_variable and step > self.start_step):
            return None
        return [self.pushed(step - 1, g).event for g in range(len(self.dataflow.groups))]

    def pulls(self, node: int, step: int) -> list[simpy.Event]:
        """`node`'s pulls of `step` (variable scope: started during the step before);
        in variable scope the next step's start now, each group as soon as its update is
        in, while this step still computes."""
        dataflow = self.dataflow
        pulls = self.prefetched.pop((node, step), None) or dataflow.pull(
            node, self.pull_after(step)
        )
        if self.per_variable and step + 1 < self.sim.total_steps:
            self.prefetched[(node, step + 1)] = dataflow.pull(node, self.pull_after(step + 1))
        return pulls


class SynchronousTraining(Training):
    """Synchronous parameter servers: a server group, each worker's dataflow, and the
    rounds that count every worker's pushes."""

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        self.servers, self.dataflow = server_parts(self.sim, self.spawn)
        self.rounds = SyncRounds(self, self.servers, self.dataflow, self.needed())
        self.workers = [Worker(self, w) for w in range(sim.workers)]
        self.spawn(self.rounds.coordinate())

    def needed(self) -> int:
        """The pushes that end a round: every worker's but the backup workers'."""
        return self.sim.workers - self.sim.spec.strategy.backup_workers

    def first_step(self, worker: Worker) -> int:
        return self.start_step

    def next_step(self, worker: Worker, step: int) -> int:
        return self.rounds.next_step(step)

    def resume_step(self, worker: Worker, step: int) -> int:
        return self.rounds.resume_step(step)

    def run_step(self, worker: Worker, step: int) -> Process:
        rounds = self.rounds
        yield from rounds.await_previous(worker, step)
        counted = rounds.counter(step, worker.index)
        spans = yield from self.dataflow.iterate(worker, step, worker.index, counted, rounds.pulls)
        yield from rounds.await_update(step)
        worker.spans = spans
        worker.inflight = []
