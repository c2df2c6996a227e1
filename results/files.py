"""Result files shared by both backends: atomic writes and provenance (STYLE.md rule 13).

Nothing is half-written: every file goes to a temporary name in the output directory and
is renamed into place (`os.replace`) only once complete.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scenarios import vocab
from scenarios.errors import UserError
from scenarios.loader import Point, Scenario
from workloads.schedule import schedule_of

PACKAGES = (
    "trainscale",
    "simpy",
    "numpy",
    "pandas",
    "pydantic",
    "pint",
    "PyYAML",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
)


def write_atomic(path: Path, text: str | Iterable[str]) -> None:
    """Write text (or its pieces, in order) to path via a temporary file in the same
    directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            if isinstance(text, str):
                f.write(text)
            else:
                f.writelines(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def results_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(list(rows))
    extra = [c for c in frame.columns if c not in vocab.RESULT_COLUMNS]
    return frame.reindex(columns=list(vocab.RESULT_COLUMNS) + extra)


def _cell(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""  # missing, as pandas writes it
    text = float.__repr__(value) if isinstance(value, float) else str(value)
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_chunks(frame: pd.DataFrame, rows: int = 50_000) -> Iterator[str]:
    """`frame.to_csv(index=False)`, the same text, in pieces of `rows` rows, each written
    a column at a time: steps.csv holds one row per worker-step, pandas formats each cell
    on its own, and the whole text of a large run would not fit beside it in memory."""
    yield ",".join(_cell(str(c)) for c in frame.columns) + "\n"
    frame = whole_numbers(frame)
    for first in range(0, len(frame), rows):
        whole = len(frame) <= rows  # one piece: the columns as they are, not sliced
        columns = [
            _column(frame[name] if whole else frame[name].iloc[first : first + rows])
            for name in frame.columns
        ]
        if len(columns) == 1:  # an empty line would read as no row at all: quote it
            columns = [[v or '""' for v in columns[0]]]
        yield "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def whole_numbers(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with each counting column (`vocab.INTEGER_COLUMNS`) of floats that are
    all whole as integers (missing values kept missing), the others as they are."""
    cast = {}
    for name in frame.columns:
        if name not in vocab.INTEGER_COLUMNS or frame[name].dtype.kind != "f":
            continue
        values = frame[name].to_numpy()
        known = values[~np.isnan(values)]
        if np.all(np.isfinite(known)) and np.all(known == np.round(known)) and (
            not len(known) or np.abs(known).max() < 2.0**53
        ):
            cast[name] = frame[name].astype("Int64")
    return frame.assign(**cast) if cast else frame


#: columns of at most this many cells are formatted cell by cell (one point's steps)
_FEW = 64


def _column(series: pd.Series) -> list[str]:
    """The cells of one column as pandas writes them. Each distinct value is formatted
    once: most columns of steps.csv repeat a few values (the point, a step's start and
    end), and formatting a float is what costs."""
    kind = series.dtype.kind
    small = len(series) <= _FEW  # too few values for finding the distinct ones to pay
    if series.dtype == "float64" and not series.isna().any():
        if small:
            return list(map(float.__repr__, series.tolist()))
        bits = series.to_numpy().view(np.int64)  # by bit pattern: -0.0 is not 0.0
        distinct, where = np.unique(bits, return_inverse=True)
        if 2 * len(distinct) > len(bits):
            return list(map(float.__repr__, series.tolist()))
        return _expand(list(map(float.__repr__, distinct.view(np.float64).tolist())), where)
    if kind == "f":  # narrower floats print at their own precision
        return ["" if v != v else str(v) for v in series.to_numpy()]
    if kind in "iub" and not series.isna().any():
        if small:
            return list(map(str, series.tolist()))
        distinct, where = np.unique(series.to_numpy(), return_inverse=True)
        return _expand(list(map(str, distinct.tolist())), where)
    values = series.tolist()
    if not all(type(v) is str or v is None for v in values):  # 1, 1.0 and True are equal
        return [_cell(v) for v in values]
    codes, uniques = pd.factorize(series)  # missing values get code -1
    return _expand([_cell(v) for v in uniques.tolist()] + [""], codes)


def _expand(texts: list[str], where: np.ndarray) -> list[str]:
    return np.array(texts, dtype=object)[where.reshape(-1)].tolist()  # type: ignore[no-any-return]


def frame_csv(frame: pd.DataFrame) -> str:
    """`frame.to_csv(index=False)`: `csv_chunks` joined."""
    return "".join(csv_chunks(frame))


def write_run(
    out_dir: Path,
    results: pd.DataFrame,
    steps: pd.DataFrame,
    meta: Mapping[str, Any],
    traces: Mapping[str, str],
    curves: pd.DataFrame | None = None,
) -> list[Path]:
    """Write results.csv, steps.csv, meta.json, trace-<point>.json files and, where a
    point has a target, curves.csv into out_dir.

    Traces and curves of an earlier run in the same directory are removed, so that every
    file there belongs to this run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, frame in (
        (out_dir / vocab.RESULTS_FILE, results),
        (out_dir / vocab.STEPS_FILE, steps),
    ):
        write_atomic(path, csv_chunks(frame))
        written.append(path)
    curves_path = out_dir / vocab.CURVES_FILE
    if curves is not None:
        write_atomic(curves_path, csv_chunks(curves))
        written.append(curves_path)
    else:
        curves_path.unlink(missing_ok=True)
    for point_id, text in traces.items():
        path = out_dir / vocab.trace_file(point_id)
        write_atomic(path, text)
        written.append(path)
    keep = {p.name for p in written}
    for stale in out_dir.glob("trace-*.json"):
        if stale.name not in keep:
            stale.unlink()
    meta_path = out_dir / vocab.META_FILE
    write_atomic(meta_path, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    written.append(meta_path)
    return written


def git_commit() -> str:
    """The commit of the trainscale source tree, '+dirty' if it has local changes."""
    here = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def point_hash(point: Point) -> str:
    """The sha256 of a point's resolved spec (meta.json's `points`): what `--resume`
    matches a finished point by."""
    return hashlib.sha256(point.spec.model_dump_json().encode()).hexdigest()


def provenance(
    scenario: Scenario, backend: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """meta.json: scenario hash and text, resolved points, seed, commit, versions, machine."""
    return {
        "backend": backend,
        "scenario": {
            "name": scenario.name,
            "path": scenario.path,
            "sha256": scenario.sha256,
            "sets": list(scenario.sets),
            "document": scenario.document,
        },
        "seed": scenario.seed,
        "points": [
            {
                "id": p.id,
                "sha256": point_hash(p),
                "values": dict(p.values),
                "resolved": p.spec.model_dump(mode="json"),
                "peak_learning_rate": schedule_of(p.spec).peak,
            }
            for p in scenario.points
        ],
        "git_commit": git_commit(),
        "versions": versions(),
        "machine": {
            "node": platform.node(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": sys.argv,
        **dict(extra or {}),
    }


# ------------------------------------------------------------------ who may replace what

#: what a result directory's meta.json says of its writer (`origin`), for `claim_output`
Origin = Mapping[str, Any]


def origin(
    command: str | None,
    scenario: str | None,
    calibrated: bool = False,
    engine: str | None = None,
) -> dict[str, Any]:
    """meta.json's `origin`: the command that wrote the results (`compare` for the runs it
    starts), the scenario's name, whether the run was calibrated (simulate with
    cluster.profile, run-real with --recalibrate) and, where the results depend on it,
    the engine (`local`, or `spark` and its master)."""
    return {"command": command, "scenario": scenario, "calibrated": calibrated, "engine": engine}


def origin_of(out_dir: Path) -> Origin | None:
    """The origin of the results in out_dir: meta.json's `origin`, or what its backend,
    scenario and calibration tell for one written without it; `{"command": None}` for
    results of unknown origin (a results.csv without a readable meta.json); None where
    out_dir holds no results."""
    meta_path = out_dir / vocab.META_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict):
        held = (out_dir / vocab.RESULTS_FILE).exists() or (out_dir / vocab.STEPS_FILE).exists()
        return {"command": None} if held or meta_path.exists() else None
    if isinstance(meta.get("origin"), dict):
        return dict(meta["origin"])
    scenario = meta.get("scenario")
    if not isinstance(scenario, dict):
        scenario = {}
    sets = [str(s) for s in scenario.get("sets") or []]
    return origin(
        {"sim": "simulate", "real": "run-real"}.get(str(meta.get("backend"))),
        scenario.get("name"),
        bool(meta.get("calibration")) or any(s.startswith("cluster.profile=") for s in sets),
    )


def describe_origin(previous: Origin) -> str:
    """What wrote a directory, in words for a refusal: "what `compare` wrote for
    mlp-localhost (calibrated, on spark local[2])"."""
    command = previous.get("command")
    if command is None:
        return "files of unknown origin"
    said = f"what `{command}` wrote"
    if previous.get("scenario"):
        said += f" for {previous['scenario']}"
    details = [
        *(["calibrated"] if previous.get("calibrated") else []),
        *([f"on {previous['engine']}"] if previous.get("engine") else []),
    ]
    return said + (f" ({', '.join(details)})" if details else "")


def replaces(previous: Origin | None, new: Origin) -> str | None:
    """Why writing `new`'s results would replace results that are not its own to replace,
    or None where it may: nothing there yet, or the same command of the same scenario
    (run again), on the same engine where the results depend on it, and calibrated
    where the results there were."""
    if previous is None:
        return None
    if previous.get("command") is None or previous.get("command") != new.get("command"):
        return "another command"
    for key, what in (("scenario", "another scenario"), ("engine", "another engine")):
        if previous.get(key) and new.get(key) and previous[key] != new[key]:
            return what
    if previous.get("calibrated") and not new.get("calibrated"):
        return "a calibrated run"
    return None


def claim(where: Path, previous: Origin | None, new: Origin, force: bool) -> None:
    """Raise UserError, in one line naming `where`, what wrote it and the way out, where
    writing `new`'s results there would replace results `replaces` keeps; nothing where
    `force` (the command's --force) is given."""
    if force or replaces(previous, new) is None:
        return
    assert previous is not None
    raise UserError(
        f"{where} holds {describe_origin(previous)}; `{new.get('command')}` would replace "
        "it: add --force to do so, or write elsewhere with --out DIR"
    )


def generator_tag(command: str) -> str:
    """The tag in a report page's head that says which command wrote it (`page_origin`)."""
    return f'<meta name="generator" content="trainscale {command}">'


_GENERATOR = re.compile(r'<meta name="generator" content="trainscale ([^"<>]+)">')


def page_origin(page: Path) -> Origin | None:
    """Which command wrote the report page at `page`, by its generator tag: None where
    there is no page, `{"command": None}` for a page no trainscale command wrote."""
    try:
        with page.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except FileNotFoundError:
        return None
    except OSError:
        return {"command": None}
    found = _GENERATOR.search(head)
    return origin(found.group(1), None) if found else {"command": None}


def claim_output(out_dir: Path, new: Origin, force: bool) -> None:
    """`claim` for a result directory (results.csv, steps.csv, meta.json ...), by its
    meta.json: call it before anything runs, so that a refusal costs nothing."""
    claim(out_dir, origin_of(out_dir), new, force)
