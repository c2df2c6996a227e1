"""Collectives on a cluster as it is built now, in closed form: the devices of a host on
their own links (NVLink, NVSwitch), each device with its own NIC on a rail where the
network has `rails`, and a fat-tree of `tiers` above the leaves (STYLE.md rule 4: what a
collective costs, not which packets it sends).

A group of devices (given by their global indices; device d on host d // devices_per_host)
runs a ring over the slowest link it crosses (the NCCL tests' bus bandwidth model,
nccl-tests doc/PERFORMANCE.md):

* inside one host: the host link's bandwidth x goodput, its step latency;
* between hosts: one NIC's bandwidth x goodput, shared by the host's devices that
  communicate at once through it (devices_per_host / rails of them, where there are fewer
  rails than devices; all a host's devices run their groups' collectives together in a
  layout), over the oversubscription of every tier the group's hosts reach past: none
  within one leaf's hosts, the leaves' within a tier-1 group, the leaves' and tier 1's
  within a tier-2 group, ... (rail-aligned rings: NCCL keeps a ring on one NIC index, and
  PXN moves what crosses rails over NVLink first, so every message stays on its rail).

Times, S the whole buffer in bytes, n the group, B the bandwidth, a the step latency:
all-reduce 2(n - 1)/n S/B + 2(n - 1) a; reduce-scatter, all-gather and all-to-all
(n - 1)/n S/B + (n - 1) a; a send S/B + a.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scenarios.sections.cluster import ClusterSpec


@dataclass(frozen=True)
class Path:
    """What one rank of a group moves at: bytes/s, and seconds a ring step costs."""

    bandwidth: float
    step_latency: float


def hosts_of(cluster: ClusterSpec, devices: Sequence[int]) -> list[int]:
    """The host of each device."""
    return [d // cluster.devices_per_host for d in devices]


def taper(cluster: ClusterSpec, hosts: Sequence[int]) -> float:
    """The oversubscription a message between these hosts meets: the product of every
    tier's below the lowest whose switch group holds them all (1 within one leaf)."""
    network = cluster.network
    tiers = network.tiers
    if not tiers:
        return 1.0 if len(set(hosts)) <= 1 else network.oversubscription
    factor = 1.0
    for tier in tiers:
        if len({h // tier.hosts for h in hosts}) == 1:
            return factor
        factor *= tier.oversubscription
    return factor


def nic_share(cluster: ClusterSpec) -> float:
    """The share of one NIC a device has when all the host's devices communicate:
    1 with a rail a device, else rails / devices_per_host."""
    rails = cluster.network.rails or 1
    return min(1.0, rails / cluster.devices_per_host)


def path_of(cluster: ClusterSpec, devices: Sequence[int]) -> Path:
    """The slowest link a group of devices crosses, as one rank sees it."""
    hosts = hosts_of(cluster, devices)
    if len(set(hosts)) <= 1:
        link = cluster.host_link
        return Path(link.bandwidth * link.goodput, link.step_latency or link.latency)
    network = cluster.network
    bandwidth = network.bandwidth * network.goodput * nic_share(cluster) / taper(cluster, hosts)
    return Path(bandwidth, network.step_latency or network.latency)


def all_reduce_s(nbytes: float, ranks: int, path: Path) -> float:
    """A ring all-reduce of `nbytes` among `ranks`: 2(n - 1)/n S/B + 2(n - 1) a."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    steps = ranks - 1
    return 2 * steps / ranks * nbytes / path.bandwidth + 2 * steps * path.step_latency


def gather_s(nbytes: float, ranks: int, path: Path) -> float:
    """A ring reduce-scatter or all-gather of `nbytes` (the whole buffer) among `ranks`,
    or an all-to-all of `nbytes` a rank: (n - 1)/n S/B + (n - 1) a."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    steps = ranks - 1
    return steps / ranks * nbytes / path.bandwidth + steps * path.step_latency


def send_s(nbytes: float, path: Path) -> float:
    """One message of `nbytes` from one device to another: S/B + a."""
    return nbytes / path.bandwidth + path.step_latency if nbytes > 0 else 0.0
