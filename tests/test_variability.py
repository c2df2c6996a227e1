"""Each device's own speed (`stragglers.variability`): one lognormal factor per device,
mean 1 and the given coefficient of variation, drawn once per run from its own seeded
stream and taken by its compute at every step (`run-real` injects the same factors:
tests/test_real_streams.py)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_spec
from test_training import COMPUTE

from results.streams import device_factor
from sim.engine.metrics import summarize
from sim.engine.stragglers import Stragglers
from sim.simulation import Simulation


def test_a_factor_per_device_for_the_whole_run() -> None:
    spec = make_spec(**{"cluster.hosts": 64, "stragglers.variability": 0.1})
    factors = Stragglers(spec).factors(64, 30)
    assert np.all(factors == factors[:, :1])  # every step alike
    assert len(np.unique(factors[:, 0])) == 64  # each device its own
    # with jitter too: the jitter's draws times the device's factor, neither changed
    both = make_spec(
        **{"cluster.hosts": 64, "stragglers.variability": 0.1, "stragglers.jitter": 0.2}
    )
    jitter = make_spec(**{"cluster.hosts": 64, "stragglers.jitter": 0.2})
    np.testing.assert_allclose(
        Stragglers(both).factors(64, 30),
        Stragglers(jitter).factors(64, 30) * factors[:, :1],
        rtol=1e-15,
    )


def test_mean_one_and_the_coefficient_of_variation_asked() -> None:
    # lognormal: E[X] = 1, sd(X) = cv; 40,000 devices put both within a few 0.1%
    draws = np.array([device_factor(5, 0, w, 0.08) for w in range(40_000)])
    assert draws.mean() == pytest.approx(1.0, abs=0.002)
    assert draws.std() == pytest.approx(0.08, rel=0.02)
    # a device draws the same whatever the job's size, another replication anew
    assert device_factor(5, 0, 7, 0.08) == draws[7]
    assert device_factor(5, 1, 7, 0.08) != draws[7]


def test_a_synchronous_step_waits_for_the_slowest_device() -> None:
    # compute, then one all-reduce once every worker is done: the step grows by the
    # compute x (the largest factor - 1), the all-reduce unchanged
    sets = {"cluster.hosts": 8, "strategy.overlap": False}
    spec = make_spec(**sets, **{"stragglers.variability": 0.1})
    step = summarize(spec, Simulation(spec).run())["step_time_mean_s"]
    plain = make_spec(**sets)
    base = summarize(plain, Simulation(plain).run())["step_time_mean_s"]
    slowest = max(device_factor(spec.seed, 0, w, 0.1) for w in range(8))
    assert step - base == pytest.approx(COMPUTE * (slowest - 1), rel=1e-9)

