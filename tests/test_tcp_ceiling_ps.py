"""What one TCP connection carries, for parameter servers: a worker keeps one connection
to each server, so its pulls from and pushes to that server between hosts move at most
the network's `stream_bandwidth` together, against closed forms (both engines, both
network models) and the catalog's cited figures (networks.yaml, collectives.yaml)."""

from __future__ import annotations

import pytest
from conftest import make_spec
from test_tcp_ceiling import STREAM_25G, STREAM_100G, catalog_spec, step_time
from test_training import ALPHA, COMPUTE, B, S, rel

from sim.costs import cost_model

STREAM = 2e9 / 8  # a connection of 2 Gbit/s on the 10 Gbit/s network of the base spec


@pytest.mark.parametrize(
    "network,ceiling",
    [
        ("25GbE", STREAM_25G),  # 13.7 < 0.9493 x 25 Gbit/s
        ("100GbE", STREAM_100G),  # 17.8 < 0.9493 x 100 Gbit/s
        ("10GbE", None),  # 13.7 > 0.9493 x 10: a NIC binds first, always
        ("ib-edr", None),  # RDMA: no TCP connection
    ],
)
def test_one_connection_per_worker_and_server(network: str, ceiling: float | None) -> None:
    ps = {"kind": "parameter_server", "servers": 2}
    assert cost_model(catalog_spec(network, strategy=ps)).servers.ceiling == pytest.approx(
        ceiling
    )


def ps_spec(n: int, k: int, model: str = "flow", stream: float | None = STREAM):  # type: ignore[no-untyped-def]
    sets = {
        "cluster.hosts": n,
        "sim.network_model": model,
        "strategy": {"kind": "parameter_server", "servers": k, "partition": "sliced"},
    }
    if stream is not None:
        sets["cluster.network.stream_bandwidth"] = f"{stream * 8} bit/s"
    return make_spec(**sets)


@pytest.mark.parametrize("lockstep", [True, False])
@pytest.mark.parametrize("n,k", [(4, 1), (4, 4), (2, 4), (8, 2), (3, 5)])
def test_each_pair_moves_at_most_one_connection(n: int, k: int, lockstep: bool) -> None:
    # each worker sends S / k to each server: its NIC gives each flow B / k, a server's
    # NIC B / n, the pair's connection c, so push and pull each take
    # max(S / B, n S / (k B), S / (k c)) + alpha
    one_way = max(S / B, n * S / (k * B), S / (k * STREAM)) + ALPHA
    assert rel(step_time(ps_spec(n, k), lockstep), COMPUTE + 2 * one_way) < 1e-6
    # the connection binds at (4, 1), (4, 4) and (2, 4); a server at (8, 2); at (3, 5) the
    # worker's NIC and the connection alike
    uncapped = max(S / B, n * S / (k * B)) + ALPHA
    assert (one_way > uncapped) == ((n, k) in [(4, 1), (4, 4), (2, 4)])


def test_without_contention_a_transfer_runs_at_the_connection() -> None:
    # analytical: a node's transfers go one after another, each at min(B, c)
    spec = ps_spec(1, 1, "analytical")
    assert rel(step_time(spec), COMPUTE + 2 * (ALPHA + S / STREAM)) < 1e-6


def test_a_connection_as_fast_as_the_nic_changes_nothing() -> None:
    for n, k in [(4, 1), (2, 4)]:
        fast = ps_spec(n, k, stream=B)
        assert cost_model(fast).servers.ceiling is None
        assert step_time(fast) == pytest.approx(step_time(ps_spec(n, k, stream=None)), rel=1e-12)
