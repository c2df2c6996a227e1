"""The compiled parameter-server engine's lists of owners (`kernel/queues.py`): each link
lists the queues owning flows on it, each once, with how many. Against the flows
themselves: whatever the order queues take and let go of flows, the list holds exactly
the queues owning some, with their counts; what the queues take of the link (`taken`) is
their shares summed flow by flow; and the queue with the greatest promise among them
(`greatest_owner`) is the one a walk over the flows finds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from sim.strategies.parameter_server.kernel.budget import greatest_owner  # noqa: E402
from sim.strategies.parameter_server.kernel.queues import (  # noqa: E402
    CAP,
    MCAP,
    N_LF,
    N_LI,
    N_MI,
    NOWN,
    ON,
    OQ,
    PCAP,
    SHARE,
    owner_add,
    owner_sub,
    taken,
)

LINKS = 6  # link 0 carries the flows; links 1-5 are the queues owning them
ROOM = 40


def _arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    li = np.zeros((N_LI, LINKS), dtype=np.int64)
    li[MCAP] = ROOM
    lf = np.zeros((N_LF, LINKS))
    lf[CAP] = 1e9
    lf[SHARE, 1:] = [3e6, 1.25e7, 7e5, 4.4e7, 1e8 / 3]  # each queue's share
    lf[PCAP, 1:] = [5e6, 2e7, 5e6, 1e6, 2e7]  # promises, ties included
    return li, lf, np.zeros((N_MI, ROOM * LINKS), dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, LINKS - 1)), max_size=ROOM))
def test_the_list_is_the_flows_owners(ops: list[tuple[bool, int]]) -> None:
    li, lf, mi = _arrays()
    flows: list[int] = []  # the owner of each flow owned on link 0, in the order owned
    for add, q in ops:
        if add:
            owner_add(li, mi, 0, q)
            flows.append(q)
        elif q in flows:
            owner_sub(li, mi, 0, q)
            flows.remove(q)
        n = li[NOWN, 0]
        listed = dict(zip(mi[OQ, :n].tolist(), mi[ON, :n].tolist(), strict=True))
        assert len(listed) == n  # each queue once
        assert listed == {q: flows.count(q) for q in set(flows)}
        by_flow = sum(lf[SHARE, q] for q in flows)
        assert taken(li, lf, mi, 0) == pytest.approx(by_flow, rel=1e-12, abs=0.0)
        greatest = max((lf[PCAP, q] for q in flows), default=None)
        found = greatest_owner(li, lf, mi, 0)
        if greatest is None:
            assert found == -1
        else:
            assert lf[PCAP, found] == greatest and found in flows
