"""Transformer layouts (`strategy.kind: hybrid`) without the event engine: every stage's
passes laid out by the schedule's list scheduling (`schedule.py`), once, and every step
the same, since nothing of the run differs from one step to the next (no stragglers, no
failures). Exact: the event engine (`training.py`) reaches the same instants, and
tests/test_hybrid.py holds the two equal on random small layouts.

One step of every device: the pipeline's passes (`costs.py`) from the step's start to
its stage's flush, then its data-parallel group's gradient reduction and the update; the
step ends when every stage's update is done. A device's record counts its passes'
compute and the update as compute, their collectives and the reduction as
communication, and the rest (the bubble, waiting for other stages) as waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.engine.outcome import SimulationOutcome

from . import schedule
from .costs import Costs, costs_of

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation

NAME = "hybrid"


def eligible(sim: Simulation) -> bool:
    """Whether `run` gives this point's results: no failures, no checkpoints, no trace,
    no stragglers (their draws differ from step to step and device to device)."""
    spec = sim.spec
    s = spec.stragglers
    return (
        not spec.failures
        and not sim.checkpoint_every
        and not sim.tracer.enabled
        and not s.jitter
        and not s.slow
        and (s.transient is None or not s.transient.probability)
    )


def orders_of(costs: Costs, schedule_kind: str) -> list[list[schedule.Pass]]:
    layout = costs.layout
    return schedule.stage_orders(
        schedule_kind, layout.pipeline, layout.micro_batches, layout.virtual
    )


def pass_seconds(costs: Costs, stage: int, pass_: schedule.Pass) -> float:
    """How long one pass of a stage runs."""
    op, _, chunk = pass_
    parts = costs.stages[stage]
    return (parts.forward if op == "F" else parts.backward)[chunk].seconds


@dataclass(frozen=True)
class StageStep:
    """One stage's step: when its pipeline flushed, and its devices' seconds of
    compute and communication in the step."""

    flush: float
    compute: float
    comm: float


def stage_steps(costs: Costs, timed: list[schedule.Timed]) -> list[StageStep]:
    """Each stage's flush and its compute and communication over the step."""
    steps = []
    for parts, done in zip(costs.stages, timed, strict=True):
        compute = comm = 0.0
        for op, _, chunk in done.passes:
            one = (parts.forward if op == "F" else parts.backward)[chunk]
            compute += one.compute
            comm += one.comm
        steps.append(StageStep(done.end, compute + parts.update_s, comm + parts.reduce_s))
    return steps


def run(sim: Simulation) -> SimulationOutcome:
    """Every step of every device, one step's schedule repeated."""
    spec = sim.spec
    costs = costs_of(spec)
    layout = costs.layout
    timed = schedule.run(
        orders_of(costs, spec.strategy.schedule),
        lambda stage, pass_: pass_seconds(costs, stage, pass_),
        costs.p2p_s,
        layout.virtual,
    )
    steps = stage_steps(costs, timed)
    duration = max(
        step.flush + part.reduce_s + part.update_s
        for step, part in zip(steps, costs.stages, strict=True)
    )
    per_stage = sim.workers // layout.pipeline
    workers = np.arange(sim.workers)
    compute = np.repeat([s.compute for s in steps], per_stage)
    comm = np.repeat([s.comm for s in steps], per_stage)
    idle = duration - compute - comm
    for step in range(sim.total_steps):
        begin = step * duration
        if sim.measure_start is None and step >= sim.warmup:
            sim.measure_start = (begin, 0.0)
        end = begin + duration
        sim.records.extend(
            worker=workers,
            step=step,
            start=begin,
            compute_end=end,
            comm_end=end,
            end=end,
            comm_s=comm,
            generation=0,
            staleness=0,
            stall=comm,
            idle=idle,
        )
        sim.completed = step + 1
        sim.step_ends[step] = end
        sim.report(step + 1, end)
    return sim.uninterrupted(0.0, NAME)
