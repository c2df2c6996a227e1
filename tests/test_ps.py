"""Parameter servers (sim/strategies/parameter_server/training.py): TensorFlow's dataflow
(pushes during backward, pulls gating forward), the host CPU's port, and steps that account
for every pull; against closed forms."""

from __future__ import annotations

import numpy as np
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
    done = simulate_point(Point("p", 0, {}, s), steps="all")
    return done.row, done.steps


def simulate_curve(s):  # type: ignore[no-untyped-def]
    done = simulate_point(Point("p", 0, {}, s), steps="all")
    return done.steps, done.curves


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


CONVERGENCE = {"metric": "loss", "initial": 2.3, "final": 0.1, "scale_samples": 1e3}


def evaluated(workers: int, target: bool, **more: object):  # type: ignore[no-untyped-def]
    """Asynchronous updates of one worker's batch, 7 of them, each worker's closure the
    same length; with a target, an evaluation of 10 held-out samples every 3 updates."""
    sets: dict[str, object] = {
        "model": {
            "name": "two",
            "layers": LAYERS,
            "convergence": {**CONVERGENCE, "noise_scale": 10, "lr_max": 1.0},
        },
        "cluster.devices_per_host": workers,
        "strategy": {
            "kind": "parameter_server",
            "servers": 1,
            "sync": False,
            "fusion_buffer": "1 B",
        },
        "training.steps": 7,
        "training.evaluation": {"every_steps": 3, "samples": 10},
    }
    if target:
        sets["training.target"] = {"metric": "loss", "value": 0.01}
    steps, curve = simulate_curve(spec(**sets, **more))
    return curve, np.sort(steps.end_s.to_numpy())[:7]  # a closure past the last counts none


@pytest.mark.parametrize("workers", [1, 2])
def test_asynchronous_evaluations_wait_behind_a_barrier(workers: int) -> None:
    # run-real's coordinator schedules the closures up to the next evaluation, waits for
    # them all, then evaluates (e: 10 samples through the forward, 10 (F1 + F2)). One
    # worker: update k (from 0) waits for the floor(k / 3) evaluations before it. Two,
    # each closure T long: updates 1-2 end at T, 3 at 2T while the other worker idles,
    # then the evaluation; 4-5 at 3T + e, 6 at 4T + e, 7 at 5T + 2e
    e = 10 * (F1 + F2)
    _, plain = evaluated(workers, target=False)
    curve, ends = evaluated(workers, target=True)
    if workers == 1:
        waits = np.arange(7) // 3
        assert ends == pytest.approx(plain + waits * e, rel=1e-9)
    else:
        t = plain[0]
        assert plain == pytest.approx(t * np.array([1, 1, 2, 2, 3, 3, 4]), rel=1e-9)
        expected = t * np.array([1, 1, 2, 3, 3, 4, 5]) + e * np.array([0, 0, 0, 1, 1, 1, 2])
        assert ends == pytest.approx(expected, rel=1e-9)
    # the curve charges each evaluation once: the engine already held the job for the
    # ones before it
    assert curve is not None
    assert curve["step"].tolist() == [3, 6, 7]
    assert curve["time_s"].to_numpy() == pytest.approx(ends[[2, 5, 6]] + e, rel=1e-9)
    # where sim.timed_steps cuts the run, the engine times the first updates without a
    # barrier, and the curve charges every evaluation on top of them
    curve, cut = evaluated(workers, target=True, **{"sim.timed_steps": 5})
    assert cut[:5] == pytest.approx(plain[:5], rel=1e-9)
    assert curve["time_s"].iloc[0] == pytest.approx(plain[2] + e, rel=1e-9)
