"""Transformer layouts (`strategy.kind: hybrid`) without the event engine: every stage's
passes laid out by the schedule's list scheduling (`schedule.py`), once, and every step
the same, since nothing of the run differs from one step to the next (no stragglers, no
failures). Exact: the event engine (`training.py`) reaches the same instants, and
tests/test_hybrid.py holds the two equal on random small layouts.

One step of every device: the pipeline's passes (`costs.py`) from the step's start to
its stage's flush, then its data-parallel group's gradient reduction (`reduced`: with
`overlap`, layer by layer as the last backward of each chunk produces the gradients) and
the update; the step ends when every stage's update is done. A device's record counts its passes'
compute and the update as compute, their collectives and the reduction as
communication, and the rest (the bubble, waiting for other stages) as waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.engine.outcome import SimulationOutcome

from . import schedule
from .costs import Costs, StageCosts, costs_of

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


def reduced(
    parts: StageCosts, last_backward: list[tuple[float, float]], flush: float, overlap: bool
) -> float:
    """When a stage's gradient reduction ends. Without `overlap`, reduce_s after the flush.
    With it (Megatron-LM's --overlap-grad-reduce), a layer's gradients are final once the
    last backward pass over its chunk has gone through it (the chunk's layers from the
    last, evenly over that pass: `last_backward`, its start and end per chunk), and each
    layer's share of the gradients' reduction runs as soon as they are and the one before
    has, one at a time; the rest (the weights' all-gather, the embedding's all-reduce)
    follows the flush and that."""
    if not overlap or parts.gradients_s <= 0:
        return flush + parts.reduce_s
    total = sum(parts.chunk_params) or 1.0
    free = 0.0
    order = sorted(range(len(last_backward)), key=lambda c: last_backward[c])
    for chunk in order:
        start, end = last_backward[chunk]
        layers = max(parts.chunk_layers[chunk], 1)
        bucket = parts.gradients_s * parts.chunk_params[chunk] / total / layers
        for layer in range(layers):
            ready = start + (layer + 1) * (end - start) / layers
            free = max(free, ready) + bucket
    return max(free, flush) + parts.reduce_s - parts.gradients_s


def last_backwards(timed: schedule.Timed, chunks: int) -> list[tuple[float, float]]:
    """The start and end of each chunk's last backward pass in a stage's step."""
    found: dict[int, tuple[float, float]] = {}
    for (op, _, chunk), start, end in zip(timed.passes, timed.starts, timed.ends, strict=True):
        if op == "B":
            found[chunk] = (start, end)
    return [found[c] for c in range(chunks)]


@dataclass(frozen=True)
class StageStep:
    """One stage's step: when its pipeline flushed, when its gradients were reduced, and
    its devices' seconds of compute and communication in the step (the reduction's part
    after the flush)."""

    flush: float
    reduced: float
    compute: float
    comm: float


def stage_steps(costs: Costs, timed: list[schedule.Timed], overlap: bool) -> list[StageStep]:
    """Each stage's flush and reduction, and its compute and communication over the
    step."""
    steps = []
    layout = costs.layout
    chunks = layout.virtual
    for stage, (parts, done) in enumerate(zip(costs.stages, timed, strict=True)):
        compute = comm = 0.0
        for pass_ in done.passes:
            op, _, chunk = pass_
            one = (parts.forward if op == "F" else parts.backward)[chunk]
            compute += one.compute
            comm += one.comm
            if schedule.sends(pass_, stage, layout.pipeline, chunks):
                comm += costs.p2p_s
        end = reduced(parts, last_backwards(done, chunks), done.end, overlap)
        steps.append(StageStep(done.end, end, compute + parts.update_s, comm + end - done.end))
    return steps


def run(sim: Simulation) -> SimulationOutcome:
    """Every step of every device, one step's schedule repeated."""
    spec = sim.spec
    costs = costs_of(spec, sim.costs.calibration)
    layout = costs.layout
    timed = schedule.run(
        orders_of(costs, spec.strategy.schedule),
        lambda stage, pass_: pass_seconds(costs, stage, pass_),
        costs.p2p_s,
        layout.virtual,
    )
    steps = stage_steps(costs, timed, spec.strategy.overlap)
    duration = max(
        step.reduced + part.update_s for step, part in zip(steps, costs.stages, strict=True)
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
