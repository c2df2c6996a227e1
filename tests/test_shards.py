"""Variables dealt to parameter-server shards and mapped to their layers (sim/shards.py)."""

from __future__ import annotations

from sim.shards import assign, variable_layers


def test_variables_fill_their_layers() -> None:
    # kernel and bias of each layer, in creation order
    assert variable_layers([6, 2, 8, 4], [0, 8, 0, 12]) == [1, 1, 3, 3]
    # a model given as one variable: it goes to its last layer with parameters
    assert variable_layers([20], [0, 8, 12, 0]) == [2]
    held = assign([4.0, 2.0, 4.0], 2, "round_robin")
    assert held.tolist() == [[4, 0], [0, 2], [4, 0]]
    assert assign([4.0, 2.0, 4.0], 2, "greedy").tolist() == [[4, 0], [0, 2], [0, 4]]
    assert assign([4.0, 2.0], 2, "sliced").tolist() == [[2, 2], [1, 1]]
