"""Read one result directory (results.csv, steps.csv, meta.json, trace-<point>.json).

Only the result files are read, never the simulator or the real backend: a report lays
side by side whatever the two backends wrote under the contract (docs/scenarios.md, "Result
files"). Every problem is a `UserError` naming the file, the column or key, and the value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from results.steps import is_summary
from scenarios import vocab
from scenarios.errors import UserError

BACKENDS = ("sim", "real")

#: results.csv columns that hold text; every other contract column is a number
TEXT_COLUMNS = ("point", "backend", "scenario", "model", "strategy", "algorithm")
BOOL_COLUMNS = ("sync", "fits")
#: results.csv columns a report cannot do without: empty cells are refused here
REQUIRED_VALUES = (
    "point",
    "backend",
    "scenario",
    "strategy",
    "sync",
    "workers",
    "batch_per_worker",
    "step_time_mean_s",
    "throughput_samples_per_s",
)
#: of REQUIRED_VALUES, those a point that does not fit its devices leaves empty
TIMINGS = ("step_time_mean_s", "throughput_samples_per_s")
#: results.csv columns added after the contract's first version, with the value a file
#: written before them means
ADDED_COLUMNS = {
    "dropped_samples_per_s": 0.0,
    "samples_trained": float("nan"),
    **dict.fromkeys(vocab.TARGET_COLUMNS, float("nan")),  # no target: empty
    "peak_memory_bytes": float("nan"),  # not estimated
    "fits": True,  # every point was timed
    "peak_learning_rate": float("nan"),  # not recorded
    "evaluation_time_s": float("nan"),  # not recorded
    **dict.fromkeys(vocab.MONEY_AND_ENERGY, float("nan")),  # not priced
}
#: steps.csv columns the report reads (the file has all of vocab.STEP_COLUMNS)
STEP_NUMBERS = ("worker", "step", "start_s", "compute_end_s", "comm_end_s", "end_s", "staleness")
STEP_FLAGS = ("warmup", "lost")
#: the summary form's columns the report reads (it has all of vocab.STEP_SUMMARY_COLUMNS)
SUMMARY_NUMBERS = (
    "step",
    "start_s",
    "step_time_mean_s",
    "compute_time_mean_s",
    "comm_time_mean_s",
    "staleness_mean",
)

_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


@dataclass
class Run:
    """One result directory: its results (one row per point), steps and provenance."""

    directory: Path
    results: pd.DataFrame
    steps: pd.DataFrame
    meta: dict[str, Any]
    traces: dict[str, Path] = field(default_factory=dict)  # point id -> trace file
    curves: pd.DataFrame | None = None  # curves.csv, where a point had a target
    #: steps.csv's form: `all` (a row per worker-step) or `summary` (a row per step, read
    #: as one worker, the mean one: see `read_steps`)
    steps_form: str = vocab.STEPS_ALL
    _by_point: dict[str, pd.DataFrame] | None = field(default=None, repr=False)

    def steps_of(self, point: str) -> pd.DataFrame:
        """The steps.csv rows of one point (split once, on first use)."""
        if self._by_point is None:
            self._by_point = {
                str(k): rows for k, rows in self.steps.groupby("point", observed=True)
            }
        return self._by_point.get(point, self.steps.iloc[:0])

    @property
    def scenario(self) -> str:
        return str(self.results["scenario"].iloc[0])

    @property
    def backends(self) -> list[str]:
        return sorted(set(self.results["backend"]))

    @property
    def results_path(self) -> Path:
        return self.directory / vocab.RESULTS_FILE


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a frame as dicts keyed by column name."""
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict(orient="records")]


def load_run(directory: str | Path) -> Run:
    """Read and check one result directory; raises UserError on anything unusable."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"{directory}: not a directory of result files")
    results = read_results(directory / vocab.RESULTS_FILE)
    steps, form = read_steps(directory / vocab.STEPS_FILE)
    meta = read_meta(directory / vocab.META_FILE)
    traces = {}
    for point in results["point"]:
        path = directory / vocab.trace_file(point)
        if path.is_file():
            traces[point] = path
    curves = read_curves(directory / vocab.CURVES_FILE)
    return Run(directory, results, steps, meta, traces, curves, steps_form=form)


def _read_csv(path: Path, **kwargs: Any) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(f"{path}: missing (a result directory holds {path.name})")
    try:
        return pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        raise UserError(f"{path}: empty file, expected a CSV header") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: not a readable CSV file ({first})") from None


def _require_columns(path: Path, columns: pd.Index, wanted: tuple[str, ...]) -> None:
    missing = [c for c in wanted if c not in columns]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(
            f"{path}: column '{missing[0]}' missing{more}; is this a trainscale result?"
        )


def _numbers(path: Path, frame: pd.DataFrame, column: str) -> pd.Series:
    """The column as floats; a cell that is not a number is refused with its row."""
    if pd.api.types.is_numeric_dtype(frame[column]) and not pd.api.types.is_bool_dtype(
        frame[column]
    ):
        return frame[column].astype(float)
    values = pd.to_numeric(frame[column], errors="coerce")
    cells = frame[column]
    bad = values.isna() & cells.notna() & (cells.astype(str).str.strip().str.lower() != "nan")
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(
            f"{path}: column '{column}', row {row + 1}: {frame[column].iloc[row]!r} is not a number"
        )
    return values.astype(float)


def _flags(path: Path, frame: pd.DataFrame, column: str) -> pd.Series:
    series = frame[column]
    if pd.api.types.is_bool_dtype(series):
        return series
    text = series.astype(str).str.strip().str.lower()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(
            f"{path}: column '{column}', row {row + 1}: {series.iloc[row]!r} is not True or False"
        )
    return text.isin(_TRUE)


def read_results(path: Path) -> pd.DataFrame:
    """results.csv with every contract column, numbers as floats, `sync` as bool."""
    frame = _read_csv(
        path, dtype={c: str for c in TEXT_COLUMNS}, keep_default_na=False, na_values=[""]
    )
    # a column later versions added: files written before it read as they were (0 then)
    for column, value in ADDED_COLUMNS.items():
        if column not in frame.columns:
            frame[column] = value
    _require_columns(path, frame.columns, vocab.RESULT_COLUMNS)
    if frame.empty:
        raise UserError(f"{path}: no rows (a result has one row per sweep point)")
    timed = _flags(path, frame, "fits")  # a point that does not fit has no timings
    for column in REQUIRED_VALUES:
        empty = frame[column].isna() & (timed | (column not in TIMINGS))
        if empty.any():
            row = int(np.flatnonzero(empty.to_numpy())[0])
            raise UserError(f"{path}: column '{column}', row {row + 1}: empty")
    for column in vocab.RESULT_COLUMNS:
        if column in BOOL_COLUMNS:
            frame[column] = _flags(path, frame, column)
        elif column not in TEXT_COLUMNS:
            frame[column] = _numbers(path, frame, column)
    for column in TEXT_COLUMNS:
        frame[column] = frame[column].fillna("").astype(str)
    bad_backend = ~frame["backend"].isin(BACKENDS)
    if bad_backend.any():
        row = int(np.flatnonzero(bad_backend.to_numpy())[0])
        raise UserError(
            f"{path}: column 'backend', row {row + 1}: {frame['backend'].iloc[row]!r} "
            f"is neither 'sim' nor 'real'"
        )
    scenarios = list(dict.fromkeys(frame["scenario"]))
    if len(scenarios) > 1:
        raise UserError(
            f"{path}: column 'scenario' holds {scenarios[0]!r} and {scenarios[1]!r}; "
            f"one result directory is one scenario"
        )
    duplicated = frame.duplicated(["backend", "point"])
    if duplicated.any():
        row = int(np.flatnonzero(duplicated.to_numpy())[0])
        raise UserError(
            f"{path}: column 'point', row {row + 1}: {frame['point'].iloc[row]!r} appears twice"
        )
    return frame


def read_curves(path: Path) -> pd.DataFrame | None:
    """curves.csv, if the run wrote one: the target metric at every evaluation."""
    if not path.exists():
        return None
    frame = _read_csv(
        path, dtype={"point": str, "metric": str}, keep_default_na=False, na_values=[""]
    )
    _require_columns(path, frame.columns, vocab.CURVE_COLUMNS)
    for column in ("replication", "step", "samples", "time_s", "value"):
        frame[column] = _numbers(path, frame, column)
    return frame


def read_steps(path: Path) -> tuple[pd.DataFrame, str]:
    """The steps.csv columns the report draws, phases per (point, worker, step), and the
    file's form. A summary (one row per step) reads as one worker, the mean one, with
    worker 0: its step starts at the step's earliest start and its phases last the
    workers' mean compute, communication and step time; staleness is the mean."""
    header = _read_csv(path, nrows=0)
    summary = is_summary(header.columns)
    numbers = SUMMARY_NUMBERS if summary else STEP_NUMBERS
    _require_columns(
        path, header.columns, vocab.STEP_SUMMARY_COLUMNS if summary else vocab.STEP_COLUMNS
    )
    frame = _read_csv(
        path,
        usecols=["point", *numbers, *STEP_FLAGS],
        dtype={"point": "category"},  # few distinct ids in up to millions of rows
        keep_default_na=False,
        na_values=[""],
    )
    for column in numbers:
        frame[column] = _numbers(path, frame, column)
    for column in STEP_FLAGS:
        frame[column] = _flags(path, frame, column)
    if not summary:
        return frame, vocab.STEPS_ALL
    start = frame["start_s"]
    compute_end = start + frame.pop("compute_time_mean_s")
    mean = pd.DataFrame(
        {
            "point": frame["point"],
            "worker": 0.0,
            "step": frame["step"],
            "start_s": start,
            "compute_end_s": compute_end,
            "comm_end_s": compute_end + frame.pop("comm_time_mean_s"),
            "end_s": start + frame.pop("step_time_mean_s"),
            "staleness": frame.pop("staleness_mean"),
            "warmup": frame["warmup"],
            "lost": frame["lost"],
        }
    )
    return mean, vocab.STEPS_SUMMARY


def _read_json(path: Path) -> Any:
    """A JSON file's document; a file that cannot be read or parsed is one line."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def read_meta(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"{path}: missing (a result directory holds {path.name}, its provenance)")
    document = _read_json(path)
    if not isinstance(document, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(document).__name__}")
    return document


def read_trace(path: Path) -> dict[str, Any]:
    """A Chrome trace document ({"traceEvents": [...]}, or a bare list of events)."""
    document = _read_json(path)
    if isinstance(document, list):
        document = {"traceEvents": document}
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise UserError(f"{path}: key 'traceEvents' missing; not a Chrome trace")
    return document
