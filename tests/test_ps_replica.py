"""The replica (sim/strategies/parameter_server/replica.py): 1 / k of an asynchronous job
with the links its hosts share at 1 / k, put down k times. Where every worker draws the
same compute times the job is exactly k copies of its replica (max-min fairness
splits a shared link's capacity evenly over identical flows), so both engines must give
the same updates and step times; elsewhere the replica is taken only by the class its
error was measured on (docs/performance.md)."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import make_spec

from scenarios.spec import ScenarioSpec
from sim.engine.metrics import summarize
from sim.simulation import Simulation
from sim.strategies.parameter_server import replica

PS = {"kind": "parameter_server", "servers": 3, "sync": False, "partition": "greedy"}


def job(**sets: Any) -> ScenarioSpec:
    fields: dict[str, Any] = {
        "model": "resnet50",
        "cluster.hosts": 16,
        "cluster.devices_per_host": 2,
        "strategy": PS,
        "training.steps": 200,
        "training.warmup_steps": 8,
        **sets,
    }
    return make_spec(**fields)


def exact(spec: ScenarioSpec) -> ScenarioSpec:
    return spec.model_copy(update={"sim": spec.sim.model_copy(update={"timing": "exact"})})


@pytest.fixture
def small_replicas() -> Any:
    """Replicas of 8 workers or more (the engine keeps 256: these jobs stay cheap)."""
    with mock.patch.object(replica, "REPLICA_WORKERS", 8):
        yield


@pytest.mark.usefixtures("small_replicas")
@pytest.mark.parametrize(
    "sets",
    [
        {},
        {"cluster.network.stream_bandwidth": "2 Gbit/s", "strategy": {**PS, "overlap": False}},
        {"training.warmup_steps": 5, "training.steps": 203},  # not a multiple of the copies
        {"strategy": {**PS, "sync": True}, "training.steps": 10},
        {"strategy": {**PS, "sync": True, "overlap": False}, "training.steps": 10},
    ],
)
def test_a_job_of_identical_workers_is_its_replica_k_times(sets: dict[str, Any]) -> None:
    spec = job(**sets)
    copied, timed = Simulation(spec).run(), Simulation(exact(spec)).run()
    assert (copied.engine, timed.engine) == (replica.NAME, "ps-lockstep")
    np.testing.assert_allclose(copied.step_ends, timed.step_ends, rtol=1e-12)
    assert len(copied.records) == len(timed.records)
    for name in ("start", "compute_end", "comm_end", "end", "comm_s"):
        np.testing.assert_allclose(
            np.sort(copied.records.column(name)), np.sort(timed.records.column(name)),
            rtol=1e-12, atol=1e-15,
        )  # fmt: skip
    # each worker's iterations are its own, one after the other
    for column in (copied.records.column("worker"), timed.records.column("worker")):
        assert sorted(set(column)) == list(range(spec.workers))
    fast, slow = summarize(spec, copied), summarize(spec, timed)
    for key in ("throughput_samples_per_s", "step_time_mean_s", "step_time_p99_s"):
        assert fast[key] == pytest.approx(slow[key], rel=1e-12), key
    # bytes count as flows start: at the run's two ends, the copies' next pulls started
    # at the instant the measurement starts or stops count k at a time
    per_update = slow["bytes_on_network"] / spec.training.steps
    k = replica.factor(Simulation(spec))
    assert abs(fast["bytes_on_network"] - slow["bytes_on_network"]) <= 2 * k * per_update


@pytest.mark.usefixtures("small_replicas")
def test_the_copies_of_a_replica_record() -> None:
    spec = job(stragglers={"jitter": 0.1})
    k = replica.factor(Simulation(spec))
    assert k == 4  # 16 hosts of 2: the largest divisor leaving 8 workers
    small = replica.replica(Simulation(spec), k)
    assert (small.workers, small.total_steps) == (8, -(-208 // 4))
    outcome = Simulation(spec).run()
    ends = outcome.step_ends
    assert len(ends) == 208 and np.all(np.diff(ends) >= 0)
    # every update time k times over, the replica's
    assert np.all(ends.reshape(-1, k) == ends[::k, None])
    workers = outcome.records.column("worker")
    staleness = outcome.records.column("staleness")
    first = outcome.records.column("start")
    # worker w's copies are w + 8, w + 16, w + 24, at the same instants, staleness x k
    for copy in range(1, k):
        twin = (workers % 8 == workers[0] % 8) & (workers // 8 == copy)
        assert np.array_equal(first[twin], first[(workers == workers[0] % 8)][: twin.sum()])
    assert np.all(staleness % k == 0)


def test_shared_links_are_those_several_hosts_cross() -> None:
    spec = job(**{"cluster.network.oversubscription": 2.0, "cluster.devices_per_host": 3})
    sim = Simulation(spec)
    topology = sim.topology
    servers = range(topology.workers + topology.hosts, topology.n_nodes)
    hosts_on: dict[int, set[int]] = {}
    for w in range(topology.workers):
        for s in servers:
            for link in (*topology.route(w, s).links, *topology.route(s, w).links):
                hosts_on.setdefault(link, set()).add(int(topology.host_of[w]))
    shared = {link for link, hosts in hosts_on.items() if len(hosts) > 1}
    assert set(topology.shared_by_hosts().tolist()) == shared


@pytest.mark.parametrize(
    "sets",
    [
        {"sim.timing": "exact"},
        {"strategy": {**PS, "sync": True, "backup_workers": 1}},
        {
            "strategy": {**PS, "sync": True},
            "stragglers": {"transient": {"probability": 0.1, "delay": "1 ms"}},
        },
        {"strategy": {**PS, "staleness": 2}},
        {"strategy": {**PS, "placement": "colocated"}},
        {"stragglers": {"slow": [{"workers": [3], "factor": 1.5}]}},
        {"checkpoint": {"every_steps": 50}},
        {"failures": [{"role": "worker", "at_step": 20, "downtime": "1 s"}]},
        {"training.target": {"metric": "accuracy", "value": 0.9}},
        {"cluster.network.oversubscription": 2.0},
        {"cluster.hosts": 3},  # no divisor keeps 8 workers
    ],
)
@pytest.mark.usefixtures("small_replicas")
def test_only_where_its_error_was_measured(sets: dict[str, Any]) -> None:
    assert replica.factor(Simulation(job())) > 1
    assert replica.factor(Simulation(job(**sets))) == 1


def test_the_most_copies_that_keep_enough_workers() -> None:
    def copies(hosts: int, devices: int) -> int:
        fields = {"cluster.hosts": hosts, "cluster.devices_per_host": devices}
        return replica.factor(Simulation(job(**fields, **{"training.steps": 2048})))

    # 256 workers at least: 96 hosts of 8 is 3 copies of 32 hosts (4 would leave 192)
    assert copies(96, 8) == 3
    assert copies(1024, 1) == 4
    assert copies(511, 1) == 1  # 7 x 73: no divisor leaves 256


@pytest.mark.parametrize("n", [8, 64, 256, 1024])
@pytest.mark.parametrize("sigma", [0.05, 0.2])
def test_the_slowest_of_n_as_sampled(n: int, sigma: float) -> None:
    draws = np.exp(sigma * np.random.default_rng(n).standard_normal((4000, n)))
    assert replica.slowest(n, sigma) == pytest.approx(draws.max(axis=1).mean(), rel=0.01)


@pytest.mark.usefixtures("small_replicas")
def test_a_synchronous_replica_only_where_its_slowest_worker_stays_as_slow() -> None:
    sync = {"strategy": {**PS, "sync": True}, "training.steps": 10}
    # the round waits for the slowest compute: of 32 workers, or of the replica's 8
    fast = {"cluster.network.bandwidth": "400 Gbit/s"}
    slow = {"cluster.network.bandwidth": "1 Gbit/s"}
    computes = job(**sync, **fast, stragglers={"jitter": 0.2})
    assert Simulation(computes).run().engine == "ps-lockstep"
    moves = job(**sync, **slow, stragglers={"jitter": 0.01})
    assert Simulation(moves).run().engine == replica.NAME
