"""A plan's files: plan.csv (every candidate evaluated), best.yaml (the recommendation as
a scenario of its own), top.yaml, plan.html (`page.py`) and meta.json; each written
atomically."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import yaml

from results.files import frame_csv, provenance, results_frame, write_atomic
from scenarios.point_ids import point_id_for

from .evaluate import COLUMNS, Judged
from .page import page
from .rank import UNITS, Ranking
from .space import Space

#: plan.csv's own columns, before each option's value and then the simulated row's
#: the candidates top.yaml holds
TOP = 5
PLAN_COLUMNS = ("rank", "candidate", "point", "status", "recommended", "pareto", "tied")


def figure_columns(objective: str) -> tuple[str, str, str]:
    unit = COLUMNS[objective][2]
    return (
        f"plan_{objective}_{unit}",
        f"plan_{objective}_low_{unit}",
        f"plan_{objective}_high_{unit}",
    )


def plan_rows(space: Space, judged: list[Judged], ranking: Ranking) -> list[dict[str, Any]]:
    """plan.csv: the feasible candidates in rank order, then the rest by index."""
    order = {j.index: r + 1 for r, j in enumerate(ranking.order)}
    best: dict[int, list[str]] = {}
    for objective, j in ranking.best.items():
        best.setdefault(j.index, []).append(objective)
    front = {j.index for j in ranking.front}
    tied = {j.index for j in ranking.tied}
    rows = []
    for j in sorted(judged, key=lambda j: (order.get(j.index, math.inf), j.index)):
        row: dict[str, Any] = {
            "rank": order.get(j.index),
            "candidate": j.index,
            "point": j.point.id,
            "status": j.status,
            "recommended": ";".join(best.get(j.index, [])),
            "pareto": j.index in front,
            "tied": j.index in tied,
        }
        for objective in COLUMNS:
            values = j.figures.get(objective, (math.nan,) * 3)
            row.update(zip(figure_columns(objective), values, strict=True))
        row["error_basis"] = j.basis
        for key, value in space.values(j.index).items():
            row[f"option.{key}"] = point_id_for({key: value})
        row.update({k: v for k, v in j.row.items() if k not in row and k != "point"})
        rows.append(row)
    return rows


def best_yaml(space: Space, ranking: Ranking) -> str:
    """The recommended candidate as a scenario `simulate` and `run-real` take as it is."""
    top = ranking.recommended
    objective = space.plan.objectives[0]
    value, low, high = top.figures[objective]
    head = [
        f"# The candidate `trainscale plan {space.path}` recommends for {objective}:",
        f"# {top.point.id}",
        f"# predicted {objective}: {value:,.6g} {UNITS[objective]} "
        f"(interval {low:,.6g} to {high:,.6g}: {top.basis})",
    ]
    document = space.document(top.index)
    return "\n".join(head) + "\n" + yaml.safe_dump(document, sort_keys=False)


def top_yaml(space: Space, ranking: Ranking, count: int = TOP) -> str:
    """The first `count` candidates in rank order as one scenario with a sweep (every
    option's path set together): `run-real top.yaml` runs them for real, `simulate
    top.yaml` gives the plan's figures, `report` sets the two side by side."""
    top = ranking.order[:count]
    paths = list(space.values(top[0].index))
    listed = [[copy.deepcopy(space.values(j.index)[path]) for path in paths] for j in top]
    document = copy.deepcopy(space.base)
    if len(paths) == 1:
        document["sweep"] = {paths[0]: [values[0] for values in listed]}
    else:
        document["sweep"] = {",".join(paths): listed}
    head = [
        f"# The first {len(top)} candidates of `trainscale plan {space.path}`, in rank order",
        f"# on {space.plan.objectives[0]}: {', '.join(j.point.id for j in top)}",
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(document, sort_keys=False)


def write_plan(
    out_dir: Path, space: Space, judged: list[Judged], ranking: Ranking, seconds: float
) -> None:
    frame = results_frame(plan_rows(space, judged, ranking))
    write_atomic(out_dir / "plan.csv", frame_csv(frame))
    write_atomic(out_dir / "best.yaml", best_yaml(space, ranking))
    write_atomic(out_dir / "top.yaml", top_yaml(space, ranking))
    write_atomic(out_dir / "plan.html", page(space, judged, ranking))
    extra = {
        "origin": {"command": "plan", "scenario": space.name, "calibrated": False, "engine": None},
        "plan": space.plan.model_dump(mode="json"),
        "candidates": space.size,
        "evaluated": len(judged),
        "method": space.plan.method(space.size),
        "recommended": {o: j.point.id for o, j in ranking.best.items()},
        "tied": [j.point.id for j in ranking.tied],
        "search_wall_time_s": seconds,
    }
    # the provenance of the recommended candidate: best.yaml's point
    meta = provenance(space.scenario([ranking.recommended.point]), "sim", extra)
    write_atomic(out_dir / "meta.json", json.dumps(meta, indent=2, default=str) + "\n")
