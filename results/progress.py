"""Result files written as the points finish, and read back to resume a run (`--resume`).

A run's directory is valid at every moment: after every few finished points (`Progress.add`
decides when: at most every FLUSH_S seconds, and never spending more than FLUSH_SHARE of
the run on it) steps.csv, curves.csv, the new traces, results.csv and, last, meta.json
are each rewritten whole to a temporary name and renamed into place (`write_atomic`), so
a reader sees the points finished so far and never half a row, and a kill leaves every
point written before it intact. meta.json's `done` names them, in the sweep's order, each
with the sha256 of its resolved spec, its results.csv row and its own entries of
meta.json's per-point maps; `complete` says whether every point is there.

Every file lists the points in the sweep's order (never the order they finished in), each
point's rows formatted on their own: the files a resumed run ends with are the files an
uninterrupted one writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from scenarios import vocab
from scenarios.errors import UserError
from scenarios.loader import Scenario

from .files import csv_chunks, point_hash, results_frame, versions, write_atomic

#: seconds between two rewrites of the files while points finish (the last is at the end)
FLUSH_S = 2.0
#: the most of a run's time its rewrites may take: the next waits 1/FLUSH_SHARE times
#: as long as the last took
FLUSH_SHARE = 0.05


def profile_hashes(scenario: Scenario) -> dict[str, str]:
    """The sha256 of each calibration profile the points name (`cluster.profile`), by
    path: a simulation depends on the profile's numbers, which its points' specs do not
    hold (they name its path)."""
    paths = sorted({str(p.spec.cluster.profile) for p in scenario.points if p.spec.cluster.profile})
    return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest() for path in paths}


def plain(value: Any) -> Any:
    """A value as JSON keeps it: numpy's scalars as Python's, pandas' missing as None."""
    return json.loads(json.dumps(value, default=_json_default))


def _json_default(value: Any) -> Any:
    if value is pd.NA or value is pd.NaT:
        return None
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    return str(value)


def csv_body(frame: pd.DataFrame, header: Sequence[str]) -> str:
    """A frame's rows as they stand in a CSV file of `header`'s columns (no header line)."""
    extra = [c for c in frame.columns if c not in header]
    if extra:
        raise ValueError(f"columns {extra} are not in the file's header")
    return "".join(list(csv_chunks(frame.reindex(columns=list(header))))[1:])


def header_line(columns: Sequence[str]) -> str:
    return next(csv_chunks(pd.DataFrame(columns=list(columns))))


@dataclass
class Finished:
    """One finished point as its result files hold it."""

    point_id: str
    row: dict[str, Any]  # results.csv's row (plain: as meta.json's `done` keeps it)
    steps: str  # its steps.csv rows
    steps_rows: int
    curves: str = ""  # its curves.csv rows, where it has any
    curves_rows: int = 0
    trace: str | None = None  # trace-<point>.json (None once written, or without --trace)
    traced: bool = False  # whether it has a trace file
    #: its own entries of meta.json's per-point maps: {key: value}, e.g. {"costs": {...}}
    meta: dict[str, Any] = field(default_factory=dict)


def finished(
    point_id: str,
    row: Mapping[str, Any],
    steps: pd.DataFrame,
    steps_header: Sequence[str],
    curves: pd.DataFrame | None = None,
    trace: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> Finished:
    """A finished point's rows formatted for its files (its steps in `steps_header`'s
    columns, its curves in curves.csv's)."""
    curves_text = "" if curves is None else csv_body(curves, vocab.CURVE_COLUMNS)
    return Finished(
        point_id,
        plain(dict(row)),
        csv_body(steps, steps_header),
        len(steps),
        curves_text,
        0 if curves is None else len(curves),
        trace,
        trace is not None,
        plain(dict(meta or {})),
    )


def by_key(records: Sequence[Finished], key: str) -> dict[str, Any]:
    """One of meta.json's per-point maps, {point: value}, from the points that have it."""
    return {r.point_id: r.meta[key] for r in records if key in r.meta}


class Progress:
    """The result directory of a run while its points finish.

    `meta_of(records)` gives meta.json's entries that depend on the points finished (the
    per-point maps, `by_key`, and whatever else the backend writes) besides `base` (the
    provenance, taken once); `options` are what else the files depend on
    (`{"steps_form": ..., "trace": ...}`), written to meta.json and compared on resume."""

    def __init__(
        self,
        out_dir: Path,
        scenario: Scenario,
        base: Mapping[str, Any],
        steps_header: Sequence[str],
        meta_of: Callable[[list[Finished]], dict[str, Any]],
        options: Mapping[str, Any],
    ):
        self.out_dir = out_dir
        self.order = {p.id: i for i, p in enumerate(scenario.points)}
        self.hashes = {p.id: point_hash(p) for p in scenario.points}
        self.base = dict(base)
        self.steps_header = list(steps_header)
        self.meta_of = meta_of
        self.options = dict(options)
        self.done: dict[str, Finished] = {}
        self.last = -math.inf  # when the files were last rewritten (perf_counter)
        self.wait_s = 0.0  # how long the next rewrite waits at least
        self.dirty = False

    @property
    def records(self) -> list[Finished]:
        """The finished points, in the sweep's order."""
        return sorted(self.done.values(), key=lambda r: self.order[r.point_id])

    def remaining(self, scenario: Scenario) -> Scenario:
        """The scenario with the points still to run."""
        points = tuple(p for p in scenario.points if p.id not in self.done)
        return dataclasses.replace(scenario, points=points)

    def resumed(self, scenario: Scenario) -> str:
        """What a resumed run says before it runs: the points done and to run."""
        todo = len(self.remaining(scenario).points)
        done = f"{len(self.done)} of {len(scenario.points)} points done in {self.out_dir}"
        return f"{done}; running {todo}"

    def add(self, record: Finished) -> None:
        """A point finished: its files are rewritten now if it is time to."""
        self.done[record.point_id] = record
        self.dirty = True
        if time.perf_counter() - self.last >= max(FLUSH_S, self.wait_s):
            self.flush()

    def flush(self, complete: bool = False, extra: Mapping[str, Any] | None = None) -> None:
        """Rewrite every file with the points finished so far; `complete` when the run is
        over (every point there), `extra`: meta.json entries besides (`incomplete`)."""
        started = time.perf_counter()
        records = self.records
        out = self.out_dir
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(
            out / vocab.STEPS_FILE, [header_line(self.steps_header), *(r.steps for r in records)]
        )
        curves_path = out / vocab.CURVES_FILE
        if any(r.curves_rows for r in records):
            write_atomic(
                curves_path, [header_line(vocab.CURVE_COLUMNS), *(r.curves for r in records)]
            )
        else:
            curves_path.unlink(missing_ok=True)
        for r in records:
            if r.trace is not None:
                write_atomic(out / vocab.trace_file(r.point_id), r.trace)
                r.trace = None  # written: not held any longer
        keep = {vocab.trace_file(r.point_id) for r in records if r.traced}
        for stale in out.glob("trace-*.json"):
            if stale.name not in keep:
                stale.unlink()
        write_atomic(out / vocab.RESULTS_FILE, csv_chunks(results_frame([r.row for r in records])))
        meta = {**self.base, **self.meta_of(records), **self.options, **dict(extra or {})}
        meta["done"] = {
            r.point_id: {
                "sha256": self.hashes[r.point_id],
                "row": r.row,
                "columns": list(r.row),  # the row's order (meta.json's keys are sorted)
                "meta": r.meta,
                "steps_rows": r.steps_rows,
                "curves_rows": r.curves_rows,
                "traced": r.traced,
            }
            for r in records
        }
        meta["complete"] = complete and len(records) == len(self.order)
        write_atomic(
            out / vocab.META_FILE, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n"
        )
        self.dirty = False
        self.last = time.perf_counter()
        self.wait_s = (self.last - started) / FLUSH_SHARE

    # ------------------------------------------------------------------ resuming

    def resume(self, scenario: Scenario, backend: str) -> None:
        """Take in the points the directory already holds for this scenario (`--resume`,
        `resumable` says which directories may be resumed). A point whose files lack its
        rows is run again."""
        meta = resumable(self.out_dir, scenario, backend, self.options)
        if meta is not None:
            self._take(meta)

    def _take(self, meta: dict[str, Any]) -> None:
        """The finished points of meta.json's `done` whose rows the files hold."""
        done = meta.get("done") or {}
        steps = _blocks(self.out_dir / vocab.STEPS_FILE, self.steps_header)
        curves = _blocks(self.out_dir / vocab.CURVES_FILE, vocab.CURVE_COLUMNS)
        for point_id, entry in done.items():
            if self.hashes.get(point_id) != entry.get("sha256"):
                continue
            rows, text = steps.get(point_id, (0, ""))
            curve_rows, curve_text = curves.get(point_id, (0, ""))
            traced = bool(entry.get("traced"))
            trace_there = (self.out_dir / vocab.trace_file(point_id)).is_file()
            if (
                rows != entry.get("steps_rows")
                or curve_rows != entry.get("curves_rows")
                or (traced and not trace_there)
            ):
                continue  # its files lack it: run it again
            row = entry.get("row") or {}
            self.done[point_id] = Finished(
                point_id,
                {column: row[column] for column in entry.get("columns") or row},
                text,
                rows,
                curve_text,
                curve_rows,
                None,
                traced,
                dict(entry.get("meta") or {}),
            )


def resumable(
    out: Path, scenario: Scenario, backend: str, options: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The meta.json of the run in `out` that `--resume` goes on with; None where `out`
    does not exist or is empty (every point is run). A directory written from another
    scenario file, with other points (another `--set`), other `options`, by another
    backend or by another version of trainscale is refused (UserError, one line)."""
    meta_path = out / vocab.META_FILE
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return None
    if not out.is_dir():
        raise UserError(f"--resume: {out} is not a directory")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(
            f"--resume: {meta_path}: missing or not JSON; {out} holds no run to resume"
        ) from None
    if not isinstance(meta, dict):
        raise UserError(f"--resume: {meta_path}: not a run's meta.json")
    why_not = _differs(meta, scenario, backend, options)
    if why_not:
        raise UserError(f"--resume: {out} {why_not}; run it into another directory (--out)")
    return meta


def _differs(
    meta: dict[str, Any], scenario: Scenario, backend: str, options: Mapping[str, Any]
) -> str | None:
    """Why the run in meta.json is not this one to resume, or None."""
    if meta.get("backend") != backend:
        return f"holds results of backend {meta.get('backend')!r}, not {backend!r}"
    ours = versions().get("trainscale")
    theirs = (meta.get("versions") or {}).get("trainscale")
    if theirs != ours:
        return f"was written by trainscale {theirs}, this is trainscale {ours}"
    written = meta.get("scenario") or {}
    if written.get("sha256") != scenario.sha256:
        return (
            f"was written from another scenario file ({written.get('name')}, sha256 "
            f"{str(written.get('sha256'))[:12]}), not {scenario.path} (sha256 "
            f"{scenario.sha256[:12]})"
        )
    if not isinstance(meta.get("done"), dict):
        return "holds no list of finished points (meta.json's `done`): nothing to resume"
    points = [(p.get("id"), p.get("sha256")) for p in meta.get("points") or []]
    if points != [(p.id, point_hash(p)) for p in scenario.points]:
        return "holds other points than this scenario resolves to (another --set?)"
    for key, value in options.items():
        if meta.get(key) != value:
            return f"was written with {key} {meta.get(key)!r}, this run has {value!r}"
    return None


def _blocks(path: Path, header: Sequence[str]) -> dict[str, tuple[int, str]]:
    """A CSV file written by Progress, as {point: (its rows, their text)}; nothing where
    the file is missing or its header is not `header`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    lines = _records(text)
    if not lines or lines[0] != header_line(header):
        return {}
    found: dict[str, list[str]] = {}
    for line in lines[1:]:
        found.setdefault(_first_field(line), []).append(line)
    return {point: (len(rows), "".join(rows)) for point, rows in found.items()}


def _records(text: str) -> list[str]:
    """The records of CSV text, each with its newline; a quoted field may hold one."""
    out: list[str] = []
    pending = ""
    for line in _lines(text):
        pending += line
        if pending.count('"') % 2 == 0:
            out.append(pending)
            pending = ""
    return out  # a last record cut short (no closing quote) is dropped


def _lines(text: str) -> Iterator[str]:
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            return  # no newline: a cut-off line is no record
        yield text[start : end + 1]
        start = end + 1


def _first_field(record: str) -> str:
    if record.startswith('"'):
        end = 1
        while True:
            end = record.index('"', end)
            if record.startswith('""', end):
                end += 2
                continue
            return record[1:end].replace('""', '"')
    return record.split(",", 1)[0].rstrip("\n")
