"""Jobs that the local and the Spark tests run alike (tests/test_real.py, test_spark.py),
and what their result files must show either way."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from scenarios import vocab

#: Async PS, checkpoint every 5 updates: worker 1 is killed at update 8 and started again
#: after 1 s (it rejoins; the job goes on); the parameter server is killed at update 22,
#: so the job restarts from the checkpoint of update 20 and redoes the rest
PS_FAILURES = (
    "--steps",
    "all",
    "--set",
    "strategy={kind: parameter_server, servers: 1, sync: false}",
    "--set",
    "training.steps=28",
    "--set",
    "checkpoint.every_steps=5",
    "--set",
    "failures=[{role: worker, index: 1, at_step: 8, downtime: 1 s}, "
    "{role: ps, index: 0, at_step: 22, downtime: 1 s}]",
)


def check_ps_failures(out: Path) -> None:
    """What a run of `PS_FAILURES` wrote to `out`."""
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["failures"] == 2
    assert 0 < row["lost_steps"] <= 5  # updates since the last checkpoint (every 5)
    assert row["recovery_time_s"] >= 2.0  # two downtimes of 1 s, plus measured restarts
    assert row["checkpoint_time_s"] > 0
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert set(steps.generation) == {0, 1}
    kept = steps[~steps.lost]
    # every update done once in the end; but a closure's record stays on its worker until
    # the coordinator fetches it (in scheduling order), so the records of the closures the
    # killed worker had finished and not yet handed over die with it (their updates were
    # applied): a few, at most the 5 of its checkpoint interval
    assert 28 + 2 - 5 <= len(kept) <= 28 + 2
    assert steps.lost.sum() <= row["lost_steps"]
