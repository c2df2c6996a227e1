"""A pipeline's step as its devices run it: each stage's order of forward and backward
passes (GPipe, 1F1B, interleaved 1F1B), and the times they run at given how long each
takes and what crosses between stages.

A pass waits for its device (the pass before it in the stage's order) and for the pass
it needs: a chunk's forward the previous virtual stage's forward of the same
micro-batch, a backward the next virtual stage's backward (the last virtual stage's, its
own forward), each `p2p_s` after it ends where they are on different devices. A device
that sends what a pass produced to another stage is held for that `p2p_s` (Megatron-LM's
schedules send and receive between passes and wait for both: `sends`). Every pass
starts at the later of the two: the schedule's list scheduling, exact for any durations,
and the same instants the event engine (`training.py`) reaches.

With equal stages and free transfers the step takes (m + p - 1)(F + B) under GPipe and
1F1B, and (m + (p - 1)/v)(F + B) interleaved over v chunks (Narayanan et al. 2021, eq. 1
and section 2.2.2); tests/test_hybrid.py holds `run` to them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from workloads.pipeline import interleaved_order, schedule_of

#: one pass of a stage: ("F" | "B", micro-batch, chunk)
Pass = tuple[str, int, int]


def stage_orders(schedule: str, stages: int, micro: int, virtual: int = 1) -> list[list[Pass]]:
    """Every stage's passes in the order it runs them."""
    if virtual > 1:
        return [interleaved_order(stages, micro, stage, virtual) for stage in range(stages)]
    return [
        [(op, j, 0) for op, j in schedule_of(schedule, stages, micro, stage)]
        for stage in range(stages)
    ]


@dataclass(frozen=True)
class Timed:
    """One stage's passes with their start and end, in the order it ran them."""

    passes: list[Pass]
    starts: list[float]
    ends: list[float]
    #: when the device is free after its last pass, its last send included
    released: float = 0.0

    @property
    def end(self) -> float:
        return max(self.ends[-1] if self.ends else 0.0, self.released)

    @property
    def busy(self) -> float:
        return sum(e - s for s, e in zip(self.starts, self.ends, strict=True))


def needs(pass_: Pass, stage: int, stages: int, virtual: int) -> tuple[Pass, int] | None:
    """The pass `pass_` of `stage` waits for, and the stage that runs it; None: nothing."""
    op, micro, chunk = pass_
    at = chunk * stages + stage  # the virtual stage
    if op == "F":
        if at == 0:
            return None
        before = at - 1
        return ("F", micro, before // stages), before % stages
    if at == stages * virtual - 1:
        return ("F", micro, chunk), stage
    after = at + 1
    return ("B", micro, after // stages), after % stages


def sends(pass_: Pass, stage: int, stages: int, virtual: int) -> bool:
    """Whether what `pass_` of `stage` produced goes on to another stage: every forward
    but the last virtual stage's, every backward but the first's."""
    op, _, chunk = pass_
    if stages == 1:
        return False
    at = chunk * stages + stage
    return at != stages * virtual - 1 if op == "F" else at != 0


def run(
    orders: list[list[Pass]],
    seconds: Callable[[int, Pass], float],
    p2p_s: float,
    virtual: int = 1,
    start: float = 0.0,
) -> list[Timed]:
    """Start and end of every pass: `seconds(stage, pass)` is how long a pass runs,
    `p2p_s` what a micro-batch's activations (or their gradient) take between stages."""
    stages = len(orders)
    ends: dict[tuple[int, Pass], float] = {}
    timed = [Timed(order, [], []) for order in orders]
    free = [start] * stages
    done = [0] * stages
    remaining = sum(len(order) for order in orders)
    while remaining:
        moved = False
        for stage, order in enumerate(orders):
            while done[stage] < len(order):
                pass_ = order[done[stage]]
                need = needs(pass_, stage, stages, virtual)
                ready = start
                if need is not None:
                    key = (need[1], need[0])
                    if key not in ends:
                        break
                    ready = ends[key] + (p2p_s if need[1] != stage else 0.0)
                begin = max(free[stage], ready)
                end = begin + seconds(stage, pass_)
                ends[(stage, pass_)] = end
                timed[stage].starts.append(begin)
                timed[stage].ends.append(end)
                free[stage] = end + (p2p_s if sends(pass_, stage, stages, virtual) else 0.0)
                done[stage] += 1
                remaining -= 1
                moved = True
        if not moved:
            raise RuntimeError("the pipeline's schedule waits on itself")
    return [replace(one, released=free[stage]) for stage, one in enumerate(timed)]
