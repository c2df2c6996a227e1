"""plan.html: the page a person decides from (templates/plan.html.j2, through
`reports.pages`).

Every candidate is named in words (`scenarios.point_ids`), its id in a tooltip. The page
opens with the trade in one sentence (the fastest against the cheapest), then one card per
objective (time, cost, energy): the best candidate on it, its value and interval and how
many published figures back the interval, where its time goes, and what it gives up
against the other cards. Then the candidates that were dropped, counted by reason; the
ties in words; the plot with the cards' candidates labelled; and every candidate that
keeps the limits in a table with a column per option and per objective, which sorts by
any column.
"""

from __future__ import annotations

import base64
import io
import math
from collections import Counter
from typing import Any

from reports.pages import render
from scenarios.point_ids import describe, devices, names_apart, strategy_of

from .evaluate import Judged, number
from .rank import UNITS, Ranking, show
from .space import Space

#: the cards, in order: objective, heading, the best candidate's title in a sentence
CARDS = (("time", "Fastest", "fastest"), ("cost", "Cheapest", "cheapest"),
         ("energy", "Least energy", "least-energy"))  # fmt: skip
#: why a candidate was dropped, in words (`evaluate.judge`'s statuses)
DROPPED = {
    "unfit": "do not fit in their devices' memory",
    "misses target": "end before they reach the target",
    "over deadline": "take longer than the deadline",
    "over budget": "cost more than the budget",
    "unknown cost": "have no price",
    "unknown energy": "have no power figures",
}
#: option columns' headings, by the last part of the option's path
HEADINGS = {
    "batch_per_worker": "batch per device",
    "tensor": "TP",
    "pipeline": "PP",
    "data": "DP",
    "context": "CP",
    "stage": "ZeRO stage",
    "micro_batch": "micro-batch",
    "virtual_stages": "virtual stages",
    "sequence_parallel": "sequence parallel",
}
#: where the time goes: (name, results.csv column)
SHARES = (("compute", "compute_time_frac"), ("communication", "comm_time_frac"),
          ("wait", "wait_time_frac"))  # fmt: skip
#: the most candidates the ranked table lists (plan.csv holds them all)
TABLE_ROWS = 500


def page(space: Space, judged: list[Judged], ranking: Ranking) -> str:
    # each feasible candidate's resolved scenario, as meta.json would hold it
    resolved = {j.index: j.point.spec.model_dump(mode="json") for j in ranking.order}
    names = _names(resolved)
    cards = _cards(ranking, names)
    first = space.plan.objectives[0]
    return render(
        "plan.html.j2",
        written_by="plan",
        title=f"Plan: {space.name}",
        description=str(space.base.get("description") or ""),
        lead=_lead(cards),
        counts=_counts(space, judged, ranking),
        cards=cards,
        ties=_ties(ranking, names, first),
        plot=_plot(space, judged, ranking, cards),
        table=_table(space, ranking, names, resolved),
        table_rows=TABLE_ROWS,
        breakdown=_breakdown(ranking.recommended, names),
        sortable=True,
    )


def _names(resolved: dict[int, dict[str, Any]]) -> dict[int, str]:
    """Each feasible candidate's name; where two share one, each says its number."""
    named = {i: describe(spec) for i, spec in resolved.items()}
    return names_apart(named, lambda i: f"candidate {i}")


def figure(j: Judged, objective: str) -> dict[str, Any]:
    """A candidate's figure on one objective: its value, its interval in words (or why
    it has none)."""
    value, low, high = j.figures.get(objective, (math.nan,) * 3)
    if math.isnan(value):
        return {"value": "unknown", "interval": "", "number": math.nan, "short": ""}
    if math.isnan(low) or math.isnan(high):
        interval = f"no interval ({j.basis})" if j.basis else "no interval"
    else:
        level = number(j.row.get("interval_level"))
        interval = (f"{level:.0%} interval " if not math.isnan(level) else "interval ") + (
            f"{show(objective, low)} to {show(objective, high)}"
        )
    return {"value": show(objective, value), "interval": interval, "number": value,
            "short": _short(objective, low, high)}  # fmt: skip


def _short(objective: str, low: float, high: float) -> str:
    """An interval in a table cell, 'low to high' with the unit once where both share
    it; nothing where there is none."""
    if math.isnan(low) or math.isnan(high):
        return ""
    a, b = show(objective, low), show(objective, high)
    unit_a, unit_b = a.rsplit(" ", 1)[-1], b.rsplit(" ", 1)[-1]
    if unit_a == unit_b:
        return f"{a.rsplit(' ', 1)[0]} to {b}"
    return f"{a} to {b}"


def _cards(ranking: Ranking, names: dict[int, str]) -> list[dict[str, Any]]:
    """One card per objective that some feasible candidate has a figure for."""
    best: dict[str, Judged] = {}
    for objective, _, _ in CARDS:
        known = [j for j in ranking.order if not math.isnan(j.value(objective))]
        if objective in ranking.best:
            best[objective] = ranking.best[objective]
        elif known:
            best[objective] = min(known, key=_by(objective))
    cards = []
    for objective, heading, title in CARDS:
        if objective not in best:
            continue
        j = best[objective]
        figures = int(number(j.row.get("interval_figures")) or 0)
        others = [o for o, _, _ in CARDS if o != objective and o in best]
        cards.append(
            {
                "objective": objective,
                "heading": heading,
                "title": title,
                "index": j.index,
                "judged": j,
                "id": j.point.id,
                "name": names[j.index],
                "figure": figure(j, objective),
                "others": [(o, figure(j, o)) for o in others],
                "backing": _backing(j, figures),
                "shares": _shares(j),
                "trade": _trade(j, objective, best, title),
            }
        )
    return cards


def _by(objective: str) -> Any:
    """A sort key: the candidate's value on `objective`, then its index."""
    return lambda j: (j.value(objective), j.index)


def _backing(j: Judged, figures: int) -> str:
    """How many published figures (or calibration rounds) back the interval."""
    basis = str(j.row.get("interval_class") or j.basis or "")
    if not figures:
        return f"No published figure backs it: {basis}." if basis else "No figure backs it."
    what = "calibration rounds" if basis == "calibration" else "published figures"
    return f"{figures} {what} back the interval ({basis})."


def _shares(j: Judged) -> list[dict[str, Any]]:
    """Where the candidate's time goes: compute, communication, wait (shares of it)."""
    shares = []
    for name, column in SHARES:
        share = number(j.row.get(column))
        shares.append({"name": name, "share": 0.0 if math.isnan(share) else max(share, 0.0)})
    return shares


def _ratio(a: float, b: float) -> str:
    r = a / b
    return "about the same" if abs(r - 1) < 0.1 else f"{r:.2g}x"


def _trade(j: Judged, objective: str, best: dict[str, Judged], title: str) -> str:
    """What the best candidate on `objective` gives up against the best on each other."""
    said = []
    for other, _, other_title in CARDS:
        if other == objective or other not in best:
            continue
        rival = best[other]
        if rival.index == j.index:
            said.append(f"it is also the {other_title} candidate")
            continue
        mine, theirs = j.value(other), rival.value(other)
        if math.isnan(mine) or math.isnan(theirs) or theirs <= 0:
            continue
        said.append(f"{_ratio(mine, theirs)} the {other} of the {other_title} candidate")
    if not said:
        return ""
    return f"The {title} candidate: " + "; ".join(said) + "."


def _lead(cards: list[dict[str, Any]]) -> str:
    """The page's first sentence: the fastest against the cheapest, and their energy."""
    by = {c["objective"]: c for c in cards}

    def said(card: dict[str, Any]) -> str:
        figures = {card["objective"]: card["figure"], **dict(card["others"])}
        values = {o: f["value"] for o, f in figures.items()}
        energy = f" ({values['energy']})" if "energy" in values else ""
        if "cost" not in values:
            return f"takes {values['time']}{energy}"
        return f"takes {values['time']} and costs {values['cost']}{energy}"

    if "time" not in by:
        return ""
    fast = by["time"]
    if "cost" not in by:  # no prices: the fastest alone
        return f"The fastest plan, {fast['name']}, {said(fast)}."
    cheap = by["cost"]

    if fast["index"] == cheap["index"]:
        return f"One candidate is both the fastest and the cheapest: {fast['name']} {said(fast)}."
    lead = (
        f"The fastest plan, {fast['name']}, {said(fast)}; the cheapest, {cheap['name']}, "
        f"{said(cheap)}."
    )
    fast_j, cheap_j = fast["judged"], cheap["judged"]
    cost = fast_j.value("cost") / cheap_j.value("cost")
    line = f" The fastest costs {cost:.2g}x what the cheapest does"
    energy = fast_j.value("energy") / cheap_j.value("energy")
    if math.isfinite(energy):
        line += (f" and uses about the same energy ({energy:.2f}x)" if abs(energy - 1) < 0.1
                 else f" and uses {energy:.2g}x its energy")  # fmt: skip
    return lead + line + "."


def _counts(space: Space, judged: list[Judged], ranking: Ranking) -> list[str]:
    """How many candidates there were, were evaluated, keep the limits, were dropped
    and why."""
    lines = [
        f"{space.size:,} candidates; {len(judged):,} evaluated "
        f"({space.plan.method(space.size)}); {len(ranking.order):,} keep the limits."
    ]
    dropped = Counter(j.status for j in judged if not j.ok)
    if dropped:
        reasons = "; ".join(
            f"{n:,} {DROPPED.get(status, status)}" for status, n in dropped.most_common()
        )
        lines.append(f"Dropped: {reasons}.")
    return lines


def _ties(ranking: Ranking, names: dict[int, str], first: str) -> str:
    """Which candidates the intervals cannot tell from the recommendation, in words."""
    top = ranking.recommended
    title = {o: t for o, _, t in CARDS}[first]
    _, low, high = top.figures[first]
    if math.isnan(low) or math.isnan(high):
        return (
            f"The {title} candidate has no interval ({top.basis}), so the plan cannot say "
            "which candidates it is tied with."
        )
    if not ranking.tied:
        return (
            f"No other candidate's interval on {first} overlaps the {title} one's: the "
            "order at the top is clear."
        )
    shown = [names[j.index] for j in ranking.tied[:8]]
    more = f", and {len(ranking.tied) - 8} more" if len(ranking.tied) > 8 else ""
    return (
        f"{len(ranking.tied)} candidates are tied with the {title} one on {first} within "
        f"their intervals, and the plan does not order them: {'; '.join(shown)}{more}."
    )


def _option_words(path: str, value: Any, resolved: dict[str, Any]) -> str:
    """One option's value in a table cell."""
    if path == "cluster":
        return devices(resolved["cluster"]).split(" ", 1)[1]
    if path == "strategy":
        cluster = resolved["cluster"]
        return strategy_of(resolved).words(cluster["hosts"] * cluster["devices_per_host"])
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


def _table(
    space: Space, ranking: Ranking, names: dict[int, str], resolved: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """The ranked candidates: a column per option and per objective, each cell with
    what it sorts by."""
    objectives = [o for o, _, _ in CARDS if any(o in j.figures for j in ranking.order)]
    paths = list(space.values(ranking.recommended.index))
    heads = [HEADINGS.get(p.rsplit(".", 1)[-1], p.rsplit(".", 1)[-1].replace("_", " "))
             for p in paths]  # fmt: skip
    tied = {j.index for j in ranking.tied}
    best = {j.index for j in ranking.best.values()}
    rows = []
    for rank, j in enumerate(ranking.order[:TABLE_ROWS], start=1):
        options = []
        for path, value in space.values(j.index).items():
            words = _option_words(path, value, resolved[j.index])
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            sort = value if numeric else words
            options.append({"text": words, "sort": sort})
        rows.append(
            {
                "rank": rank,
                "name": names[j.index],
                "id": j.point.id,
                "options": options,
                "figures": [figure(j, o) for o in objectives],
                "tied": j.index in tied,
                "best": j.index in best,
            }
        )
    return {"heads": heads, "objectives": objectives, "rows": rows, "total": len(ranking.order)}


def _breakdown(top: Judged, names: dict[int, str]) -> dict[str, Any]:
    """Where the recommended candidate's time (and so its money) goes."""
    time_s, cost = top.value("time"), top.value("cost")
    rows = []
    for share in _shares(top):
        part = share["share"]
        rows.append(
            {
                "name": share["name"],
                "share": f"{100 * part:.1f}%",
                "time": show("time", part * time_s),
                "money": "" if math.isnan(cost) else f"{part * cost:,.4g} USD",
            }
        )
    return {"name": names[top.index], "id": top.point.id, "rows": rows}


def _plot(
    space: Space, judged: list[Judged], ranking: Ranking, cards: list[dict[str, Any]]
) -> str:
    """The candidates on the plan's objectives (time and the second, or time and the
    throughput with one), intervals as bars, the front joined, the cards' candidates
    labelled, as a base64 PNG."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    objectives = space.plan.objectives
    x_name = objectives[0]
    y_name = objectives[1] if len(objectives) > 1 else None
    figure = Figure(figsize=(9, 5.2))
    ax = figure.subplots()
    for ok, colour, label in ((True, "tab:blue", "keeps the limits"), (False, "0.7", "dropped")):
        pts = [j for j in judged if j.ok == ok and x_name in j.figures]
        if pts:
            xs = [_scale(x_name, j.value(x_name)) for j in pts]
            ax.scatter(xs, [_y(j, y_name) for j in pts], s=14, color=colour, label=label, zorder=2)
    for j in ranking.order[:10]:
        _, low, high = j.figures[x_name]
        y = _y(j, y_name)
        ax.plot([_scale(x_name, low), _scale(x_name, high)], [y, y], color="tab:blue", lw=1)
    if y_name:
        ax.plot([_scale(x_name, j.value(x_name)) for j in ranking.front],
                [_y(j, y_name) for j in ranking.front],
                color="tab:red", lw=1, label="Pareto front")  # fmt: skip
    by_index = {j.index: j for j in ranking.order}
    labels: dict[int, list[str]] = {}
    for card in cards:  # one label per candidate, naming each card it heads
        labels.setdefault(card["index"], []).append(card["heading"])
    for k, (index, headings) in enumerate(labels.items()):
        j = by_index[index]
        x, y = _scale(x_name, j.value(x_name)), _y(j, y_name)
        short = ", ".join(names_of(cards, index).split(", ")[:2])
        ax.scatter([x], [y], marker="*", s=180, color="tab:red", zorder=3)
        said = " and ".join([headings[0], *(h.lower() for h in headings[1:])])
        ax.annotate(f"{said}: {short}", (x, y), xytext=(10, 14 + 16 * k),
                    textcoords="offset points", fontsize=8, zorder=4,
                    bbox={"boxstyle": "round", "fc": "white", "ec": "0.7", "alpha": 0.9},
                    arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.6})  # fmt: skip
    ax.set_xlabel(f"{x_name} ({'h' if x_name == 'time' else UNITS[x_name]})")
    ax.set_ylabel(f"{y_name} ({UNITS[y_name]})" if y_name else "throughput (samples/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1000 else f"{v:.3g}")
    for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_major_formatter(plain)
        # the minor ticks named only where the axis spans less than a decade
        axis.set_minor_formatter(plain if high < 10 * low else NullFormatter())
    ax.tick_params(which="minor", labelsize=7)
    ax.legend(fontsize=8, loc="lower left")
    buf = io.BytesIO()
    figure.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def names_of(cards: list[dict[str, Any]], index: int) -> str:
    """The name the cards give candidate `index`."""
    return next(c["name"] for c in cards if c["index"] == index)


def _scale(objective: str, value: float) -> float:
    return value / 3600 if objective == "time" else value


def _y(j: Judged, y_name: str | None) -> float:
    if y_name:
        return _scale(y_name, j.value(y_name))
    return number(j.row.get("throughput_samples_per_s"))
