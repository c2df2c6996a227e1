"""Transformer layouts (`strategy.kind: hybrid`) on the event engine: every copy of the
model's pipeline stages as processes, each running its passes in its schedule's order
(`schedule.py`), each pass waiting for its device and for the pass it needs on another
stage (`p2p_s` after that one ends), for as long as `costs.py` says, stretched by the
slowest straggler of the devices that run it together (a tensor and context group, whose
collectives hold them in step).

Once every copy of a stage has flushed its pipeline, the stage's devices reduce their
gradients over their data-parallel group and update; the step ends when every stage has.
Failures stop the job (any device's loss stops every collective), as under all-reduce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from sim.engine.training import Counter, JobStopped, Process, Training

from . import schedule
from .costs import Costs, costs_of
from .engine import orders_of, reduced

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class HybridTraining(Training):
    """One generation of a hybrid layout's job, from `start_step`."""

    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        self.costs: Costs = costs_of(sim.spec, sim.costs.calibration)
        layout = self.costs.layout
        self.orders = orders_of(self.costs, sim.spec.strategy.schedule)
        #: (step, copy, stage, pass) -> when it ended, once it has
        self.ended: dict[tuple[int, int, int, schedule.Pass], float] = {}
        #: (step, copy, stage, chunk) -> the start and end of the chunk's last backward
        self.last_backward: dict[tuple[int, int, int, int], tuple[float, float]] = {}
        self.waiting: dict[tuple[int, int, int, schedule.Pass], simpy.Event] = {}
        self.flushed: dict[tuple[int, int], Counter] = {}
        self.done: dict[int, Counter] = {}
        self.step_start: dict[int, simpy.Event] = {}
        self.began: dict[int, float] = {}
        self.spent: dict[tuple[int, int, int], tuple[float, float]] = {}
        self.spawn(self.coordinate())
        for copy in range(layout.data):
            for stage in range(layout.pipeline):
                self.spawn(self.run_stage(copy, stage))

    # -- what the steps share ---------------------------------------------------------------

    def _started(self, step: int) -> simpy.Event:
        if step not in self.step_start:
            self.step_start[step] = self.sim.env.event()
        return self.step_start[step]

    def _done(self, step: int) -> Counter:
        if step not in self.done:
            layout = self.costs.layout
            self.done[step] = Counter(self.sim.env, layout.data * layout.pipeline)
        return self.done[step]

    def _flushed(self, step: int, stage: int) -> Counter:
        if (step, stage) not in self.flushed:
            self.flushed[(step, stage)] = Counter(self.sim.env, self.costs.layout.data)
        return self.flushed[(step, stage)]

    def _ended(self, key: tuple[int, int, int, schedule.Pass]) -> simpy.Event:
        if key not in self.waiting:
            self.waiting[key] = self.sim.env.event()
        return self.waiting[key]

    def devices(self, copy: int, stage: int) -> list[int]:
        """The devices that run a copy's stage together: its tensor and context groups."""
        layout = self.costs.layout
        return [
            layout.device(tensor=t, context=c, data=copy, stage=stage)
            for c in range(layout.context)
            for t in range(layout.tensor)
        ]

    # -- processes -----------------------------------------------------------------------------

    def coordinate(self) -> Process:
        """Starts each step once the one before has ended everywhere."""
        sim, env = self.sim, self.sim.env
        try:
            for step in range(self.start_step, sim.total_steps):
                sim.begin_step(step)
                self.began[step] = env.now
                self._started(step).succeed()
                yield self._done(step).event
                self._record(step)
                yield from sim.end_of_step(step)
        except simpy.Interrupt as interrupt:
            assert isinstance(interrupt.cause, JobStopped)

    def run_stage(self, copy: int, stage: int) -> Process:
        """One copy's stage: its passes every step, then its gradients and update."""
        sim, env = self.sim, self.sim.env
        parts = self.costs.stages[stage]
        devices = self.devices(copy, stage)
        try:
            for step in range(self.start_step, sim.total_steps):
                yield self._started(step)
                factor = max(sim.compute_factor(d, step) for d in devices)
                delay = max(sim.compute_delay(d, step) for d in devices)
                compute = comm = 0.0
                for pass_ in self.orders[stage]:
                    yield from self._wait_for(step, copy, stage, pass_)
                    op, _, chunk = pass_
                    one = (parts.forward if op == "F" else parts.backward)[chunk]
                    seconds = one.compute * factor + one.comm + delay
                    compute += one.compute * factor + delay
                    comm += one.comm
                    delay = 0.0  # a hiccup once a step
                    started = env.now
                    yield env.timeout(seconds)
                    if op == "B":
                        self.last_backward[(step, copy, stage, chunk)] = (started, env.now)
                    key = (step, copy, stage, pass_)
                    self.ended[key] = env.now
                    self._ended(key).succeed()
                    if schedule.sends(
                        pass_, stage, self.costs.layout.pipeline, self.costs.layout.virtual
                    ):
                        comm += self.costs.p2p_s
                        yield env.timeout(self.costs.p2p_s)
                counter = self._flushed(step, stage)
                counter.arrive(copy)
                yield counter.event  # every copy of the stage has flushed
                flushed = env.now
                end = self._reduced(step, stage, flushed)
                if end > flushed:
                    yield env.timeout(end - flushed)
                yield env.timeout(parts.update_s)
                self.spent[(step, copy, stage)] = (
                    compute + parts.update_s,
                    comm + end - flushed,
                )
                self._done(step).arrive(copy * self.costs.layout.pipeline + stage)
        except simpy.Interrupt as interrupt:
            assert isinstance(interrupt.cause, JobStopped)

    def _reduced(self, step: int, stage: int, flushed: float) -> float:
        """When a stage's gradient reduction ends, every copy's stage having flushed at
        `flushed`: a layer's gradients are reduced once every copy's are final
        (`engine.reduced`)."""
        layout = self.costs.layout
        chunks = [
            (
                max(self.last_backward[(step, c, stage, k)][0] for c in range(layout.data)),
                max(self.last_backward[(step, c, stage, k)][1] for c in range(layout.data)),
            )
            for k in range(layout.virtual)
        ]
        parts = self.costs.stages[stage]
        return reduced(parts, chunks, flushed, self.sim.spec.strategy.overlap)

    def _wait_for(self, step: int, copy: int, stage: int, pass_: schedule.Pass) -> Process:
        layout = self.costs.layout
        need = schedule.needs(pass_, stage, layout.pipeline, layout.virtual)
        if need is None:
            return
        needed, other = need
        key = (step, copy, other, needed)
        if key not in self.ended:
            yield self._ended(key)
        ready = self.ended[key] + (self.costs.p2p_s if other != stage else 0.0)
        if ready > self.sim.env.now:
            yield self.sim.env.timeout(ready - self.sim.env.now)

    def _record(self, step: int) -> None:
        """Every device's record of a step that has ended everywhere."""
        sim, layout = self.sim, self.costs.layout
        begin, end = self.began[step], sim.env.now
        for copy in range(layout.data):
            for stage in range(layout.pipeline):
                compute, comm = self.spent.pop((step, copy, stage))
                for device in self.devices(copy, stage):
                    sim.record(
                        device,
                        step,
                        begin,
                        end,
                        end,
                        [],
                        stall=comm,
                        idle=end - begin - compute - comm,
                        traced=False,
                    )
