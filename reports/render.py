"""Render a Report as one self-contained HTML page (templates/report.html.j2, through
`pages`) and as a Markdown summary.

The page embeds every plot as a base64 PNG data URI and its CSS inline: no scripts, no
network, it opens offline and can be mailed as one file.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .compare import Agreement, PairOrder, TargetAgreement
from .intervals import coverage
from .load import Run
from .pages import anchor, data_uri, render
from .report import Plot, Report
from .tables import (
    Table,
    breakdown_table,
    error_table,
    memory_table,
    points_table,
    staleness_table,
    step_table,
    target_table,
)

#: the page's sections, in order: (id, heading); tests and readers rely on these ids
SECTIONS = (
    ("prediction-error", "Prediction error"),
    ("scaling", "Scaling"),
    ("time-breakdown", "Where the time goes"),
    ("step-times", "Step times"),
    ("staleness", "Staleness"),
    ("time-to-target", "Time to target"),
    ("memory", "Memory"),
    ("timelines", "Timelines"),
    ("points", "All points"),
    ("provenance", "Provenance"),
)





def origin_note(report: Report) -> list[str]:
    """A warning when the inputs came from scenario files that differ (content or --set)."""
    # `compare` gives the simulator the calibration it made (`--set cluster.profile=...`):
    # that is the comparison, not a difference between the inputs
    origins = {
        (
            str(_mapping(r.meta.get("scenario")).get("sha256", "")),
            tuple(
                str(s)
                for s in _mapping(r.meta.get("scenario")).get("sets") or []
                if not str(s).startswith("cluster.profile=")
            ),
        )
        for r in report.runs
    }
    if len(origins) < 2:
        return []
    return [
        "Note: the inputs were made from scenario files that differ in content or --set "
        "overrides (see Provenance); their points pair by id all the same."
    ]


def summary_lines(report: Report) -> list[str]:
    a = report.agreement
    n = len(a.pairs)
    if not n:
        return [
            "No point has both a simulated and a real result: give a sim and a real directory "
            "of the same scenario to compare them."
        ]
    mape_step = "n/a" if a.mape_step_time is None else f"{a.mape_step_time:.1f}%"
    mape_tp = "n/a" if a.mape_throughput is None else f"{a.mape_throughput:.1f}%"
    if a.tau is None:
        tau = "n/a (needs two points and throughputs that are not all equal)"
    else:
        tau = f"{a.tau:+.3f} (+1: ranked as reality ranks them; -1: reversed)"
    return [
        f"Points with both backends: {n}. Relative error = (sim - real) / real.",
        f"Mean absolute percentage error: step time {mape_step}, throughput {mape_tp}.",
        f"Kendall tau-b of the throughput ranking, sim vs real: {tau}.",
        *coverage_lines(a),
        *order_lines(a.order),
        *target_lines(a.target),
        *origin_note(report),
        *drift_note(report),
        *uncalibrated_note(report),
    ]


def coverage_lines(a: Agreement) -> list[str]:
    """How many measurements fell inside their prediction's 90% interval (the model's
    error on this machine, the calibration's spread and the runs' together:
    reports/intervals.py, `measured_interval`)."""
    inside, known, width = coverage(a.pairs)
    if not known:
        return [
            "No point has an interval to hold its measurement: it needs a calibrated "
            "prediction (compare makes one)."
        ]
    return [
        f"Measurements inside their prediction's 90% interval (the model's error on "
        f"this machine, the calibration's spread and the runs' together): {inside} of "
        f"{known}; the intervals are "
        f"{width:.0%} of the prediction wide on average."
    ]


def order_lines(order: PairOrder | None) -> list[str]:
    """The throughput pairs the runs tell apart and how the simulator orders them, where
    the real points were repeated."""
    if order is None:
        return []
    sigma, dof = order.noise
    return [
        f"One real run's throughput varies by {sigma:.1%} ({dof} degrees of freedom); the "
        f"runs tell apart {order.apart} of the {order.pairs} pairs of points, and the "
        f"simulator orders {order.concordant} of them as the runs do"
        + (f", {order.discordant} the other way." if order.discordant else ".")
    ]


def target_lines(target: TargetAgreement | None) -> list[str]:
    """The time-to-target agreement in words, where the points have a target."""
    if target is None:
        return []
    lines = [
        f"Time to target, over the {target.points} points that reached it on both backends: "
        + ("MAPE n/a." if target.mape is None else f"MAPE {target.mape:.1f}%.")
    ]
    if target.one_sided:
        lines.append(f"{target.one_sided} point(s) reached the target on one backend only.")
    if target.noise is None:
        lines.append(
            "The real points were run once: how far apart their times to target must be "
            "to be told apart is unknown (real.repeats >= 2 measures it)."
        )
    else:
        sigma, dof = target.noise
        lines.append(
            f"One real run's time to target varies by {sigma:.1%} ({dof} degrees of "
            f"freedom); the runs tell apart {target.apart} of the {target.pairs} pairs of "
            f"points, and the simulator orders {target.concordant} of them as the runs do"
            + (f", {target.discordant} the other way." if target.discordant else ".")
        )
    return lines


def drift_note(report: Report) -> list[str]:
    """How far the machine moved between the calibration and the real runs, where run-real
    measured it (`run-real --recalibrate`, as `compare` runs it: meta.json
    `machine_drift`)."""
    lines = []
    for run in report.runs:
        moved = _mapping(run.meta.get("machine_drift"))
        drift, noise = moved.get("drift"), moved.get("noise")
        if not isinstance(drift, int | float) or not isinstance(noise, int | float):
            continue
        if moved.get("changed"):
            lines.append(
                f"Warning: the machine changed under the real runs: the step time of the "
                f"single-worker compute probe moved {drift:+.1%} from the calibration the "
                f"simulation used to the runs, beyond its noise ({noise:.1%}); that much of "
                "the error above is the machine's, not the model's."
            )
        else:
            lines.append(
                f"Machine drift between the calibration and the real runs: {drift:+.1%} "
                f"(single-worker compute probe), within its noise ({noise:.1%})."
            )
    return lines


def uncalibrated_note(report: Report) -> list[str]:
    """A pointer to `compare` where a real run on CPU meets a prediction made without a
    calibration profile (meta.json without `calibration` and no cluster.profile): the
    catalog's devices are not this machine's CPU, so the error says little of the model."""
    if not len(report.agreement.pairs):
        return []
    real_on_cpu = any("real" in run.backends and "cpu" in _devices(run.meta) for run in report.runs)
    uncalibrated = any("sim" in run.backends and not _calibrated(run.meta) for run in report.runs)
    if not (real_on_cpu and uncalibrated):
        return []
    return [
        "Note: the prediction is uncalibrated: CPU runs need `compare` (or `run-real "
        "--calibrate` and cluster.profile) for a fair comparison."
    ]


def _devices(meta: Mapping[str, Any]) -> set[str]:
    """real.device of every point (cpu where meta.json does not say: its default)."""
    points = meta.get("points")
    found = {
        str(_mapping(_mapping(_mapping(p).get("resolved")).get("real")).get("device", "cpu"))
        for p in (points if isinstance(points, list) else [])
    }
    return found or {"cpu"}


def _calibrated(meta: Mapping[str, Any]) -> bool:
    if meta.get("calibration") or _mapping(meta.get("origin")).get("calibrated"):
        return True
    sets = _mapping(meta.get("scenario")).get("sets") or []
    if any(str(s).startswith("cluster.profile=") for s in sets):
        return True
    points = meta.get("points")
    return any(
        _mapping(_mapping(_mapping(p).get("resolved")).get("cluster")).get("profile")
        for p in (points if isinstance(points, list) else [])
    )


def _short(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def provenance(run: Run) -> list[tuple[str, str]]:
    """(field, value) of one directory's meta.json, the fields a reader asks about first."""
    meta = run.meta
    scenario, machine, versions = (
        _mapping(meta.get(k)) for k in ("scenario", "machine", "versions")
    )
    command = meta.get("command")
    fields = [
        ("directory", str(run.directory)),
        ("backend", ", ".join(run.backends) + f" (meta.json: {meta.get('backend', '?')})"),
        ("points", str(len(run.results))),
        ("scenario", str(scenario.get("name", ""))),
        ("scenario file", str(scenario.get("path", ""))),
        ("scenario sha256", str(scenario.get("sha256", ""))),
        ("overrides (--set)", ", ".join(map(str, scenario.get("sets") or [])) or "none"),
        ("seed", _short(meta.get("seed", ""))),
        ("git commit", str(meta.get("git_commit", ""))),
        ("date", str(meta.get("date", ""))),
        ("command", " ".join(map(str, command)) if isinstance(command, list) else _short(command)),
        (
            "machine",
            ", ".join(f"{k}: {v}" for k, v in machine.items()) if machine else "",
        ),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items())),
        (
            "wall time",
            f"{meta['wall_time_s']:.1f} s"
            if isinstance(meta.get("wall_time_s"), int | float)
            else "",
        ),
        ("traces", str(len(run.traces))),
    ]
    return fields


def calibration(run: Run) -> Any:
    """meta.json's `calibration` (which numbers came from a calibration profile), if any:
    a mapping of lists and mappings, drawn as nested lists, not as JSON."""
    return run.meta.get("calibration")



def _md_tree(value: Any, depth: int = 0) -> list[str]:
    pad = "  " * depth
    if isinstance(value, Mapping):
        lines = []
        for k, v in value.items():
            if isinstance(v, Mapping | list) and v:
                lines += [f"{pad}- {k}:", *_md_tree(v, depth + 1)]
            else:
                lines.append(f"{pad}- {k}: {v if v not in ({}, []) else 'none'}")
        return lines
    if isinstance(value, list):
        return [line for v in value for line in _md_tree(v, depth)]
    return [f"{pad}- {value}"]


# ---------------------------------------------------------------------------- HTML


def _plot_view(plot: Plot) -> dict[str, str]:
    return {
        "anchor": anchor(plot.key),
        "uri": data_uri(plot.png),
        "title": plot.title,
        "caption": plot.caption,
    }


def to_html(report: Report, generated: str | None = None, written_by: str = "report") -> str:
    """The page (templates/report.html.j2); `written_by` (report, or compare for the report
    it writes) goes in its generator tag, which `report` reads before it replaces a page
    (reports/cli.py)."""
    generated = generated or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    tables: dict[str, Table] = {
        "error": error_table(report),
        "breakdown": breakdown_table(report),
        "steps": step_table(report),
        "points": points_table(report),
    }
    if "staleness" in report.plots:
        tables["staleness"] = staleness_table(report)
    if "time-to-target" in report.plots:
        tables["target"] = target_table(report)
    if "memory" in report.plots:
        tables["memory"] = memory_table(report)
    plots = {key: _plot_view(plot) for key, plot in report.plots.items()}
    runs = [
        {
            "directory": str(run.directory),
            "fields": provenance(run),
            "calibration": calibration(run),
        }
        for run in report.runs
    ]
    inputs = ", ".join(f"{run.directory} ({'/'.join(run.backends)})" for run in report.runs)
    return render(
        "report.html.j2",
        written_by=written_by,
        title=f"trainscale report: {report.scenario}",
        inputs=inputs,
        generated=generated,
        sections=SECTIONS,
        summary=summary_lines(report),
        paired=bool(len(report.agreement.pairs)),
        tables=tables,
        plots=plots,
        timelines=[_plot_view(p) for p in report.timelines],
        runs=runs,
        names=report.names,
    )


# ---------------------------------------------------------------------------- Markdown


def _md_escape(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table, names: Mapping[str, str] | None = None) -> str:
    """A Markdown table; with `names`, a point in words, its id after it in code (the
    id results.csv and steps.csv know it by)."""
    header, rows = table
    lines = [
        "| " + " | ".join(map(_md_escape, header)) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        cells = [
            f"{names[cell]} (`{cell}`)"
            if head == "point" and names and names.get(cell, cell) != cell
            else cell
            for head, cell in zip(header, row, strict=True)
        ]
        lines.append("| " + " | ".join(map(_md_escape, cells)) + " |")
    return "\n".join(lines)


def _md_fields(fields: Iterable[tuple[str, str]]) -> str:
    return _md_table((["field", "value"], [[k, f"`{v}`" if v else ""] for k, v in fields]))


def to_markdown(report: Report, html_name: str, generated: str | None = None) -> str:
    generated = generated or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    out = [
        f"# trainscale report: {report.scenario}",
        "",
        f"Generated {generated}. Plots and timelines: [{html_name}]({html_name}).",
        "",
        "## Prediction error",
        "",
        *[f"{line}  " for line in summary_lines(report)],
        "",
    ]
    if len(report.agreement.pairs):
        out += [_md_table(error_table(report), report.names), ""]
    sections: list[tuple[str, Callable[[Report], Table]]] = [
        ("Where the time goes", breakdown_table),
        ("Step times", step_table),
    ]
    if not report.asynchronous.empty:
        sections.append(("Staleness", staleness_table))
    if "time-to-target" in report.plots:
        sections.append(("Time to target", target_table))
    if "memory" in report.plots:
        sections.append(("Memory", memory_table))
    sections.append(("All points", points_table))
    for heading, table in sections:
        out += [f"## {heading}", "", _md_table(table(report), report.names), ""]
    out += ["## Provenance", ""]
    for run in report.runs:
        out += [f"### {run.directory}", "", _md_fields(provenance(run)), ""]
        cal = calibration(run)
        if cal is not None:
            out += [
                "Calibration (which numbers came from a calibration profile):",
                "",
                *_md_tree(cal),
                "",
            ]
    return "\n".join(out)
