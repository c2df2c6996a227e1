"""Render a Report as one self-contained HTML page and as a Markdown summary.

The page embeds every plot as a base64 PNG data URI and its CSS inline: no scripts, no
network, it opens offline and can be mailed as one file.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from results.files import generator_tag

from .compare import Agreement, PairOrder, TargetAgreement
from .intervals import coverage
from .load import Run
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

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
img { max-width: 100%; height: auto; display: block; margin: 0.5em 0; }
figcaption, .note { color: #666; font-size: 12px; }
nav a { margin-right: 1em; } code { font-size: 12px; word-break: break-all; }
td.out { background: #fde2e1; color: #a0001c; font-weight: 600; }
dl.tree { margin: 0.2em 0; } dl.tree dt { font-weight: 600; } dl.tree dd { margin-left: 1.5em; }
"""


def anchor(key: str) -> str:
    """An HTML id from a point id (which may hold '=', ',' and '.')."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", key)


def _data_uri(plot: Plot) -> str:
    return "data:image/png;base64," + base64.b64encode(plot.png).decode("ascii")


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


def _html_tree(value: Any) -> str:
    """A mapping as a definition list, a list as a bulleted list, anything else as text."""
    if isinstance(value, Mapping):
        if not value:
            return "none"
        items = "".join(
            f"<dt>{html.escape(str(k))}</dt><dd>{_html_tree(v)}</dd>" for k, v in value.items()
        )
        return f'<dl class="tree">{items}</dl>'
    if isinstance(value, list):
        if not value:
            return "none"
        return "<ul>" + "".join(f"<li>{_html_tree(v)}</li>" for v in value) + "</ul>"
    return html.escape(str(value))


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


def _html_table(table: Table, text: int = 2, attrs: str = "") -> str:
    header, rows = table

    def cell(tag: str, i: int, value: str) -> str:
        classes = (["text"] if i < text else []) + (["out"] if value.startswith("\u2717") else [])
        cls = f' class="{" ".join(classes)}"' if classes else ""
        return f"<{tag}{cls}>{html.escape(value)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "\n".join(
        "<tr>" + "".join(cell("td", i, v) for i, v in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table{attrs}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _fields_table(fields: Iterable[tuple[str, str]]) -> str:
    body = "\n".join(
        f'<tr><th class="text">{html.escape(k)}</th><td class="text"><code>{html.escape(v)}'
        f"</code></td></tr>"
        for k, v in fields
    )
    return f"<table>\n{body}\n</table>"


def _figure(plot: Plot) -> str:
    return (
        f'<figure id="plot-{anchor(plot.key)}">'
        f'<img src="{_data_uri(plot)}" alt="{html.escape(plot.title)}">'
        f"<figcaption>{html.escape(plot.caption)}</figcaption></figure>"
    )


def _paragraphs(lines: Sequence[str]) -> str:
    return "\n".join(f"<p>{html.escape(line)}</p>" for line in lines)


def to_html(report: Report, generated: str | None = None, written_by: str = "report") -> str:
    """The page; `written_by` (report, or compare for the report it writes) goes in its
    generator tag, which `report` reads before it replaces a page (reports/cli.py)."""
    generated = generated or dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    body: dict[str, str] = {}
    body["prediction-error"] = _paragraphs(summary_lines(report)) + _html_table(
        error_table(report), attrs=' id="error-table"'
    )
    body["scaling"] = _figure(report.plots["scaling"])
    body["time-breakdown"] = _figure(report.plots["breakdown"]) + _html_table(
        breakdown_table(report)
    )
    body["step-times"] = _figure(report.plots["step-times"]) + _html_table(step_table(report))
    if "staleness" in report.plots:
        body["staleness"] = _figure(report.plots["staleness"]) + _html_table(
            staleness_table(report)
        )
    else:
        body["staleness"] = _paragraphs(["No asynchronous runs: every update is fresh."])
    if "time-to-target" in report.plots:
        body["time-to-target"] = (
            _figure(report.plots["time-to-target"])
            + _html_table(target_table(report))
            + _figure(report.plots["curves"])
        )
    else:
        body["time-to-target"] = _paragraphs(["No point has a target (training.target)."])
    if "memory" in report.plots:
        body["memory"] = _figure(report.plots["memory"]) + _html_table(memory_table(report))
    else:
        body["memory"] = _paragraphs(["No point's memory was estimated."])
    body["timelines"] = (
        _paragraphs(
            [
                "The first steps after warm-up of every point, per worker: compute above, "
                "communication and waiting below. From the trace where the run wrote one "
                "(--trace), else from steps.csv."
            ]
        )
        + "\n".join(_figure(p) for p in report.timelines)
        if report.timelines
        else _paragraphs(["Timelines not drawn."])
    )
    body["points"] = _html_table(points_table(report), text=3)
    parts = []
    for i, run in enumerate(report.runs):
        parts.append(f"<h3>{html.escape(str(run.directory))}</h3>")
        parts.append(_fields_table(provenance(run)))
        cal = calibration(run)
        if cal is not None:
            parts.append(
                "<h4>Calibration: which numbers came from a calibration profile</h4>"
                f'<div id="calibration-{i}">{_html_tree(cal)}</div>'
            )
    body["provenance"] = "\n".join(parts)
    nav = " ".join(f'<a href="#{key}">{html.escape(title)}</a>' for key, title in SECTIONS)
    sections = "\n".join(
        f'<section id="{key}">\n<h2>{html.escape(title)}</h2>\n{body[key]}\n</section>'
        for key, title in SECTIONS
    )
    inputs = ", ".join(f"{run.directory} ({'/'.join(run.backends)})" for run in report.runs)
    title = f"trainscale report: {report.scenario}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"{generator_tag(html.escape(written_by))}\n"
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n"
        f'<p class="note">Inputs: {html.escape(inputs)}. Generated {html.escape(generated)}.</p>\n'
        f"<nav>{nav}</nav>\n{sections}\n</body>\n</html>\n"
    )


# ---------------------------------------------------------------------------- Markdown


def _md_escape(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> str:
    header, rows = table
    lines = [
        "| " + " | ".join(map(_md_escape, header)) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(map(_md_escape, row)) + " |" for row in rows]
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
        out += [_md_table(error_table(report)), ""]
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
        out += [f"## {heading}", "", _md_table(table(report)), ""]
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
