"""The network, behind one narrow interface (STYLE.md rule 4).

Collectives and parameter servers only call

    transfer(src, dst, nbytes, messages=1) -> simpy.Event
    transfers(pairs, nbytes, messages=1) -> simpy.Event   # a batch; fires when all are done

A transfer pays `messages` times the route's latency, then moves `nbytes` over the route's
links. `messages > 1` lets one flow stand for a pipeline of back-to-back messages over the
same link (the N - 1 steps of a ring phase): each pays the latency once, the bytes flow as
one stream (STYLE.md rule 6: one flow per ring link per phase, never one per chunk).

Two back ends, chosen by `sim.network_model`:
  * `AnalyticalNetwork`: alpha-beta, no contention: messages * alpha + nbytes / B_min.
  * `FlowNetwork`: max-min fair sharing of every link among the flows crossing it (SimGrid's
    flow model); rates are recomputed only when flows start or end, and simultaneous flows
    start and finish as one batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import simpy

from .topology import MAX_PATH, Topology

Pair = tuple[int, int]


class Network(ABC):
    """Common bookkeeping: bytes that crossed host NICs."""

    def __init__(self, env: simpy.Environment, topology: Topology):
        self.env = env
        self.topology = topology
        self.bytes_on_network = 0.0

    def transfer(self, src: int, dst: int, nbytes: float, messages: int = 1) -> simpy.Event:
        """Move nbytes from src to dst; the event fires when the last byte arrives."""
        return self.transfers([(src, dst)], nbytes, messages)

    @abstractmethod
    def transfers(
        self, pairs: Sequence[Pair], nbytes: float | Sequence[float], messages: int = 1
    ) -> simpy.Event:
        """Move each pair's bytes concurrently; the event fires when the last one arrives."""

    def _sizes(self, pairs: Sequence[Pair], nbytes: float | Sequence[float]) -> list[float]:
        if isinstance(nbytes, int | float):
            return [float(nbytes)] * len(pairs)
        if len(nbytes) != len(pairs):
            raise ValueError("transfers: one size per pair, or one size for all")
        return [float(x) for x in nbytes]


class AnalyticalNetwork(Network):
    """alpha-beta: each transfer takes messages x latency + nbytes / (narrowest link)."""

    def transfers(
        self, pairs: Sequence[Pair], nbytes: float | Sequence[float], messages: int = 1
    ) -> simpy.Event:
        sizes = self._sizes(pairs, nbytes)
        longest = 0.0
        capacity = self.topology.capacity
        for (src, dst), size in zip(pairs, sizes, strict=True):
            if src == dst:
                continue
            route = self.topology.route(src, dst)
            if route.inter_host:
                self.bytes_on_network += size
            bandwidth = min(capacity[link] for link in route.links)
            longest = max(longest, messages * route.latency + size / bandwidth)
        return self.env.timeout(longest)


def max_min_rates(paths: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates by progressive filling.

    paths: (flows, MAX_PATH) link indices, padded with -1; capacity: (links,).
    Each round finds the tightest link (residual capacity / unfixed flows crossing it),
    gives every unfixed flow through a link that tight that fair share, and removes them.
    Symmetric cases finish in one round.
    """
    n_flows = len(paths)
    rates = np.zeros(n_flows)
    if n_flows == 0:
        return rates
    valid = paths >= 0
    safe = np.where(valid, paths, 0)
    residual = capacity.astype(float).copy()
    unfixed = np.ones(n_flows, dtype=bool)
    n_links = len(capacity)
    while unfixed.any():
        on = valid & unfixed[:, None]
        counts = np.bincount(safe[on], minlength=n_links)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(counts > 0, residual / np.maximum(counts, 1), np.inf)
        fair = share.min()
        tight = share <= fair * (1 + 1e-12)
        hit = unfixed & (tight[safe] & valid).any(axis=1)
        rates[hit] = fair
        residual -= np.bincount(safe[valid & hit[:, None]], minlength=n_links) * fair
        np.maximum(residual, 0.0, out=residual)
        unfixed &= ~hit
    return rates


class _Batch:
    """The flows of one `transfers` call: an event that fires when the last one ends."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int):
        self.event = event
        self.left = left


class FlowNetwork(Network):
    """Max-min fair sharing of links among concurrent flows (full-duplex ports)."""

    def __init__(self, env: simpy.Environment, topology: Topology):
        super().__init__(env, topology)
        self._paths = np.empty((0, MAX_PATH), dtype=np.int64)
        self._remaining = np.empty(0)
        self._rates = np.empty(0)
        self._tolerance = np.empty(0)
        self._batches: list[_Batch] = []  # one per active flow
        self._last = 0.0
        self._wakeup_token = 0
        self._arrivals: dict[float, list[tuple[np.ndarray, float, _Batch]]] = {}

    def transfers(
        self, pairs: Sequence[Pair], nbytes: float | Sequence[float], messages: int = 1
    ) -> simpy.Event:
        env = self.env
        sizes = self._sizes(pairs, nbytes)
        event = env.event()
        batch = _Batch(event, 0)
        route_of = self.topology.route
        now = env.now
        for (src, dst), size in zip(pairs, sizes, strict=True):
            if src == dst:
                continue  # a local copy: free
            route = route_of(src, dst)
            if route.inter_host:
                self.bytes_on_network += size
            batch.left += 1
            # Flows that start at the same instant join in one batch: one rate update.
            start = now + messages * route.latency
            queue = self._arrivals.get(start)
            if queue is None:
                queue = self._arrivals[start] = []
                env.timeout(start - now).callbacks.append(
                    lambda _e, t=start: self._start(t)  # type: ignore[misc]
                )
            queue.append((route.padded, size, batch))
        if batch.left == 0:
            event.succeed()
        return event

    # -- internals: advance, recompute, wake at the next completion ------------------

    def _start(self, at: float) -> None:
        arrivals = self._arrivals.pop(at)
        self._advance()
        immediate = [item for item in arrivals if item[1] <= 0]
        for _, _, batch in immediate:
            self._finish_one(batch)
        arrivals = [item for item in arrivals if item[1] > 0]
        if arrivals:
            paths = np.stack([a[0] for a in arrivals])
            sizes = np.array([a[1] for a in arrivals])
            self._paths = np.concatenate([self._paths, paths])
            self._remaining = np.concatenate([self._remaining, sizes])
            # a flow is done when less than this is left (float rounding of rate x time)
            self._tolerance = np.concatenate([self._tolerance, sizes * 1e-9 + 1e-9])
            self._batches.extend(a[2] for a in arrivals)
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
        self._rates = max_min_rates(self._paths, self.topology.capacity)
        dt = float(np.min(self._remaining / self._rates))
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
        done = (self._remaining <= self._tolerance) | (
            self._remaining <= self._rates * resolution
        )
        if not done.any():  # rounding left a sliver: wait for it
            self._reschedule()
            return
        keep = ~done
        finished = [b for b, d in zip(self._batches, done, strict=True) if d]
        self._batches = [b for b, k in zip(self._batches, keep, strict=True) if k]
        self._paths = self._paths[keep]
        self._remaining = self._remaining[keep]
        self._tolerance = self._tolerance[keep]
        for batch in finished:
            self._finish_one(batch)
        self._reschedule()

    @staticmethod
    def _finish_one(batch: _Batch) -> None:
        batch.left -= 1
        if batch.left == 0:
            batch.event.succeed()


def make_network(model: str, env: simpy.Environment, topology: Topology) -> Network:
    """The back end named by `sim.network_model`."""
    if model == "analytical":
        return AnalyticalNetwork(env, topology)
    if model == "flow":
        return FlowNetwork(env, topology)
    raise ValueError(f"unknown network model {model!r}")
