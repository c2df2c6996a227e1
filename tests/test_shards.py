"""Variables dealt to parameter-server shards and mapped to their layers
(sim/strategies/parameter_server/shards.py)."""

from __future__ import annotations

from sim.strategies.parameter_server.shards import assign, deal, variable_layers


def test_variables_fill_their_layers() -> None:
    # kernel and bias of each layer, in creation order
    assert variable_layers([6, 2, 8, 4], [0, 8, 0, 12]) == [1, 1, 3, 3]
    # a model given as one variable: it goes to its last layer with parameters
    assert variable_layers([20], [0, 8, 12, 0]) == [2]
    held = assign([4.0, 2.0, 4.0], 2, "round_robin")
    assert held.tolist() == [[4, 0], [0, 2], [4, 0]]
    assert assign([4.0, 2.0, 4.0], 2, "greedy").tolist() == [[4, 0], [0, 2], [0, 4]]
    assert assign([4.0, 2.0], 2, "sliced").tolist() == [[2, 2], [1, 1]]


def test_one_deal_for_both_strategies() -> None:
    # three variables on three servers, round-robin, 4 bytes a parameter: the third server
    # holds nothing and takes no part; a tensor-parallel device holds a share of its part
    dealt = deal([4.0, 2.0, 0.0], [6, 0], 3, "round_robin", 4.0)
    assert dealt.shards == (0, 1) and dealt.layers == (0, 0, 0)
    assert dealt.total_bytes == 24.0
    assert dealt.by_part([0, 0], 1).tolist() == [[16, 8]]
    assert dealt.by_part({0: 0, 1: 0}, 1, share=2).tolist() == [[8, 4]]
