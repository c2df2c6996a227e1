"""The flow network of the compiled parameter-server engine (`loop.py`): the
same max-min fair rates as `FlowNetwork`, without solving for every flow on every event.

Every route crosses a sender's link and a receiver's. A link whose fair share C / n is
at most the share of every other link its flows cross (the share rule; synchronous runs
over many servers follow the budget rule of `budget.py`) gives each of
them exactly that share (`queues.py` says why): it runs as a
processor-sharing queue, with a virtual clock and a heap of its flows' finishing times,
so a flow starting or ending there costs O(log n) and changes nothing else. At a
parameter server that is the rule: its share is the least once more workers send to it
than a worker has flows. The flows no queue owns (as traffic ramps up or drains) are
filled max-min (`sim.network.flowkernel.fill`) over what the queues leave of each link. What the
flows get is what `FlowNetwork`'s full solve gives them, to rounding; the tests hold the
two engines equal.

An event: flows start (`START`: they join their links, a queue takes the ones that keep
it a queue, and a link whose share fell below a queue's makes that queue residual) or
the first ones may be done (`WAKE`: the residual flows and the queues whose first flow
is due are checked, with `FlowNetwork._complete`'s tolerance); then links that now
qualify become queues, the residual flows are filled, and the next wake-up is the
earliest of the queues' (a calendar of their keys, stale ones skipped) and the
residual flows'.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from sim.network.flowkernel import fill
from sim.network.unmanaged import bare, stable_sort

from .budget import qualifies, rebudget, room, settle
from .calendar import (
    LAST,
    NFLOWS,
    NPFREE,
    NSFREE,
    PBATCH,
    PDIR,
    PFREE,
    PJ,
    PNEXT,
    PULL,
    PW,
    SFREE,
    SHEAD,
    WAKE,
    WAKE_AT,
    WAKESEQ,
    XID,
)
from .queues import (
    ASIDE,
    CAND,
    CAP,
    CNT,
    CNT0,
    COUNTS,
    DONE,
    EARLY,
    EARLY_AT,
    EARLY_KEY,
    EARLY_SIZE,
    ELSE,
    FBATCH,
    FFREE,
    HSIZE,
    LEFT,
    LOWER,
    MARK,
    MAXTOL,
    MCAP,
    MOFF,
    N_LF,
    N_LI,
    N_MI,
    NEW,
    NOWN,
    OQ,
    OWN,
    PATH,
    PCAP,
    QMODE,
    RATE,
    RCAP,
    RES,
    RLEFT,
    RRATE,
    RULE,
    SHARE,
    SHARE_RULE,
    TOL,
    TOUCHED,
    VCLOCK,
    WHEN,
    WHEN_AT,
    WHEN_KEY,
    WHEN_SIZE,
    advance,
    calendar_remove,
    calendar_set,
    demote,
    disown,
    heap_pop,
    heap_push,
    join,
    least_partner,
    leave,
    own,
    promote,
    res_add,
    res_remove,
    share,
    taken,
    touch,
)


@njit(cache=True)
def net_state(capacity, pull_paths, push_paths, held, most, rule):  # type: ignore[no-untyped-def]
    """The network's arrays (`queues.py` names their rows), its queues
    following `rule` (SHARE_RULE, BUDGET_RULE): room on each link for twice the flows
    that can cross it at once in a step (a worker's pull or push of shard j is a flow
    per part it holds, `held[j]`; a late worker's pushes may still be in flight when it
    pushes again), and the residual fill's links."""
    n, shards, width = pull_paths.shape
    links = capacity.shape[0]
    li = np.zeros((N_LI, links), dtype=np.int64)
    lf = np.zeros((N_LF, links))
    lf[CAP] = capacity
    lf[SHARE] = np.inf
    li[CNT0] = -1
    li[WHEN_AT] = -1
    li[EARLY_AT] = -1
    room = np.zeros(links, dtype=np.int64)
    for w in range(n):
        for j in range(shards):
            for k in range(width):
                for paths in (pull_paths, push_paths):
                    if paths[w, j, k] >= 0:
                        room[paths[w, j, k]] += 2 * held[j]
    at = 0
    for link in range(links):
        li[MOFF, link] = at
        li[MCAP, link] = room[link]
        at += room[link]
    fint = np.zeros((most, PATH + 2 * width), dtype=np.int64)
    fint[:, PATH:PATH + width] = -1
    ls = np.zeros((COUNTS + 1, max(most, links, RULE + 1)), dtype=np.int64)
    ls[COUNTS, RULE] = rule
    ls[FFREE, :most] = np.arange(most - 1, -1, -1)
    ls[COUNTS, FFREE] = most
    mi = np.zeros((N_MI, max(at, 1)), dtype=np.int64)
    rpaths = np.full((most, width), -1, dtype=np.int64)
    return fint, np.zeros((6, most)), li, lf, mi, np.zeros(max(at, 1)), ls, rpaths


@bare
def sliver(nbytes):  # type: ignore[no-untyped-def]
    """What a flow of `nbytes` may have left and be done: float rounding of rate x time
    (FlowNetwork's tolerance)."""
    return nbytes * 1e-9 + 1e-9


@bare
def clock_resolution(now):  # type: ignore[no-untyped-def]
    """Four of the clock's least steps at `now`: a flow with less time than that left is
    done (FlowNetwork._complete), else now + its time could stay now."""
    scale = max(abs(now), 1.0)
    return 4 * (np.nextafter(scale, np.inf) - scale)


@bare
def start(slot, now, pull_paths, push_paths, slots, slotf, c, net):  # type: ignore[no-untyped-def]
    """The flows waiting for the instant `slot` (out of `slot_of` already) join their
    links, residual for now."""
    fint, ff, li, lf, mi, ls = net[0], net[1], net[2], net[3], net[4], net[6]
    width = pull_paths.shape[2]
    p = slots[SHEAD, slot]
    while p >= 0:
        j, w = slots[PJ, p], slots[PW, p]
        paths = pull_paths if slots[PDIR, p] == PULL else push_paths
        if ls[COUNTS, FFREE] == 0:
            raise RuntimeError("more flows than the compiled engine made room for")
        ls[COUNTS, FFREE] -= 1
        f = ls[FFREE, ls[COUNTS, FFREE]]
        for k in range(width):
            link = paths[w, j, k]
            fint[f, PATH + k] = link
            if link >= 0:
                advance(li, lf, link, now)
                touch(li, ls, link)
                join(li, lf, mi, fint, link, f, k)
        ff[LEFT, f] = slotf[0, p]
        ff[TOL, f] = sliver(slotf[0, p])
        ff[RATE, f] = 0.0
        fint[f, FBATCH] = slots[PBATCH, p]
        res_add(fint, ls, f)
        ls[NEW, ls[COUNTS, NEW]] = f
        ls[COUNTS, NEW] += 1
        c[NFLOWS] += 1
        nxt = slots[PNEXT, p]
        slots[PFREE, c[NPFREE]] = p
        c[NPFREE] += 1
        p = nxt
    slots[SFREE, c[NSFREE]] = slot
    c[NSFREE] += 1


@bare
def absorb(now, fint, ff, li, lf, mi, hk, ls):  # type: ignore[no-untyped-def]
    """The flows just started: a queue-mode link they cross takes each one whose other
    links' shares are no less than its own (the share rule) or stay within budget with
    its promise (the budget rule, `budget.py`), or leaves queue mode;
    then, under the share rule, every queue owning flows on a link whose share fell
    below its own leaves queue mode."""
    width = (fint.shape[1] - PATH) // 2
    by_share = ls[COUNTS, RULE] == SHARE_RULE
    for i in range(ls[COUNTS, NEW]):
        f = ls[NEW, i]
        for p in range(width):
            q = fint[f, PATH + p]
            if q < 0 or not li[QMODE, q]:
                continue
            mine = share(li, lf, q)
            promised = lf[PCAP, q]
            ok = fint[f, OWN] < 0
            for k in range(width):
                x = fint[f, PATH + k]
                if x >= 0 and x != q:
                    if by_share:
                        other = share(li, lf, x)
                        lf[LOWER, q] = min(lf[LOWER, q], other)
                        ok = ok and mine <= other
                    elif ok:
                        ok = room(li, lf, mi, x, promised, promised, 1)
            if ok:
                res_remove(fint, ls, f)
                own(fint, ff, li, lf, hk, mi, f, q, ff[LEFT, f])
            else:
                demote(fint, ff, li, lf, hk, mi, ls, q, now)
    ls[COUNTS, NEW] = 0
    if not by_share:
        return
    for t in range(ls[COUNTS, TOUCHED]):
        x = ls[TOUCHED, t]
        if li[QMODE, x] or li[ELSE, x] == 0 or li[CNT, x] <= li[CNT0, x]:
            continue
        theirs = share(li, lf, x)
        base = li[MOFF, x]
        # the queues owning flows on x, from the last: a queue leaving queue mode leaves
        # the list, the last one (seen already) taking its place
        for i in range(li[NOWN, x] - 1, -1, -1):
            q = mi[OQ, base + i]
            lf[LOWER, q] = min(lf[LOWER, q], theirs)
            if share(li, lf, q) > theirs:
                demote(fint, ff, li, lf, hk, mi, ls, q, now)


@bare
def due(now, ff, li, lf, mi, hk, ls):  # type: ignore[no-untyped-def]
    """The flows done now, into the list DONE: residual flows and the flows of the
    queues whose first may be due, with less than their tolerance left, or less time
    left than the clock can resolve (FlowNetwork._complete)."""
    resolution = clock_resolution(now)
    n_done = 0
    for i in range(ls[COUNTS, RES]):
        f = ls[RES, i]
        if ff[LEFT, f] <= ff[TOL, f] or ff[LEFT, f] <= ff[RATE, f] * resolution:
            ls[DONE, n_done] = f
            n_done += 1
    while ls[COUNTS, EARLY_SIZE] > 0 and lf[EARLY_KEY, li[EARLY, 0]] <= now:
        link = li[EARLY, 0]
        calendar_remove(li, lf, ls, EARLY, link)
        advance(li, lf, link, now)
        touch(li, ls, link)
        rate = share(li, lf, link)
        near = max(lf[MAXTOL, link], rate * resolution)
        base = li[MOFF, link]
        clock = lf[VCLOCK, link]
        n_aside = 0
        while li[HSIZE, link] > 0 and hk[base] - clock <= near:
            key = hk[base]
            f = heap_pop(li, hk, mi, link)
            left = key - clock
            if left <= ff[TOL, f] or left <= rate * resolution:
                ls[DONE, n_done] = f
                n_done += 1
            else:
                ff[ASIDE, n_aside] = key
                ls[CAND, n_aside] = f
                n_aside += 1
        for i in range(n_aside):
            heap_push(li, hk, mi, link, ff[ASIDE, i], ls[CAND, i])
    ls[COUNTS, DONE] = n_done


@bare
def remove(now, c, slots, finished_slots, finished_ids, fint, li, lf, mi, ls):  # type: ignore[no-untyped-def]
    """The flows done leave their links (their queues have already let them go); their
    transfers into finished_slots, those transfers' order of creation in finished_ids."""
    width = (fint.shape[1] - PATH) // 2
    for i in range(ls[COUNTS, DONE]):
        f = ls[DONE, i]
        finished_slots[i] = fint[f, FBATCH]
        finished_ids[i] = slots[XID, fint[f, FBATCH]]
        q = fint[f, OWN]
        if q >= 0:
            disown(fint, li, lf, mi, f, q)
        else:
            res_remove(fint, ls, f)
        for k in range(width):
            link = fint[f, PATH + k]
            if link >= 0:
                advance(li, lf, link, now)
                touch(li, ls, link)
                leave(li, lf, mi, fint, link, f, k)
        ls[FFREE, ls[COUNTS, FFREE]] = f
        ls[COUNTS, FFREE] += 1
        c[NFLOWS] -= 1
    return ls[COUNTS, DONE]


@bare
def released(now, fint, ff, li, lf, mi, hk, ls):  # type: ignore[no-untyped-def]
    """After flows ended, under the share rule: an empty queue closes; one whose share
    rose above the least share its flows' other links may have (its bound, renewed where
    it no longer holds) leaves queue mode."""
    for t in range(ls[COUNTS, TOUCHED]):
        x = ls[TOUCHED, t]
        if not li[QMODE, x]:
            continue
        if li[CNT, x] == 0:
            demote(fint, ff, li, lf, hk, mi, ls, x, now)
        elif li[CNT, x] < li[CNT0, x] and share(li, lf, x) > lf[LOWER, x]:
            lf[LOWER, x] = least_partner(li, lf, mi, fint, x)
            if share(li, lf, x) > lf[LOWER, x]:
                demote(fint, ff, li, lf, hk, mi, ls, x, now)


@bare
def enqueue(now, fint, ff, li, lf, mi, hk, ls):  # type: ignore[no-untyped-def]
    """The links the residual flows cross that now qualify become queues, the least
    share first."""
    width = (fint.shape[1] - PATH) // 2
    n_cand = 0
    for i in range(ls[COUNTS, RES]):
        f = ls[RES, i]
        for k in range(width):
            link = fint[f, PATH + k]
            if link >= 0 and not li[MARK, link]:
                li[MARK, link] = 1
                ls[CAND, n_cand] = link
                n_cand += 1
    # a link some queue owns flows on cannot become one, nor can it once a link is
    # promoted below (that only adds owners). Under the share rule whether a link
    # qualifies depends on the links' counts alone, which promoting changes not: the
    # links that do are found first (their least partner's share in LOWER, unused
    # outside queue mode) and only they are ordered. Under the budget rule a promotion
    # spends budget the next ones need: every candidate is ordered, then tried.
    by_share = ls[COUNTS, RULE] == SHARE_RULE
    n_found = n_cand
    n_cand = 0
    for i in range(n_found):
        link = ls[CAND, i]
        li[MARK, link] = 0
        if li[QMODE, link] or li[ELSE, link] > 0:
            continue
        if by_share:
            lf[LOWER, link] = least_partner(li, lf, mi, fint, link)
            if share(li, lf, link) > lf[LOWER, link]:
                continue
        ls[CAND, n_cand] = link
        n_cand += 1
    # the others by share, ties in the order found, a stable sort in place (by
    # insertion where they are few); RCAP holds the shares until the residual fill
    for i in range(n_cand):
        link = ls[CAND, i]
        lf[RCAP, link] = share(li, lf, link)
        j = i
        while n_cand <= 64 and j > 0 and lf[RCAP, ls[CAND, j - 1]] > lf[RCAP, link]:
            ls[CAND, j] = ls[CAND, j - 1]
            j -= 1
        ls[CAND, j] = link
    if n_cand > 64:
        stable_sort(ls, CAND, NEW, n_cand, lf[RCAP])  # NEW: emptied by `absorb`
    for i in range(n_cand):
        link = ls[CAND, i]
        if li[QMODE, link] or li[ELSE, link] > 0:
            continue
        if by_share:
            promote(fint, ff, li, lf, mi, hk, ls, link, lf[LOWER, link], now)
            touch(li, ls, link)
        elif qualifies(fint, li, lf, mi, ls, link):
            promote(fint, ff, li, lf, mi, hk, ls, link, 0.0, now)
            touch(li, ls, link)


@bare
def residual_fill(fint, ff, li, lf, mi, ls, rpaths, work):  # type: ignore[no-untyped-def]
    """Max-min rates of the residual flows over what the queues leave of their links;
    returns the seconds until the first of them is done (inf: none)."""
    n_res = ls[COUNTS, RES]
    if n_res == 0:
        return np.inf
    width = rpaths.shape[1]
    for i in range(n_res):
        f = ls[RES, i]
        ff[RLEFT, i] = ff[LEFT, f]
        for k in range(width):
            link = fint[f, PATH + k]
            rpaths[i, k] = link
            if link >= 0 and not li[MARK, link]:
                li[MARK, link] = 1
                left = lf[CAP, link]
                if li[ELSE, link] > 0:  # some queue owns flows on it
                    left -= taken(li, lf, mi, link)
                lf[RCAP, link] = left
    first = fill(rpaths, n_res, lf[RCAP], ff[RLEFT], ff[RRATE], work)
    for i in range(n_res):
        f = ls[RES, i]
        ff[RATE, f] = ff[RRATE, i]
        for k in range(width):
            if fint[f, PATH + k] >= 0:
                li[MARK, fint[f, PATH + k]] = 0
    return first


@bare
def rekey(now, li, lf, hk, ls):  # type: ignore[no-untyped-def]
    """New calendar keys for the queues changed this event, and the touched marks
    cleared; returns the earliest queue's first finish (inf: none)."""
    for t in range(ls[COUNTS, TOUCHED]):
        link = ls[TOUCHED, t]
        li[CNT0, link] = -1
        if not li[QMODE, link] or li[HSIZE, link] == 0:
            continue
        advance(li, lf, link, now)
        rate = share(li, lf, link)
        left = hk[li[MOFF, link]] - lf[VCLOCK, link]
        wake = now + max(left, 0.0) / rate
        early = now + (left - lf[MAXTOL, link]) / rate - 1e-12 * max(abs(wake), 1.0)
        calendar_set(li, lf, ls, WHEN, link, wake)
        calendar_set(li, lf, ls, EARLY, link, early)
    ls[COUNTS, TOUCHED] = 0
    if ls[COUNTS, WHEN_SIZE] == 0:
        return np.inf
    return lf[WHEN_KEY, li[WHEN, 0]]


@bare
def network_event(now, kind, seq, c, fl, slots, net, finished_slots, finished_ids, work):  # type: ignore[no-untyped-def]
    """After a start of flows (`START`: `start` has put them on their links) or at a
    check for completions (`WAKE`); returns how many flows are done, their transfers in
    finished_slots and those transfers' order of creation in finished_ids."""
    fint, ff, li, lf, mi, hk, ls, rpaths = net
    n_done = 0
    if kind == WAKE:
        due(now, ff, li, lf, mi, hk, ls)
        n_done = remove(now, c, slots, finished_slots, finished_ids, fint, li, lf, mi, ls)
        if ls[COUNTS, RULE] == SHARE_RULE:
            released(now, fint, ff, li, lf, mi, hk, ls)
    else:
        absorb(now, fint, ff, li, lf, mi, hk, ls)
    if ls[COUNTS, RULE] != SHARE_RULE:
        rebudget(now, fint, ff, li, lf, hk, mi, ls)
        settle(now, fint, ff, li, lf, hk, mi, ls)
    first = rekey(now, li, lf, hk, ls)
    if ls[COUNTS, RES] > 0:
        enqueue(now, fint, ff, li, lf, mi, hk, ls)
        first = min(first, rekey(now, li, lf, hk, ls))
        if ls[COUNTS, RES] > 0:
            left = residual_fill(fint, ff, li, lf, mi, ls, rpaths, work)
            first = min(first, now + max(left, 0.0))
    # the one wake-up pending, at the first finish (FlowNetwork._reschedule)
    fl[WAKE_AT] = first
    if first < np.inf:
        c[WAKESEQ] = seq[0]
        seq[0] += 1
    return n_done


@bare
def progress(now, fl, net):  # type: ignore[no-untyped-def]
    """The residual flows' bytes left brought to `now`, before the network's event."""
    ff, ls = net[1], net[6]
    dt = now - fl[LAST]
    if dt > 0:
        for i in range(ls[COUNTS, RES]):
            f = ls[RES, i]
            ff[LEFT, f] -= ff[RATE, f] * dt
    fl[LAST] = now
