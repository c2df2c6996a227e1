"""One candidate judged: what it is predicted to take in time, money and energy, with the
interval the validation cases earn each figure, and whether it keeps the plan's limits.

Time is to the target where the scenario sets one, otherwise the whole run's training
time; cost and energy likewise (`cost_to_target_usd` or `cost_usd`, ...). A candidate is
`ok`, or its `status` says why it is out: `unfit` (its devices cannot hold it, pruned
before simulating), `misses target` (the run ends before the target), `over deadline`,
`over budget`, or `unknown cost` / `unknown energy` (no price, no power figures). The
first three are known before simulating for some candidates (`bounds`); their rows say
so in `pruned`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from measured.errors import of_row
from scenarios.loader import Point
from scenarios.sections.plan import PlanSpec

#: per objective: its results.csv column to the target, for the whole run, and its unit
COLUMNS: dict[str, tuple[str, str, str]] = {
    "time": ("time_to_target_s", "training_time_s", "s"),
    "cost": ("cost_to_target_usd", "cost_usd", "usd"),
    "energy": ("energy_to_target_kwh", "energy_kwh", "kwh"),
}
OK = "ok"
#: a candidate's row key saying why it was not simulated (`bounds.sure_status`)
PRUNED = "pruned"


@dataclass
class Judged:
    """A candidate, its simulated row and its figures (per objective: value, low, high)."""

    index: int
    point: Point
    row: dict[str, Any]
    status: str = OK
    figures: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    basis: str = ""

    @property
    def ok(self) -> bool:
        return self.status == OK

    def value(self, objective: str) -> float:
        return self.figures.get(objective, (math.nan,) * 3)[0]


def number(value: Any) -> float:
    """A result cell as a float (NaN where empty or not a number)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def judge(plan: PlanSpec, index: int, point: Point, row: dict[str, Any]) -> Judged:
    """The candidate's figures from its simulated row (or its unfit row), and its status."""
    judged = Judged(index, point, row)
    if row.get("fits") is False:
        judged.status = "unfit"
        return judged
    if row.get(PRUNED):
        judged.status = str(row[PRUNED])
        return judged
    spec = point.spec
    to_target = spec.training.target is not None
    if to_target and math.isnan(number(row.get("time_to_target_s"))):
        judged.status = "misses target"
    band = of_row(spec, row, to_target)
    judged.basis = band.basis
    for objective, (target_column, run_column, _) in COLUMNS.items():
        value = number(row.get(target_column if to_target else run_column))
        if not math.isnan(value):
            judged.figures[objective] = (value, *band.around(value))
    if not judged.ok:
        return judged
    for objective in plan.objectives:
        if objective not in judged.figures:
            judged.status = f"unknown {objective}"
            return judged
    limits = plan.constraints
    if limits.deadline is not None and judged.value("time") > limits.deadline:
        judged.status = "over deadline"
    elif limits.budget is not None:
        cost = judged.value("cost")
        if math.isnan(cost):
            judged.status = "unknown cost"
        elif cost > limits.budget:
            judged.status = "over budget"
    return judged
