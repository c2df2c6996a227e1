"""Collectives against their closed forms (alpha-beta, uncontended) and NCCL's identities."""

from __future__ import annotations

import math

import pytest
from conftest import cluster, timed

from sim.network.collectives import (
    ALGORITHMS,
    btree_parents,
    double_binary_tree,
    halving_doubling,
    hierarchical,
    ring,
    ring_all_gather,
    ring_reduce_scatter,
    tree,
    tree_depth,
)

ALPHA = 10e-6  # s
B = 10e9 / 8  # 10 Gbit/s in bytes/s
S = 100e6  # bytes


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 64])
def test_ring_closed_form(network_model: str, n: int) -> None:
    t = timed(network_model, cluster(n), lambda net: ring(net, list(range(n)), S))
    expected = 2 * (n - 1) * (ALPHA + S / (n * B))
    assert rel(t, expected) < 1e-6


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_reduce_scatter_and_all_gather_are_each_half_the_ring(
    network_model: str, n: int
) -> None:
    # each (N-1)(alpha + S/(N B)): ZeRO's reduce-scatter of gradients and all-gather of
    # parameters move what one all-reduce moves (Rajbhandari et al. 2020, section 7)
    half = (n - 1) * (ALPHA + S / (n * B))
    for collective in (ring_reduce_scatter, ring_all_gather):
        t = timed(network_model, cluster(n), lambda net, c=collective: c(net, list(range(n)), S))
        assert rel(t, half) < 1e-6


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32])
def test_halving_doubling_closed_form(network_model: str, n: int) -> None:
    # Rabenseifner, N a power of two: 2 lg N alpha + 2 S (N-1) / (N B)
    t = timed(network_model, cluster(n), lambda net: halving_doubling(net, list(range(n)), S))
    expected = 2 * math.log2(n) * ALPHA + 2 * S * (n - 1) / (n * B)
    assert rel(t, expected) < 1e-6


@pytest.mark.parametrize("n", [3, 5, 6, 7, 12])
def test_halving_doubling_non_power_of_two(network_model: str, n: int) -> None:
    # the extra ranks hand over their vector (S) before and get it back after
    p = 1 << (n.bit_length() - 1)
    t = timed(network_model, cluster(n), lambda net: halving_doubling(net, list(range(n)), S))
    expected = 2 * (ALPHA + S / B) + 2 * math.log2(p) * ALPHA + 2 * S * (p - 1) / (p * B)
    assert rel(t, expected) < 1e-6


def test_analytical_and_flow_agree_uncontended() -> None:
    for algorithm in ("ring", "halving_doubling"):
        for n in (2, 4, 8, 16):
            times = [
                timed(
                    m,
                    cluster(n),
                    lambda net, a=algorithm, n=n: ALGORITHMS[a](net, list(range(n)), S),
                )
                for m in ("analytical", "flow")
            ]
            assert rel(times[0], times[1]) < 1e-6, (algorithm, n)


def test_busbw_identity() -> None:
    # nccl-tests: algbw = S / t; busbw = algbw * 2 (N - 1) / N equals the link bandwidth
    # when latency is negligible (large S) for the ring.
    n = 8
    spec = cluster(n, lat="0 us")
    t = timed("flow", spec, lambda net: ring(net, list(range(n)), S))
    algbw = S / t
    busbw = algbw * 2 * (n - 1) / n
    assert rel(busbw, B) < 1e-6


@pytest.mark.parametrize("hosts,devices", [(2, 4), (4, 8), (3, 2)])
def test_hierarchical_closed_form(network_model: str, hosts: int, devices: int) -> None:
    # chain reduce in the host, ring over hosts, chain broadcast in the host
    link_bw, link_lat = 100e9, 1e-6
    n = hosts * devices
    spec = cluster(hosts, devices)
    t = timed(network_model, spec, lambda net: hierarchical(net, list(range(n)), S))
    intra = (devices - 1) * link_lat + S / link_bw
    inter = 2 * (hosts - 1) * (ALPHA + S / (hosts * B))
    assert rel(t, 2 * intra + inter) < 1e-6


def test_hierarchical_beats_flat_ring_on_many_devices_per_host() -> None:
    # Goyal et al.: with fast intra-host links the inter-host step carries S / H per rank
    # instead of the ring's latency-bound 2(N-1) steps
    spec = cluster(8, 8, lat="50 us")
    ranks = list(range(64))
    flat = timed("flow", spec, lambda net: ring(net, ranks, 1e6))
    hier = timed("flow", spec, lambda net: hierarchical(net, ranks, 1e6))
    assert hier < flat


def test_btree_is_nccl_tree() -> None:
    # ncclGetBtree for 8 ranks: 0 -> 4 -> {2, 6}, 2 -> {1, 3}, 6 -> {5, 7}
    assert btree_parents(8) == [-1, 2, 4, 2, 0, 6, 4, 6]
    for n in range(2, 70):
        parents = btree_parents(n)
        assert parents.count(-1) == 1
        assert tree_depth(parents) == max(1, math.ceil(math.log2(n)))
        children: dict[int, int] = {}
        for p in parents:
            if p >= 0:
                children[p] = children.get(p, 0) + 1
        assert max(children.values()) <= 2


@pytest.mark.parametrize("n", [4, 7, 8, 16, 33])
def test_double_binary_tree_spans_and_complements(n: int) -> None:
    first, second = double_binary_tree(n)
    for parents in (first, second):
        assert parents.count(-1) == 1
        for r in range(n):  # every rank reaches the root: a spanning tree
            seen, node = 0, r
            while parents[node] >= 0 and seen <= n:
                node, seen = parents[node], seen + 1
            assert parents[node] == -1
    # most ranks are interior in at most one of the two trees
    interior = [set(p for p in t if p >= 0) for t in (first, second)]
    assert len(interior[0] & interior[1]) <= 2


@pytest.mark.parametrize("n", [4, 8, 16, 32])
def test_tree_closed_form_flow(n: int) -> None:
    # every rank sends S/2 up each tree over its one NIC: two flows share it, so each phase
    # takes depth alpha + S / B; two phases (reduce, broadcast)
    t = timed("flow", cluster(n), lambda net: tree(net, list(range(n)), S))
    depth = math.ceil(math.log2(n))
    assert rel(t, 2 * (depth * ALPHA + S / B)) < 1e-6


@pytest.mark.parametrize("n", [4, 8, 16])
def test_tree_closed_form_analytical(n: int) -> None:
    # without contention each S/2 flow runs at full bandwidth
    t = timed("analytical", cluster(n), lambda net: tree(net, list(range(n)), S))
    depth = math.ceil(math.log2(n))
    assert rel(t, 2 * (depth * ALPHA + S / (2 * B))) < 1e-6


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_one_rank_costs_nothing(network_model: str, algorithm: str) -> None:
    assert timed(network_model, cluster(1), lambda net: ALGORITHMS[algorithm](net, [0], S)) == 0
