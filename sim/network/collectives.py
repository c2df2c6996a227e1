"""All-reduce algorithms as straight-line code over `Network.transfers` (STYLE.md rule 5).

Each is a generator `algorithm(net, ranks, nbytes, costs)` that a SimPy process runs
with `yield from`; `ranks` are endpoint ids in ring order. One flow per link per phase
stands for the phase's back-to-back messages (`messages=`), so the cost is O(ranks) per
phase, whatever the size or number of chunks (STYLE.md rule 6). `costs` (the cost model's
`CollectiveCosts`) adds what the library costs beyond the links: a launch before the
first step, and each step's latency in place of the route's (NCCL's per-step latencies);
reductions cross the receiver's memory (`reduce=True`, where the topology models it); over
TCP each flow between hosts moves at most the library's connections x what one connection
carries (`costs.ceiling`), so a ring over TCP takes 2(N-1)(alpha + S/(N min(B, C))).
Gloo's chunked ring walks the whole buffer in 2N chunks per phase (`ring_phase`):
4N alpha + 2S/B.

Closed forms without contention (alpha latency, B bandwidth, S bytes, N ranks):
  ring              2(N-1)(alpha + S/(N B))                          (Patarasuk & Yuan 2009)
  halving_doubling  2 lg N alpha + 2 S (N-1)/(N B), N a power of 2   (Rabenseifner 2004)
  hierarchical      chain reduce in each host, ring over the hosts' roots, chain broadcast
                    (Goyal et al. 2017; NCCL's intra-node reduce / broadcast)
  tree              NCCL's double binary tree: S/2 up and down each of two trees
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator, Sequence
from typing import Any

from sim.costs import NO_COLLECTIVE_COSTS, CollectiveCosts

from .backends import Network

Process = Generator[Any, Any, None]
Algorithm = Callable[[Network, Sequence[int], float, CollectiveCosts], Process]


def ring(
    net: Network, ranks: Sequence[int], nbytes: float, costs: CollectiveCosts = NO_COLLECTIVE_COSTS
) -> Process:
    """Ring all-reduce: reduce-scatter then all-gather, N-1 steps of S/N bytes each."""
    yield from ring_reduce_scatter(net, ranks, nbytes, costs)
    yield from ring_all_gather(net, ranks, nbytes, costs, launch=False)


def ring_phase(n: int, nbytes: float, costs: CollectiveCosts) -> tuple[float, int]:
    """Bytes over each ring link and its messages in one phase of a ring of n ranks over
    S bytes: N - 1 steps of S / N, or where the library walks the whole buffer in k
    chunks per rank (Gloo's chunked ring, k = 2) k N steps of S / (k N)."""
    chunks = costs.ring_chunks_per_rank
    if chunks:
        return float(nbytes), chunks * n
    return (n - 1) * nbytes / n, n - 1


def ring_reduce_scatter(
    net: Network, ranks: Sequence[int], nbytes: float, costs: CollectiveCosts = NO_COLLECTIVE_COSTS
) -> Process:
    """Ring reduce-scatter of S bytes: in N-1 steps every link carries one chunk of S/N
    per step, reduced on arrival; rank i ends with the sum of chunk i. (N-1)(alpha +
    S/(N B)) without contention."""
    n = len(ranks)
    if n < 2 or nbytes <= 0:
        return
    links = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    moved, messages = ring_phase(n, nbytes, costs)
    yield net.transfers(
        links,
        moved,
        messages=messages,
        setup=costs.launch_s,
        step=costs.step_s,
        reduce=True,
        ceiling=costs.ceiling,
    )


def ring_all_gather(
    net: Network,
    ranks: Sequence[int],
    nbytes: float,
    costs: CollectiveCosts = NO_COLLECTIVE_COSTS,
    launch: bool = True,
) -> Process:
    """Ring all-gather of S bytes (S/N from each rank): the reduce-scatter's traffic
    without the reduction, (N-1)(alpha + S/(N B)); `launch`: a collective of its own, not
    the second half of an all-reduce."""
    n = len(ranks)
    if n < 2 or nbytes <= 0:
        return
    links = [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    setup = costs.launch_s if launch else 0.0
    moved, messages = ring_phase(n, nbytes, costs)
    yield net.transfers(
        links,
        moved,
        messages=messages,
        setup=setup,
        step=costs.step_s,
        ceiling=costs.ceiling,
    )


def halving_doubling(
    net: Network, ranks: Sequence[int], nbytes: float, costs: CollectiveCosts = NO_COLLECTIVE_COSTS
) -> Process:
    """Rabenseifner: recursive-halving reduce-scatter, recursive-doubling all-gather.

    For N not a power of two, the first 2r ranks (r = N - 2^floor(lg N)) pair up: the even
    one hands its whole vector to the odd one before, and gets the result back after.
    """
    n = len(ranks)
    if n < 2 or nbytes <= 0:
        return
    step, launch, ceiling = costs.step_s, costs.launch_s, costs.ceiling
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    if extra:
        pairs = [(ranks[2 * i], ranks[2 * i + 1]) for i in range(extra)]
        yield net.transfers(pairs, nbytes, setup=launch, step=step, reduce=True, ceiling=ceiling)
        launch = 0.0
    # the p active ranks: the odd ones of the first 2r, then everyone after them
    active = [ranks[2 * i + 1] for i in range(extra)] + list(ranks[2 * extra :])
    distances = [p >> (k + 1) for k in range(p.bit_length() - 1)]  # p/2, p/4, ..., 1
    size = float(nbytes)
    for d in distances:  # reduce-scatter: exchange half of what is left with rank ^ d
        size /= 2
        pairs = [(active[i], active[i ^ d]) for i in range(p)]
        yield net.transfers(pairs, size, setup=launch, step=step, reduce=True, ceiling=ceiling)
        launch = 0.0
    for d in reversed(distances):  # all-gather: double it back
        pairs = [(active[i], active[i ^ d]) for i in range(p)]
        yield net.transfers(pairs, size, step=step, ceiling=ceiling)
        size *= 2
    if extra:
        pairs = [(ranks[2 * i + 1], ranks[2 * i]) for i in range(extra)]
        yield net.transfers(pairs, nbytes, step=step, ceiling=ceiling)


def hierarchical(
    net: Network, ranks: Sequence[int], nbytes: float, costs: CollectiveCosts = NO_COLLECTIVE_COSTS
) -> Process:
    """Reduce inside each host, ring all-reduce across hosts, broadcast inside each host.

    Intra-host reduce and broadcast are pipelined chains (NCCL's ring reduce / broadcast):
    D - 1 latencies to fill the pipeline, then S bytes over every chain link.
    """
    if len(ranks) < 2 or nbytes <= 0:
        return
    host_of = net.topology.host_of
    hosts: dict[int, list[int]] = {}
    for r in ranks:
        hosts.setdefault(int(host_of[r]), []).append(r)
    groups = list(hosts.values())
    depth = max(len(g) for g in groups) - 1
    chain = [(g[i + 1], g[i]) for g in groups for i in range(len(g) - 1)]
    step, launch = costs.step_s, costs.launch_s
    # the chains stay inside hosts: no ceiling applies to them
    if chain:
        yield net.transfers(chain, nbytes, messages=depth, setup=launch, step=step, reduce=True)
        launch = 0.0
    across = dataclasses.replace(costs, launch_s=launch)
    yield from ring(net, [g[0] for g in groups], nbytes, across)
    if chain:
        broadcast = [(dst, src) for src, dst in chain]
        yield net.transfers(broadcast, nbytes, messages=depth, step=step)


def btree_parents(n: int) -> list[int]:
    """Parent of every rank in NCCL's binary tree (`ncclGetBtree`); -1 for the root (0).

    Rank r > 0 with lowest set bit b hangs under (r ^ b) | 2b, or under r ^ b when that
    is out of range: an in-order tree of depth ceil(lg n) whose leaves are the even ranks.
    """
    parents = [-1] * n
    for r in range(1, n):
        bit = r & -r
        up = (r ^ bit) | (bit << 1)
        parents[r] = up if up < n else r ^ bit
    return parents


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """NCCL's two complementary trees (`ncclGetDtree`): the second mirrors the first
    (n even) or shifts it by one (n odd), so that most interior ranks of one tree are
    leaves of the other and every rank sends and receives about S in each phase."""
    first = btree_parents(n)
    second = [-1] * n
    for r in range(n):
        if n % 2 == 0:
            up = first[n - 1 - r]
            second[r] = -1 if up < 0 else n - 1 - up
        else:
            up = first[(r - 1) % n]
            second[r] = -1 if up < 0 else (up + 1) % n
    return first, second


def tree_depth(parents: Sequence[int]) -> int:
    depth = 0
    for r in range(len(parents)):
        d, node = 0, r
        while parents[node] >= 0:
            node, d = parents[node], d + 1
        depth = max(depth, d)
    return depth


def tree(
    net: Network, ranks: Sequence[int], nbytes: float, costs: CollectiveCosts = NO_COLLECTIVE_COSTS
) -> Process:
    """Double binary tree: each half of the data is reduced up one tree and broadcast down
    it, both trees at once, pipelined (depth latencies to fill, then the bytes)."""
    n = len(ranks)
    if n < 2 or nbytes <= 0:
        return
    trees = double_binary_tree(n)
    depth = max(tree_depth(t) for t in trees)
    up = [(ranks[r], ranks[t[r]]) for t in trees for r in range(n) if t[r] >= 0]
    step, ceiling = costs.step_s, costs.ceiling
    yield net.transfers(
        up,
        nbytes / 2,
        messages=depth,
        setup=costs.launch_s,
        step=step,
        reduce=True,
        ceiling=ceiling,
    )
    down = [(dst, src) for src, dst in up]
    yield net.transfers(down, nbytes / 2, messages=depth, step=step, ceiling=ceiling)


ALGORITHMS: dict[str, Algorithm] = {
    "ring": ring,
    "hierarchical": hierarchical,
    "tree": tree,
    "halving_doubling": halving_doubling,
}
