"""A plan's files: plan.csv (every candidate evaluated), best.yaml (the recommendation as
a scenario of its own), plan.html (the front, the ranked table, where the recommended
candidate's time and money go) and meta.json; each written atomically."""

from __future__ import annotations

import base64
import copy
import html
import io
import json
import math
from pathlib import Path
from typing import Any

import yaml

from results.files import provenance, results_frame, write_atomic
from scenarios.point_ids import point_id_for

from .evaluate import COLUMNS, Judged, number
from .rank import UNITS, Ranking, show
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
    write_atomic(out_dir / "plan.csv", frame.to_csv(index=False))
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


# ------------------------------------------------------------------ plan.html


def page(space: Space, judged: list[Judged], ranking: Ranking) -> str:
    objectives = space.plan.objectives
    top = ranking.recommended
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        '<meta name="generator" content="trainscale plan">',
        f"<title>plan: {html.escape(space.name)}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .5em;"
        "text-align:right}td:first-child{text-align:left}</style></head><body>",
        f"<h1>Plan: {html.escape(space.name)}</h1>",
        f"<p>{len(judged)} of {space.size} candidates evaluated "
        f"({html.escape(space.plan.method(space.size))}); "
        f"{len(ranking.order)} keep the limits.</p>",
        "<h2>Recommended</h2><ul>",
    ]
    for objective, j in ranking.best.items():
        value, low, high = j.figures[objective]
        parts.append(
            f"<li><b>{objective}</b>: {html.escape(j.point.id)}: {show(objective, value)} "
            f"({show(objective, low)} to {show(objective, high)})</li>"
        )
    parts.append("</ul>")
    if ranking.tied:
        names = ", ".join(html.escape(j.point.id) for j in ranking.tied[:12])
        more = f" and {len(ranking.tied) - 12} more" if len(ranking.tied) > 12 else ""
        parts.append(
            f"<p>Tied with the recommendation within the intervals ({objectives[0]}): "
            f"{names}{more}. The plan does not order these.</p>"
        )
    parts.append(
        f"<img alt='candidates' src='data:image/png;base64,{_plot(space, judged, ranking)}'>"
    )
    parts += _table(space, ranking)
    parts += _breakdown(top)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _table(space: Space, ranking: Ranking) -> list[str]:
    objectives = space.plan.objectives
    head = "".join(f"<th>{o}</th><th>interval</th>" for o in objectives)
    rows = [
        f"<h2>Ranked (first {min(25, len(ranking.order))})</h2>",
        f"<table><tr><th>candidate</th>{head}<th>tied</th></tr>",
    ]
    tied = {j.index for j in ranking.tied}
    for j in ranking.order[:25]:
        cells = "".join(
            f"<td>{show(o, j.figures[o][0])}</td>"
            f"<td>{show(o, j.figures[o][1])} to {show(o, j.figures[o][2])}</td>"
            for o in objectives
        )
        mark = "yes" if j.index in tied else ""
        rows.append(f"<tr><td>{html.escape(j.point.id)}</td>{cells}<td>{mark}</td></tr>")
    rows.append("</table>")
    return rows


def _breakdown(top: Judged) -> list[str]:
    """Where the recommended candidate's time (and so its money) goes."""
    row = top.row
    time_s = top.value("time")
    cost = top.value("cost")
    lines = [
        "<h2>Where the recommendation's time and money go</h2><table>",
        "<tr><th>share</th><th>of the time</th><th>time</th><th>money</th></tr>",
    ]
    for name, column in (
        ("compute", "compute_time_frac"),
        ("communication exposed", "comm_time_frac"),
        ("waiting for others", "wait_time_frac"),
    ):
        share = number(row.get(column))
        money = "" if math.isnan(cost) else f"{share * cost:,.4g} USD"
        lines.append(
            f"<tr><td>{name}</td><td>{100 * share:.1f}%</td>"
            f"<td>{show('time', share * time_s)}</td><td>{money}</td></tr>"
        )
    lines.append("</table>")
    return lines


def _plot(space: Space, judged: list[Judged], ranking: Ranking) -> str:
    """The candidates on the plan's objectives (time and the second, or time and the
    throughput with one), intervals as bars, the front joined, as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    objectives = space.plan.objectives
    x_name = objectives[0]
    y_name = objectives[1] if len(objectives) > 1 else None
    fig, ax = plt.subplots(figsize=(8, 5))
    for ok, colour, label in ((True, "tab:blue", "keeps the limits"), (False, "0.7", "out")):
        pts = [j for j in judged if j.ok == ok and x_name in j.figures]
        if not pts:
            continue
        xs = [_scale(x_name, j.value(x_name)) for j in pts]
        ys = [_y(j, y_name) for j in pts]
        ax.scatter(xs, ys, s=14, color=colour, label=label, zorder=2)
    for j in ranking.order[:10]:
        _, low, high = j.figures[x_name]
        y = _y(j, y_name)
        ax.plot([_scale(x_name, low), _scale(x_name, high)], [y, y], color="tab:blue", lw=1)
    if y_name:
        ax.plot(
            [_scale(x_name, j.value(x_name)) for j in ranking.front],
            [_y(j, y_name) for j in ranking.front],
            color="tab:red",
            lw=1,
            label="Pareto front",
        )
    top = ranking.recommended
    ax.scatter(
        [_scale(x_name, top.value(x_name))],
        [_y(top, y_name)],
        marker="*",
        s=160,
        color="tab:red",
        zorder=3,
        label="recommended",
    )
    ax.set_xlabel(f"{x_name} ({'h' if x_name == 'time' else UNITS[x_name]})")
    ax.set_ylabel(f"{y_name} ({UNITS[y_name]})" if y_name else "throughput (samples/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _scale(objective: str, value: float) -> float:
    return value / 3600 if objective == "time" else value


def _y(j: Judged, y_name: str | None) -> float:
    if y_name:
        return _scale(y_name, j.value(y_name))
    return number(j.row.get("throughput_samples_per_s"))
