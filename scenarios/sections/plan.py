"""The `plan:` block: what `trainscale plan` searches, for what, and within which limits.

A plan is a scenario whose `plan` names the objectives, the constraints and the options:
the options are a sweep (the same keys and values as `sweep`), and every combination of
them is a candidate. `trainscale plan FILE` (the `planner` package) prunes, simulates and
ranks the candidates; `simulate` refuses a plan file in one line.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from ..fields import Dollars, Seconds, Strict

#: what a plan may minimise: time (to the target where the scenario has one, otherwise
#: the training time), cost in US dollars and energy in kWh, each likewise
Objective = Literal["time", "cost", "energy"]
OBJECTIVES: tuple[str, ...] = ("time", "cost", "energy")


class Constraints(Strict):
    """Limits a candidate must keep: `deadline` on its time, `budget` on its cost (to the
    target where there is one), and whether its devices must hold it (`fits_memory`)."""

    deadline: Seconds | None = None
    budget: Dollars | None = None
    fits_memory: bool = True


class Search(Strict):
    """How the candidates are chosen: `grid` simulates every one, `optuna` a multi-objective
    search of at most `trials` simulations (its study on disk, so an interrupted plan
    resumes), `auto` the grid where the candidates are at most `grid_limit`."""

    method: Literal["auto", "grid", "optuna"] = "auto"
    trials: int = Field(default=60, ge=1)
    grid_limit: int = Field(default=300, ge=1)
    seed: int = 0


class PlanSpec(Strict):
    objectives: tuple[Objective, ...] = Field(default=("time",), min_length=1, max_length=2)
    constraints: Constraints = Constraints()
    options: dict[str, list[Any]] = Field(min_length=1)
    search: Search = Search()

    @field_validator("objectives")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise ValueError(f"names an objective twice: {list(value)}")
        return value

    def method(self, candidates: int) -> str:
        """`grid` or `optuna`, for a space of this many candidates."""
        if self.search.method != "auto":
            return self.search.method
        return "grid" if candidates <= self.search.grid_limit else "optuna"
