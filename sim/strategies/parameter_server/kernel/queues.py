"""The links of the compiled parameter-server engine's flow network as queues
(`net.py` says why that is exact): each link's flows, its count, and,
for a link in queue mode, its virtual clock and the heap of its flows' finishing
virtual times.

Under the share rule a link j is in queue mode when its fair share C_j / n_j is at most
the share of every other link its flows cross; under the budget rule (synchronous runs
over 16 servers or more, `budget.py` says why) when every other link its
flows cross stays within its budget. Max-min fairness then gives each of its flows
exactly that share (progressive filling fixes the least share first, and a link's share
only grows as flows fixed below it leave), so the link is a processor-sharing queue:
its virtual clock V_j counts the bytes each of its flows has received since the link
went into queue mode, a flow finishes when V_j reaches its finishing virtual time, and
a flow starting or ending changes nothing of the others but the clock's speed. Every
flow crossing a queue-mode link is owned by it (no two queue-mode links share a flow);
the flows no queue owns are filled max-min over what the queues leave of each link.

State, in a few packed arrays (rows and columns named below), since numba counts a
reference for every array a function is given: per flow `fint` (owner, transfer,
position in the residual list, its links from column PATH, its place in each link's list
from PATH + width) and `ff`; per link `li` and `lf`; the links' flow lists, heaps'
flows and owners `mi` and the heaps' finishing virtual times `hk`, at `li[MOFF]`, as long
as `li[MCAP]`; the lists `ls`, their lengths in its row COUNTS.
"""

from __future__ import annotations

import numpy as np

from sim.network.unmanaged import bare

# `fint` columns: a flow's owner (a queue-mode link, -1: residual), transfer, place in
# the residual list, its links (PATH ..), its place in each one's list (PATH + width ..)
OWN, FBATCH, RPOS, PATH = range(4)
# `ff` rows: a flow's tolerance (bytes), bytes left and rate (residual flows only); the
# residual fill's bytes left and rates (by place in the residual list); set aside
TOL, LEFT, RATE, RLEFT, RRATE, ASIDE = range(6)
# `mi` rows: the links' flow lists, the flows of their heaps; the queues owning flows on
# each link, each once, and how many of its flows each owns there (what the queues take
# of a link, and which of them own flows on it, are walks over them, not over its flows)
MEM, HFLOW, OQ, ON = range(4)
N_MI = 4
# `li`: a link's flows, where its lists begin, their room, its heap's size, queue mode
# (0 / 1), its flows owned by another link, its count before this event (-1: untouched),
# a mark (candidates); the queues' two calendars, each a heap of links by key (WHEN:
# the first flow's finish; EARLY: the earliest any flow may be done) with each link's
# place in it (-1: absent); under the budget rule, a queue's count its promise holds
# down to, and whether the link waits in the list CHECK
CNT, MOFF, MCAP, HSIZE, QMODE, ELSE, CNT0, MARK, WHEN, EARLY, WHEN_AT, EARLY_AT, PKEEP, CHK = (
    range(14))
# and the length of its list of owners (`mi` OQ, ON), and the place in it found last
NOWN, OLAST = 14, 15
N_LI = 16
# `lf`: a link's capacity, virtual clock, when the clock was last advanced, a lower bound
# of the shares of the links its flows cross (the share rule), its flows' largest
# tolerance, what the queues leave of it (for the residual fill), its keys in the
# calendars WHEN and EARLY, its fair share C / n (kept as its count changes: the walks
# over a link's flows read one number per flow, not two and a division); under the
# budget rule (`budget.py`), a queue's promise, and on a link that is no
# queue the sum of the promises of the queues owning its flows, one per flow, and a
# bound of the greatest of them
CAP, VCLOCK, VTIME, LOWER, MAXTOL, RCAP, WHEN_KEY, EARLY_KEY, SHARE, PCAP, BSUM, MAXP = (
    range(12))
N_LF = 12
# `ls` rows: residual flows, free flow slots, links touched this event, candidate links,
# flows started this event, flows done, links whose budget is to be checked; their
# lengths in row COUNTS (same order, then the sizes of the calendars WHEN and EARLY, and
# the rule the queues follow: SHARE_RULE or BUDGET_RULE)
RES, FFREE, TOUCHED, CAND, NEW, DONE, CHECK, COUNTS = range(8)
WHEN_SIZE, EARLY_SIZE, RULE = 7, 8, 9
SHARE_RULE, BUDGET_RULE = 0, 1


@bare
def share(li, lf, link):  # type: ignore[no-untyped-def]
    return lf[SHARE, link]


@bare
def advance(li, lf, link, now):  # type: ignore[no-untyped-def]
    """A queue-mode link's clock brought to `now` (before its count changes)."""
    if li[QMODE, link] and li[CNT, link] > 0:
        lf[VCLOCK, link] += lf[SHARE, link] * (now - lf[VTIME, link])
    lf[VTIME, link] = now


@bare
def touch(li, ls, link):  # type: ignore[no-untyped-def]
    """Remembers the link's count before this event's first change to it."""
    if li[CNT0, link] < 0:
        li[CNT0, link] = li[CNT, link]
        ls[TOUCHED, ls[COUNTS, TOUCHED]] = link
        ls[COUNTS, TOUCHED] += 1


@bare
def join(li, lf, mi, fint, link, f, p):  # type: ignore[no-untyped-def]
    """Flow f (its p-th link) into the link's list."""
    n = li[CNT, link]
    if n >= li[MCAP, link]:
        raise RuntimeError("more flows on a link than the compiled engine made room for")
    mi[MEM, li[MOFF, link] + n] = f
    fint[f, PATH + (fint.shape[1] - PATH) // 2 + p] = n
    li[CNT, link] = n + 1
    lf[SHARE, link] = lf[CAP, link] / (n + 1)


@bare
def leave(li, lf, mi, fint, link, f, p):  # type: ignore[no-untyped-def]
    """Flow f (its p-th link) out of the link's list: the last one takes its place."""
    width = (fint.shape[1] - PATH) // 2
    base = li[MOFF, link]
    last = li[CNT, link] - 1
    at = fint[f, PATH + width + p]
    g = mi[MEM, base + last]
    mi[MEM, base + at] = g
    for q in range(width):
        if fint[g, PATH + q] == link:
            fint[g, PATH + width + q] = at
    li[CNT, link] = last
    lf[SHARE, link] = lf[CAP, link] / last if last > 0 else np.inf


@bare
def heap_push(li, hk, mi, link, key, f):  # type: ignore[no-untyped-def]
    base = li[MOFF, link]
    i = li[HSIZE, link]
    li[HSIZE, link] = i + 1
    while i > 0:
        parent = (i - 1) // 2
        if hk[base + parent] <= key:
            break
        hk[base + i] = hk[base + parent]
        mi[HFLOW, base + i] = mi[HFLOW, base + parent]
        i = parent
    hk[base + i] = key
    mi[HFLOW, base + i] = f


@bare
def heap_pop(li, hk, mi, link):  # type: ignore[no-untyped-def]
    """Removes the least finishing time of the link's heap; returns its flow."""
    base = li[MOFF, link]
    top = mi[HFLOW, base]
    n = li[HSIZE, link] - 1
    li[HSIZE, link] = n
    if n == 0:
        return top
    key, f = hk[base + n], mi[HFLOW, base + n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and hk[base + child + 1] < hk[base + child]:
            child += 1
        if hk[base + child] >= key:
            break
        hk[base + i] = hk[base + child]
        mi[HFLOW, base + i] = mi[HFLOW, base + child]
        i = child
    hk[base + i] = key
    mi[HFLOW, base + i] = f
    return top


@bare
def res_add(fint, ls, f):  # type: ignore[no-untyped-def]
    fint[f, OWN] = -1
    fint[f, RPOS] = ls[COUNTS, RES]
    ls[RES, ls[COUNTS, RES]] = f
    ls[COUNTS, RES] += 1


@bare
def res_remove(fint, ls, f):  # type: ignore[no-untyped-def]
    at = fint[f, RPOS]
    last = ls[RES, ls[COUNTS, RES] - 1]
    ls[RES, at] = last
    fint[last, RPOS] = at
    ls[COUNTS, RES] -= 1


@bare
def check_later(li, ls, x):  # type: ignore[no-untyped-def]
    """Link x into the list of links whose budget is to be checked, if not in it."""
    if not li[CHK, x]:
        li[CHK, x] = 1
        ls[CHECK, ls[COUNTS, CHECK]] = x
        ls[COUNTS, CHECK] += 1


@bare
def owner_at(li, mi, x, q):  # type: ignore[no-untyped-def]
    """Where queue q is in link x's list of owners (-1: absent); the place found last
    first, since a queue's flows are owned and let go many in a row."""
    base = li[MOFF, x]
    at = li[OLAST, x]
    if at < li[NOWN, x] and mi[OQ, base + at] == q:
        return at
    for i in range(li[NOWN, x]):
        if mi[OQ, base + i] == q:
            li[OLAST, x] = i
            return i
    return -1


@bare
def owner_add(li, mi, x, q):  # type: ignore[no-untyped-def]
    """One more flow on link x owned by queue q."""
    at = owner_at(li, mi, x, q)
    if at < 0:
        at = li[NOWN, x]
        li[NOWN, x] = at + 1
        mi[OQ, li[MOFF, x] + at] = q
        mi[ON, li[MOFF, x] + at] = 0
        li[OLAST, x] = at
    mi[ON, li[MOFF, x] + at] += 1


@bare
def owner_sub(li, mi, x, q):  # type: ignore[no-untyped-def]
    """One flow fewer on link x owned by queue q: a queue owning none there leaves the
    list, the last one taking its place."""
    base = li[MOFF, x]
    at = owner_at(li, mi, x, q)
    mi[ON, base + at] -= 1
    if mi[ON, base + at] == 0:
        last = li[NOWN, x] - 1
        mi[OQ, base + at] = mi[OQ, base + last]
        mi[ON, base + at] = mi[ON, base + last]
        li[NOWN, x] = last


@bare
def taken(li, lf, mi, x):  # type: ignore[no-untyped-def]
    """What the queues take of link x: their shares, one per flow they own on it."""
    used = 0.0
    base = li[MOFF, x]
    for i in range(li[NOWN, x]):
        used += mi[ON, base + i] * lf[SHARE, mi[OQ, base + i]]
    return used


@bare
def own(fint, ff, li, lf, hk, mi, f, link, left):  # type: ignore[no-untyped-def]
    """Flow f, `left` bytes to go, owned by the queue-mode link: the other links it
    crosses count the queue's promise (0 under the share rule)."""
    fint[f, OWN] = link
    promised = lf[PCAP, link]
    for p in range((fint.shape[1] - PATH) // 2):
        x = fint[f, PATH + p]
        if x >= 0 and x != link:
            li[ELSE, x] += 1
            owner_add(li, mi, x, link)
            lf[BSUM, x] += promised
            if promised > lf[MAXP, x]:
                lf[MAXP, x] = promised
    heap_push(li, hk, mi, link, lf[VCLOCK, link] + left, f)
    if ff[TOL, f] > lf[MAXTOL, link]:
        lf[MAXTOL, link] = ff[TOL, f]


@bare
def disown(fint, li, lf, mi, f, link):  # type: ignore[no-untyped-def]
    """Flow f no longer owned by the queue-mode link: the other links it crosses
    release the queue's promise (exactly 0 once they count none)."""
    for p in range((fint.shape[1] - PATH) // 2):
        x = fint[f, PATH + p]
        if x >= 0 and x != link:
            li[ELSE, x] -= 1
            owner_sub(li, mi, x, link)
            if li[ELSE, x] == 0:
                lf[BSUM, x] = 0.0
                lf[MAXP, x] = 0.0
            else:
                lf[BSUM, x] -= lf[PCAP, link]


@bare
def least_partner(li, lf, mi, fint, link):  # type: ignore[no-untyped-def]
    """The least share of the other links the link's flows cross, or, as soon as one
    is below the link's own share (so that it is no queue), that one's."""
    least = np.inf
    mine = lf[SHARE, link]
    base = li[MOFF, link]
    for i in range(li[CNT, link]):
        f = mi[MEM, base + i]
        for p in range((fint.shape[1] - PATH) // 2):
            x = fint[f, PATH + p]
            if x >= 0 and x != link:
                s = lf[SHARE, x]
                if s < least:
                    least = s
                    if s < mine:
                        return least
    return least


@bare
def _sift(li, lf, ls, which, i):  # type: ignore[no-untyped-def]
    """Restores calendar `which` (WHEN or EARLY) around place i, up or down."""
    at, key, size = which + 2, which - WHEN + WHEN_KEY, ls[COUNTS, which - WHEN + WHEN_SIZE]
    link = li[which, i]
    k = lf[key, link]
    while i > 0:
        parent = (i - 1) // 2
        above = li[which, parent]
        if lf[key, above] <= k:
            break
        li[which, i] = above
        li[at, above] = i
        i = parent
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and lf[key, li[which, child + 1]] < lf[key, li[which, child]]:
            child += 1
        below = li[which, child]
        if lf[key, below] >= k:
            break
        li[which, i] = below
        li[at, below] = i
        i = child
    li[which, i] = link
    li[at, link] = i


@bare
def calendar_set(li, lf, ls, which, link, key):  # type: ignore[no-untyped-def]
    """The link's key in calendar `which` (WHEN or EARLY), entered if absent."""
    lf[which - WHEN + WHEN_KEY, link] = key
    i = li[which + 2, link]
    if i < 0:
        i = ls[COUNTS, which - WHEN + WHEN_SIZE]
        ls[COUNTS, which - WHEN + WHEN_SIZE] += 1
        li[which, i] = link
        li[which + 2, link] = i
    _sift(li, lf, ls, which, i)


@bare
def calendar_remove(li, lf, ls, which, link):  # type: ignore[no-untyped-def]
    """The link out of calendar `which`, if in it."""
    i = li[which + 2, link]
    if i < 0:
        return
    li[which + 2, link] = -1
    size = ls[COUNTS, which - WHEN + WHEN_SIZE] - 1
    ls[COUNTS, which - WHEN + WHEN_SIZE] = size
    if i < size:
        last = li[which, size]
        li[which, i] = last
        li[which + 2, last] = i
        _sift(li, lf, ls, which, i)


@bare
def demote(fint, ff, li, lf, hk, mi, ls, link, now):  # type: ignore[no-untyped-def]
    """The link leaves queue mode: its flows become residual, with the bytes they have
    left; under the budget rule the other links they cross are to be checked (they
    carry more residual flows)."""
    advance(li, lf, link, now)
    base = li[MOFF, link]
    clock = lf[VCLOCK, link]
    width = (fint.shape[1] - PATH) // 2
    budget = ls[COUNTS, RULE] == BUDGET_RULE
    for i in range(li[HSIZE, link]):
        f = mi[HFLOW, base + i]
        ff[LEFT, f] = hk[base + i] - clock
        disown(fint, li, lf, mi, f, link)
        res_add(fint, ls, f)
        if budget:
            for p in range(width):
                x = fint[f, PATH + p]
                if x >= 0 and x != link:
                    check_later(li, ls, x)
    li[HSIZE, link] = 0
    li[QMODE, link] = 0
    calendar_remove(li, lf, ls, WHEN, link)
    calendar_remove(li, lf, ls, EARLY, link)
    lf[VCLOCK, link] = 0.0
    lf[MAXTOL, link] = 0.0
    lf[PCAP, link] = 0.0


@bare
def kept(n):  # type: ignore[no-untyped-def]
    """The count a promise made at count n holds down to: 7/8 of n, rounded up."""
    return n - n // 8


@bare
def promise(li, lf, link):  # type: ignore[no-untyped-def]
    """The queue's promise under the budget rule: its share at `kept` of its count, so
    that it holds while an eighth of its flows end (`budget.py`)."""
    keep = kept(li[CNT, link])
    li[PKEEP, link] = keep
    lf[PCAP, link] = lf[CAP, link] / keep


@bare
def promote(fint, ff, li, lf, mi, hk, ls, link, lower, now):  # type: ignore[no-untyped-def]
    """The link, every flow of it residual, goes into queue mode: with `lower`, the
    least share of the links its flows cross, under the share rule; with its promise
    under the budget rule."""
    if ls[COUNTS, RULE] == BUDGET_RULE:
        promise(li, lf, link)
    li[QMODE, link] = 1
    lf[VCLOCK, link] = 0.0
    lf[VTIME, link] = now
    lf[LOWER, link] = lower
    lf[MAXTOL, link] = 0.0
    base = li[MOFF, link]
    for i in range(li[CNT, link]):
        f = mi[MEM, base + i]
        res_remove(fint, ls, f)
        own(fint, ff, li, lf, hk, mi, f, link, ff[LEFT, f])
