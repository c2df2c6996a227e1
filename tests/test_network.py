"""The network back ends: max-min fairness on textbook cases, latency, batching."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
from conftest import cluster, timed
from hypothesis import given, settings
from hypothesis import strategies as st

import sim
from sim.costs import Links
from sim.network.backends import FlowNetwork, make_network, max_min_rates
from sim.network.topology import Topology

B = 10e9 / 8


def test_max_min_equal_share() -> None:
    # n flows over one link of capacity C get C / n each
    paths = np.array([[0, -1, -1]] * 4)
    assert np.allclose(max_min_rates(paths, np.array([8.0])), 2.0)


def test_max_min_bottleneck_elsewhere_leaves_share() -> None:
    # Bertsekas & Gallager's example: flows a, b share link 0 (cap 10); b also crosses
    # link 1 (cap 2). b is held to 2 by link 1, so a gets the remaining 8.
    paths = np.array([[0, -1, -1], [0, 1, -1]])
    rates = max_min_rates(paths, np.array([10.0, 2.0]))
    assert np.allclose(rates, [8.0, 2.0])


def test_max_min_parking_lot() -> None:
    # parking lot: one long flow over links 0,1,2 and one short flow on each link (cap 1):
    # every link has two flows, so everyone gets 1/2
    paths = np.array([[0, 1, 2], [0, -1, -1], [1, -1, -1], [2, -1, -1]])
    assert np.allclose(max_min_rates(paths, np.ones(3)), 0.5)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True), min_size=1, max_size=12
    ),
    st.lists(st.floats(0.5, 100.0), min_size=5, max_size=5),
)
def test_max_min_properties(flow_links: list[list[int]], caps: list[float]) -> None:
    paths = np.full((len(flow_links), 3), -1)
    for i, links in enumerate(flow_links):
        paths[i, : len(links)] = links
    capacity = np.array(caps)
    rates = max_min_rates(paths, capacity)
    assert (rates > 0).all()
    load = np.zeros(5)
    for i, links in enumerate(flow_links):
        load[links] += rates[i]
    assert (load <= capacity * (1 + 1e-9)).all()  # feasible
    # max-min: every flow crosses a saturated link on which no flow gets more than it
    for i, links in enumerate(flow_links):
        ok = False
        for link in links:
            on = [j for j, lk in enumerate(flow_links) if link in lk]
            if load[link] >= capacity[link] * (1 - 1e-9) and rates[i] >= max(rates[on]) * (
                1 - 1e-9
            ):
                ok = True
        assert ok


def test_two_flows_into_one_nic_share_it(network_model: str) -> None:
    # two senders to one receiver: its NIC-in is shared under flow, not under analytical
    t = timed(
        network_model,
        cluster(3, lat="0 us"),
        lambda net: iter([net.transfers([(0, 2), (1, 2)], 1e9)]),
    )
    expected = 2e9 / B if network_model == "flow" else 1e9 / B
    assert abs(t - expected) / expected < 1e-9


def test_full_duplex() -> None:
    # a -> b and b -> a at once do not slow each other down
    t = timed(
        "flow", cluster(2, lat="0 us"), lambda net: iter([net.transfers([(0, 1), (1, 0)], 1e9)])
    )
    assert abs(t - 1e9 / B) < 1e-12 * 1e3


def test_rates_change_when_flows_end() -> None:
    # a short and a long flow share a link: the long one speeds up once the short one ends
    env = simpy.Environment()
    net = FlowNetwork(env, Topology(cluster(3, lat="0 us")))
    ends = {}

    def send(name: str, nbytes: float):  # type: ignore[no-untyped-def]
        yield net.transfer(0 if name == "short" else 1, 2, nbytes)
        ends[name] = env.now

    env.process(send("short", 1e9))
    env.process(send("long", 3e9))
    env.run()
    assert abs(ends["short"] - 2e9 / B) < 1e-9
    # long: 1e9 at B/2 during the first 2e9/B, then 2e9 alone at B
    assert abs(ends["long"] - (2e9 / B + 2e9 / B)) < 1e-9


def test_latency_then_bandwidth_and_messages(network_model: str) -> None:
    t = timed(
        network_model,
        cluster(2, lat="10 us"),
        lambda net: iter([net.transfer(0, 1, 1e6, messages=3)]),
    )
    assert abs(t - (3 * 10e-6 + 1e6 / B)) < 1e-12


def test_oversubscribed_core_limits_crossing_traffic() -> None:
    # 4 hosts, oversubscription 4: the core carries 4 B / 4 = B in all; 4 disjoint pairs of
    # flows that would each run at B share it
    spec = cluster(4, lat="0 us", oversubscription=4.0)
    pairs = [(0, 1), (1, 0), (2, 3), (3, 2)]
    t = timed("flow", spec, lambda net: iter([net.transfers(pairs, 1e9)]))
    assert abs(t - 4e9 / B) / (4e9 / B) < 1e-9


def test_intra_host_uses_host_link(network_model: str) -> None:
    t = timed(
        network_model,
        cluster(1, 2, link_bw="100 GB/s", link_lat="1 us"),
        lambda net: iter([net.transfer(0, 1, 1e9)]),
    )
    assert abs(t - (1e-6 + 1e9 / 100e9)) < 1e-12


def test_bytes_on_network_counts_inter_host_only(network_model: str) -> None:
    env = simpy.Environment()
    from sim.network.backends import make_network

    net = make_network(network_model, env, Topology(cluster(2, 2)))
    net.transfers([(0, 1), (1, 2), (3, 0)], 5.0)
    env.run()
    assert net.bytes_on_network == 10.0


@pytest.mark.parametrize("n", [16, 128])
def test_simultaneous_flows_are_one_batch(n: int) -> None:
    # STYLE rule 6: a batch of identical flows costs one rate update to start and one to end
    env = simpy.Environment()
    net = FlowNetwork(env, Topology(cluster(n)))
    calls = 0
    original = net._reschedule

    def counting() -> None:
        nonlocal calls
        calls += 1
        original()

    net._reschedule = counting  # type: ignore[method-assign]
    net.transfers([(i, (i + 1) % n) for i in range(n)], 1e6)
    env.run()
    assert calls == 2


def test_flows_finish_late_in_a_long_run() -> None:
    # Late in a run the clock cannot resolve the last sliver of a fast flow (now + dt == now);
    # such a flow must still finish instead of rescheduling itself forever.
    env = simpy.Environment()
    net = FlowNetwork(env, Topology(cluster(1, 8, link_bw="150 GB/s", link_lat="0 us")))
    done = []

    def later():  # type: ignore[no-untyped-def]
        yield env.timeout(1e6)
        for size in (1e6, 1e7 / 3, 3e7):
            start = env.now
            yield net.transfers([(i, (i + 1) % 8) for i in range(8)], size)
            done.append((env.now - start) / (size / 150e9))

    env.process(later())
    env.run(until=2e6)
    assert len(done) == 3 and all(abs(r - 1) < 1e-3 for r in done)


def test_flows_on_the_cores_share_the_loopback(network_model: str) -> None:
    # one host, 3 processes, ports 200 MB/s, the host's loopback 300 MB/s (calibrated): a
    # flow on the host's cores (a parameter-server closure's) crosses no port; three at
    # once share the loopback, 100 MB/s each. Without contention (analytical) each takes
    # the loopback's time alone regardless
    topology = Topology(
        cluster(1, 3, link_bw="200 MB/s"),
        links=replace(Links.of(cluster(1, 3, link_bw="200 MB/s")), loopback=300e6),
    )
    routes = [topology.cores_route(w) for w in range(3)]
    assert all(len(r.links) == 1 and r.latency == 0.0 for r in routes)
    assert topology.narrowest(routes[0]) == 300e6
    env = simpy.Environment()
    net = make_network(network_model, env, topology)

    def proc() -> Any:
        # a closure that alone takes what its bytes take on the loopback: all flow
        yield env.all_of([net.closure(w, 1e6 / 300e6, 1e6) for w in range(3)])

    env.process(proc())
    env.run()
    expected = 1e6 / 300e6 if network_model == "analytical" else 1e6 / 100e6
    assert env.now == pytest.approx(expected, rel=1e-9)


def test_only_the_network_starts_a_flow() -> None:
    # the engine and the parameter servers share a host's cores through the network's
    # interface (compute, closure); no module of sim/ reaches the flows themselves
    root = Path(sim.__file__).parent
    callers = [
        str(path.relative_to(root))
        for path in sorted(root.rglob("*.py"))
        if path.name != "backends.py" and re.search(r"\._?flow\(", path.read_text())
    ]
    assert callers == []


def plain_max_min(flow_links: list[list[int]], capacity: list[float]) -> list[float]:
    """Max-min fair shares, written plainly: raise every unfrozen flow's rate together
    until a link fills; freeze the flows through it; repeat (Bertsekas & Gallager, Data
    Networks, section 6.5.2)."""
    rates = [0.0] * len(flow_links)
    frozen = [False] * len(flow_links)
    used = [0.0] * len(capacity)
    while not all(frozen):
        users = [
            sum(1 for i, f in enumerate(flow_links) if link in f and not frozen[i])
            for link in range(len(capacity))
        ]
        rise = min((capacity[k] - used[k]) / users[k] for k in range(len(capacity)) if users[k])
        for i, f in enumerate(flow_links):
            if not frozen[i]:
                rates[i] += rise
                for link in f:
                    used[link] += rise
        for k in range(len(capacity)):
            if users[k] and used[k] >= capacity[k] * (1 - 1e-12):
                for i, f in enumerate(flow_links):
                    if k in f:
                        frozen[i] = True
    return rates


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=1, max_size=30
    ),
    st.lists(st.floats(0.5, 100.0), min_size=8, max_size=8),
)
def test_max_min_equals_a_plain_implementation(
    flow_links: list[list[int]], caps: list[float]
) -> None:
    paths = np.full((len(flow_links), 4), -1)
    for i, links in enumerate(flow_links):
        paths[i, : len(links)] = links
    expected = plain_max_min(flow_links, caps)
    np.testing.assert_allclose(max_min_rates(paths, np.array(caps)), expected, rtol=1e-9)
