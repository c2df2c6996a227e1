"""`strategy.partition: mxnet` (sim/strategies/parameter_server/shards.py): MXNet's
distributed KVStore's placement, against its closed forms, and the same job on both
parameter-server engines."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_spec
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ps_lockstep import assert_same

from real.strategies.parameter_server import ParameterServers
from scenarios import ScenarioError
from sim.strategies.parameter_server.shards import MXNET_BIGARRAY_BOUND, assign, deal

BOUND = MXNET_BIGARRAY_BOUND


def test_bound_is_mxnets_default() -> None:
    # MXNET_KVSTORE_BIGARRAY_BOUND's default, 1000 * 1000 elements (kvstore_dist.h)
    assert BOUND == 1_000_000


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, BOUND - 1), min_size=1, max_size=40),
    servers=st.integers(1, 70),
)
def test_small_key_on_its_hashed_server(sizes: list[int], servers: int) -> None:
    held = assign(np.array(sizes, dtype=float), servers, "mxnet")
    for key, n in enumerate(sizes):
        expected = np.zeros(servers)
        expected[(key * 9973) % servers] = n
        np.testing.assert_array_equal(held[key], expected)


@pytest.mark.parametrize("servers", [2, 3, 4, 6, 9, 12, 18, 36])
def test_small_keys_round_robin_where_9973_is_one_more_than_a_multiple(servers: int) -> None:
    # 9972 = 2^2 x 3^2 x 277: for these counts (k x 9973) mod S = k mod S
    sizes = np.arange(1, 50, dtype=float) * 1000
    np.testing.assert_array_equal(
        assign(sizes, servers, "mxnet"), assign(sizes, servers, "round_robin")
    )


def test_small_keys_with_eight_servers() -> None:
    # 9973 mod 8 = 5: keys 0..7 land on servers 0, 5, 2, 7, 4, 1, 6, 3
    held = assign(np.full(8, 10.0), 8, "mxnet")
    assert [int(np.flatnonzero(row)[0]) for row in held] == [0, 5, 2, 7, 4, 1, 6, 3]


def test_bound_is_strict() -> None:
    # `num_arr_elems < bigarray_bound_` keeps an array whole; the bound itself is split
    held = assign(np.array([BOUND - 1, BOUND], dtype=float), 4, "mxnet")
    np.testing.assert_array_equal(held[0], [BOUND - 1, 0, 0, 0])
    np.testing.assert_array_equal(held[1], [250_000] * 4)


@pytest.mark.parametrize(
    ("n", "servers", "parts"),
    [
        # cuts round(n / S x i): 333,333.3 -> 333,333; 666,666.7 -> 666,667
        (1_000_000, 3, [333_333, 333_334, 333_333]),
        # VGG-16's fc6 kernel, 25,088 x 4,096: cuts 34,253,482.7 and 68,506,965.3
        (102_760_448, 3, [34_253_483, 34_253_482, 34_253_483]),
        # a half rounds away from zero (C's round, not to even): cut 500,000.5 -> 500,001
        (1_000_001, 2, [500_001, 500_000]),
        # cuts 142,857.1, 285,714.3, 428,571.4, 571,428.6, 714,285.7, 857,142.9
        (1_000_000, 7, [142_857, 142_857, 142_857, 142_858, 142_857, 142_857, 142_857]),
        (2_000_000, 1, [2_000_000]),
    ],
)
def test_big_array_split(n: int, servers: int, parts: list[int]) -> None:
    assert sum(parts) == n
    held = assign(np.array([5.0, float(n)]), servers, "mxnet")
    np.testing.assert_array_equal(held[1], parts)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(BOUND, 10**9), servers=st.integers(1, 200))
def test_big_array_even(n: int, servers: int) -> None:
    row = assign(np.array([float(n)]), servers, "mxnet")[0]
    assert row.sum() == n
    assert np.all(np.abs(row - n / servers) <= 1)
    assert np.all(row == np.round(row))


@pytest.mark.parametrize("model", ["vgg16", "resnet50", "inception_v3", "mlp"])
@pytest.mark.parametrize("servers", [1, 3, 8, 16])
def test_bytes_add_up_to_the_models(model: str, servers: int) -> None:
    spec = make_spec(model=model).model
    dealt = deal(
        spec.variables(),
        [p for _, p, _, _ in spec.layer_table()],
        servers,
        "mxnet",
        spec.bytes_per_param,
    )
    assert dealt.total_bytes == pytest.approx(spec.gradient_bytes, rel=1e-12)
    per_server = np.zeros(servers)
    per_server[list(dealt.shards)] = dealt.held.sum(axis=0)
    assert per_server.sum() == pytest.approx(spec.gradient_bytes, rel=1e-12)


def test_zero_sized_variable_holds_nothing_and_keeps_its_key() -> None:
    held = assign(np.array([0.0, 7.0]), 5, "mxnet")
    assert held[0].sum() == 0
    assert held[1, 9973 % 5] == 7


def test_unknown_partition_refused() -> None:
    with pytest.raises(ScenarioError):
        make_spec(strategy={"kind": "parameter_server", "partition": "hashed"})


@pytest.mark.parametrize(
    ("model", "hosts", "servers", "placement", "sync"),
    [
        ("vgg16", 3, 3, "dedicated", True),
        ("resnet50", 4, 8, "colocated", True),
        ("vgg16", 2, 5, "dedicated", False),
    ],
)
def test_engines_agree(model: str, hosts: int, servers: int, placement: str, sync: bool) -> None:
    strategy = {
        "kind": "parameter_server",
        "servers": servers,
        "placement": placement,
        "partition": "mxnet",
        "sync": sync,
    }
    assert_same(
        make_spec(
            **{
                "model": model,
                "cluster.hosts": hosts,
                "strategy": strategy,
                "training.steps": 3 if sync else 2 * hosts,
                "training.warmup_steps": 1 if sync else hosts,
            }
        )
    )


def test_run_real_refuses_it() -> None:
    spec = make_spec(strategy={"kind": "parameter_server", "servers": 2, "partition": "mxnet"})
    assert ParameterServers().problems(spec) == [
        "strategy.partition: mxnet (TF 2 places variables its own way)"
    ]
