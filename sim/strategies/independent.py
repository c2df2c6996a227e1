"""Independent trials: a hyperparameter search, one single-worker training per combination.

The cartesian product of `strategy.trials` is scheduled onto the worker slots (hosts x
devices), first come first served in the order of the product (SimPy's FIFO `Resource`).
Each trial trains `training.steps` (+ warm-up) steps on one worker; a trial value for
`batch_per_worker` or `steps` changes that trial's work, other hyperparameters (learning
rate, dropout, ...) change what is learnt, not how long a step takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import simpy

from scenarios import vocab
from scenarios.sections.trials import trial_grid
from sim.engine.training import Process, Training

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


class IndependentTrials(Training):
    def __init__(self, sim: Simulation, start_step: int):
        super().__init__(sim, start_step)
        spec = sim.spec
        self.grid = trial_grid(dict(spec.strategy.trials or {}))
        self.slots = simpy.Resource(sim.env, capacity=sim.workers)
        self.free = list(range(sim.workers))  # slot indices, lowest first
        self.busy_time = 0.0
        self.left = len(self.grid)
        self.makespan = 0.0
        self.trial_times: list[float] = []
        for index, params in enumerate(self.grid):
            self.spawn(self.run_trial(index, params))

    def run_trial(self, index: int, params: dict[str, Any]) -> Process:
        sim, env = self.sim, self.sim.env
        training = sim.spec.training
        batch = int(params.get("batch_per_worker", training.batch_per_worker))
        steps = training.warmup_steps + int(params.get("steps", training.steps))
        scale = batch / training.batch_per_worker  # compute time is linear in the batch
        with self.slots.request() as slot:
            yield slot
            where = self.free.pop(0)
            started = env.now
            for step in range(steps):
                start = env.now
                # stragglers of the slot (a slow device stays slow for every trial on it),
                # jitter from the trial's own stream position
                seconds = (
                    sim.compute.step_s * scale * sim.compute_factor(where, index * steps + step)
                )
                seconds += sim.compute_delay(where, index * steps + step)
                yield env.timeout(seconds)
                sim.record(where, step, start, env.now, env.now, (), trial=index)
                sim.tracer.span(where, vocab.COMPUTE, start, env.now, trial=index)
            self.busy_time += env.now - started
            self.trial_times.append(env.now - started)
            self.free.append(where)
            self.free.sort()
        self.left -= 1
        if self.left == 0:
            self.makespan = env.now
            sim.completed = sim.total_steps
            sim.trials = self
            sim.finished.succeed()
