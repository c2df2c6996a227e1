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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


def write_atomic(path: Path, text: str) -> None:
    """Write text to path via a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
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


def frame_csv(frame: pd.DataFrame) -> str:
    """`frame.to_csv(index=False)`, the same text, written a column at a time: steps.csv
    holds one row per worker-step, and pandas formats each cell on its own."""
    columns = []
    for name in frame.columns:
        series = frame[name]
        values = series.tolist()
        kind = series.dtype.kind
        if series.dtype == "float64" and not series.isna().any():
            columns.append(list(map(float.__repr__, values)))
        elif kind == "f":  # narrower floats print at their own precision
            columns.append(["" if v != v else str(v) for v in series.to_numpy()])
        elif kind in "iub" and not series.isna().any():
            columns.append(list(map(str, values)))
        else:
            columns.append([_cell(v) for v in values])
    if len(columns) == 1:  # an empty line would read as no row at all: quote it
        columns = [[v or '""' for v in columns[0]]]
    header = ",".join(_cell(str(c)) for c in frame.columns)
    if not len(frame):
        return header + "\n"
    return header + "\n" + "\n".join(map(",".join, zip(*columns, strict=True))) + "\n"


def write_run(
    out_dir: Path,
    results: pd.DataFrame,
    steps: pd.DataFrame,
    meta: Mapping[str, Any],
    traces: Mapping[str, str],
) -> list[Path]:
    """Write results.csv, steps.csv, meta.json and trace-<point>.json files into out_dir.

    Traces of an earlier run in the same directory are removed, so that every file there
    belongs to this run.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path, text in (
        (out_dir / vocab.RESULTS_FILE, frame_csv(results)),
        (out_dir / vocab.STEPS_FILE, frame_csv(steps)),
    ):
        write_atomic(path, text)
        written.append(path)
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
