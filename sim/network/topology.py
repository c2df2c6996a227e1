"""Where every endpoint sits and which links a message between two endpoints crosses.

Endpoints (integer node ids):
  * workers 0..N-1, worker w on host w // devices_per_host (one device each);
  * one CPU per worker host, N + h: where colocated parameter servers run;
  * dedicated parameter servers N + H + j, each alone on a host of its own.

Links (each one direction of a full-duplex port; capacity in bytes/s):
  * a device's port into its host fabric, out and in (`host_link`), and the host CPU's
    (`cpu_link`: one PCIe port between the CPU and all the host's devices);
  * each host's NIC, out and in (`network`);
  * the switch core, shared by every inter-host message, when `oversubscription` > 1:
    capacity = (all hosts' NIC bandwidth) / oversubscription.
  * where the device's memory bandwidth is known, each worker's memory: the data it
    receives to reduce crosses it, at memory bandwidth / the bytes a reduction reads and
    writes per byte received (`Links.memory`);
  * with a calibration profile (`sim/costs/measured.py`), each host's loopback: the CPU that
    moves tensors between its processes, capacity `cpus x` what one core moves
    (`Calibration.loopback_capacity`); on one machine each worker's compute is CPU work
    on it too, through a link of one core of its own (`compute_route`); and
    each port is then a process, which moves what it sends and what it receives with its
    own CPU: one direction at most the calibrated bandwidth, both together `duplex` times
    it (a link shared by both directions; `duplex` 1: one link for both, 2: full duplex,
    below 1: both together less than one way alone; from the profile's 2-process
    all-reduce, or its exchange probe).
Inside a host a message crosses the sender's out-port and the receiver's in-port (and the
host's loopback, when calibrated); between hosts it crosses the sender host's NIC out, the
core (if any) and the receiver host's NIC in. The PCIe hop from a device to its NIC is not
modelled: the NIC is the narrower of the two for every catalog pairing.

`one_machine` (a calibrated job with one host, as run-real runs it): dedicated parameter
servers are processes on host 0 with ports of their own, so every message is inside the
host; their own hosts and NICs carry nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios.sections.cluster import ClusterSpec
from sim.costs import Links

#: paths have at most this many links (NIC out, core, NIC in); with ports that carry
#: both ways apart (calibrated, duplex other than 1) one more each: the two ports one way,
#: the two ports both ways, the loopback (`Topology.max_path`)
MAX_PATH = 3
MAX_PATH_DUPLEX = 5


@dataclass(frozen=True)
class Route:
    links: tuple[int, ...]
    latency: float  # seconds per message
    inter_host: bool
    padded: np.ndarray  # links padded with -1 to the topology's max_path, for the flow model


class Topology:
    """Endpoints, links and routes of one simulated cluster."""

    def __init__(
        self,
        cluster: ClusterSpec,
        *,
        dedicated_servers: int = 0,
        links: Links | None = None,
    ):
        """`cluster`: hosts and devices per host; `links`: what each link carries and what a
        message costs (the cost model's, `sim/costs`; the catalog's by default)."""
        links = Links.of(cluster) if links is None else links
        self.hosts = cluster.hosts
        self.devices_per_host = cluster.devices_per_host
        self.workers = cluster.workers
        self.dedicated_servers = dedicated_servers
        n, h = self.workers, self.hosts
        self.n_nodes = n + h + dedicated_servers
        # host of every node; dedicated servers get hosts h .. h + servers - 1
        d = dedicated_servers
        servers_host = np.zeros(d) if links.one_machine else h + np.arange(d)
        self.host_of = np.concatenate(
            [np.arange(n) // self.devices_per_host, np.arange(h), servers_host]
        ).astype(np.int64)
        # link layout: [port out | port in] for the n + h fabric ports (and the dedicated
        # servers' on one machine), then NICs, then core, then loopbacks
        capacity = self._lay_out_ports(links)
        self._add_shared_links(links, capacity)
        self.capacity = np.asarray(capacity, dtype=float)
        self.fabric_latency = links.fabric_latency
        self.network_latency = links.network_latency
        self._cache: dict[tuple[int, int, bool], Route] = {}

    def _lay_out_ports(self, links: Links) -> list[float]:
        """The capacities of the ports and the NICs, in link order, and where each kind of
        link starts (`_port_out`, `_port_in`, `_port_both`, `_nic_out`, `_nic_in`).

        Calibrated (loopback given): a port is a process, which moves its tensors in and
        out with its own CPU (serialising, copying, deserialising): one link for both
        directions at the calibrated one-way bandwidth, or (duplex other than 1) one each
        way at that bandwidth and one both ways at duplex x it. Otherwise full duplex."""
        n, h = self.workers, self.hosts
        all_hosts = h + self.dedicated_servers
        fabric = links.fabric_bandwidth
        ports = n + h + (self.dedicated_servers if links.one_machine else 0)
        self._port_both: int | None = None
        if links.loopback is None:
            directions = 2
            # the hosts' CPUs (ports n .. n + h - 1) reach their devices over one PCIe port
            cpu = fabric if links.cpu_bandwidth is None else links.cpu_bandwidth
            one_way = [fabric] * n + [cpu] * h + [fabric] * (ports - n - h)
            capacity = one_way + one_way
        elif links.duplex != 1.0:
            directions = 3
            self._port_both = 2 * ports
            capacity = [fabric] * (2 * ports) + [links.duplex * fabric] * ports
        else:
            directions = 1
            capacity = [fabric] * ports
        # the flow network's arrays are this wide: no wider than the routes need
        self.max_path = MAX_PATH if self._port_both is None else MAX_PATH_DUPLEX
        self._port_out = 0
        self._port_in = 0 if directions == 1 else ports
        self._nic_out = directions * ports
        self._nic_in = directions * ports + all_hosts
        return capacity + [links.network_bandwidth] * (2 * all_hosts)

    def _add_shared_links(self, links: Links, capacity: list[float]) -> None:
        """Append to `capacity` the links that exist only where the cost model gives them:
        the switch core (oversubscribed), the hosts' loopbacks, the workers' compute cores
        and what a host's processes compute together (calibrated), the workers' memory;
        where each starts, None where absent, and how much longer paths get."""
        n, all_hosts = self.workers, self.hosts + self.dedicated_servers
        loopback = links.loopback
        self.core: int | None = None
        if links.oversubscription > 1:
            self.core = len(capacity)
            capacity.append(all_hosts * links.network_bandwidth / links.oversubscription)
        self._loopback: int | None = None
        if loopback is not None:
            self._loopback = len(capacity)
            capacity += [loopback] * all_hosts
        # a worker's compute: one core at most, in the loopback's unit (bytes a core moves)
        self._core: int | None = None
        self._pinned = links.pinned
        if links.core is not None and loopback is not None:
            self._core = len(capacity)
            capacity += [links.core] * n
            if self._pinned is not None:  # a transfer crosses its two processes' cores
                self.max_path += 2
        # the compute of each host's processes together (`Links.beside`)
        self._beside: int | None = None
        if links.beside is not None and self._core is not None:
            self._beside = len(capacity)
            capacity += [links.beside] * all_hosts
        # each worker's memory, which the data it receives to reduce crosses
        self._memory: int | None = None
        if links.memory is not None:
            self._memory = len(capacity)
            capacity += [links.memory] * n
            self.max_path += 1

    def shared_by_hosts(self) -> np.ndarray:
        """The links that carry the flows of several hosts' workers between hosts: the
        dedicated servers' NICs, both ways, and the switch core (where oversubscribed)."""
        first = self.hosts
        servers = np.arange(first, first + self.dedicated_servers)
        shared = [self._nic_out + servers, self._nic_in + servers]
        if self.core is not None:
            shared.append(np.array([self.core]))
        return np.concatenate(shared).astype(np.int64)

    def worker(self, w: int) -> int:
        return w

    def host_cpu(self, host: int) -> int:
        return self.workers + host

    def server(self, j: int) -> int:
        return self.workers + self.hosts + j

    def route(self, src: int, dst: int, reduce: bool = False) -> Route:
        """Links and per-message latency from src to dst (src != dst); `reduce`: the
        receiver reduces what arrives, through its memory (where that is modelled)."""
        key = (src, dst, reduce)
        route = self._cache.get(key)
        if route is None:
            route = self._route(src, dst)
            if reduce and self._memory is not None and dst < self.workers:
                memory = self._memory + dst
                route = self._padded([*route.links, memory], route.latency, route.inter_host)
            self._cache[key] = route
        return route

    def narrowest(self, route: Route) -> float:
        """Bytes/s of the route's narrowest link: what one flow on it gets alone."""
        return float(min(self.capacity[link] for link in route.links))

    def cores_route(self, node: int) -> Route:
        """The host's cores alone (its loopback): what a parameter-server closure's pull or
        push crosses. A closure moves the model's variables several at once, on several
        threads of its worker and its servers, so it is bound by neither process's port
        (one tensor's one-way bandwidth) but by the cores every transfer in the host
        shares. Needs the calibrated loopback."""
        assert self._loopback is not None, "closures need the calibrated loopback"
        return self._padded([self._loopback + int(self.host_of[node])], 0.0, False)

    def compute_route(self, worker: int) -> Route | None:
        """What a worker's compute crosses where it shares its host's cores with the
        transfers: one core of its own (it computes on one at most) and the host's
        loopback (the cores every transfer inside the host shares); None elsewhere. Pinned
        processes (`Links.pinned`) share their core with those pinned to the same one;
        with `Links.beside`, the compute of every process of the host shares one more
        link, which slows processes computing side by side."""
        if self._core is None or self._loopback is None:
            return None
        core = worker if self._pinned is None else worker % self._pinned
        host = int(self.host_of[worker])
        links = [self._core + core, self._loopback + host]
        if self._beside is not None:  # and what the host's processes compute together
            links.append(self._beside + host)
        return self._padded(links, 0.0, False)

    def routes(self, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The routes of many (src, dst) pairs, as `route` gives them, as arrays: the
        links padded with -1 (pairs x max_path), the latencies and whether each crosses
        hosts. Kept nowhere: for the compiled engines, which take every pair once."""
        width = self.max_path
        padded, latency, inter = [], [], []
        for src, dst in pairs:
            links, seconds, crosses = self._links(src, dst)
            padded.append(links + [-1] * (width - len(links)))
            latency.append(seconds)
            inter.append(crosses)
        shape = (len(pairs), width)
        return (
            np.array(padded, dtype=np.int64).reshape(shape),
            np.array(latency, dtype=float),
            np.array(inter, dtype=np.bool_),
        )

    def _route(self, src: int, dst: int) -> Route:
        return self._padded(*self._links(src, dst))

    def _links(self, src: int, dst: int) -> tuple[list[int], float, bool]:
        """The links from src to dst, the latency per message, whether it crosses hosts."""
        hs, hd = int(self.host_of[src]), int(self.host_of[dst])
        if hs == hd:
            links = [self._port_out + src, self._port_in + dst]
            if self._port_both is not None:
                links += [self._port_both + src, self._port_both + dst]
            if self._loopback is not None:
                links.append(self._loopback + hs)
            if self._pinned is not None and self._core is not None:
                # pinned processes move their tensors with the one core each computes on
                cores = {w % self._pinned for w in (src, dst) if w < self.workers}
                links += [self._core + core for core in sorted(cores)]
            latency, inter_host = self.fabric_latency, False
        else:
            links = [self._nic_out + hs]
            if self.core is not None:
                links.append(self.core)
            links.append(self._nic_in + hd)
            latency, inter_host = self.network_latency, True
        return links, latency, inter_host

    def _padded(self, links: list[int], latency: float, inter_host: bool) -> Route:
        """A route over `links`, padded with -1 to `max_path` for the flow model."""
        padded = np.full(self.max_path, -1, dtype=np.int64)
        padded[: len(links)] = links
        return Route(tuple(links), latency, inter_host, padded)
