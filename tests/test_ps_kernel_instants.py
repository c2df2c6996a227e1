"""The compiled parameter-server engine's table of start instants
(`sim/strategies/parameter_server/kernel/flows.py`) against a dict: open addressing with
deletion by backward shift must find every instant present and none removed, whatever the
collisions and the wrap-around."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from sim.strategies.parameter_server.kernel.flows import (  # noqa: E402
    _home,
    instant_add,
    instant_drop,
    instant_slot,
)

# instants a few apart in the last bits share a home; others spread over the table
_BASES = [0.0, 1.0, 2.5, 1e3, 12345.678]
_INSTANTS = [b + d for b in _BASES for d in (0.0, 1e-9, 2e-9, 5e-7)]


def _table(size: int) -> np.ndarray:
    table = np.zeros((2, size))
    table[1] = -1.0
    return table


@settings(max_examples=300, deadline=None)
@given(
    size=st.sampled_from([8, 16, 64]),
    ops=st.lists(st.tuples(st.booleans(), st.sampled_from(_INSTANTS)), max_size=60),
)
def test_table_agrees_with_a_dict(size: int, ops: list[tuple[bool, float]]) -> None:
    table, truth = _table(size), {}
    for n, (add, at) in enumerate(ops):
        if add and at not in truth and len(truth) < size // 2:
            instant_add(table, at, n)
            truth[at] = n
        elif not add and at in truth:
            instant_drop(table, at)
            del truth[at]
        for x in _INSTANTS:
            assert instant_slot(table, x) == truth.get(x, -1)
    assert int((table[1] >= 0).sum()) == len(truth)


def test_colliding_instants_probe_on() -> None:
    table = _table(8)
    crowd = [1.0, 1.0 + 1e-9, 1.0 + 2e-9]
    assert len({_home(table, x) for x in crowd}) == 1  # one home: a run of three
    for slot, at in enumerate(crowd):
        instant_add(table, at, slot)
    instant_drop(table, crowd[0])  # the run's head: the others move back
    assert [instant_slot(table, x) for x in crowd] == [-1, 1, 2]
    instant_add(table, crowd[0], 7)
    assert instant_slot(table, crowd[0]) == 7


def test_a_run_wraps_around_the_end() -> None:
    table = _table(8)
    start = next(x for x in (k * 0.37 for k in range(1000)) if _home(table, x) == 7)
    crowd = [start, start + 1e-9, start + 2e-9]
    assert {_home(table, x) for x in crowd} == {7}  # at 7, then 0 and 1
    for slot, at in enumerate(crowd):
        instant_add(table, at, slot)
    assert list(table[1, [7, 0, 1]]) == [0, 1, 2]
    instant_drop(table, crowd[1])  # at 0: the one at 1 moves back past the end
    assert [instant_slot(table, x) for x in crowd] == [0, -1, 2]
    assert list(table[1, [7, 0, 1]]) == [0, 2, -1]
    instant_drop(table, crowd[0])  # at 7, the end: the one at 0 moves back to it
    assert [instant_slot(table, x) for x in crowd] == [-1, -1, 2]
    assert list(table[1, [7, 0, 1]]) == [2, -1, -1]
