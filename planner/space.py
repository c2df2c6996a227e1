"""A plan file read: its `plan:` block, and the candidates its options make.

The options are a sweep over the rest of the file (the same keys, values and point ids as
`sweep`); candidate i is the i-th combination in the sweep's order, validated only when it
is asked for, so that a large space costs nothing until the search reaches into it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from scenarios.errors import ScenarioError
from scenarios.loader import (
    MAX_POINTS,
    Point,
    Scenario,
    apply_set,
    check_sweep,
    format_error,
    parse_document,
    set_path,
    validate,
    with_profile_paths,
)
from scenarios.point_ids import point_id_for, sweep_paths, sweep_varying
from scenarios.reading import read_yaml
from scenarios.sections.plan import PlanSpec


@dataclass(frozen=True)
class Space:
    """A plan's candidates: the product of its options over its base document."""

    name: str
    path: str
    sha256: str
    plan: PlanSpec
    base: dict[str, Any]  # the file without `plan`, with the --set edits
    base_dir: Path
    sets: tuple[str, ...] = ()

    @property
    def keys(self) -> list[str]:
        return list(self.plan.options)

    @property
    def size(self) -> int:
        return math.prod(len(v) for v in self.plan.options.values())

    def choices(self, index: int) -> tuple[int, ...]:
        """Candidate `index` as one position per option (the last option varies fastest,
        as the sweep's product does)."""
        out = []
        for listed in reversed(list(self.plan.options.values())):
            index, position = divmod(index, len(listed))
            out.append(position)
        return tuple(reversed(out))

    def index(self, choices: Sequence[int]) -> int:
        index = 0
        for position, listed in zip(choices, self.plan.options.values(), strict=True):
            index = index * len(listed) + position
        return index

    def values(self, index: int) -> dict[str, Any]:
        """The fields candidate `index` sets, path by path."""
        values: dict[str, Any] = {}
        for key, position in zip(self.keys, self.choices(index), strict=True):
            value = self.plan.options[key][position]
            paths = sweep_paths(key)
            for path, one in zip(paths, value if len(paths) > 1 else [value], strict=True):
                values[path] = one
        return values

    def document(self, index: int) -> dict[str, Any]:
        """Candidate `index` as a scenario document of its own (what best.yaml holds)."""
        doc = copy.deepcopy(self.base)
        for path, value in self.values(index).items():
            set_path(doc, path, value)
        return doc

    def point(self, index: int) -> Point:
        """Candidate `index`, validated, as `simulate` would load it. Raises ScenarioError
        naming the candidate where its combination is not a valid scenario."""
        values = self.values(index)
        point_id = point_id_for(values, sweep_varying(self.plan.options))
        try:
            spec = validate(self.document(index))
        except ScenarioError as exc:
            raise ScenarioError(f"{exc} (plan candidate {point_id})") from None
        spec = spec.model_copy(update={"strategy": spec.strategy.for_backend("sim")})
        point = Point(id=point_id, index=index, values=values, spec=spec)
        return with_profile_paths([point], self.base_dir)[0]

    def check(self) -> None:
        """Validate the candidates before any is simulated: all of a grid, and otherwise
        each option's every value once (the others at their first): a value that makes no
        scenario is refused up front, not when the search reaches it."""
        if self.plan.method(self.size) == "grid":
            for index in range(self.size):
                self.point(index)
            return
        lists = list(self.plan.options.values())
        for k, listed in enumerate(lists):
            for position in range(len(listed)):
                choices = [0] * len(lists)
                choices[k] = position
                self.point(self.index(choices))

    def scenario(self, points: Sequence[Point]) -> Scenario:
        """These candidates as a scenario, for `sim.runner.run`."""
        return Scenario(
            name=self.name,
            path=self.path,
            sha256=self.sha256,
            document=self.base,
            sets=self.sets,
            points=tuple(dataclasses.replace(p, index=i) for i, p in enumerate(points)),
        )


def load_plan(path: str | Path, sets: Sequence[str] = ()) -> Space:
    """Read a plan file (a scenario with a `plan:` block and no `sweep`), its --set edits
    applied. Raises ScenarioError, one line naming the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    document = parse_document(raw, str(path))
    block = document.pop("plan", None)
    if block is None:
        raise ScenarioError(f"plan: {path} has no plan block (docs/planning.md)")
    for item in sets:
        if item.startswith("plan."):
            _set_plan(block, item)
        else:
            apply_set(document, item)
    if "sweep" in document:
        raise ScenarioError("sweep: a plan's candidates are its plan.options; move the keys there")
    try:
        plan = PlanSpec.model_validate(block)
    except ValidationError as exc:
        raise ScenarioError("plan." + format_error(exc, block)) from None
    check_sweep(plan.options, "plan.options")
    size = math.prod(len(listed) for listed in plan.options.values())
    if plan.method(size) == "grid" and size > MAX_POINTS:  # every candidate, validated first
        raise ScenarioError(
            f"plan.search.method: a grid of {size:,} candidates, more than the {MAX_POINTS:,} "
            "a scenario may hold; search them with method optuna"
        )
    document.setdefault("name", path.stem)
    return Space(
        name=str(document["name"]),
        path=str(path),
        sha256=hashlib.sha256(raw).hexdigest(),
        plan=plan,
        base=document,
        base_dir=path.parent,
        sets=tuple(sets),
    )


def _set_plan(block: Any, item: str) -> None:
    """`--set plan.PATH=VALUE`; an option's key is a field path itself:
    `--set plan.options.cluster.hosts=[1,2]`."""
    path, _, text = item.partition("=")
    path = path.strip()
    if not _ or not isinstance(block, dict):
        raise ScenarioError(f"--set {item}: expected PATH=VALUE, e.g. plan.search.trials=40")
    value = read_yaml(text, f"--set {path}") if text.strip() else ""
    rest = path[len("plan.") :]
    if rest.startswith("options."):
        options = block.setdefault("options", {})
        options[rest[len("options.") :]] = value
        return
    set_path(block, rest, value)
