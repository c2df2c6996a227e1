"""Asynchronous parameter servers with host aggregation
(sim/strategies/parameter_server/asynchronous_hosts.py, MXNet's dist_async on multi-device
machines): each host's devices sum their gradients and push once, and every host push is one
update of the host's devices' batches."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_spec

from sim.engine.metrics import summarize
from sim.simulation import Simulation
from workloads.schedule import schedule_of

HOSTS, DEVICES, BATCH = 4, 4, 10


def spec(local_aggregation: bool, **sets: object):  # type: ignore[no-untyped-def]
    return make_spec(
        **{
            "cluster.hosts": HOSTS,
            "cluster.devices_per_host": DEVICES,
            "strategy": {
                "kind": "parameter_server",
                "servers": 1,
                "sync": False,
                "local_aggregation": local_aggregation,
            },
            "training.steps": 40,
            "training.warmup_steps": 4,
            **sets,
        }
    )


def test_an_update_is_a_host_push_of_its_devices_batches() -> None:
    point = spec(True)
    assert point.samples_per_step == DEVICES * BATCH
    outcome = Simulation(point).run()
    row = summarize(point, outcome)
    assert row["samples_trained"] == 40 * DEVICES * BATCH
    assert np.isfinite(outcome.step_ends).all() and len(outcome.step_ends) == 44
    # every device of a host records each of the host's iterations, with one staleness
    records = outcome.records
    worker, step = records.column("worker"), records.column("step")
    staleness = records.column("staleness")
    for host in range(HOSTS):
        mine = (worker // DEVICES) == host
        by_device = [set(step[mine & (worker == host * DEVICES + d)]) for d in range(DEVICES)]
        assert all(s == by_device[0] for s in by_device)
        for s in by_device[0]:
            assert len(set(staleness[mine & (step == s)])) == 1
    # with the others pushing in between, a host's push is up to HOSTS - 1 updates stale
    assert 0 < records.column("staleness").max() <= 2 * (HOSTS - 1)


def test_compute_bound_throughput_is_every_device_busy() -> None:
    # a network and host links too fast to matter: each host applies one update of
    # DEVICES x BATCH samples per step of compute, so HOSTS x DEVICES x BATCH / step
    point = spec(
        True,
        **{
            "model.flops_per_sample": "100 GFLOP",
            "cluster.network": {"bandwidth": "100 Tbit/s", "latency": "1 ns"},
            "cluster.host_link": {"bandwidth": "100 TB/s", "latency": "1 ns"},
        },
    )
    sim = Simulation(point)
    step_s = sim.compute.step_s
    row = summarize(point, sim.run())
    expected = HOSTS * DEVICES * BATCH / step_s
    assert row["throughput_samples_per_s"] == pytest.approx(expected, rel=0.01)


def test_at_the_servers_nic_a_push_carries_a_hosts_batches() -> None:
    # one server's 10 Gbit/s NIC carries every pull and push of the 100 MB model. The
    # hosts, alike and sharing it fairly, move in step: all pull (H M / C), then all
    # push (H M / C), so H updates take 2 H M / C, and each carries DEVICES x BATCH
    # samples: C / (2 M) x DEVICES x BATCH. Apart, each push carries one device's batch.
    apart, together = (summarize(s, Simulation(s).run()) for s in (spec(False), spec(True)))
    nic, model = 10e9 / 8, 25e6 * 4
    expected = nic / (2 * model) * DEVICES * BATCH
    assert together["throughput_samples_per_s"] == pytest.approx(expected, rel=0.02)
    assert together["throughput_samples_per_s"] > 3 * apart["throughput_samples_per_s"]


def test_the_rate_scales_with_the_hosts_batch() -> None:
    point = spec(
        True, **{"training.learning_rate": {"base": 0.1, "base_batch": 10, "scaling": "linear"}}
    )
    assert schedule_of(point).peak == pytest.approx(0.1 * DEVICES)


def test_fewer_updates_than_hosts_are_refused() -> None:
    from scenarios.errors import ScenarioError

    with pytest.raises(ScenarioError, match="3 updates measure less than one iteration"):
        spec(True, **{"training.steps": 3})
    spec(True, **{"training.steps": HOSTS})  # one per host is enough


def test_a_slow_host_runs_at_its_own_pace() -> None:
    # host 1's devices 3 times slower, compute-bound: each host applies an update per
    # step of its own compute, host 0 three for each of host 1's; a host's counters are
    # its own, so the fast host finishing an iteration never disturbs the slow one's
    point = spec(
        True,
        **{
            "cluster.hosts": 2,
            "model.flops_per_sample": "100 GFLOP",
            "cluster.network": {"bandwidth": "100 Tbit/s", "latency": "1 ns"},
            "cluster.host_link": {"bandwidth": "100 TB/s", "latency": "1 ns"},
            "stragglers": {"slow": [{"workers": [4, 5, 6, 7], "factor": 3}]},
        },
    )
    sim = Simulation(point)
    step_s = sim.compute.step_s
    outcome = sim.run()
    assert np.isfinite(outcome.step_ends).all()
    row = summarize(point, outcome)
    expected = DEVICES * BATCH * (1 / step_s + 1 / (3 * step_s))
    assert row["throughput_samples_per_s"] == pytest.approx(expected, rel=0.05)
