"""Parameter servers (sim/ps.py): TensorFlow's dataflow (pushes during backward, pulls
gating forward), the host CPU's port, and steps that account for every pull; against
closed forms."""

from __future__ import annotations

import pytest
from conftest import make_spec

from scenarios.loader import Point
from sim.runner import simulate_point

B = 100e9  # bytes/s of every link here
# two layers: the input one small and slow to compute, the output one large and quick
LAYERS = [
    {"name": "first", "params": 25e6, "flops": "40 GFLOP"},  # 100 MB: 1 ms, 4 ms of forward
    {"name": "second", "params": 50e6, "flops": "10 GFLOP"},  # 200 MB: 2 ms, 1 ms of forward
]
F1, F2 = 40e9 / 10e12, 10e9 / 10e12  # forward of a batch of one at 10 TFLOP/s
K1, K2 = 2 * F1, 2 * F2  # backward = 2 x forward
P1, P2 = 100e6 / B, 200e6 / B  # each layer's variables over one link


def spec(**sets: object):  # type: ignore[no-untyped-def]
    return make_spec(
        **{
            "model": {"name": "two", "layers": LAYERS},
            "cluster.hosts": 1,
            "cluster.devices_per_host": 1,
            "cluster.host_link": {"bandwidth": "100 GB/s", "latency": "0 us"},
            "cluster.cpu_link": {"bandwidth": "100 GB/s", "latency": "0 us"},
            "cluster.network": {"bandwidth": "100 GB/s", "latency": "0 us"},
            "training.batch_per_worker": 1,
            "training.warmup_steps": 0,
            "sim.network_model": "analytical",
            "strategy": {"kind": "parameter_server", "servers": 1, "fusion_buffer": "1 B"},
            **sets,
        }
    )


def simulate(s):  # type: ignore[no-untyped-def]
    done = simulate_point(Point("p", 0, {}, s))
    return done.row, done.steps


def test_pushes_during_backward_and_pulls_gating_forward() -> None:
    # one worker, one server, each layer its own group, transfers in order (no contention):
    # pull first (P1), its forward (F1) while the second's pull (P2 < F1) goes on, the
    # second's forward, its backward, its push (P2) during the first's backward (K1 > P2),
    # then the first's push (P1); the next step's pulls start after the update
    assert P2 < F1 and P2 < K1
    row, steps = simulate(spec())
    step = P1 + F1 + F2 + K2 + K1 + P1
    assert row["step_time_mean_s"] == pytest.approx(step, rel=1e-9)
    assert (steps.end_s - steps.start_s).to_numpy() == pytest.approx(step, rel=1e-9)
    # without overlap: everything pulled, then computed, then pushed
    row, _ = simulate(spec(**{"strategy.overlap": False}))
    serial = (P1 + P2) + (F1 + F2 + K1 + K2) + (P1 + P2)
    assert row["step_time_mean_s"] == pytest.approx(serial, rel=1e-9)


def test_every_step_pays_its_pull_even_without_warmup() -> None:
    # the first step's pull counts: the mean equals every step's own length, none shorter
    row, steps = simulate(spec(**{"strategy.overlap": False, "training.steps": 4}))
    lengths = (steps.end_s - steps.start_s).to_numpy()
    assert lengths == pytest.approx(row["step_time_mean_s"], rel=1e-9)
    assert row["training_time_s"] == pytest.approx(lengths.sum(), rel=1e-9)


def test_servers_on_the_host_cpu_share_its_one_port() -> None:
    # 4 devices, one colocated server on the host's CPU behind a 0.5 GB/s port; the devices'
    # fabric is 10 GB/s. Each step every worker pulls and pushes the whole 300 MB: 4 x 300
    # MB through the CPU port each way, at 0.5 GB/s, far slower than the fabric and compute
    s = spec(
        **{
            "cluster.devices_per_host": 4,
            "cluster.host_link": {"bandwidth": "10 GB/s", "latency": "0 us"},
            "cluster.cpu_link": {"bandwidth": "0.5 GB/s", "latency": "0 us"},
            "sim.network_model": "flow",
            "strategy": {
                "kind": "parameter_server",
                "servers": 1,
                "placement": "colocated",
                "overlap": False,
            },
        }
    )
    row, _ = simulate(s)
    compute = F1 + F2 + K1 + K2
    assert row["step_time_mean_s"] == pytest.approx(2 * 4 * 300e6 / 0.5e9 + compute, rel=1e-9)
