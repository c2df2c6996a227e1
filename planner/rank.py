"""The candidates ranked: the best per objective, the Pareto front of two, and which
candidates the intervals cannot tell from the recommendation.

A candidate is tied with the recommendation where their intervals on the first objective
overlap: the validation cases' errors are as large as the gap, so the plan does not
claim an order between them. (Candidates of one class share its systematic error, so
overlap is the cautious reading: their gap may be better known than the intervals say.)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from scenarios.errors import UserError
from scenarios.sections.plan import PlanSpec

from .evaluate import Judged

UNITS = {"time": "s", "cost": "USD", "energy": "kWh"}


@dataclass(frozen=True)
class Ranking:
    """Feasible candidates in order of the first objective; the best per objective; the
    Pareto front (two objectives); those tied with the recommendation."""

    order: list[Judged]
    best: dict[str, Judged]
    front: list[Judged]
    tied: list[Judged]

    @property
    def recommended(self) -> Judged:
        return self.order[0]


def rank(plan: PlanSpec, judged: list[Judged]) -> Ranking:
    """Rank the candidates; raises UserError, in one line, where none keeps the limits."""
    feasible = [j for j in judged if j.ok]
    if not feasible:
        raise UserError(_none_feasible(plan, judged))
    first = plan.objectives[0]
    key = {o: (lambda j, o=o: (j.value(o), j.index)) for o in plan.objectives}
    order = sorted(feasible, key=lambda j: (*[j.value(o) for o in plan.objectives], j.index))
    best: dict[str, Judged] = {o: min(feasible, key=key[o]) for o in plan.objectives}
    front = _front(plan, feasible)
    top = order[0]
    _, _, high = top.figures[first]
    tied = [j for j in order[1:] if j.figures[first][1] <= high]
    return Ranking(order, best, front, tied)


def _front(plan: PlanSpec, feasible: list[Judged]) -> list[Judged]:
    """The candidates no other beats on every objective (all of them ordered by the
    first objective; with one objective, its best)."""
    if len(plan.objectives) == 1:
        return [min(feasible, key=lambda j: (j.value(plan.objectives[0]), j.index))]
    a, b = plan.objectives
    front: list[Judged] = []
    for j in sorted(feasible, key=lambda j: (j.value(a), j.value(b), j.index)):
        if not front or j.value(b) < front[-1].value(b):
            front.append(j)
    return front


def _none_feasible(plan: PlanSpec, judged: list[Judged]) -> str:
    """Why nothing qualifies: the statuses counted, and the closest to each limit."""
    counts = Counter(j.status for j in judged)
    said = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    limits = plan.constraints
    closest = []
    for objective, limit in (("time", limits.deadline), ("cost", limits.budget)):
        values = [j.value(objective) for j in judged if not math.isnan(j.value(objective))]
        if limit is not None and values:
            closest.append(
                f"the least {objective} is {show(objective, min(values))} "
                f"(limit {show(objective, limit)})"
            )
    tail = f"; {'; '.join(closest)}" if closest else ""
    return f"plan.constraints: no candidate qualifies ({said} of {len(judged)}){tail}"


def show(objective: str, value: float) -> str:
    """A figure as a person reads it: a time in s, min or h; an energy in kWh, Wh or J."""
    if objective == "time":
        if value < 120:
            return f"{value:,.3g} s"
        if value < 7200:
            return f"{value / 60:,.3g} min"
        return f"{value / 3600:,.3g} h"
    if objective == "energy" and abs(value) < 1:  # small jobs: Wh, J
        return f"{value * 1e3:,.3g} Wh" if abs(value) >= 1e-3 else f"{value * 3.6e6:,.3g} J"
    if abs(value) >= 1e4:  # whole units, never an exponent
        return f"{value:,.0f} {UNITS[objective]}"
    return f"{value:,.4g} {UNITS[objective]}"
