"""steps.csv in its two forms (docs/scenarios.md, "Result files"), for both backends.

`all`: one row per (point, replication, worker, step), `vocab.STEP_COLUMNS`.
`summary` (the default): one row per (point, replication, step, generation, trial), the
workers' rows of that step summed up, `vocab.STEP_SUMMARY_COLUMNS`: the earliest start and
the latest ends, and the mean, least and most of each worker's step time (end - start),
compute time (compute_end - start) and communication after its compute (comm_end -
compute_end, 0 where the communication ended first). A file's header says which form it
is (only `all` has a `worker` column); meta.json's `steps_form` says it too.

The summary is built a piece of the records at a time, each piece grouped on its own and
the pieces' groups merged (sums add, extremes take the extreme), so that 65,536 workers'
records are never one table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from scenarios import vocab

KEYS = ["step", "generation", "trial"]

#: per-worker quantity -> how it is summarised (sum for the mean, and the extremes)
_SPREAD = {
    "step_time": ("end_s", "start_s"),
    "compute_time": ("compute_end_s", "start_s"),
    "comm_time": ("comm_end_s", "compute_end_s"),
}


def is_summary(columns: Iterable[str]) -> bool:
    """Whether a steps.csv header is the summary form (it has no `worker` column)."""
    return "worker" not in set(columns)


def summary(
    pieces: Iterable[Mapping[str, np.ndarray]], point: str, replication: int
) -> pd.DataFrame:
    """The summary rows of one run's per-worker records, given a piece at a time as
    arrays named as steps.csv's per-worker columns (`step`, `generation`, `trial`,
    `warmup`, `start_s`, `compute_end_s`, `comm_end_s`, `end_s`, `staleness`; `lost` where
    known, else a step counts as lost where a later generation ran it again; `loss`, where
    given, is averaged over the workers that report one)."""
    partials = []
    has_lost = has_loss = False
    for piece in pieces:
        frame = pd.DataFrame({k: np.asarray(piece[k]) for k in KEYS})
        frame["warmup"] = np.asarray(piece["warmup"], dtype=bool)
        for name in ("start_s", "compute_end_s", "comm_end_s", "end_s"):
            frame[name] = np.asarray(piece[name], dtype=float)
        for name, (hi, lo) in _SPREAD.items():
            value = frame[hi].to_numpy() - frame[lo].to_numpy()
            frame[name] = np.maximum(value, 0.0) if name == "comm_time" else value
        frame["staleness"] = np.asarray(piece["staleness"], dtype=float)
        aggs: dict[str, tuple[str, str]] = {
            "workers": ("start_s", "size"),
            "warmup": ("warmup", "max"),
            "start_s": ("start_s", "min"),
            "compute_end_s": ("compute_end_s", "max"),
            "comm_end_s": ("comm_end_s", "max"),
            "end_s": ("end_s", "max"),
            "staleness_sum": ("staleness", "sum"),
            "staleness_max": ("staleness", "max"),
        }
        for name in _SPREAD:
            aggs |= {
                f"{name}_sum": (name, "sum"),
                f"{name}_min_s": (name, "min"),
                f"{name}_max_s": (name, "max"),
            }
        if "lost" in piece:
            has_lost = True
            frame["lost"] = np.asarray(piece["lost"], dtype=bool)
            aggs["lost"] = ("lost", "max")
        if "loss" in piece:
            has_loss = True
            frame["loss"] = np.asarray(piece["loss"], dtype=float)
            aggs |= {"loss_sum": ("loss", "sum"), "loss_count": ("loss", "count")}
        partials.append(frame.groupby(KEYS, sort=False, dropna=False).agg(**aggs))
    if not partials:
        return pd.DataFrame(columns=list(vocab.STEP_SUMMARY_COLUMNS))
    joined = pd.concat(partials)
    if len(partials) > 1:  # a step's workers split between pieces: merge their groups
        how = {
            c: "sum" if c.endswith(("_sum", "_count")) or c == "workers" else "max"
            for c in joined.columns
        }
        how |= {c: "min" for c in joined.columns if c.endswith("_min_s") or c == "start_s"}
        joined = joined.groupby(level=KEYS, sort=False, dropna=False).agg(how)
    out = joined.reset_index()
    for name in _SPREAD:
        out[f"{name}_mean_s"] = out.pop(f"{name}_sum") / out["workers"]
    out["staleness_mean"] = out.pop("staleness_sum") / out["workers"]
    if has_loss:
        out["loss"] = out.pop("loss_sum") / out.pop("loss_count").replace(0, np.nan)
    if not has_lost:  # a step run again by a later generation (after a restart) was lost
        last = out.groupby(["step", "trial"], dropna=False)["generation"].transform("max")
        out["lost"] = out["generation"] < last
    out.insert(0, "point", point)
    out.insert(1, "replication", replication)
    out = out.sort_values(["step", "trial", "generation"], kind="stable", ignore_index=True)
    columns = list(vocab.STEP_SUMMARY_COLUMNS) + (["loss"] if has_loss else [])
    return out.reindex(columns=columns)


def summary_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The summary form of per-worker steps.csv rows (any number of points and
    replications; run-real's rows and `simulate --steps all`'s)."""
    parts = []
    for (point, replication), rows in frame.groupby(
        ["point", "replication"], sort=False, dropna=False
    ):
        piece = {c: rows[c].to_numpy() for c in rows.columns if c not in ("point", "replication")}
        piece["trial"] = rows["trial"].fillna(-1).to_numpy()
        piece["generation"] = rows["generation"].fillna(0).to_numpy()
        parts.append(summary([piece], str(point), int(replication)))  # type: ignore[call-overload]
    if not parts:
        extra = ["loss"] if "loss" in frame.columns else []
        return pd.DataFrame(columns=list(vocab.STEP_SUMMARY_COLUMNS) + extra)
    return pd.concat(parts, ignore_index=True)
