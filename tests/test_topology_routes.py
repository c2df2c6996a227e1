"""`Topology.routes` (many pairs at once, for the compiled engines) against `route`, one
pair at a time: the same links, latency and crossing of hosts, on every kind of link a
topology lays out."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import cluster

from sim.costs import Links
from sim.network.topology import Topology

_CATALOG = cluster(3, 2, oversubscription=2.0)  # a switch core
_LINKS = Links(
    fabric_bandwidth=1e9,
    fabric_latency=1e-6,
    network_bandwidth=1e9,
    network_latency=1e-5,
)


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"loopback": 5e9, "duplex": 1.5},  # ports both ways and the loopback
        {"loopback": 5e9, "core": 2e9, "pinned": 2},  # pinned processes' cores
        {"memory": 3e9, "cpu_bandwidth": 8e9},
    ],
    ids=["catalog", "duplex", "pinned", "memory"],
)
@pytest.mark.parametrize("servers", [0, 2])
def test_routes_are_the_routes(fields: dict[str, Any], servers: int) -> None:
    links = None if not fields else Links(**{**_LINKS.__dict__, **fields})
    topo = Topology(_CATALOG, dedicated_servers=servers, links=links)
    ends = [*range(topo.workers), *(topo.server(j) for j in range(servers))]
    pairs = [(a, b) for a in ends for b in ends if a != b]
    paths, latency, inter = topo.routes(pairs)
    for i, (a, b) in enumerate(pairs):
        route = topo.route(a, b)
        np.testing.assert_array_equal(paths[i], route.padded)
        assert latency[i] == route.latency
        assert inter[i] == route.inter_host
    assert inter.any() and not inter.all()  # within hosts and between them
