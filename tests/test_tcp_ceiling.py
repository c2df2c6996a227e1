"""What one TCP stream carries: a collective's transfer between hosts moves at most its
library's connections x the network's `stream_bandwidth`, against closed forms built from
the catalog's cited figures (networks.yaml, collectives.yaml)."""

from __future__ import annotations

from functools import partial

import pytest
from conftest import cluster, make_spec, timed
from test_training import COMPUTE, NCCL_LAUNCH, S, rel

from scenarios import catalog
from sim.costs import CollectiveCosts, connections, cost_model, tcp_ceiling
from sim.engine.metrics import summarize
from sim.network.collectives import halving_doubling, ring
from sim.simulation import Simulation

GOODPUT = 0.9493  # the catalog's TCP/IPv4 payload per Ethernet frame, 1460 / 1538
STREAM_25G = 13.7e9 / 8  # iperf -P 1 between 25 Gbit/s cloud VMs (byteps#29), bytes/s
STREAM_100G = 17.8e9 / 8  # slowest of 2 iperf3 flows at 100 Gbit/s (nccl#450), bytes/s
NCCL_CONNECTIONS = 2 * 1 * 1  # channels per NIC x socket threads x sockets per thread
NET_STEP = 9.6e-6  # NCCL's per-step latency across the network (tuning.cc hwLat)


def step_time(spec, lockstep: bool = True) -> float:  # type: ignore[no-untyped-def]
    return summarize(spec, Simulation(spec, lockstep=lockstep).run())["step_time_mean_s"]


def catalog_spec(network: str, model: str = "analytical", **sets: object):  # type: ignore[no-untyped-def]
    return make_spec(**{"cluster.network": network, "sim.network_model": model, **sets})


def ring_step(n: int, alpha: float, rate: float, launch: float) -> float:
    """A synchronous step of compute, then one ring all-reduce of S over n ranks, one a
    host: launch + 2(n-1)(alpha + S/(n rate))."""
    return COMPUTE + launch + 2 * (n - 1) * (alpha + S / (n * rate))


def test_the_libraries_connections_come_from_the_catalog() -> None:
    assert connections(catalog.entry("collective", "nccl")) == NCCL_CONNECTIONS
    assert connections(catalog.entry("collective", "grpc")) == 1


@pytest.mark.parametrize(
    "network,gpu,cpu",
    [
        ("25GbE", NCCL_CONNECTIONS * STREAM_25G, STREAM_25G),
        ("100GbE", NCCL_CONNECTIONS * STREAM_100G, STREAM_100G),
        ("ib-edr", None, None),  # RDMA: no TCP connection to cap
    ],
)
def test_the_ceiling_is_connections_times_one_stream(
    network: str, gpu: float | None, cpu: float | None
) -> None:
    assert cost_model(catalog_spec(network)).collective.ceiling == pytest.approx(gpu)
    on_cpu = catalog_spec(network, **{"cluster.device.kind": "cpu"})
    assert cost_model(on_cpu).collective.ceiling == pytest.approx(cpu)


def test_no_ceiling_without_a_stream_figure_or_over_rdma() -> None:
    # a network of one's own gives none; the catalog's TCP network made RDMA (RoCE) drops it
    assert cost_model(make_spec()).collective.ceiling is None
    roce = catalog_spec({"base": "25GbE", "protocol": "rdma"})  # type: ignore[arg-type]
    assert roce.cluster.network.stream_bandwidth == pytest.approx(STREAM_25G)
    assert tcp_ceiling(roce.cluster.network, 1) is None
    assert cost_model(roce).collective.ceiling is None
    # the link itself still carries its goodput: the ceiling is per transfer, not per link
    links = cost_model(catalog_spec("25GbE")).links
    assert links.network_bandwidth == pytest.approx(25e9 / 8 * GOODPUT)


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("n", [2, 4])
def test_nccl_ring_over_100gbe_is_bound_by_its_sockets(model: str, n: int) -> None:
    # 2 sockets x 17.8 = 35.6 Gbit/s, below 0.9493 x 100: the ring runs at the sockets' rate;
    # 100GbE's kernel TCP latency (10 us) is above NCCL's 9.6 us per step
    spec = catalog_spec("100GbE", model, **{"cluster.hosts": n})
    rate = min(100e9 / 8 * GOODPUT, NCCL_CONNECTIONS * STREAM_100G)
    assert rate == NCCL_CONNECTIONS * STREAM_100G
    expected = ring_step(n, max(10e-6, NET_STEP), rate, NCCL_LAUNCH)
    assert rel(step_time(spec), expected) < 1e-6
    assert rel(step_time(spec, lockstep=False), expected) < 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_nccl_ring_over_25gbe_keeps_the_links_share(model: str) -> None:
    # 2 sockets x 13.7 = 27.4 Gbit/s is above 0.9493 x 25 = 23.7: nothing changes
    spec = catalog_spec("25GbE", model, **{"cluster.hosts": 4})
    assert NCCL_CONNECTIONS * STREAM_25G > 25e9 / 8 * GOODPUT
    expected = ring_step(4, 15e-6, 25e9 / 8 * GOODPUT, NCCL_LAUNCH)
    assert rel(step_time(spec), expected) < 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_grpc_ring_over_25gbe_runs_at_one_stream(model: str) -> None:
    # TensorFlow's gRPC ring on CPU devices: one connection per peer, 13.7 < 23.7 Gbit/s;
    # its steps pay the network's own latency (15 us) and no launch
    spec = catalog_spec("25GbE", model, **{"cluster.hosts": 4, "cluster.device.kind": "cpu"})
    expected = ring_step(4, 15e-6, STREAM_25G, 0.0)
    assert rel(step_time(spec), expected) < 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_10gbe_is_untouched(model: str, kind: str) -> None:
    # one stream (13.7 Gbit/s) is above 10 GbE's 9.49: the link's share binds, as before
    spec = catalog_spec("10GbE", model, **{"cluster.hosts": 4, "cluster.device.kind": kind})
    launch, alpha = (NCCL_LAUNCH, 20e-6) if kind == "gpu" else (0.0, 20e-6)
    expected = ring_step(4, alpha, 10e9 / 8 * GOODPUT, launch)
    assert rel(step_time(spec), expected) < 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_rdma_is_untouched(model: str) -> None:
    # a stream figure given to an RDMA network is not read: verbs have no TCP connection
    edr = 100e9 / 8 * 0.976
    plain = catalog_spec("ib-edr", model, **{"cluster.hosts": 4})
    given = catalog_spec(
        {"base": "ib-edr", "stream_bandwidth": "1 Gbit/s"},  # type: ignore[arg-type]
        model,
        **{"cluster.hosts": 4},
    )
    expected = ring_step(4, NET_STEP, edr, NCCL_LAUNCH)
    assert rel(step_time(plain), expected) < 1e-6
    assert rel(step_time(given), expected) < 1e-6


@pytest.mark.parametrize("n", [2, 4, 8])
def test_more_sockets_reach_up_to_the_links_share(network_model: str, n: int) -> None:
    # a ring over 100 Gbit/s with k connections of 17.8 Gbit/s: 2(n-1)(alpha + S/(n min(B, k c)))
    alpha, link = 10e-6, 100e9 / 8
    spec = cluster(n, bw="100 Gbit/s")
    times = []
    for k in (1, 2, 4, 8, 16):
        costs = CollectiveCosts(ceiling=k * STREAM_100G)
        t = timed(network_model, spec, partial(ring, ranks=list(range(n)), nbytes=S, costs=costs))
        expected = 2 * (n - 1) * (alpha + S / (n * min(link, k * STREAM_100G)))
        assert rel(t, expected) < 1e-6
        times.append(t)
    assert times == sorted(times, reverse=True)
    # from 6 connections on (6 x 17.8 > 100) the link binds: as without a ceiling
    free = timed(network_model, spec, lambda net: ring(net, list(range(n)), S))
    assert rel(times[-1], free) < 1e-9 and rel(times[-2], free) < 1e-9


def test_a_capped_flow_leaves_the_rest_of_the_link_to_others() -> None:
    # two flows out of one NIC, one capped at B/4: max-min gives the other 3B/4 until it
    # ends (4S/3B), then the capped one still moves at B/4 (it ends at 4S/B)
    link = 10e9 / 8
    spec = cluster(3, bw="10 Gbit/s", lat="0 us")
    ends: dict[str, float] = {}

    def both(net):  # type: ignore[no-untyped-def]
        env = net.env

        def one(name: str, dst: int, ceiling: float | None):  # type: ignore[no-untyped-def]
            yield net.transfers([(0, dst)], S, ceiling=ceiling)
            ends[name] = env.now

        capped = env.process(one("capped", 1, link / 4))
        free = env.process(one("free", 2, None))
        yield capped & free

    timed("flow", spec, both)
    assert rel(ends["free"], 4 * S / (3 * link)) < 1e-9
    assert rel(ends["capped"], 4 * S / link) < 1e-9


def test_flows_sharing_a_nic_below_the_ceiling_are_unchanged() -> None:
    # halving-doubling over 2 hosts of 4: each phase between hosts puts 4 flows on a NIC,
    # B/4 each, below a ceiling of B/2: the same time as without a ceiling
    spec = cluster(2, devices=4, bw="10 Gbit/s")
    ranks = list(range(8))
    capped = CollectiveCosts(ceiling=10e9 / 8 / 2)
    with_ceiling = timed("flow", spec, lambda net: halving_doubling(net, ranks, S, capped))
    without = timed("flow", spec, lambda net: halving_doubling(net, ranks, S))
    assert rel(with_ceiling, without) < 1e-9


def test_the_compiled_solve_caps_flows_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # 32 ranks put 32 flows in flight: with the switch at once, the compiled kernel solves
    # the rates, connections' links included, as numpy does
    monkeypatch.setattr("sim.network.backends.COMPILED_AFTER_S", 0.0)
    n, alpha, link = 32, 10e-6, 100e9 / 8
    costs = CollectiveCosts(ceiling=2 * STREAM_100G)
    t = timed(
        "flow",
        cluster(n, bw="100 Gbit/s"),
        partial(ring, ranks=list(range(n)), nbytes=S, costs=costs),
    )
    expected = 2 * (n - 1) * (alpha + S / (n * min(link, 2 * STREAM_100G)))
    assert rel(t, expected) < 1e-6
