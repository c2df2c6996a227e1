"""Result files shared by both backends: atomic writes and provenance (STYLE.md rule 13).

Nothing is half-written: every file goes to a temporary name in the output directory and
is renamed into place (`os.replace`) only once complete.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import vocab
from .loader import Scenario

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
    for first in range(0, len(frame), rows):
        columns = [_column(frame[name].iloc[first : first + rows]) for name in frame.columns]
        if len(columns) == 1:  # an empty line would read as no row at all: quote it
            columns = [[v or '""' for v in columns[0]]]
        yield "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def _column(series: pd.Series) -> list[str]:
    """The cells of one column as pandas writes them. Each distinct value is formatted
    once: most columns of steps.csv repeat a few values (the point, a step's start and
    end), and formatting a float is what costs."""
    kind = series.dtype.kind
    if series.dtype == "float64" and not series.isna().any():
        bits = series.to_numpy().view(np.int64)  # by bit pattern: -0.0 is not 0.0
        distinct, where = np.unique(bits, return_inverse=True)
        if 2 * len(distinct) > len(bits):
            return list(map(float.__repr__, series.tolist()))
        return _expand(list(map(float.__repr__, distinct.view(np.float64).tolist())), where)
    if kind == "f":  # narrower floats print at their own precision
        return ["" if v != v else str(v) for v in series.to_numpy()]
    if kind in "iub" and not series.isna().any():
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
            {"id": p.id, "values": dict(p.values), "resolved": p.spec.model_dump(mode="json")}
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
