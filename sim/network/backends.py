"""The network, behind one narrow interface (STYLE.md rule 4).

Collectives and parameter servers only call

    transfer(src, dst, nbytes, messages=1) -> simpy.Event
    transfers(pairs, nbytes, messages=1) -> simpy.Event   # a batch; fires when all are done

and, on the calibrated machine, where work on a host's cores shares them with the transfers
in flight, the engine and the parameter servers call

    compute(worker, seconds) -> simpy.Event         # a worker's measured compute
    closure(node, seconds, nbytes) -> simpy.Event   # a parameter-server closure's pull or push

which the network turns into flows of its own on the cores' links (`Topology.compute_route`,
`Topology.cores_route`), in its units (bytes of what the cores move). Nothing else starts
a flow.

A transfer pays `messages` times the route's latency, then moves `nbytes` over the route's
links; with a `ceiling` (a collective over TCP: its connections x what one connection
carries; a parameter server's pull or push over TCP: one connection) each of its flows
between hosts moves at most that many bytes/s. `messages > 1`
lets one flow stand for a pipeline of back-to-back messages over the same link (the N - 1
steps of a ring phase): each pays the latency once, the bytes flow as one stream
(STYLE.md rule 6: one flow per ring link per phase, never one per chunk).

Two back ends, chosen by `sim.network_model`:
  * `AnalyticalNetwork`: alpha-beta, no contention: messages * alpha + nbytes / B_min.
  * `FlowNetwork`: max-min fair sharing of every link among the flows crossing it (SimGrid's
    flow model); rates are recomputed only when flows start or end, and simultaneous flows
    start and finish as one batch. A ceiling is one more link on the flow's path, the
    connections between its two endpoints, of the ceiling's capacity: a flow gets
    min(its fair share, the ceiling), and what it leaves goes to the others.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import simpy

from .topology import Route, Topology

Pair = tuple[int, int]


class Network(ABC):
    """Common bookkeeping: bytes that crossed host NICs."""

    def __init__(
        self, env: simpy.Environment, topology: Topology, compute_rate: float | None = None
    ):
        """`compute_rate`: on the calibrated machine, bytes (in the cores' unit) one second
        of a worker's measured compute is (the cost model's `compute_rate`); None where
        compute does not share the cores with transfers."""
        self.env = env
        self.topology = topology
        self.compute_rate = compute_rate
        self.bytes_on_network = 0.0

    def transfer(
        self,
        src: int,
        dst: int,
        nbytes: float,
        messages: int = 1,
        setup: float = 0.0,
        ceiling: float | None = None,
    ) -> simpy.Event:
        """Move nbytes from src to dst; the event fires when the last byte arrives."""
        return self.transfers([(src, dst)], nbytes, messages, setup, ceiling=ceiling)

    @abstractmethod
    def transfers(
        self,
        pairs: Sequence[Pair],
        nbytes: float | Sequence[float],
        messages: int = 1,
        setup: float = 0.0,
        step: tuple[float, float] | None = None,
        reduce: bool = False,
        ceiling: float | None = None,
    ) -> simpy.Event:
        """Move each pair's bytes concurrently; the event fires when the last one arrives.

        `setup`: seconds a call pays before its first message (beyond the messages'
        latency), e.g. a parameter server's pull issued as a call of its own, or a
        collective's launch. `step`: what each message costs inside a host and between
        hosts, in place of the route's own latency (a collective library's per-step
        latency). `reduce`: the receivers reduce what arrives (through their memory).
        `ceiling`: bytes/s each pair's flows between hosts move at most together, in this
        transfer and any other with that ceiling (a library's TCP connections to a peer x
        what one carries); inside a host it does not apply."""

    def compute(self, worker: int, seconds: float) -> simpy.Event:
        """`seconds` of the worker's measured compute, as CPU work on its host's cores: one
        flow of `seconds x compute_rate` over its core and the host's loopback, which the
        transfers in flight share. Beside as many workers computing as when it was
        measured, and nothing else, it takes `seconds`. Needs a `compute_rate`."""
        route = self.topology.compute_route(worker)
        assert route is not None, "a compute rate comes with the workers' cores"
        assert self.compute_rate is not None, "compute shares no cores without a compute rate"
        return self._flow(route, seconds * self.compute_rate)

    def closure(self, node: int, seconds: float, nbytes: float) -> simpy.Event:
        """A parameter-server closure's pull or push from `node`, which alone takes
        `seconds` (the closure probe's time) and moves `nbytes` (the model's): the bytes
        as one flow on the host's cores, after a wait for the rest of the probe's time
        (its round trips). Beside other flows in flight on the host the bytes share the
        cores and slow as they do; the round trips do not. A probe time shorter than the
        bytes take at the cores' rate is all flow (sized to take that time alone)."""
        route = self.topology.cores_route(node)
        rate = self.topology.narrowest(route)
        moving_s = min(seconds, nbytes / rate)
        waiting = dataclasses.replace(route, latency=route.latency + seconds - moving_s)
        return self._flow(waiting, moving_s * rate)

    @abstractmethod
    def _flow(self, route: Route, nbytes: float) -> simpy.Event:
        """Move nbytes along one given route (no latency beyond the route's own)."""

    def cancel(self, event: simpy.Event) -> None:  # noqa: B027 - a no-op by default
        """Stop the flows of one transfer (its sender failed); its event never fires.

        Without contention (analytical) a stopped flow slows nobody: nothing to do.
        """

    def abort(self) -> None:  # noqa: B027 - a no-op by default
        """Stop every flow (the job restarts); their events never fire."""

    def _sizes(self, pairs: Sequence[Pair], nbytes: float | Sequence[float]) -> list[float]:
        if isinstance(nbytes, int | float):
            return [float(nbytes)] * len(pairs)
        if len(nbytes) != len(pairs):
            raise ValueError("transfers: one size per pair, or one size for all")
        return [float(x) for x in nbytes]


class AnalyticalNetwork(Network):
    """alpha-beta: each transfer takes messages x latency + nbytes / (narrowest link)."""

    def transfers(
        self,
        pairs: Sequence[Pair],
        nbytes: float | Sequence[float],
        messages: int = 1,
        setup: float = 0.0,
        step: tuple[float, float] | None = None,
        reduce: bool = False,
        ceiling: float | None = None,
    ) -> simpy.Event:
        sizes = self._sizes(pairs, nbytes)
        longest = 0.0
        for (src, dst), size in zip(pairs, sizes, strict=True):
            if src == dst:
                continue
            route = self.topology.route(src, dst, reduce)
            rate = self.topology.narrowest(route)
            if route.inter_host:
                self.bytes_on_network += size
                if ceiling is not None:
                    rate = min(rate, ceiling)
            latency = route.latency if step is None else step[int(route.inter_host)]
            moved = setup + messages * latency + size / rate
            longest = max(longest, moved)
        return self.env.timeout(longest)

    def _flow(self, route: Route, nbytes: float) -> simpy.Event:
        return self.env.timeout(route.latency + nbytes / self.topology.narrowest(route))


#: from this many flows in flight on, rates come from the compiled kernel
#: (`flowkernel.py`, bit for bit the same as `max_min_rates`); below, numpy is as fast
COMPILED_FROM = 16
#: ... once a network has spent this many seconds in numpy's solves that big: loading
#: numba (about 0.5 s and 150 MB) pays only for runs with many rate updates, not for a
#: pipeline's few hundred or one collective on an idle network (the lockstep engine's)
COMPILED_AFTER_S = 0.5


def max_min_rates(paths: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    paths: (flows, max path) link indices, padded with -1; capacity: (links,).
    Each round finds the tightest link (residual capacity / unfixed flows crossing it),
    gives every unfixed flow through a link that tight that fair share, and removes them.
    Symmetric cases finish in one round. The (flow, link) incidences are kept as two flat
    arrays that shrink as flows are fixed, so a round costs a few numpy calls over what is
    left.
    """
    n_flows = len(paths)
    rates = np.zeros(n_flows)
    if n_flows == 0:
        return rates
    n_links = len(capacity)
    valid = paths >= 0
    flow = np.nonzero(valid)[0]  # row of each incidence
    link = paths[valid]
    residual = capacity.astype(float)
    share = np.empty(n_links)
    while len(flow):
        counts = np.bincount(link, minlength=n_links)
        share.fill(np.inf)
        np.divide(residual, counts, out=share, where=counts > 0)
        fair = share.min()
        tight = share <= fair * (1 + 1e-12)
        hit = np.zeros(n_flows, dtype=bool)
        hit[flow[tight[link]]] = True
        rates[hit] = fair
        done = hit[flow]
        residual -= np.bincount(link[done], minlength=n_links) * fair
        np.maximum(residual, 0.0, out=residual)
        flow, link = flow[~done], link[~done]
    return rates


class _Batch:
    """The flows of one `transfers` call: an event that fires when the last one ends."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int):
        self.event = event
        self.left = left


class _Plan(NamedTuple):
    """Routes of one list of pairs, as arrays (collectives reuse the same pairs each step)."""

    keep: np.ndarray  # index of each pair that moves data (src != dst)
    paths: np.ndarray  # (flows, topology.max_path)
    latency: np.ndarray  # seconds per message
    inter_host: np.ndarray  # bool


class FlowNetwork(Network):
    """Max-min fair sharing of links among concurrent flows (full-duplex ports).

    Active flows live in parallel numpy arrays; each remembers the batch (`transfers`
    call) it belongs to, so a batch of a thousand flows starts and ends with a handful of
    array operations and a single SimPy event.
    """

    def __init__(
        self, env: simpy.Environment, topology: Topology, compute_rate: float | None = None
    ):
        super().__init__(env, topology, compute_rate)
        self._paths = np.empty((0, topology.max_path), dtype=np.int64)
        self._remaining = np.empty(0)
        self._rates = np.empty(0)
        self._tolerance = np.empty(0)
        self._batch_of = np.empty(0, dtype=np.int64)  # batch id of every active flow
        self._batches: dict[int, _Batch] = {}
        self._next_batch = 0
        self._last = 0.0
        self._wakeup_token = 0
        self._numpy_s = 0.0  # seconds spent in numpy's solves of COMPILED_FROM flows or more
        self._arrivals: dict[float, list[tuple[np.ndarray, np.ndarray, int]]] = {}
        self._plans: dict[tuple[tuple[Pair, ...], bool, float | None], _Plan] = {}
        self._batch_of_event: dict[int, int] = {}  # id(event) -> batch id, while active
        # the topology's links, then one per (src, dst, ceiling) that a transfer with a
        # ceiling crossed: the connections between two endpoints (`_connection`)
        self._capacity = topology.capacity
        self._connections: dict[tuple[int, int, float], int] = {}
        self._room = self._capacity  # `_capacity` is its first links (grown by doubling)

    def _plan(
        self, pairs: Sequence[Pair], reduce: bool = False, ceiling: float | None = None
    ) -> _Plan:
        key = (tuple(pairs), reduce, ceiling)
        plan = self._plans.get(key)
        if plan is None:
            keep = [i for i, (src, dst) in enumerate(pairs) if src != dst]
            routes = [self.topology.route(*pairs[i], reduce) for i in keep]
            paths = np.array([r.padded for r in routes], dtype=np.int64).reshape(
                -1, self.topology.max_path
            )
            inter_host = np.array([r.inter_host for r in routes], dtype=bool)
            if ceiling is not None:  # one more link: the pair's connections, between hosts
                extra = np.full((len(keep), 1), -1, dtype=np.int64)
                for row in np.flatnonzero(inter_host):
                    extra[row, 0] = self._connection(*pairs[keep[row]], ceiling)
                paths = np.hstack([paths, extra])
            plan = _Plan(
                np.array(keep, dtype=np.int64),
                paths,
                np.array([r.latency for r in routes], dtype=float),
                inter_host,
            )
            if len(self._plans) < 4096:  # bounded: parameter servers make many small lists
                self._plans[key] = plan
        return plan

    def _connection(self, src: int, dst: int, ceiling: float) -> int:
        """The link that stands for the TCP connections from `src` to `dst` carrying at
        most `ceiling` bytes/s together: made on first use, kept for the run (a library
        keeps its connections to a peer open)."""
        key = (src, dst, ceiling)
        link = self._connections.get(key)
        if link is None:
            link = self._connections[key] = len(self._capacity)
            if link == len(self._room):  # a new array, twice as long (never the topology's)
                self._room = np.empty(max(2 * link, 16))
                self._room[:link] = self._capacity
            self._room[link] = ceiling
            self._capacity = self._room[: link + 1]
        return link

    def transfers(
        self,
        pairs: Sequence[Pair],
        nbytes: float | Sequence[float],
        messages: int = 1,
        setup: float = 0.0,
        step: tuple[float, float] | None = None,
        reduce: bool = False,
        ceiling: float | None = None,
    ) -> simpy.Event:
        plan = self._plan(pairs, reduce, ceiling)
        if isinstance(nbytes, int | float):
            sizes = np.full(len(plan.keep), float(nbytes))
        else:
            sizes = np.asarray(self._sizes(pairs, nbytes), dtype=float)[plan.keep]
        if step is not None:
            plan = plan._replace(latency=np.where(plan.inter_host, step[1], step[0]))
        return self._submit(plan, sizes, messages, setup)

    def _flow(self, route: Route, nbytes: float) -> simpy.Event:
        plan = _Plan(
            np.zeros(1, dtype=np.int64),
            route.padded.reshape(1, -1),
            np.array([route.latency]),
            np.array([route.inter_host]),
        )
        return self._submit(plan, np.array([float(nbytes)]), 1, 0.0)

    def _submit(self, plan: _Plan, sizes: np.ndarray, messages: int, setup: float) -> simpy.Event:
        env = self.env
        event = env.event()
        if not len(sizes):
            event.succeed()  # only local copies: free
            return event
        self.bytes_on_network += float(sizes[plan.inter_host].sum())
        batch_id = self._next_batch
        self._next_batch += 1
        self._batches[batch_id] = _Batch(event, len(sizes))
        self._batch_of_event[id(event)] = batch_id
        now = env.now
        starts = now + setup + messages * plan.latency
        # Flows that start at the same instant join in one batch: one rate update.
        for start in np.unique(starts):
            at = float(start)
            chosen = starts == start
            queue = self._arrivals.get(at)
            if queue is None:
                queue = self._arrivals[at] = []
                env.timeout(at - now).callbacks.append(
                    lambda _e, t=at: self._start(t)  # type: ignore[misc]
                )
            queue.append((plan.paths[chosen], sizes[chosen], batch_id))
        return event

    # -- internals: advance, recompute, wake at the next completion ------------------

    def cancel(self, event: simpy.Event) -> None:
        batch_id = self._batch_of_event.pop(id(event), None)
        if batch_id is None or batch_id not in self._batches:
            return
        del self._batches[batch_id]
        self._advance()
        keep = self._batch_of != batch_id
        self._paths = self._paths[keep]
        self._remaining = self._remaining[keep]
        self._tolerance = self._tolerance[keep]
        self._batch_of = self._batch_of[keep]
        for queue in self._arrivals.values():
            queue[:] = [a for a in queue if a[2] != batch_id]
        self._reschedule()

    def abort(self) -> None:
        self._advance()
        self._paths = self._paths[:0]
        self._remaining = self._remaining[:0]
        self._tolerance = self._tolerance[:0]
        self._batch_of = self._batch_of[:0]
        self._batches.clear()
        self._batch_of_event.clear()
        for queue in self._arrivals.values():
            queue.clear()
        self._reschedule()

    def _start(self, at: float) -> None:
        arrivals = [a for a in self._arrivals.pop(at, []) if a[2] in self._batches]
        self._advance()
        if not arrivals:
            self._reschedule()
            return
        # flows with a ceiling have one link more: every path as wide as the widest
        width = max(self._paths.shape[1], *(a[0].shape[1] for a in arrivals))
        if self._paths.shape[1] < width:
            self._paths = _widened(self._paths, width)
        paths = np.concatenate([_widened(a[0], width) for a in arrivals])
        sizes = np.concatenate([a[1] for a in arrivals])
        ids = np.concatenate([np.full(len(a[1]), a[2], dtype=np.int64) for a in arrivals])
        empty = sizes <= 0  # latency only: done on arrival
        if empty.any():
            self._finish(ids[empty])
            paths, sizes, ids = paths[~empty], sizes[~empty], ids[~empty]
        if len(sizes):
            self._paths = np.concatenate([self._paths, paths])
            self._remaining = np.concatenate([self._remaining, sizes])
            # a flow is done when less than this is left (float rounding of rate x time)
            self._tolerance = np.concatenate([self._tolerance, sizes * 1e-9 + 1e-9])
            self._batch_of = np.concatenate([self._batch_of, ids])
        self._reschedule()

    def _advance(self) -> None:
        dt = self.env.now - self._last
        if dt > 0 and len(self._remaining):
            self._remaining -= self._rates * dt
        self._last = self.env.now

    def _reschedule(self) -> None:
        self._wakeup_token += 1
        if not len(self._remaining):
            self._rates = np.empty(0)
            return
        big = len(self._remaining) >= COMPILED_FROM
        if not big or self._numpy_s < COMPILED_AFTER_S:
            started = time.perf_counter() if big else 0.0
            self._rates = max_min_rates(self._paths, self._capacity)
            dt = float(np.min(self._remaining / self._rates))
            if big:  # the same rates either way: only the switch's moment is timed
                self._numpy_s += time.perf_counter() - started
        else:  # the same solve, compiled (numba loads on the first)
            from . import flowkernel

            self._rates, dt = flowkernel.solve(self._paths, self._capacity, self._remaining)
        token = self._wakeup_token
        self.env.timeout(max(dt, 0.0)).callbacks.append(
            lambda _e: self._complete(token)  # type: ignore[misc]
        )

    def _complete(self, token: int) -> None:
        if token != self._wakeup_token:
            return  # superseded by a later rate change
        self._advance()
        # Done: less than a rounding sliver of bytes left, or less time left than the clock
        # can still resolve at this point in the run (else now + dt == now forever).
        resolution = 4 * float(np.spacing(max(abs(self.env.now), 1.0)))
        done = (self._remaining <= self._tolerance) | (self._remaining <= self._rates * resolution)
        if not done.any():  # rounding left a sliver: wait for it
            self._reschedule()
            return
        finished = self._batch_of[done]
        keep = ~done
        self._paths = self._paths[keep]
        self._remaining = self._remaining[keep]
        self._tolerance = self._tolerance[keep]
        self._batch_of = self._batch_of[keep]
        self._finish(finished)
        self._reschedule()

    def _finish(self, batch_ids: np.ndarray) -> None:
        """Count finished flows against their batches; fire the batches now complete."""
        ids, counts = np.unique(batch_ids, return_counts=True)
        for batch_id, count in zip(ids.tolist(), counts.tolist(), strict=True):
            batch = self._batches[batch_id]
            batch.left -= count
            if batch.left == 0:
                del self._batches[batch_id]
                self._batch_of_event.pop(id(batch.event), None)
                batch.event.succeed()


def _widened(paths: np.ndarray, width: int) -> np.ndarray:
    """`paths` padded with -1 (no link) to `width` columns."""
    if paths.shape[1] == width:
        return paths
    return np.pad(paths, ((0, 0), (0, width - paths.shape[1])), constant_values=-1)


def make_network(
    model: str, env: simpy.Environment, topology: Topology, compute_rate: float | None = None
) -> Network:
    """The back end named by `sim.network_model`; `compute_rate`: the cost model's, where
    compute shares the hosts' cores with the transfers (`Network.compute`)."""
    if model == "analytical":
        return AnalyticalNetwork(env, topology, compute_rate)
    if model == "flow":
        return FlowNetwork(env, topology, compute_rate)
    raise ValueError(f"unknown network model {model!r}")
