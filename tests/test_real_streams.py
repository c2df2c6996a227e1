"""run-real injects the very stragglers the simulator draws (no TensorFlow needed here)."""

from __future__ import annotations

import pytest
from conftest import make_spec

from real.runner import jobs_for
from real.strategies.base import stragglers_of
from results.streams import device_factor
from sim.simulation import Simulation


@pytest.mark.parametrize("variability", [0.0, 0.2])
def test_real_jitter_and_hiccups_are_the_simulated_ones(variability: float) -> None:
    spec = make_spec(
        **{
            "cluster.hosts": 1,
            "cluster.devices_per_host": 3,
            "training.steps": 40,
            "stragglers.jitter": 0.3,
            "stragglers.variability": variability,
            "stragglers.slow": [{"workers": [2], "factor": 1.5}],
            "stragglers.transient": {"probability": 0.2, "delay": "50 ms"},
        }
    )
    sim = Simulation(spec)
    total = spec.training.warmup_steps + spec.training.steps
    for job in jobs_for(spec):
        w = job.index
        # each device's own factor (`variability`) times the `slow` groups' factors
        device = device_factor(spec.seed, 0, w, variability)
        assert stragglers_of(spec, w)["slow"] == pytest.approx(device * (1.5 if w == 2 else 1))
        # a factor below 1 cannot be made real: it counts as 1
        expected = [max(0.0, sim.compute_factor(w, t) - 1) for t in range(total)]
        assert job.step_slowdowns(total) == pytest.approx(expected, rel=1e-12)
        assert job.hiccups == [sim.compute_delay(w, t) for t in range(total)]
    if not variability:
        assert stragglers_of(spec, 2)["slow"] == 1.5 and stragglers_of(spec, 0)["slow"] == 1.0


@pytest.mark.parametrize(
    ("strategy", "failures", "stops"),
    [
        ({"kind": "allreduce"}, [{"role": "worker", "index": 1, "at_step": 2}], True),
        ({"kind": "parameter_server"}, [{"role": "worker", "index": 1, "at_step": 2}], False),
        ({"kind": "parameter_server"}, [{"role": "ps", "index": 0, "at_step": 2}], True),
        ({"kind": "parameter_server"}, [{"role": "chief", "at_step": 2}], True),
        ({"kind": "parameter_server"}, [{"random": {"mtbf_per_host": "1 h"}}], True),
        ({"kind": "allreduce"}, [], False),
        (
            {"kind": "parameter_server"},
            [
                {"role": "worker", "index": 1, "at_step": 2},
                {"role": "ps", "index": 0, "at_step": 3},
            ],
            True,
        ),
    ],
)
def test_which_failures_have_a_relaunch_to_calibrate(
    strategy: dict[str, object], failures: list[dict[str, object]], stops: bool
) -> None:
    # the contract: a parameter-server worker rejoins alone (nothing is relaunched); any
    # failure under all-reduce, a server's, the chief's, and random ones stop the job
    from real.calibrate.measure import _stopping_failure

    spec = make_spec(
        **{
            "cluster.hosts": 1,
            "cluster.devices_per_host": 2,
            "strategy": strategy,
            "failures": failures,
        }
    )
    failure = _stopping_failure(spec)
    assert (failure is not None) is stops
    if failure is not None and strategy["kind"] == "parameter_server":
        assert failure.role != "worker"  # the one relaunched is never a rejoining worker
