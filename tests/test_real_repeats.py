"""`real.repeats`: every point run again, interleaved, and combined into means with 95%
half-widths (no TensorFlow needed: the runs are stand-ins)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from real import runner
from real.runner import RealPoint, merge_repeats
from scenarios import loads

SCENARIO = """
version: 1
name: repeated
model: mlp
cluster: {hosts: 1, devices_per_host: 1, device: cpu, host_link: loopback, network: 1GbE}
training: {batch_per_worker: 8, steps: 3, warmup_steps: 1}
strategy: {kind: allreduce, algorithm: ring}
real: {repeats: 3}
sweep:
  cluster.devices_per_host: [1, 2]
"""


def fake(point_id: str, throughput: float, step_s: float) -> RealPoint:
    row = {
        "point": point_id,
        "backend": "real",
        "workers": 1,
        "sync": True,
        "throughput_samples_per_s": throughput,
        "step_time_mean_s": step_s,
        "training_time_s": 3 * step_s,
        "wall_time_s": 10.0,
    }
    steps = pd.DataFrame({"point": [point_id] * 2, "step": [0, 1], "replication": [0, 0]})
    return RealPoint(point_id, row, steps)


def test_runs_are_interleaved_and_combined(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = loads(SCENARIO)
    order: list[str] = []
    values = iter([100.0, 200.0, 110.0, 210.0, 120.0, 230.0])

    def run_point(point: Any) -> RealPoint:
        order.append(point.id)
        throughput = next(values)
        return fake(point.id, throughput, 8 / throughput)

    monkeypatch.setattr(runner, "run_point", run_point)
    monkeypatch.setattr(runner, "check_supported", lambda spec: None)
    done = runner.run(scenario)
    first, second = (p.id for p in scenario.points)
    # every point once, then every point again: a slow spell of the machine hits both
    assert order == [first, second] * 3
    assert [p.point_id for p in done] == [first, second]
    one = done[0].row
    assert one["replications"] == 3
    assert one["workers"] == 1 and isinstance(one["workers"], int)  # identity, not averaged
    assert one["throughput_samples_per_s"] == pytest.approx(110.0)
    # Student's t with 2 degrees of freedom (4.303) x sample sd 10 / sqrt(3)
    assert one["throughput_ci95_samples_per_s"] == pytest.approx(4.303 * 10 / math.sqrt(3))
    assert one["wall_time_s"] == pytest.approx(30.0)
    assert list(done[0].steps["replication"]) == [0, 0, 1, 1, 2, 2]
    # each run's own figures, for meta.json
    assert done[0].runs is not None
    assert [r["throughput_samples_per_s"] for r in done[0].runs] == [100.0, 110.0, 120.0]


def test_one_run_is_the_run() -> None:
    merged = merge_repeats([fake("p", 100.0, 0.08)])
    assert merged.row["replications"] == 1
    assert merged.row["throughput_samples_per_s"] == 100.0
    assert "throughput_ci95_samples_per_s" not in merged.row
    assert merged.runs is None


def test_repeats_must_be_positive() -> None:
    from scenarios import ScenarioError

    with pytest.raises(ScenarioError, match="real.repeats"):
        loads(SCENARIO.replace("repeats: 3", "repeats: 0"))
