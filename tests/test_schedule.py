"""The learning-rate schedule (workloads/schedule.py) against its published definitions."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from scenarios.sections.training import LearningRate
from workloads.schedule import schedule, schedule_of

IMAGENET = 1_281_167  # training images (Russakovsky et al. 2015)


def test_goyal_et_al_warmup_and_steps() -> None:
    # Goyal et al. 2017: eta = 0.1 x kn/256, gradual warm-up over 5 epochs from 0.1, then
    # divided by 10 at epochs 30, 60 and 80; 32 workers of 32 images: kn = 1024
    s = schedule(0.1, "linear", 32, 1024, IMAGENET, 5.0, "step", (30, 60, 80))
    assert s.peak == pytest.approx(3.2)
    epoch = IMAGENET / 1024
    assert s.rate(0) == pytest.approx(0.1)
    assert s.rate(2.5 * epoch) == pytest.approx((0.1 + 3.2) / 2)  # the same step each update
    assert s.rate(5 * epoch) == pytest.approx(3.2)
    assert s.rate(29.99 * epoch) == pytest.approx(3.2)
    assert s.rate(30 * epoch) == pytest.approx(0.32)
    assert s.rate(60 * epoch) == pytest.approx(0.032)
    assert s.rate(85 * epoch) == pytest.approx(0.0032)
    steps = np.diff(s.rates(np.arange(0, 100)))
    assert np.allclose(steps, (3.2 - 0.1) / (5 * epoch))


def test_cosine_from_the_end_of_the_warmup_to_zero() -> None:
    s = schedule(0.2, "sqrt", 16, 512, 10_000, 1.0, "cosine", total_updates=1000)
    warm = 10_000 / 512
    assert s.peak == pytest.approx(0.8)  # sqrt(16) x 0.2
    assert s.rate(warm) == pytest.approx(0.8)
    assert s.rate(warm + (1000 - warm) / 2) == pytest.approx(0.4)
    assert s.rate(1000) == pytest.approx(0.0, abs=1e-12)
    u = warm + (1000 - warm) * 0.25
    assert s.rate(u) == pytest.approx(0.8 * 0.5 * (1 + math.cos(math.pi / 4)))


def test_no_warmup_no_decay_is_constant_and_none_does_not_scale() -> None:
    s = schedule(0.05, "none", 64, 2048, None)
    assert np.all(s.rates(np.arange(0, 10_000, 7)) == 0.05)


def test_epochs_need_the_training_set() -> None:
    with pytest.raises(ValueError, match="training.dataset_samples"):
        schedule(0.1, "linear", 2, 64, None, warmup_epochs=1.0)
    with pytest.raises(ValueError, match="training.dataset_samples"):
        schedule(0.1, "linear", 2, 64, None, decay="step", milestones_epochs=(3,))


# ------------------------------------------------------------------ the rule on the batch

RESNET_TO_TARGET = """
version: 1
name: lr-batch
model: resnet50
cluster: {hosts: 1, devices_per_host: 8, device: v100, host_link: nvlink2, network: 100GbE}
training:
  batch_per_worker: 32
  dataset_samples: 1281167
  warmup_steps: 0
  max_epochs: 90
  learning_rate: {base: 0.1, base_batch: 256, scaling: linear, warmup_epochs: 5,
                  decay: {kind: step, milestones: [30, 60, 80]}}
  target: {metric: accuracy, value: 0.75}
  evaluation: {every_steps: 157, samples: 50000}
strategy: {kind: allreduce, algorithm: ring}
sim: {network_model: analytical, timed_steps: 5}
sweep:
  cluster.hosts,training.batch_per_worker: [[1, 32], [1, 256], [1, 1024], [4, 256], [32, 32]]
"""


def _simulate(tmp_path: Path, text: str) -> tuple[pd.DataFrame, dict[str, Any], str]:
    from sim.cli import main

    path = tmp_path / "lr.yaml"
    path.write_text(text)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    return pd.read_csv(tmp_path / "out" / "results.csv"), meta, err.getvalue()


def test_base_batch_scales_the_rate_with_the_batch_not_the_workers() -> None:
    lr = LearningRate(base=0.1, base_batch=256)
    assert lr.peak(8, 8 * 1024) == pytest.approx(3.2)  # Goyal et al.: 0.1 x 8192 / 256
    assert lr.peak(256, 256 * 32) == pytest.approx(3.2)
    assert lr.peak(1, 128) == pytest.approx(0.05)  # below the base batch: below the base
    sqrt = LearningRate(base=0.1, base_batch=256, scaling="sqrt")
    assert sqrt.peak(8, 8 * 1024) == pytest.approx(0.1 * math.sqrt(32))
    assert LearningRate(base=0.1, base_batch=256, scaling="none").peak(8, 8192) == 0.1
    # without base_batch: the workers, whatever the batch (the form's old meaning)
    assert LearningRate(base=0.0125).peak(8, 8 * 1024) == pytest.approx(0.1)


def test_warm_up_starts_at_the_base_or_below() -> None:
    s = schedule(0.1, "linear", 0.5, 128, IMAGENET, 5.0)
    assert s.peak == pytest.approx(0.05) and s.rate(0) == pytest.approx(0.05)


def test_equal_global_batches_reach_the_target_in_equal_epochs(tmp_path: Path) -> None:
    # 8 workers of 1,024 train as 32 of 256 and as 256 of 32: the same global batch
    # (8,192), the same rate, the same SGD
    results, meta, err = _simulate(tmp_path, RESNET_TO_TARGET)
    by = results.set_index(["workers", "batch_per_worker"])
    global_batch = results["workers"] * results["batch_per_worker"]
    assert np.allclose(results["peak_learning_rate"], 0.1 * global_batch / 256)
    assert by.loc[(8, 1024), "epochs_to_target"] == pytest.approx(
        by.loc[(256, 32), "epochs_to_target"], rel=0.02
    )
    assert by.loc[(32, 256), "epochs_to_target"] == pytest.approx(
        by.loc[(256, 32), "epochs_to_target"], rel=0.02
    )
    assert results["epochs_to_target"].notna().all()
    peaks = {p["id"]: p["peak_learning_rate"] for p in meta["points"]}
    assert peaks == dict(zip(results["point"], results["peak_learning_rate"], strict=True))
    assert "warning" not in err


def test_without_base_batch_a_batch_sweep_is_warned_of(tmp_path: Path) -> None:
    text = RESNET_TO_TARGET.replace("base: 0.1, base_batch: 256,", "base: 0.0125,")
    results, _, err = _simulate(tmp_path, text)
    lines = [line for line in err.splitlines() if "warning" in line]
    assert len(lines) == 1 and "base_batch" in lines[0] and "(32, 256, 1024)" in lines[0]
    by = results.set_index(["workers", "batch_per_worker"])
    # what the warning is about: 8 x 1,024 trains at 8 x 32's rate and misses the target
    assert by.loc[(8, 1024), "peak_learning_rate"] == by.loc[(8, 32), "peak_learning_rate"]
    assert np.isnan(by.loc[(8, 1024), "epochs_to_target"])


def test_asynchronous_updates_scale_with_one_workers_batch() -> None:
    from scenarios import loads

    text = (
        "version: 1\nmodel: mlp\ncluster: {devices_per_host: 4}\n"
        "training: {batch_per_worker: 64, learning_rate: {base: 0.1, base_batch: 256}}\n"
        "strategy: {kind: parameter_server, sync: false}\n"
    )
    spec = loads(text).points[0].spec
    assert schedule_of(spec).peak == pytest.approx(0.1 * 64 / 256)
    synchronous = loads(text.replace("sync: false", "sync: true")).points[0].spec
    assert schedule_of(synchronous).peak == pytest.approx(0.1 * 4 * 64 / 256)


def test_run_real_trains_at_the_same_rate() -> None:
    from real.runner import jobs_for
    from scenarios import loads

    scenario = loads(
        "version: 1\nmodel: mlp\ncluster: {devices_per_host: 2}\n"
        "training: {batch_per_worker: 512, learning_rate: {base: 0.1, base_batch: 256}}\n",
        backend="real",
    )
    jobs = jobs_for(scenario.points[0].spec)
    assert [job.learning_rate for job in jobs] == pytest.approx([0.1 * 2 * 512 / 256] * len(jobs))
