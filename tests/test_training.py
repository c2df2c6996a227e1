"""Whole training steps against closed forms, and invariants of the simulator."""

from __future__ import annotations

import pytest
from conftest import make_spec

from sim import baseline
from sim.baseline import baseline_throughput
from sim.costs.compute import ComputeModel
from sim.engine.metrics import summarize
from sim.runner import simulate_point
from sim.simulation import Simulation

B = 10e9 / 8  # 10 Gbit/s
ALPHA = 10e-6
S = 25e6 * 4  # 25 M float32 parameters
COMPUTE = 10 * 3e9 / 10e12  # batch 10 x (1 + 2) GFLOP / 10 TFLOP/s
# NCCL's launch of a ring all-reduce on a GPU (baseLat, ring, Simple protocol, in NCCL's
# src/graph/tuning.cc): every collective of a GPU job pays it once
NCCL_LAUNCH = 8.4e-6


def step_time(spec) -> float:  # type: ignore[no-untyped-def]
    return summarize(spec, Simulation(spec).run())["step_time_mean_s"]


def rel(a: float, b: float) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_sync_ring_step_is_compute_plus_ring(model: str, n: int) -> None:
    spec = make_spec(**{"cluster.hosts": n, "sim.network_model": model})
    ring = 2 * (n - 1) * (ALPHA + S / (n * B)) + (NCCL_LAUNCH if n > 1 else 0.0)
    assert rel(step_time(spec), COMPUTE + ring) < 1e-6


@pytest.mark.parametrize("n,k", [(4, 1), (4, 2), (4, 4), (8, 2), (2, 4), (3, 5)])
def test_ps_dedicated_sliced_push_pull(n: int, k: int) -> None:
    # each of push and pull takes max(S/B, N S/(k B)) + alpha
    spec = make_spec(
        **{
            "cluster.hosts": n,
            "strategy": {"kind": "parameter_server", "servers": k, "partition": "sliced"},
        }
    )
    one_way = max(S / B, n * S / (k * B)) + ALPHA
    assert rel(step_time(spec), COMPUTE + 2 * one_way) < 1e-6


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ps_colocated_bandwidth_term_equals_ring(n: int) -> None:
    # BytePS (OSDI 2020): colocated servers with k = N move 2 (N-1) S / (N B), as the ring
    spec = make_spec(
        **{
            "cluster.hosts": n,
            "strategy": {
                "kind": "parameter_server",
                "servers": n,
                "partition": "sliced",
                "placement": "colocated",
            },
        }
    )
    bandwidth_term = 2 * (n - 1) * S / (n * B)
    assert rel(step_time(spec), COMPUTE + bandwidth_term + 2 * ALPHA) < 1e-6


def test_round_robin_imbalance_is_slower_than_sliced() -> None:
    layers = [
        {"name": f"l{i}", "params": p, "flops": "0.1 GFLOP"}
        for i, p in enumerate([20e6, 1e6, 1e6, 1e6])
    ]
    common = {"cluster.hosts": 4, "model": {"name": "skewed", "layers": layers}}
    times = {
        how: step_time(
            make_spec(
                **common, strategy={"kind": "parameter_server", "servers": 4, "partition": how}
            )
        )
        for how in ("round_robin", "greedy", "sliced")
    }
    assert times["sliced"] < times["greedy"] <= times["round_robin"]


def test_local_aggregation_pushes_once_per_host() -> None:
    base = {"cluster.hosts": 2, "cluster.devices_per_host": 4}
    plain = make_spec(**base, strategy={"kind": "parameter_server", "servers": 2})
    local = make_spec(
        **base, strategy={"kind": "parameter_server", "servers": 2, "local_aggregation": True}
    )
    bytes_plain = Simulation(plain).run().bytes_on_network
    bytes_local = Simulation(local).run().bytes_on_network
    assert bytes_plain == pytest.approx(4 * bytes_local)
    assert step_time(local) < step_time(plain)


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical", "tree", "halving_doubling"])
@pytest.mark.parametrize("hosts,devices", [(2, 4), (4, 2), (8, 1)])
def test_overlap_never_slower(algorithm: str, hosts: int, devices: int) -> None:
    layers = [{"name": f"l{i}", "params": 2e6, "flops": "0.2 GFLOP"} for i in range(12)]
    common = {
        "cluster.hosts": hosts,
        "cluster.devices_per_host": devices,
        "model": {"name": "layered", "layers": layers},
        "strategy.algorithm": algorithm,
        "strategy.fusion_buffer": "8 MB",
        "stragglers.jitter": 0.1,
    }
    with_overlap = step_time(make_spec(**common, **{"strategy.overlap": True}))
    without = step_time(make_spec(**common, **{"strategy.overlap": False}))
    assert with_overlap <= without * (1 + 1e-9)


@pytest.mark.parametrize(
    "strategy",
    [
        {"kind": "allreduce", "algorithm": "ring"},
        {"kind": "allreduce", "algorithm": "tree"},
        {"kind": "parameter_server", "servers": 2},
        {"kind": "parameter_server", "servers": 2, "placement": "colocated"},
    ],
)
@pytest.mark.parametrize("jitter", [0.0, 0.3])
def test_scaling_efficiency_at_most_one(strategy: dict, jitter: float) -> None:
    from scenarios.loader import Point

    for hosts in (1, 2, 4):
        spec = make_spec(
            **{
                "cluster.hosts": hosts,
                "cluster.devices_per_host": 2,
                "strategy": strategy,
                "stragglers.jitter": jitter,
            }
        )
        row = simulate_point(Point("p", 0, {}, spec)).row
        assert 0 < row["scaling_efficiency"] <= 1 + 1e-12
        assert row["compute_time_frac"] + row["comm_time_frac"] <= 1 + 1e-9
        if jitter == 0 and spec.strategy.all_reduces:
            assert row["wait_time_frac"] == pytest.approx(0.0, abs=1e-9)  # nobody to wait for
        if jitter > 0 and hosts > 1:
            assert row["wait_time_frac"] > 0  # the fast wait for the slowest


def test_one_worker_baseline_is_pure_compute() -> None:
    spec = make_spec(**{"cluster.hosts": 8})
    assert baseline_throughput(spec) == pytest.approx(10 / COMPUTE)


def test_a_long_runs_baseline_times_its_first_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    # one worker's steps share nothing: their mean over the first 400 steps is the mean
    # over all 20,000 within the jitter's standard error (0.2 / sqrt(400) = 1%)
    spec = make_spec(**{"stragglers.jitter": 0.2, "training.steps": 20_000})
    every = baseline_throughput(spec)
    assert every == pytest.approx(10 / COMPUTE, rel=0.005)  # 0.14% standard error
    monkeypatch.setattr(baseline, "BASELINE_STEPS", 400)
    monkeypatch.setattr(baseline, "_BASELINES", {})
    first = baseline_throughput(spec)
    assert first != every and first == pytest.approx(every, rel=0.03)


def test_same_seed_same_results_other_seed_differs() -> None:
    spec = make_spec(**{"stragglers.jitter": 0.2, "cluster.hosts": 4})
    a = Simulation(spec).run().records
    b = Simulation(spec).run().records
    c = Simulation(make_spec(**{"stragglers.jitter": 0.2, "cluster.hosts": 4, "seed": 2})).run()
    assert a == b
    assert a != c.records


def test_jitter_stream_of_a_worker_does_not_depend_on_worker_count() -> None:
    small = Simulation(make_spec(**{"stragglers.jitter": 0.2, "cluster.hosts": 2}))
    large = Simulation(make_spec(**{"stragglers.jitter": 0.2, "cluster.hosts": 8}))
    draws = [[s.compute_factor(w, t) for w in range(2) for t in range(300)] for s in (small, large)]
    assert draws[0] == draws[1]
    assert sum(draws[0]) / len(draws[0]) == pytest.approx(1.0, abs=0.05)


def test_buckets_follow_fusion_buffer() -> None:
    layers = [{"name": f"l{i}", "params": 1e6, "flops": "0.1 GFLOP"} for i in range(10)]
    spec = make_spec(model={"name": "m", "layers": layers})
    compute = ComputeModel(spec)
    per_tensor = compute.buckets(0, overlap=True)
    assert [b.last_layer for b in per_tensor] == [f"l{i}" for i in reversed(range(10))]
    fused = compute.buckets(8e6, overlap=True)  # 4 MB a layer: two layers a bucket
    assert [b.nbytes for b in fused] == [8e6] * 5
    assert [b.first_layer for b in fused] == ["l9", "l7", "l5", "l3", "l1"]
    # ready times grow and the last one is the end of backward
    ready = [b.ready_s for b in fused]
    assert ready == sorted(ready) and ready[-1] == pytest.approx(compute.step_s)
    assert all(b.ready_s == compute.step_s for b in compute.buckets(8e6, overlap=False))


def test_measured_samples_per_s_sets_compute() -> None:
    spec = make_spec(**{"cluster.device": {"samples_per_s": {"toy": 500}}, "cluster.hosts": 1})
    assert ComputeModel(spec).step_s == pytest.approx(10 / 500)
