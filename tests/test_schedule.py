"""The learning-rate schedule (scenarios/schedule.py) against its published definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scenarios.schedule import schedule

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
