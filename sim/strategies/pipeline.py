"""Pipeline model parallelism: each device runs one stage of one replica of the model,
or a 1 / T share of every layer of it with tensor parallelism.

Device d holds stage k of replica r, tensor share t, d = (r P + k) T + t
(`workloads/pipeline.py`). Every step, a replica's batch is cut into M micro-batches. A
stage's forward of micro-batch j waits for the previous stage's activations of j; when
done, it sends its own to the next stage (a transfer over the topology, from share t to
share t). A backward waits for the next stage's gradient of j and sends its own back. The
order of a stage's work is its schedule's:

* gpipe (Huang et al. 2019): every forward, then every backward (last micro-batch first);
* 1f1b (PipeDream-Flush, Narayanan et al. 2021): P - k - 1 forwards to fill the
  pipeline, then one forward and one backward in turn, then the backwards left.

With tensor parallelism (Megatron, Shoeybi et al. 2019) each of a stage's T devices
computes 1 / T of every layer, and after each forward and each backward of a micro-batch
the T devices all-reduce what the layers' splits exchange (`Layer.tensor_exchange`
elements per sample each way: 2 s h for a transformer layer, its 4 all-reduces of s h per
step); a micro-batch's all-reduces of a stage are merged into one per direction.

Once a stage's last backward is done, its gradients (each share's) are all-reduced among the
replicas (`strategy.algorithm`), and its step ends; a job's step ends when every device's
has. With parameter servers (`strategy.servers` given) the model's variables are dealt to
the servers (`partition`, by the parameter server's deal: `parameter_server/shards.py`),
each on a host of its own (a `ServerGroup`, `parameter_server/servers.py`); a device instead
pushes its share of its stage's gradients to the servers holding them, all at once; once
every replica of that stage and share has pushed, the update is applied and each pulls its
stage's variables back, and its step ends.

With uniform stages and free transfers, a step takes (M + P - 1) (t_f + t_b) of which
(P - 1) (t_f + t_b) is the bubble.

A stage's forward and backward times are its layers' (`sim/costs/compute.py`) for a
micro-batch: the layers' per-step times scaled by 1 / (M T). On a calibrated machine each
op also holds its stage's core for every message it receives or sends (c, the profile's
fed stage, `sim/costs/measured.py`): a forward or backward of a middle stage pays 2 c,
one at either end of the pipeline c; with uniform stages and free transfers a two-stage
step takes (M + 1) (t_f + t_b + 2 c).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from scenarios import vocab
from sim.costs import ServerCosts
from sim.engine.outcome import Span
from sim.engine.training import Counter, Events, PerStep, Process, Training, Worker
from sim.network.collectives import ALGORITHMS
from sim.strategies.parameter_server.servers import ServerGroup
from sim.strategies.parameter_server.shards import deal
from workloads.pipeline import replicas, schedule_of, stage_layers

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class PipelineTraining(Training):
    traces_steps = True

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec
        strategy = spec.strategy
        self.stages = strategy.stages
        self.tensor = strategy.tensor
        self.micro = strategy.micro_batches
        self.replicas = replicas(spec)
        self.schedule = strategy.schedule
        self.algorithm = ALGORITHMS[strategy.algorithm]
        # each op receives one message and sends one, but at either end of the pipeline
        self.message_s = sim.costs.stage_message_s
        compute = sim.compute
        cuts = stage_layers(spec)
        share = self.micro * self.tensor
        self.forward_s = [float(compute.forward_s[list(c)].sum()) / share for c in cuts]
        self.backward_s = [float(compute.backward_s[list(c)].sum()) / share for c in cuts]
        size = compute.bytes_per_param
        self.gradient_bytes = [
            float(compute.params[list(c)].sum()) * size / self.tensor for c in cuts
        ]
        layers = spec.model.layers or ()
        batch = spec.training.batch_per_worker / self.micro
        self.boundary_bytes = [
            (layers[c.stop - 1].activations or 0.0) * batch * size if layers else 0.0 for c in cuts
        ]
        self.exchange_bytes = [
            sum(layers[i].tensor_exchange or 0.0 for i in c) * batch * size
            if layers and self.tensor > 1
            else 0.0
            for c in cuts
        ]
        # parameter servers (a server group of their own, each on a host of its own): the
        # bytes of each stage's share (stages x servers) each holds. They pay no call costs:
        # the servers' costs are measured for the parameter_server kind's closures only.
        self.servers: ServerGroup | None = None
        self.server_bytes = np.zeros((self.stages, 0))
        if strategy.parameter_servers:
            dealt = deal(
                spec.model.variables(),
                compute.params.tolist(),
                strategy.parameter_servers,
                strategy.partition,
                size,
            )
            stage_of = {i: k for k, c in enumerate(cuts) for i in c}
            self.server_bytes = dealt.by_part(stage_of, self.stages, share=self.tensor)
            # the servers' calls cost nothing beyond their bytes; over TCP a device's one
            # connection to a server caps what it pulls and pushes there, as for data
            # parallelism's servers
            costs = ServerCosts(ceiling=sim.costs.servers.ceiling)
            self.servers = ServerGroup(sim, self.spawn, dealt, "dedicated", costs)
        self.arrived = Events(sim.env)  # (step, "F" | "B", stage, replica, share, micro)
        self.sent_at: dict[Any, float] = {}
        self.finished = PerStep(sim.env, sim.workers)
        self.groups: dict[Any, Counter] = {}  # a collective's members as they arrive
        self.ended = Events(sim.env)  # a collective's end
        self.spans: dict[Any, list[Span]] = {}
        self.workers = [Worker(self, w) for w in range(sim.workers)]
        self.spawn(self.steps())

    def device(self, replica: int, stage: int, share: int) -> int:
        return (replica * self.stages + stage) * self.tensor + share

    def steps(self) -> Process:
        """Each step ends once every device has finished its part of it."""
        sim = self.sim
        try:
            for step in range(self.start_step, sim.total_steps):
                yield self.finished(step).event
                self.finished.drop(step)
                for key in [k for k in self.groups if k[0] == step]:
                    del self.groups[key]
                    self.ended.forget(key)
                    self.spans.pop(key, None)
                yield from sim.end_of_step(step)
        except simpy.Interrupt:
            return

    def _send(self, key: tuple[Any, ...], src: int, dst: int, nbytes: float) -> Process:
        net, env = self.sim.network, self.sim.env
        self.sent_at[key] = env.now
        start = env.now
        if nbytes > 0:
            yield net.transfer(src, dst, nbytes)
        self.sim.tracer.span(src, vocab.SEND, start, env.now, comm=True, step=key[0])
        self.arrived(key).succeed()

    def _together(
        self, worker: Worker, key: tuple[Any, ...], ranks: list[int], nbytes: float
    ) -> Process:
        """One all-reduce of `nbytes` among `ranks`: started by the first rank once every
        rank has arrived; each waits for its end. Returns its span."""
        sim, env = self.sim, self.sim.env
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Counter(env, len(ranks))
        group.arrive(worker.index)
        ended = self.ended(key)
        if worker.index == ranks[0]:
            yield group.event
            began = env.now
            yield from self.algorithm(sim.network, ranks, nbytes, sim.costs.collective)
            self.spans[key] = [(vocab.ALLREDUCE, began, env.now)]
            ended.succeed()
        else:
            yield ended
        spans = self.spans[key]
        for phase, began, end in spans:
            sim.tracer.span(worker.index, phase, began, end, comm=True, step=key[0])
        return spans

    def _push_pull(
        self, servers: ServerGroup, worker: Worker, step: int, stage: int, share: int
    ) -> Process:
        """A device's gradients to the servers, the update once every replica's have
        arrived, its variables back. Returns the push's and the pull's spans."""
        env, me = self.sim.env, worker.index
        held = self.server_bytes[stage]
        began = env.now
        pushes = [event for _, event in servers.push(me, held)]
        if pushes:
            yield simpy.AllOf(env, pushes)
        pushed = env.now
        key = (step, "servers", stage, share)
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = Counter(env, self.replicas)
        group.arrive(worker.index)
        yield group.event
        updated = env.now
        pulls = servers.pull_shards(me, held)
        if pulls:
            yield simpy.AllOf(env, pulls)
        spans = [(vocab.PUSH, began, pushed), (vocab.PULL, updated, env.now)]
        for phase, start, end in spans:
            self.sim.tracer.span(me, phase, start, end, comm=True, step=step)
        return spans

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, env = self.sim, self.sim.env
        place, share = divmod(worker.index, self.tensor)
        replica, stage = divmod(place, self.stages)
        last = self.stages - 1
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        if delay > 0:
            yield env.timeout(delay)
        tracer = sim.tracer
        mates = [self.device(replica, stage, t) for t in range(self.tensor)]
        key: tuple[Any, ...]
        for op, j in schedule_of(self.schedule, self.stages, self.micro, stage):
            needs = (stage > 0) if op == "F" else (stage < last)
            if needs:
                key = (step, op, stage, replica, share, j)
                event = self.arrived(key)
                if not event.triggered:
                    waited = env.now
                    yield event
                    # waiting on the other stage's compute is the bubble; on the bytes
                    # in flight, communication
                    sent = max(self.sent_at.pop(key, waited), waited)
                    worker.idle += sent - waited
                    worker.stall += env.now - sent
                else:
                    self.sent_at.pop(key, None)
                self.arrived.forget(key)
            began = env.now
            seconds = self.forward_s[stage] if op == "F" else self.backward_s[stage]
            seconds += self.message_s * ((stage > 0) + (stage < last))
            yield from sim.busy(worker, seconds, factor)
            phase = vocab.FORWARD if op == "F" else vocab.BACKWARD
            tracer.span(worker.index, phase, began, env.now, step=step)
            if self.exchange_bytes[stage] > 0:  # the layers' tensor splits meet
                waited = env.now
                key = (step, "tensor", op, stage, replica, j)
                yield from self._together(worker, key, mates, self.exchange_bytes[stage])
                worker.stall += env.now - waited
            if op == "F" and stage < last:
                key = (step, "F", stage + 1, replica, share, j)
                dst = self.device(replica, stage + 1, share)
                self.spawn(self._send(key, worker.index, dst, self.boundary_bytes[stage]))
            elif op == "B" and stage > 0:
                key = (step, "B", stage - 1, replica, share, j)
                dst = self.device(replica, stage - 1, share)
                self.spawn(self._send(key, worker.index, dst, self.boundary_bytes[stage - 1]))
        worker.compute_end = env.now
        worker.spans = []
        if self.servers is not None:
            worker.spans = yield from self._push_pull(self.servers, worker, step, stage, share)
        elif self.replicas > 1 and self.gradient_bytes[stage] > 0:
            # a share's gradients, all-reduced among the replicas of that stage and share
            ranks = [self.device(r, stage, share) for r in range(self.replicas)]
            key = (step, "replicas", stage, share)
            worker.spans = yield from self._together(worker, key, ranks, self.gradient_bytes[stage])
        done = self.finished(step)
        done.arrive(worker.index)
        yield done.event
