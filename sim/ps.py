"""Parameter servers: synchronous (with backup workers) and asynchronous (with SSP).

Variables (`ModelSpec.variables`: kernel and bias of each layer, in creation order, where
the model's builder is known; else one per layer) are spread over the shards by
`partition`; each shard sits on a host of its own (`dedicated`) or on a worker host's CPU
(`colocated`, behind the host's CPU port: `Topology.host_cpu`). Round-robin over
variables is TensorFlow's own placement: with two servers an MLP's kernels all land on
the first and its biases on the second.

A step moves the model in groups of consecutive layers (`Group`): each group's variables,
split by shard, are one pull and one push per shard. As TensorFlow's dataflow runs a step
(`overlap: true`, the default): every pull starts when the step starts, a layer's forward
starts once its group has arrived, and a group's gradients go to their shards as soon as
backward has produced them. With `overlap: false` the worker pulls everything before its
forward and pushes everything after its backward. The groups are the variables one by one
(`fusion_buffer` not given: TensorFlow sends each variable on its own), merged into at most
`MAX_GROUPS` groups of about equal bytes, fewer where the pushing nodes x shards x groups
would exceed `FLOW_BUDGET` flows, so that the cost of a step stays bounded; or buckets of
`fusion_buffer` bytes where it is given.

Synchronous: a step's update is applied once N - b workers' gradients have reached every
shard (b = `backup_workers`, Chen et al. 2016), counted per shard; gradients that arrive
later are dropped and counted; the next step's pulls start once the update is applied.
With `local_aggregation` the devices of a host reduce over the host link to the host's
first device, which pushes and pulls for all of them and broadcasts back
(tf_cnn_benchmarks' distributed_replicated); the update then needs the pushes of
ceil((N - b) / D) hosts.

Asynchronous: a worker pulls, computes, pushes; each worker's push is applied when all of
it has arrived and counts one update. The staleness of a push is the number of updates
applied between the worker's pull and its push. With `staleness: k` (stale synchronous
parallel, Ho et al. 2013) a worker may start its iteration i only when every other live
worker has finished iteration i - k - 1: it never runs more than k iterations ahead of the
slowest.

On the calibrated machine with closures measured (`ServerCosts.closure_s`) a step is one
closure: its pull and its push each take what the closure probes measured alone, the
model's bytes sharing the host's cores with everything else in flight (`_closure_flow`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np
import simpy

from scenarios import vocab

from .convergence import eval_time, held_by_engine
from .shards import FLOW_BUDGET, MAX_GROUPS, Group, assign, groups_of, variable_layers
from .simulation import Simulation, Span
from .training import Events, PerStep, Process, Training, Worker

#: a transfer started in turn: (gate to wait for, if any; its start; its arrival's event)
Turn = tuple[simpy.Event | None, Callable[[], simpy.Event], simpy.Event]


class ParameterServerTraining(Training):
    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec.strategy
        topo = sim.topology
        compute = sim.compute
        variables = np.array(sim.spec.model.variables(), dtype=float)
        held = assign(variables, spec.servers, spec.partition) * compute.bytes_per_param
        if spec.placement == "dedicated":
            nodes = [topo.server(j) for j in range(spec.servers)]
        else:
            nodes = [topo.host_cpu(j % topo.hosts) for j in range(spec.servers)]
        # shards that hold nothing take no part
        keep = [j for j in range(spec.servers) if held[:, j].sum() > 0]
        held = held[:, keep]
        self.shards = [nodes[j] for j in keep]  # the node of each shard that holds something
        self.total_bytes = float(held.sum())
        # bytes of each layer on each shard, then the groups a step moves
        layer_bytes = np.zeros((len(compute.params), len(keep)))
        for v, layer in enumerate(variable_layers(variables.tolist(), compute.params.tolist())):
            layer_bytes[layer] += held[v]
        # a calibration profile measured run-real's closures, which move the whole model
        # in one call each way: there a step pulls it all, computes, and pushes it all
        calibrated = sim.costs.calibration is not None
        explicit = "fusion_buffer" in spec.model_fields_set
        # each group is a flow per pushing node and shard each way: the default grouping
        # keeps a step's flows within FLOW_BUDGET (the flow network's cost grows with them)
        pushers = topo.hosts if spec.local_aggregation else sim.workers
        budget = max(1, min(MAX_GROUPS, FLOW_BUDGET // max(1, pushers * len(keep))))
        min_bytes = spec.fusion_buffer if explicit else self.total_bytes / budget
        if calibrated:
            min_bytes = math.inf
        self.groups = groups_of(compute.forward_s, compute.backward_s, layer_bytes, min_bytes)
        self.overlap = spec.overlap and not calibrated
        # without contention (the analytical network) transfers that share a path would
        # not slow each other: a worker's pulls, and its pushes, then go one after another
        self.in_order = sim.spec.sim.network_model == "analytical"
        self.sync = spec.sync
        self.local = spec.local_aggregation and topo.devices_per_host > 1
        self.devices = topo.devices_per_host
        needed = sim.workers - spec.backup_workers
        if self.local:
            needed = math.ceil(needed / self.devices)
        # step scope: a step's gradients at each shard (keyed by shard); variable scope:
        # a step's gradients of each group (keyed by group), each then updated on its own
        self.pushed = PerStep(sim.env, needed)
        self.per_variable = spec.sync_scope == "variable"
        self.updated = Events(sim.env)  # per step: update applied (and checkpoint written)
        self.global_step = start_step  # the step whose update is pending (sync)
        # local aggregation: per step and host x group, every device has its gradients;
        # per (step, host), the round of pulls and pushes its first device runs
        self.host_ready = PerStep(sim.env, self.devices)
        self.host_rounds: dict[tuple[int, int], Any] = {}
        # variable scope: a node's pulls of the next step, started while this one computes
        self.prefetched: dict[tuple[int, int], list[simpy.Event]] = {}
        # async: iterations completed per worker, and SSP waiters
        self.iterations = [0] * sim.workers
        self.down: set[int] = set()
        # the SSP bound in iterations (the contract calls it staleness)
        self.bound = (
            spec.staleness if spec.max_iterations_ahead is None else spec.max_iterations_ahead
        )
        self.waiting: list[tuple[int, int, simpy.Event]] = []
        # async with a target: run-real's coordinator schedules the closures up to the next
        # evaluation, waits for them all, evaluates, then schedules more (a barrier)
        self.barrier_every, self.barrier_s = 0, 0.0
        if held_by_engine(sim.spec):
            self.barrier_every = sim.spec.training.evaluation.every_steps
            profile = sim.costs.calibration.profile if sim.costs.calibration else None
            self.barrier_s = eval_time(sim.spec, float(compute.forward_s.sum()), profile)
        self.boundary = self.barrier_every  # the update count of the next evaluation
        self.dispatched = 0  # closures started
        self.gate: simpy.Event | None = None  # workers waiting for the evaluation
        costs = sim.costs.servers
        self.dispatch_s = costs.dispatch_s  # a closure reaches its worker
        # the update of the whole model on the servers, one call: it ends a synchronous round
        self.update_s = costs.update_s
        # a pull or push issued as a call of its own pays a call's fixed cost beyond its
        # messages' latency (on the calibrated machine without closures)
        self.setup_s = costs.call_s
        # on the calibrated machine, a closure's pull and push each take what the closure
        # probes measured alone, and closures in flight at once share the host's cores as
        # transfers do, by their bytes (`_closure_flow`)
        self.closure_s = costs.closure_s
        # without them, an asynchronous closure's update after its push
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
                # variable scope: each group is summed, and pulled, once its counter fires
                keys = range(len(self.groups) if self.per_variable else len(self.shards))
                yield env.all_of([self.pushed(step, k).event for k in keys])
                if self.update_s:  # the call that applies the update on the servers
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

    def run_step(self, worker: Worker, step: int) -> Process:
        if not self.sync:
            yield from self.run_async(worker, step)
            return
        if self.local:
            yield from self.run_local(worker, step)
            return
        env = self.sim.env
        if step > self.start_step and not self.per_variable:
            yield self.updated(step - 1)  # the previous step's update, before its parameters
            worker.step_start = env.now
        counted = self._counter(step, worker.index)
        spans = yield from self.iterate(worker, step, worker.index, counted)
        if not self.per_variable:  # variable scope: the next step's pulls wait instead
            yield self.updated(step)
        worker.spans = spans
        worker.inflight = []

    def _counter(self, step: int, member: int) -> Any:
        """Count a member's gradients for `step` at each shard (variable scope: of each
        group), once all its parts there have arrived; gradients that come after the
        update are dropped and counted. Returns the callback of one part's arrival:
        `counted(event, j=shard, g=group)`."""
        if self.per_variable:
            left = [sum(1 for b in g.nbytes if b > 0) for g in self.groups]
        else:
            left = [sum(1 for g in self.groups if g.nbytes[j] > 0) for j in range(len(self.shards))]
        dropped = [False]
        generation = self.generation

        def arrived(_: Any, j: int, g: int = 0) -> None:
            if generation != self.sim.generation:
                return  # a push of a stopped generation
            key = g if self.per_variable else j
            left[key] -= 1
            if left[key] == 0 and not self.pushed(step, key).arrive(member) and not dropped[0]:
                dropped[0] = True
                self.sim.dropped_gradients += 1
                self.sim.dropped_measured += step >= self.sim.warmup

        return arrived

    def iterate(
        self, worker: Worker, step: int, node: int, counted: Any
    ) -> Generator[Any, Any, list[Span]]:
        """One pull, compute and push of the model by `node` for `worker`'s step; returns
        the pull and push spans. Counts the pushes with `counted(event, shard)`."""
        sim, env = self.sim, self.sim.env
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        pull_start = env.now
        if self.dispatch_s:  # the step's closure reaches the worker
            yield env.timeout(self.dispatch_s)
        if self.closure_s is not None:
            yield from self._closure_iteration(worker, node, factor, delay, counted)
            return worker.spans
        pulls = self.prefetched.pop((node, step), None) or self.pull(node, self._pull_after(step))
        if self.per_variable and self.sync and step + 1 < sim.total_steps:
            # each group of the next step is pulled as soon as its update is in, while this
            # step still computes
            self.prefetched[(node, step + 1)] = self.pull(node, self._pull_after(step + 1))
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

    def _pull_after(self, step: int) -> list[simpy.Event] | None:
        """Variable scope: each group's pull waits for that group's previous update."""
        if not (self.per_variable and self.sync and step > self.start_step):
            return None
        return [self.pushed(step - 1, g).event for g in range(len(self.groups))]

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

    def pull(self, node: int, after: list[simpy.Event] | None = None) -> list[simpy.Event]:
        """Every group's pull from its shards to `node`: all started now, or each once its
        event of `after` fires (in layer order, one after another, without contention)."""
        env, net = self.sim.env, self.sim.network

        def start(group: Group) -> simpy.Event:
            shards = zip(self.shards, group.nbytes, strict=True)
            pairs = [(shard, node) for shard, b in shards if b > 0]
            sizes = [b for b in group.nbytes if b > 0]
            return net.transfers(pairs, sizes, setup=self.setup_s)

        if not self.in_order and after is None:
            return [start(group) for group in self.groups]
        events = [env.event() for _ in self.groups]
        gates: Sequence[simpy.Event | None] = after or [None] * len(self.groups)
        turns: list[Turn] = [
            (gate, functools.partial(start, group), done)
            for gate, group, done in zip(gates, self.groups, events, strict=True)
        ]
        if self.in_order:
            self.spawn(self._in_turn(turns))
        else:
            for turn in turns:
                self.spawn(self._in_turn([turn]))
        return events

    def push(self, node: int, g: int, counted: Any, after: Any = None) -> list[simpy.Event]:
        """Group g's gradients from `node` to its shards, each counted as it arrives;
        without contention, after `after` (the worker's previous push) has arrived."""
        net = self.sim.network
        counted = functools.partial(counted, g=g)
        events = []
        for j, (shard, nbytes) in enumerate(zip(self.shards, self.groups[g].nbytes, strict=True)):
            if nbytes <= 0:
                continue
            if self.in_order and after is not None and not after.triggered:
                event = self.sim.env.event()
                send = functools.partial(net.transfer, node, shard, nbytes, setup=self.setup_s)
                self.spawn(self._in_turn([(after, send, event)]))
            else:
                event = net.transfer(node, shard, nbytes, setup=self.setup_s)
            event.callbacks.append(functools.partial(counted, j=j))
            events.append(event)
        return events

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

    def _closure_iteration(
        self, worker: Worker, node: int, factor: float, delay: float, counted: Any
    ) -> Process:
        """A step as one closure on the calibrated machine: its pull, the compute, its push
        (each part of the push counted at every shard as it arrives)."""
        sim, env = self.sim, self.sim.env
        assert self.closure_s is not None
        pull_start = env.now
        pull = self._closure_flow(node, self.closure_s[0])
        worker.inflight = [pull]
        yield pull
        pulled = env.now
        worker.stall = pulled - pull_start
        yield from sim.busy(worker, sim.compute.step_s, factor, delay)
        worker.compute_end = env.now
        push_start = env.now
        push = self._closure_flow(node, self.closure_s[1])
        for j in range(len(self.shards)):
            for group in self.groups:
                if group.nbytes[j] > 0:
                    push.callbacks.append(functools.partial(counted, j=j))
        worker.inflight = [push]
        yield push
        worker.spans = [(vocab.PULL, pull_start, pulled), (vocab.PUSH, push_start, env.now)]

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

    # -- synchronous, with local aggregation ----------------------------------------------

    def run_local(self, worker: Worker, step: int) -> Process:
        """The host's first device pulls for the host and broadcasts each group over the
        host link, every device computes, and each group's gradients, once every device
        of the host has them, are reduced to the first device, which pushes them for the
        host (`_host_round`)."""
        sim, env = self.sim, self.sim.env
        if step > self.start_step and not self.per_variable:
            yield self.updated(step - 1)
            worker.step_start = env.now
        host, local = divmod(worker.index, self.devices)
        key = (step, host)
        if key not in self.host_rounds:
            self.host_rounds[key] = self._host_round(step, host)
        ahead = (step + 1, host)
        if self.per_variable and step + 1 < sim.total_steps and ahead not in self.host_rounds:
            # the next step's groups are pulled as soon as their updates are in
            self.host_rounds[ahead] = self._host_round(step + 1, host)
        broadcast, pull_span, push_span = self.host_rounds[key]
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        stall = yield from self.forward(worker, broadcast, factor, delay)
        groups = len(self.groups)
        for g in reversed(range(groups)):
            yield from sim.busy(worker, self.groups[g].backward_s, factor)
            if self.overlap:
                self.host_ready(step, host * groups + g).arrive(local)
        worker.compute_end = env.now
        worker.stall = stall
        if not self.overlap:
            for g in reversed(range(groups)):
                self.host_ready(step, host * groups + g).arrive(local)
        if not self.per_variable:
            yield self.updated(step)
        worker.spans = [(vocab.PULL, *pull_span), (vocab.PUSH, *push_span)]
        self.host_rounds.pop(key, None)

    def _host_round(
        self, step: int, host: int
    ) -> tuple[list[simpy.Event], list[float], list[float]]:
        """Start a host's round: every group pulled by the host's first device and
        broadcast down the host's chain (events: each group broadcast), and each group
        reduced up the chain and pushed once every device has its gradients. The spans
        (start, end) of the pulls and pushes fill in as they happen."""
        env, net = self.sim.env, self.sim.network
        first = host * self.devices
        chain = [(first + i + 1, first + i) for i in range(self.devices - 1)]
        down = [(b, a) for a, b in chain]
        groups = len(self.groups)
        broadcast = [env.event() for _ in self.groups]
        pull_span = [env.now, env.now]
        push_span = [env.now, env.now]
        counted = self._counter(step, host)

        def pull_all() -> Process:
            if self.dispatch_s:
                yield env.timeout(self.dispatch_s)
            pulls = self.pull(first, self._pull_after(step))
            moved = [
                self.spawn(spread(pulled, sum(g.nbytes), done))
                for pulled, g, done in zip(pulls, self.groups, broadcast, strict=True)
            ]
            yield env.all_of(moved)
            pull_span[1] = env.now

        def spread(pulled: simpy.Event, nbytes: float, done: simpy.Event) -> Process:
            yield pulled
            yield net.transfers(down, nbytes, messages=self.devices - 1)
            done.succeed()

        def reduce_and_push() -> Process:
            pushes: list[simpy.Event] = []
            started = False
            for g in reversed(range(groups)):
                yield self.host_ready(step, host * groups + g).event
                if not started:
                    push_span[0], started = env.now, True
                yield net.transfers(chain, sum(self.groups[g].nbytes), messages=self.devices - 1)
                pushes += self.push(first, g, counted, env.all_of(pushes))
            yield env.all_of(pushes)
            push_span[1] = env.now

        self.spawn(pull_all())
        self.spawn(reduce_and_push())
        return broadcast, pull_span, push_span

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
        if self.barrier_every and self.dispatched >= self.boundary:
            # no closure left before the evaluation: idle until it is done
            wait_start = env.now
            while self.dispatched >= self.boundary:
                if self.gate is None:
                    self.gate = env.event()
                yield self.gate
            sim.tracer.span(me, vocab.WAIT, wait_start, env.now, step=iteration)
            worker.step_start = env.now  # the wait lies between iterations
        self.dispatched += 1
        if not self._may_start(me, iteration):
            gate = env.event()
            self.waiting.append((me, iteration, gate))
            wait_start = env.now
            yield gate
            sim.tracer.span(me, vocab.WAIT, wait_start, env.now, step=iteration)
            worker.step_start = env.now  # the wait lies between iterations
        version = sim.completed
        worker.spans = yield from self.iterate(worker, iteration, me, _uncounted)
        worker.inflight = []
        if self.apply_s:  # the closure's own update on the servers
            yield env.timeout(self.apply_s)
        worker.staleness = sim.completed - version
        sim.apply_update()
        self.iterations[me] = iteration + 1
        self._release()
        if self.barrier_every and sim.completed == self.boundary:
            env.process(self._evaluate())  # every closure of the chunk is in
        if me == 0:  # the chief writes checkpoints; it alone stalls
            yield from sim.async_checkpoint()

    def _evaluate(self) -> Process:
        """The coordinator's evaluation behind the barrier, then the next chunk."""
        yield self.sim.env.timeout(self.barrier_s)
        self.boundary += self.barrier_every
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.succeed()


def _uncounted(_: Any, j: int, g: int = 0) -> None:
    """Asynchronous pushes: each applies on arrival, none is counted towards a round."""
