"""steps.csv's rows of one simulated replication, from the engine's records.

Two forms (results/steps.py): one row per worker-step (`all`), or the steps summed over
the workers (`summary`, the default), built a piece of the records at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from results.steps import summary as step_summary
from scenarios import vocab
from scenarios.spec import ScenarioSpec


def steps_frame(point_id: str, replication: int, spec: ScenarioSpec, outcome: Any) -> pd.DataFrame:
    """steps.csv's rows of one replication, one per worker-step (`--steps all`), in step,
    worker and trial order; a step done again after a restart marks the earlier one lost."""
    records = outcome.records
    step = records.column("step")
    frame = pd.DataFrame(
        {
            "point": point_id,
            "worker": records.column("worker"),
            "step": step,
            "warmup": step < spec.training.warmup_steps,
            "start_s": records.column("start"),
            "compute_end_s": records.column("compute_end"),
            "comm_end_s": records.column("comm_end"),
            "end_s": records.column("end"),
            "replication": replication,
            "generation": records.column("generation"),
            "trial": records.column("trial"),
            "staleness": records.column("staleness"),
        }
    )
    # a step done again after a restart: the earlier attempt was lost
    frame["lost"] = frame.duplicated(["worker", "step", "trial"], keep="last")
    if spec.strategy.counts_updates:
        frame["warmup"] = False  # asynchronous: warm-up counts updates, not iterations
    frame = frame.reindex(columns=list(vocab.STEP_COLUMNS))
    return frame.sort_values(["step", "worker", "trial"], kind="stable", ignore_index=True)


def steps_summary(
    point_id: str, replication: int, spec: ScenarioSpec, outcome: Any
) -> pd.DataFrame:
    """steps.csv's summary rows of one replication, from the records a piece at a time
    (results/steps.py): no per-worker table is built."""
    warmup = spec.training.warmup_steps
    asynchronous = spec.strategy.counts_updates
    names = ("step", "generation", "trial", "start", "compute_end", "comm_end", "end", "staleness")

    def pieces() -> Any:
        for piece in outcome.records.chunks(names):
            step = piece["step"]
            yield {
                "step": step,
                "generation": piece["generation"],
                "trial": piece["trial"],
                # asynchronous: warm-up counts updates, not iterations
                "warmup": np.zeros(len(step), dtype=bool) if asynchronous else step < warmup,
                "start_s": piece["start"],
                "compute_end_s": piece["compute_end"],
                "comm_end_s": piece["comm_end"],
                "end_s": piece["end"],
                "staleness": piece["staleness"],
            }

    return step_summary(pieces(), point_id, replication)
