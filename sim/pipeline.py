"""Pipeline model parallelism: each device runs one stage of one replica of the model.

Device d holds stage k = d mod P of replica d // P (`scenarios/pipeline.py`). Every step,
a replica's batch is cut into M micro-batches. A stage's forward of micro-batch j waits
for the previous stage's activations of j; when done, it sends its own to the next
stage (a transfer over the topology). A backward waits for the next stage's gradient
of j and sends its own back. The order of a stage's work is its schedule's:

* gpipe (Huang et al. 2019): every forward, then every backward (last micro-batch first);
* 1f1b (PipeDream-Flush, Narayanan et al. 2021): P - k - 1 forwards to fill the
  pipeline, then one forward and one backward in turn, then the backwards left.

Once a stage's last backward is done, its gradients are all-reduced among the replicas
of that stage (the stage's parameters, with `strategy.algorithm`), and its step ends; a
job's step ends when every device's has. With uniform stages and free transfers, a step
takes (M + P - 1) (t_f + t_b) of which (P - 1) (t_f + t_b) is the bubble.

A stage's forward and backward times are its layers' (`sim/compute.py`) for a
micro-batch: the layers' per-step times scaled by 1 / M.
"""

from __future__ import annotations

from typing import Any

import simpy

from scenarios import vocab
from scenarios.pipeline import replicas, stage_layers

from .collectives import ALGORITHMS
from .simulation import Simulation, Span
from .training import Events, PerStep, Process, Training, Worker


def schedule_of(kind: str, stages: int, micro: int, stage: int) -> list[tuple[str, int]]:
    """The order of a stage's work in one step: ("F" | "B", micro-batch)."""
    if kind == "gpipe":
        return [("F", j) for j in range(micro)] + [("B", j) for j in reversed(range(micro))]
    warm = min(stages - stage - 1, micro)
    ops = [("F", j) for j in range(warm)]
    forward, backward = warm, 0
    while backward < micro:
        if forward < micro:
            ops.append(("F", forward))
            forward += 1
        ops.append(("B", backward))
        backward += 1
    return ops


class PipelineTraining(Training):
    traces_steps = True

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec
        strategy = spec.strategy
        self.stages = strategy.stages
        self.micro = strategy.micro_batches
        self.replicas = replicas(spec)
        self.schedule = strategy.schedule
        self.algorithm = ALGORITHMS[strategy.algorithm]
        compute = sim.compute
        cuts = stage_layers(spec)
        self.forward_s = [float(compute.forward_s[list(c)].sum()) / self.micro for c in cuts]
        self.backward_s = [float(compute.backward_s[list(c)].sum()) / self.micro for c in cuts]
        self.gradient_bytes = [
            float(compute.params[list(c)].sum()) * compute.bytes_per_param for c in cuts
        ]
        layers = spec.model.layers or ()
        batch = spec.training.batch_per_worker / self.micro
        self.boundary_bytes = [
            (layers[c.stop - 1].activations or 0.0) * batch * spec.model.bytes_per_param
            if layers
            else 0.0
            for c in cuts
        ]
        self.arrived = Events(sim.env)  # (step, "F" | "B", stage, replica, micro)
        self.sent_at: dict[Any, float] = {}
        self.finished = PerStep(sim.env, sim.workers)
        self.ready = PerStep(sim.env, self.replicas)  # (step, stage): replicas done
        self.reduced = Events(sim.env)  # (step, stage): its all-reduce ended
        self.spans: dict[tuple[int, int], list[Span]] = {}
        self.workers = [Worker(self, w) for w in range(sim.workers)]
        self.spawn(self.steps())

    def steps(self) -> Process:
        """Each step ends once every device has finished its part of it."""
        sim = self.sim
        try:
            for step in range(self.start_step, sim.total_steps):
                yield self.finished(step).event
                self.finished.drop(step)
                self.ready.drop(step)
                for stage in range(self.stages):
                    self.reduced.forget((step, stage))
                    self.spans.pop((step, stage), None)
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

    def run_step(self, worker: Worker, step: int) -> Process:
        sim, env = self.sim, self.sim.env
        replica, stage = divmod(worker.index, self.stages)
        last = self.stages - 1
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        if delay > 0:
            yield env.timeout(delay)
        tracer = sim.tracer
        for op, j in schedule_of(self.schedule, self.stages, self.micro, stage):
            needs = (stage > 0) if op == "F" else (stage < last)
            if needs:
                key = (step, op, stage, replica, j)
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
            yield from sim.busy(worker, seconds, factor)
            phase = vocab.FORWARD if op == "F" else vocab.BACKWARD
            tracer.span(worker.index, phase, began, env.now, step=step)
            if op == "F" and stage < last:
                nbytes = self.boundary_bytes[stage]
                key = (step, "F", stage + 1, replica, j)
                self.spawn(self._send(key, worker.index, worker.index + 1, nbytes))
            elif op == "B" and stage > 0:
                nbytes = self.boundary_bytes[stage - 1]
                key = (step, "B", stage - 1, replica, j)
                self.spawn(self._send(key, worker.index, worker.index - 1, nbytes))
        worker.compute_end = env.now
        worker.spans = []
        if self.replicas > 1 and self.gradient_bytes[stage] > 0:
            yield from self._reduce(worker, step, stage, replica)
        done = self.finished(step)
        done.arrive(worker.index)
        yield done.event

    def _reduce(self, worker: Worker, step: int, stage: int, replica: int) -> Process:
        """All-reduce a stage's gradients among its replicas: one collective, started by
        replica 0 once every replica's backward is done; each replica waits for its end."""
        sim, env = self.sim, self.sim.env
        ready = self.ready(step, stage)
        ready.arrive(replica)
        reduced = self.reduced((step, stage))
        if replica == 0:
            yield ready.event
            began = env.now
            ranks = [r * self.stages + stage for r in range(self.replicas)]
            yield from self.algorithm(
                sim.network, ranks, self.gradient_bytes[stage], sim.costs.collective
            )
            self.spans[(step, stage)] = [(vocab.ALLREDUCE, began, env.now)]
            reduced.succeed()
        else:
            yield reduced
        spans: list[Span] = self.spans[(step, stage)]
        worker.spans = spans
        for phase, began, end in spans:
            sim.tracer.span(worker.index, phase, began, end, comm=True, step=step)
