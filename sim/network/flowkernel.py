"""The flow network's compiled kernel (numba): max-min fair rates and the next completion.

`FlowNetwork` (backends.py) keeps its flows in flight as arrays and asks this module,
on every start and end of a flow, for the rates of all of them and for the time until the
first one finishes. `solve` does both in one compiled pass: the same progressive filling
as `sim.network.backends.max_min_rates` (the tightest link's fair share, residual capacity over the
unfixed flows crossing it, goes to every unfixed flow through a link that tight; repeat on
what is left), with the same arithmetic in the same order, so its rates are the numpy
version's to the last bit, and the tests hold the two equal on random networks.

Importing this module compiles nothing: numba compiles `solve` on its first call, and caches
the machine code next to this file (`cache=True`), so a later process loads it. The flow
network imports it only once it has solved many times over many flows
(`sim.network.backends.COMPILED_FROM`, `COMPILED_AFTER_S`), so runs that never share links
among many flows, or do so a few times (a collective on an idle network), never load numba;
the compiled parameter-server engine (`sim/strategies/parameter_server/kernel/loop.py`)
calls `fill` itself.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .unmanaged import bare


@njit(cache=True)
def scratch(n_links: int, max_flows: int, width: int) -> tuple:  # type: ignore[type-arg]
    """The work arrays of `fill` for up to `max_flows` flows of up to `width` links over
    `n_links` links; `fill` leaves them ready for the next call."""
    return (
        np.empty(n_links),  # residual capacity of each link
        np.zeros(n_links, dtype=np.int64),  # unfixed flows crossing each link (kept 0)
        np.zeros(n_links, dtype=np.int64),  # flows fixed on each link this round (kept 0)
        np.empty(n_links, dtype=np.int64),  # where each link's flows begin in `members`
        np.empty(n_links, dtype=np.int64),  # ... and end
        np.empty(n_links, dtype=np.int64),  # the links some unfixed flow crosses
        np.empty(n_links, dtype=np.int64),  # the links tight this round
        np.empty(max_flows * width, dtype=np.int64),  # the flows crossing each link
        np.zeros(max_flows, dtype=np.bool_),  # fixed
    )


@bare
def _list_flows(
    paths: np.ndarray,
    n_flows: int,
    capacity: np.ndarray,
    rates: np.ndarray,
    work: tuple,  # type: ignore[type-arg]
) -> int:
    """`fill`'s start: every flow unfixed at rate 0, each link crossed its full capacity,
    its count of flows and the list of them (`members[begin[link]:end[link]]`); returns
    how many links some flow crosses (listed first in `active`)."""
    residual, counts, _, begin, end, active, _, members, fixed = work
    width = paths.shape[1]
    n_active = 0
    for f in range(n_flows):
        rates[f] = 0.0
        fixed[f] = False
        for p in range(width):
            link = paths[f, p]
            if link >= 0:
                if counts[link] == 0:
                    active[n_active] = link
                    n_active += 1
                    residual[link] = capacity[link]
                counts[link] += 1
    at = 0
    for u in range(n_active):
        link = active[u]
        begin[link] = at
        end[link] = at
        at += counts[link]
    for f in range(n_flows):
        for p in range(width):
            link = paths[f, p]
            if link >= 0:
                members[end[link]] = f
                end[link] += 1
    return n_active


@bare
def fill(
    paths: np.ndarray,
    n_flows: int,
    capacity: np.ndarray,
    remaining: np.ndarray,
    rates: np.ndarray,
    work: tuple,  # type: ignore[type-arg]
) -> float:
    """Max-min fair rates of the first `n_flows` flows of `paths` into `rates`; returns
    min(remaining / rates), the seconds until the first of them finishes.

    paths: (flows, max path) link indices padded with -1; capacity: (links,) bytes/s;
    work: `scratch`'s arrays. Each link keeps the list of the flows crossing it; a round
    is one pass over the links some unfixed flow still crosses, then the flows of the
    tight ones: a link is tight once (its flows are all fixed then), so the rounds cost
    the links' count each, and the flows' incidences once in all.
    """
    residual, counts, removed, begin, end, active, tight, members, fixed = work
    width = paths.shape[1]
    n_active = _list_flows(paths, n_flows, capacity, rates, work)
    while n_active > 0:
        fair = np.inf
        for u in range(n_active):
            link = active[u]
            share = residual[link] / counts[link]
            if share < fair:
                fair = share
        limit = fair * (1 + 1e-12)
        # every link as tight as `fair` before any is changed (one round of the numpy solve)
        n_tight = 0
        for u in range(n_active):
            link = active[u]
            if residual[link] / counts[link] <= limit:
                tight[n_tight] = link
                n_tight += 1
        for t in range(n_tight):
            link = tight[t]
            for i in range(begin[link], end[link]):
                f = members[i]
                if not fixed[f]:
                    fixed[f] = True
                    rates[f] = fair
                    for p in range(width):
                        crossed = paths[f, p]
                        if crossed >= 0:
                            removed[crossed] += 1
        kept = 0
        for u in range(n_active):
            link = active[u]
            if removed[link] > 0:
                # as numpy's `residual -= bincount * fair`, then clamped at 0
                residual[link] -= removed[link] * fair
                if residual[link] < 0.0:
                    residual[link] = 0.0
                counts[link] -= removed[link]
                removed[link] = 0
            if counts[link] > 0:
                active[kept] = link
                kept += 1
        n_active = kept
    first = np.inf
    for f in range(n_flows):
        left = remaining[f] / rates[f]
        if left != left:  # nan (0 / 0), as numpy's min would return it
            return left
        if left < first:
            first = left
    return first


def solve(
    paths: np.ndarray, capacity: np.ndarray, remaining: np.ndarray
) -> tuple[np.ndarray, float]:
    """(max-min fair rates of the flows, seconds until the first of them finishes).

    paths: (flows, max path) int64 link indices padded with -1; capacity: (links,);
    remaining: (flows,) bytes each has left.
    """
    n_flows, width = paths.shape
    rates = np.empty(n_flows)
    first = fill(paths, n_flows, capacity, remaining, rates, scratch(len(capacity), n_flows, width))
    return rates, float(first)
