"""Published measurements that a scenario file carries (`published:`), matched to its points.

A file of `scenarios/published/` is a source's setup written as a scenario, plus a
`published` block: the citation, the table or figure, and one figure per measured point,
each naming the swept values that pick its point (`at`), and the orderings it states in
words without figures (`orders`: this point trains faster than that one). `figures(scenario)`
returns each figure with its point, `stated(scenario)` each ordering with its two points;
`make validate-published` simulates the points and compares.
The block's fields are the language's (`scenarios/sections/figures.py`); this matches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scenarios.errors import ScenarioError
from scenarios.loader import Point, Scenario, sweep_paths
from scenarios.sections.figures import PublishedOrder, PublishedPoint, PublishedSpec


@dataclass(frozen=True)
class Figure:
    """One published figure and the sweep point it was measured at."""

    point: Point
    published: PublishedPoint
    spec: PublishedSpec
    reference: Point | None = None  # relative_throughput: the point it is relative to

    @property
    def metric(self) -> str:
        return self.spec.metric


@dataclass(frozen=True)
class Stated:
    """An ordering a source states in words, with the points it orders."""

    faster: Point
    slower: Point
    order: PublishedOrder
    spec: PublishedSpec


def stated(scenario: Scenario) -> list[Stated]:
    """Every ordering the scenario's source states, with its two points; an `at` that
    picks no point or several is a ScenarioError, as a figure's."""
    spec = _spec(scenario)
    swept = _swept(scenario)
    return [
        Stated(
            _pick(scenario, swept, order.faster, f"published.orders[{i}].faster"),
            _pick(scenario, swept, order.slower, f"published.orders[{i}].slower"),
            order,
            spec,
        )
        for i, order in enumerate(spec.orders)
    ]


def _spec(scenario: Scenario) -> PublishedSpec:
    spec = scenario.points[0].spec.published
    if spec is None:
        raise ScenarioError(f"published: {scenario.path} has no published figures")
    return spec


def _swept(scenario: Scenario) -> set[str]:
    return {path for key in scenario.document.get("sweep") or {} for path in sweep_paths(key)}


def figures(scenario: Scenario) -> list[Figure]:
    """Every published figure of the scenario with its point; a figure whose `at` picks
    no point or several, or names a field the sweep does not set, is a ScenarioError."""
    spec = _spec(scenario)
    swept = _swept(scenario)
    reference = None
    if spec.reference is not None:
        reference = _pick(scenario, swept, spec.reference, "published.reference")
    found = []
    for i, figure in enumerate(spec.points):
        point = _pick(scenario, swept, figure.at, f"published.points[{i}].at")
        found.append(Figure(point, figure, spec, reference))
    return found


def _pick(scenario: Scenario, swept: set[str], at: dict[str, Any], where: str) -> Point:
    for key in at:
        if key not in swept:
            raise ScenarioError(f"{where}: {key!r} is not swept (sweep: {sorted(swept)})")
    matches = [p for p in scenario.points if _matches(p, at)]
    if len(matches) != 1:
        raise ScenarioError(f"{where}: {at!r} picks {len(matches)} sweep points; it must pick one")
    return matches[0]


def _matches(point: Point, at: dict[str, Any]) -> bool:
    return all(key in point.values and point.values[key] == value for key, value in at.items())
