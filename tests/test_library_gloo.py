"""Gloo as the collective library (`strategy.library: gloo`): its chunked ring walks the
whole buffer in 2N chunks per phase, 4N steps and 2S bytes in all (Gloo's
docs/algorithms.md), and its steps pay the transport's own latency, against closed forms;
where it applies and where it is refused."""

from __future__ import annotations

import pytest
from conftest import make_spec
from test_tcp_ceiling import step_time
from test_training import ALPHA, COMPUTE, NCCL_LAUNCH, B, S, rel

from real.strategies.allreduce import AllReduce
from scenarios import catalog
from scenarios.errors import ScenarioError
from sim.costs import connections, cost_model

GLOO = {"kind": "allreduce", "library": "gloo"}


def test_the_catalog_gives_gloos_chunks_and_connections() -> None:
    gloo = catalog.entry("collective", "gloo")
    assert int(gloo["ring_chunks_per_rank"]) == 2  # "The number of chunks is equal to 2*P"
    assert connections(gloo) == 1  # one socket per pair
    costs = cost_model(make_spec(strategy=GLOO)).collective
    assert (costs.launch_s, costs.step_s, costs.ring_chunks_per_rank) == (0.0, None, 2)


@pytest.mark.parametrize("model", ["analytical", "flow"])
@pytest.mark.parametrize("n", [2, 4, 8])
def test_chunked_ring_takes_4n_steps_and_2s_bytes(model: str, n: int) -> None:
    spec = make_spec(**{"cluster.hosts": n, "sim.network_model": model, "strategy": GLOO})
    gloo = 4 * n * ALPHA + 2 * S / B
    assert rel(step_time(spec), COMPUTE + gloo) < 1e-6
    # NCCL's ring on the same hosts: 2(N-1) steps of S/N, after its launch
    nccl = NCCL_LAUNCH + 2 * (n - 1) * (ALPHA + S / (n * B))
    nccl_spec = make_spec(**{"cluster.hosts": n, "sim.network_model": model})
    assert rel(step_time(nccl_spec), COMPUTE + nccl) < 1e-6


@pytest.mark.parametrize("n", [2, 4, 8])
def test_halving_doubling_is_gloos_too(n: int) -> None:
    # 2 lg N steps, 2 S (N-1)/N bytes, no launch
    spec = make_spec(
        **{"cluster.hosts": n, "strategy": {**GLOO, "algorithm": "halving_doubling"}}
    )
    lg = n.bit_length() - 1
    hd = 2 * lg * ALPHA + 2 * S * (n - 1) / (n * B)
    assert rel(step_time(spec), COMPUTE + hd) < 1e-6


@pytest.mark.parametrize("model", ["analytical", "flow"])
def test_over_tcp_a_link_moves_one_connection(model: str) -> None:
    c = 4e9 / 8  # 4 Gbit/s a connection, below the 10 Gbit/s link
    spec = make_spec(
        **{
            "cluster.hosts": 4,
            "cluster.network.stream_bandwidth": "4 Gbit/s",
            "sim.network_model": model,
            "strategy": GLOO,
        }
    )
    assert cost_model(spec).collective.ceiling == pytest.approx(c)
    assert rel(step_time(spec), COMPUTE + 4 * 4 * ALPHA + 2 * S / c) < 1e-6


def test_where_it_is_refused() -> None:
    with pytest.raises(ScenarioError, match="library gloo runs ring or halving_doubling"):
        make_spec(strategy={**GLOO, "algorithm": "tree"})
    with pytest.raises(ScenarioError, match="'library' applies to kind allreduce only"):
        make_spec(strategy={"kind": "parameter_server", "library": "gloo"})
    with pytest.raises(ScenarioError, match="nccl runs on GPU devices, not cpu"):
        make_spec(**{"cluster.device.kind": "cpu", "strategy": {"library": "nccl"}})
    assert AllReduce().problems(make_spec(strategy={**GLOO, "overlap": False})) == [
        "strategy.library: gloo (TensorFlow's collectives run NCCL or gRPC, not Gloo)"
    ]
