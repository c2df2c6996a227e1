"""Host aggregation on the compiled parameter-server engine
(sim/strategies/parameter_server/kernel/hosts.py): a host's broadcasts, devices and reduces
against closed forms, and whole jobs, synchronous and asynchronous, against the event
engine (hosts.py, asynchronous_hosts.py): the same records, step ends and summaries to
1e-9 relative (`test_ps_lockstep.assert_same`; the bundled scenarios' hosts and hosts
behind the evaluation barrier: `test_ps_lockstep.py`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import make_spec
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ps_lockstep import JOBS, assert_same, queue_rule, random_job

from sim.simulation import Simulation
from sim.strategies.parameter_server import lockstep as ps_lockstep
from sim.strategies.parameter_server.kernel.hosts import BDONE, N_SCRATCH, host_step

RATE, LATENCY = 100.0, 0.05


def _host_step(
    arrived: list[float], nbytes: list[float], devices: int, overlap: bool, t0: float = 0.0,
    forward: float = 0.1, backward: float = 0.2, factors: list[float] | None = None,
) -> tuple[float, float, np.ndarray, np.ndarray, np.ndarray]:
    """host_step for host 0 at step 0: (broadcasts' end, last group ready, each
    broadcast's end, each reduce's end, devices' compute end and stall)."""
    groups = len(nbytes)
    compute = np.array([[forward] * groups, [backward] * groups, nbytes])
    jitter = np.zeros((2, devices, 1))
    jitter[0, :, 0] = factors if factors is not None else 1.0
    scratch, reduced, dev = np.zeros((N_SCRATCH, groups)), np.zeros(groups), np.zeros((2, devices))
    pulled, ready = host_step(
        0, t0, 0, devices, overlap, LATENCY, RATE, np.array(arrived), compute, jitter,
        scratch, reduced, dev,
    )  # fmt: skip
    return pulled, ready, scratch[BDONE].copy(), reduced, dev


def test_broadcasts_share_the_chain_as_a_processor_sharing_queue() -> None:
    # k broadcasts that start together end in the order of their bytes, the i-th
    # smallest after (D - 1) latencies and sum_{j<=i} b_j + (k - i) b_i ... at rate / k
    sizes = [300.0, 100.0, 200.0]
    _, _, done, _, _ = _host_step([1.0] * 3, sizes, devices=3, overlap=True)
    start = 1.0 + 2 * LATENCY
    ordered = sorted(sizes)
    expected = {}
    moved, elapsed = 0.0, 0.0
    for i, size in enumerate(ordered):
        left = len(ordered) - i  # in flight while this one finishes
        elapsed += (size - moved) * left / RATE
        moved = size
        expected[size] = start + elapsed
    np.testing.assert_allclose(done, [expected[s] for s in sizes], rtol=1e-12)
    # one alone: its bytes at the hop's rate, whatever came before it has ended
    _, _, done, _, _ = _host_step([0.0, 10.0], [100.0, 100.0], devices=2, overlap=True)
    np.testing.assert_allclose(done, [LATENCY + 1.0, 10.0 + LATENCY + 1.0], rtol=1e-12)


@pytest.mark.parametrize("overlap", [True, False])
def test_devices_then_reduces_one_after_another(overlap: bool) -> None:
    # two groups, both broadcast by t = 1.05 + 2 (1.0 and 2.0 s at rate / 2, then alone);
    # devices at factors 1 and 2; reduces from the last group, each after the one before
    sizes = [100.0, 200.0]
    pulled, ready, done, reduced, dev = _host_step(
        [1.0, 1.0], sizes, devices=2, overlap=overlap, factors=[1.0, 2.0]
    )
    np.testing.assert_allclose(done, [1.05 + 2.0, 1.05 + 3.0], rtol=1e-12)
    assert pulled == pytest.approx(4.05, rel=1e-12)
    slow = 2.0
    if overlap:  # group 0 computes once it is in (3.05), group 1 at 4.05
        forward_end = 4.05 + 0.1 * slow
        stall = 4.05 - 0.1 * slow  # all but group 0's forward
    else:  # every broadcast first
        forward_end = 4.05 + 2 * 0.1 * slow
        stall = 4.05
    compute_end = forward_end + 2 * 0.2 * slow
    assert dev[0, 1] == pytest.approx(compute_end, rel=1e-12)
    assert dev[1, 1] == pytest.approx(stall, rel=1e-12)
    # the last group is ready once the slow device has its gradients
    last_ready = forward_end + 0.2 * slow if overlap else compute_end
    assert ready == pytest.approx(last_ready, rel=1e-12)
    r1 = last_ready + LATENCY + 200.0 / RATE
    r0 = max(r1, compute_end) + LATENCY + 100.0 / RATE
    np.testing.assert_allclose(reduced, [r0, r1], rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(
    budget=st.booleans(),
    # hosts of 2 to 4 devices; no backup workers (they run on the event engine); with
    # jitter, which keeps hosts' updates from tying (the order of those at one instant
    # is left to the engines' last bits, and with it their staleness)
    **{**JOBS, "devices": st.integers(2, 4), "backup": st.just(0), "jitter": st.just(0.1)},
)
def test_random_jobs(budget: bool, **job: Any) -> None:
    with queue_rule(budget):
        assert_same(random_job(**job, local_aggregation=True))


def test_backup_workers_stay_on_the_event_engine() -> None:
    # a late host's reduce may still be in flight while its next step broadcasts
    ps = {"kind": "parameter_server", "servers": 2, "local_aggregation": True}
    cluster = {"cluster.hosts": 3, "cluster.devices_per_host": 2}
    assert Simulation(make_spec(strategy=ps, **cluster)).engine() is ps_lockstep
    late = make_spec(strategy={**ps, "backup_workers": 1}, **cluster)
    assert Simulation(late).engine() is not ps_lockstep
    asynchronous = make_spec(strategy={**ps, "sync": False}, **cluster)
    assert Simulation(asynchronous).engine() is ps_lockstep

