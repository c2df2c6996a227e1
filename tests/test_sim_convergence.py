"""The times a simulated run to a target reports (sim/engine/convergence.py): its steps'
training time, its evaluations' time and its time to target add up as docs/scenarios.md
defines them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scenarios import loads
from sim import run

SCENARIO = """
version: 1
name: adds-up
seed: 3
model: {name: toy, params: 1e6, flops_per_sample: 1 GFLOP,
        convergence: {metric: loss, initial: 2.3, final: 0.1, scale_samples: 300,
                      noise_scale: 100, lr_max: 1.0}}
cluster: {hosts: 1, devices_per_host: 4, device: {peak_flops: 1 TFLOP/s, efficiency: 0.5}}
training:
  batch_per_worker: 16
  warmup_steps: 2
  steps: 60
  learning_rate: {base: 0.05, base_batch: 16}
  target: {metric: loss, value: 1.0}
  evaluation: {every_steps: 7, samples: 32}
stragglers: {jitter: 0.1}
"""


def simulated(*sets: str) -> tuple[dict, pd.DataFrame]:  # type: ignore[type-arg]
    result = run(loads(SCENARIO, sets))
    (row,) = result.results.to_dict(orient="records")
    assert result.curves is not None
    return row, result.curves


@pytest.mark.parametrize(
    "strategy",
    [
        "strategy={kind: allreduce}",
        "strategy={kind: parameter_server, sync: true}",
        "strategy={kind: parameter_server, sync: false}",  # the engine holds the job
    ],
)
def test_the_last_evaluation_ends_at_the_steps_plus_the_evaluations(strategy: str) -> None:
    row, curves = simulated(strategy)
    last = curves.sort_values("step").iloc[-1]
    evaluations = len(curves)  # every 7 updates and after the last
    assert evaluations == len(np.arange(7, 62 + 1, 7)) + 1
    assert row["evaluation_time_s"] > 0
    assert last.time_s == pytest.approx(row["training_time_s"] + row["evaluation_time_s"])
    assert row["time_to_target_s"] <= row["training_time_s"] + row["evaluation_time_s"]
    # throughput is the steps' alone: evaluations do not count as training
    assert row["throughput_samples_per_s"] == pytest.approx(
        row["samples_trained"] / row["training_time_s"]
    )


def test_an_evaluation_costs_one_forward_pass_over_the_held_out_samples() -> None:
    row, curves = simulated("stragglers={jitter: 0}")
    # 32 samples through 1 GFLOP each at 0.5 TFLOP/s, on one worker
    assert row["evaluation_time_s"] == pytest.approx(len(curves) * 32 * 1e9 / 0.5e12)


def test_a_cut_run_reports_the_whole_run_at_the_timed_steps_mean() -> None:
    whole, _ = simulated("stragglers={jitter: 0}")
    cut, curves = simulated("stragglers={jitter: 0}", "sim.timed_steps=10")
    assert cut["steps"] == whole["steps"] == 60
    # no jitter: every step alike, so the extension is exact
    assert cut["training_time_s"] == pytest.approx(whole["training_time_s"], rel=1e-9)
    assert cut["samples_trained"] == pytest.approx(whole["samples_trained"], rel=1e-9)
    assert curves.sort_values("step").iloc[-1].time_s == pytest.approx(
        cut["training_time_s"] + cut["evaluation_time_s"]
    )
