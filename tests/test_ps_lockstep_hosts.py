"""Host aggregation on the compiled parameter-server engine
(sim/strategies/parameter_server/kernel/hosts.py): a host's broadcasts, devices and reduces
against closed forms, and whole jobs, synchronous and asynchronous, against the event
engine (hosts.py, asynchronous_hosts.py): the same records, step ends and summaries to
1e-9 relative."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ROOT, make_spec
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ps_lockstep import RTOL, queue_rule

from scenarios import load
from scenarios.spec import ScenarioSpec
from sim.engine.convergence import held_by_engine
from sim.engine.metrics import summarize
from sim.engine.outcome import StepRecord
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
        0, t0, 0, devices, overlap, LATENCY, RATE, np.array(arrived), np.array(nbytes, float),
        compute, jitter, scratch, reduced, dev,
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


def assert_same_records(spec: ScenarioSpec) -> None:
    """The compiled engine equals the event engine: step ends, summaries, and every
    device's records (sorted by step and worker: the engines write a step's records in
    the order its devices finish, which ties at one instant leave to their last bits)."""
    compiled, events = Simulation(spec), Simulation(spec, lockstep=False)
    assert compiled.engine() is ps_lockstep
    fast, exact = compiled.run(), events.run()
    np.testing.assert_allclose(fast.step_ends, exact.step_ends, rtol=RTOL, atol=1e-15)
    a, b = summarize(spec, fast), summarize(spec, exact)
    assert a.keys() == b.keys()
    for key, value in b.items():
        assert a[key] == pytest.approx(value, rel=RTOL, abs=1e-12), key
    for name in ("checkpoints", "measure_start"):
        assert getattr(fast, name) == pytest.approx(getattr(exact, name), rel=RTOL), name
    assert len(fast.records) == len(exact.records)

    def order(records: Any) -> np.ndarray:
        return np.lexsort((records.column("worker"), records.column("step")))

    mine, theirs = order(fast.records), order(exact.records)
    for name in StepRecord._fields:
        np.testing.assert_allclose(
            np.asarray(fast.records.column(name))[mine],
            np.asarray(exact.records.column(name))[theirs],
            rtol=RTOL,
            atol=1e-15,
            err_msg=name,
        )


@settings(max_examples=30, deadline=None)
@given(
    hosts=st.integers(1, 4),
    devices=st.integers(2, 4),
    servers=st.integers(1, 3),
    placement=st.sampled_from(["dedicated", "colocated"]),
    partition=st.sampled_from(["round_robin", "greedy", "mxnet"]),
    fusion=st.sampled_from([None, "4 MB", "1 GiB"]),
    overlap=st.booleans(),
    hiccups=st.booleans(),
    every=st.sampled_from([None, 2]),
    warmup=st.integers(0, 2),
    network=st.sampled_from(["10 Gbit/s", "100 Gbit/s"]),
    stream=st.sampled_from([None, "2 Gbit/s"]),
    sync=st.booleans(),
    ssp=st.sampled_from([None, 0, 1]),
    budget=st.booleans(),
)
def test_random_jobs(
    hosts: int,
    devices: int,
    servers: int,
    placement: str,
    partition: str,
    fusion: str | None,
    overlap: bool,
    hiccups: bool,
    every: int | None,
    warmup: int,
    network: str,
    stream: str | None,
    sync: bool,
    ssp: int | None,
    budget: bool,
) -> None:
    stragglers: dict[str, Any] = {"jitter": 0.1}
    if hiccups:
        stragglers["transient"] = {"probability": 0.3, "delay": "5 ms"}
    strategy: dict[str, Any] = {
        "kind": "parameter_server",
        "servers": servers,
        "placement": placement,
        "partition": partition,
        "overlap": overlap,
        "sync": sync,
        "local_aggregation": True,
    }
    if not sync and ssp is not None:
        strategy["staleness"] = ssp
    if fusion is not None:
        strategy["fusion_buffer"] = fusion
    spec = make_spec(
        **{
            "model": "resnet50",
            "cluster.hosts": hosts,
            "cluster.devices_per_host": devices,
            "cluster.network.bandwidth": network,
            "cluster.network.stream_bandwidth": stream,
            "strategy": strategy,
            "stragglers": stragglers,
            "checkpoint": {"every_steps": every} if every else {},
            # asynchronous: updates, a few per host
            "training.steps": 3 if sync else 3 * hosts,
            "training.warmup_steps": warmup if sync else warmup * hosts,
        }
    )
    with queue_rule(budget):
        assert_same_records(spec)


def test_bundled_scenario() -> None:
    ran = 0
    sets = ("training.steps=3", "training.warmup_steps=1")
    path = ROOT / "scenarios/library/vgg16-parameter-servers.yaml"
    for point in load(path, sets).points:
        strategy = point.spec.strategy
        if strategy.local_aggregation and point.spec.cluster.devices_per_host > 1:
            assert_same_records(point.spec)
            ran += 1
    assert ran


def test_backup_workers_stay_on_the_event_engine() -> None:
    # a late host's reduce may still be in flight while its next step broadcasts
    ps = {"kind": "parameter_server", "servers": 2, "local_aggregation": True}
    cluster = {"cluster.hosts": 3, "cluster.devices_per_host": 2}
    assert Simulation(make_spec(strategy=ps, **cluster)).engine() is ps_lockstep
    late = make_spec(strategy={**ps, "backup_workers": 1}, **cluster)
    assert Simulation(late).engine() is not ps_lockstep
    asynchronous = make_spec(strategy={**ps, "sync": False}, **cluster)
    assert Simulation(asynchronous).engine() is ps_lockstep


@pytest.mark.parametrize(
    "sets",
    [
        ("cluster.devices_per_host=4", "training.evaluation.every_steps=3"),
        ("cluster.devices_per_host=3", "training.evaluation.every_steps=1"),
        ("cluster.devices_per_host=2", "stragglers.jitter=0.2"),
    ],
)
@pytest.mark.parametrize("staleness", ["", ", staleness: 1"])
def test_evaluation_barrier(sets: tuple[str, ...], staleness: str) -> None:
    # asynchronous hosts to a target: closures (a host's) up to the next evaluation
    strategy = (
        f"{{kind: parameter_server, servers: 1, sync: false, local_aggregation: true{staleness}}}"
    )
    scenario = load(
        ROOT / "scenarios/library/digits-time-to-target.yaml",
        (f"sweep.strategy=[{strategy}]", *sets),
    )
    held = [p.spec for p in scenario.points if held_by_engine(p.spec)]
    assert held
    for spec in held:
        assert_same_records(spec)
