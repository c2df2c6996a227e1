"""When a link of the compiled parameter-server engine's network may run as a queue under
the budget rule: the budget of the links its flows cross.

Synchronous runs over 16 servers or more follow this rule, the others the share rule
(`net.py`, `queues.py`: a queue's share no more than that of every other link its flows
cross; `sim.strategies.parameter_server.lockstep.BUDGET_FROM_SERVERS`). Both give the
max-min rates, and the tests hold each to the event engine. They differ in which links they
let run as queues, and in cost. As a synchronous step drains, a server with few pushes left
sends to workers whose links carry many flows of busier servers' queues, at a small share
each: the share rule keeps that server out of queue mode (a worker's link has the lower C /
n although the queues take a small part of it), the budget rule lets it in, and the residual
flows are five times fewer. Where traffic stays balanced (asynchronous updates, every link
near full), a promise's slack does not fit in a link's budget and the share rule keeps the
more queues. Over a few servers, each with thousands of flows, the share rule's residual
flows are few and renewing a promise (a walk over the queue's flows) costs more than they
do.

A link in queue mode gives each of its flows its fair share C / n. Max-min fairness
gives them exactly that as long as every other link they cross can carry it, and
without bounding the flows no queue owns below it. Each queue promises a rate its share
stays at or below (`promise`: its share at 7/8 of its count), and a link that is no
queue counts, over its flows owned by queues, the sum B of their promises and a bound M
of the greatest. The link is within budget when

    B <= C    and, with r > 0 residual flows on it,    M r <= C - B.

Where every link is within budget, the rates are max-min fair: each queue is saturated
and its flows equal, so it is their bottleneck; the residual flows are filled max-min
over C less what the queues actually take (at most B), so a residual flow bottlenecked
at a link gets at least (C - B) / r >= M there, no less than any owned flow on it; and
no link carries more than C. (Tying the promise to C / n of the other links, the
stricter rule, keeps a server out of queue mode as soon as one worker it sends to
carries more flows than it, although the queues' flows on that worker's link take a
small part of it.)

A queue's flows ending raise its share; past its promise (its count below 7/8 of what
it was), the promise is renewed and the links its flows cross are checked; flows
starting lower it, and below half the promise it is renewed downwards (`rebudget`). A
link is checked when flows join it, when a queue crossing it leaves queue mode (its
flows are residual there), or when a promise on it rises (`settle`); one over budget
sends the queue with the greatest promise on it out of queue mode until it is within.
A link becomes a queue only where all the links its flows cross stay within budget
with its promise (`qualifies`).
"""

from __future__ import annotations

from sim.network.unmanaged import bare

from .queues import (
    BSUM,
    CAP,
    CHECK,
    CHK,
    CNT,
    CNT0,
    COUNTS,
    ELSE,
    MARK,
    MAXP,
    MEM,
    MOFF,
    NEW,
    NOWN,
    OQ,
    PATH,
    PCAP,
    PKEEP,
    QMODE,
    SHARE,
    TOUCHED,
    check_later,
    demote,
    kept,
    promise,
)


@bare
def fits(li, lf, x, more, greatest, owned):  # type: ignore[no-untyped-def]
    """Whether link x is within budget with `owned` more of its flows owned by queues
    promising `more` in all, the greatest `greatest`."""
    used = lf[BSUM, x] + more
    if used > lf[CAP, x]:
        return False
    residual = li[CNT, x] - li[ELSE, x] - owned
    if residual <= 0:
        return True
    return max(lf[MAXP, x], greatest) * residual <= lf[CAP, x] - used


@bare
def greatest_owner(li, lf, mi, x):  # type: ignore[no-untyped-def]
    """The queue with the greatest promise among those owning flows on link x (the
    first such in its list of owners; -1: none)."""
    found = -1
    base = li[MOFF, x]
    for i in range(li[NOWN, x]):
        q = mi[OQ, base + i]
        if found < 0 or lf[PCAP, q] > lf[PCAP, found]:
            found = q
    return found


@bare
def room(li, lf, mi, x, more, greatest, owned):  # type: ignore[no-untyped-def]
    """`fits`, with the bound of the greatest promise on x made exact where it decides."""
    if fits(li, lf, x, more, greatest, owned):
        return True
    if lf[BSUM, x] + more > lf[CAP, x]:
        return False
    q = greatest_owner(li, lf, mi, x)
    lf[MAXP, x] = lf[PCAP, q] if q >= 0 else 0.0
    return fits(li, lf, x, more, greatest, owned)


@bare
def qualifies(fint, li, lf, mi, ls, link):  # type: ignore[no-untyped-def]
    """Whether the link (no queue, its flows all residual) may become a queue: every
    other link its flows cross stays within budget with its promise on each of them
    (li[MARK] counts them per link; row NEW lists those links)."""
    width = (fint.shape[1] - PATH) // 2
    n = li[CNT, link]
    promised = lf[CAP, link] / kept(n)
    found = 0
    base = li[MOFF, link]
    for i in range(n):
        f = mi[MEM, base + i]
        for p in range(width):
            x = fint[f, PATH + p]
            if x >= 0 and x != link:
                if li[MARK, x] == 0:
                    ls[NEW, found] = x
                    found += 1
                li[MARK, x] += 1
    ok = True
    for i in range(found):
        x = ls[NEW, i]
        if ok and not room(li, lf, mi, x, li[MARK, x] * promised, promised, li[MARK, x]):
            ok = False
        li[MARK, x] = 0
    return ok


@bare
def recap(fint, li, lf, mi, ls, link):  # type: ignore[no-untyped-def]
    """The queue's promise renewed at its count; the links its flows cross count the
    new one, and are to be checked where it rose."""
    width = (fint.shape[1] - PATH) // 2
    old = lf[PCAP, link]
    promise(li, lf, link)
    new = lf[PCAP, link]
    base = li[MOFF, link]
    for i in range(li[CNT, link]):
        f = mi[MEM, base + i]
        for p in range(width):
            x = fint[f, PATH + p]
            if x >= 0 and x != link:
                lf[BSUM, x] += new - old
                if new > old:
                    if new > lf[MAXP, x]:
                        lf[MAXP, x] = new
                    check_later(li, ls, x)


@bare
def rebudget(now, fint, ff, li, lf, hk, mi, ls):  # type: ignore[no-untyped-def]
    """The queues this event changed: an empty one closes; one whose share rose past
    its promise, or whose count doubled what the promise holds down to, renews it; a
    link flows joined is to be checked."""
    for t in range(ls[COUNTS, TOUCHED]):
        x = ls[TOUCHED, t]
        if not li[QMODE, x]:
            if li[ELSE, x] > 0 and li[CNT, x] > li[CNT0, x]:
                check_later(li, ls, x)
        elif li[CNT, x] == 0:
            demote(fint, ff, li, lf, hk, mi, ls, x, now)
        elif lf[SHARE, x] > lf[PCAP, x] or li[CNT, x] >= 2 * li[PKEEP, x]:
            recap(fint, li, lf, mi, ls, x)


@bare
def settle(now, fint, ff, li, lf, hk, mi, ls):  # type: ignore[no-untyped-def]
    """Every link to be checked brought within budget: while one is over, the queue with
    the greatest promise on it leaves queue mode (which may send more links to be
    checked)."""
    while ls[COUNTS, CHECK] > 0:
        ls[COUNTS, CHECK] -= 1
        x = ls[CHECK, ls[COUNTS, CHECK]]
        li[CHK, x] = 0
        if li[QMODE, x]:
            continue
        while li[ELSE, x] > 0 and not room(li, lf, mi, x, 0.0, 0.0, 0):
            demote(fint, ff, li, lf, hk, mi, ls, greatest_owner(li, lf, mi, x), now)
