"""What everything costs, in one place that the engine asks.

`cost_model(spec, profile)` answers, once per simulated point, what a compute step, a
message, a transfer's links, a collective, a parameter server's round, a checkpoint, a
restart and an evaluation cost here: from
the catalog (`scenarios/catalog/*.yaml`: the device's speed, the host link, the network)
or, where the scenario names a calibration profile, from what it measured
(`sim/costs/measured.py`). The engine (`sim/engine/simulation.py`, the strategies, the topology)
reads the frozen `CostModel` it returns and nothing else of the catalog or the profile;
the network keeps its narrow interface (`sim/network/backends.py`). `sim/costs/explain.py` says in
words which measured numbers a point took. Formulas: docs/simulator.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from measured.profile import Fit, Profile, load_profile
from scenarios import catalog
from scenarios.sections.cluster import ClusterSpec, NetworkSpec
from scenarios.spec import ScenarioSpec
from scenarios.units import parse

from . import explain
from .compute import ComputeModel
from .measured import Calibration, calibrate


@dataclass(frozen=True)
class Links:
    """What the topology's links carry and what a message on them costs (SI units).

    Catalog: a device's port into its host's fabric (`host_link`) and each host's NIC
    (`network`), per direction. Calibrated machine (`sim/costs/measured.py`): the fabric is
    the measured point-to-point transfer, and the host's cores are a link of their own."""

    fabric_bandwidth: float  # bytes/s, a device's port into its host's fabric, each way
    fabric_latency: float  # seconds per message inside a host
    network_bandwidth: float  # bytes/s, a host's NIC, each way
    network_latency: float  # seconds per message between hosts
    oversubscription: float = 1.0  # the switch core: all NICs' bandwidth / this
    # the calibrated machine: bytes/s all transfers inside a host share (cores x what one
    # core moves), None elsewhere
    loopback: float | None = None
    # what a port carries both ways together, in multiples of one way (with `loopback`)
    duplex: float = 1.0
    # bytes/s one core moves, where compute shares the host's cores with transfers
    core: float | None = None
    # every process of the job on the calibrated machine: dedicated servers are
    # processes of host 0
    one_machine: bool = False
    # bytes/s of received data a device reduces through its memory (its memory bandwidth
    # over the bytes a reduction reads and writes per byte received); None: not modelled
    memory: float | None = None
    # bytes/s of a host CPU's one port to its devices, each way (PCIe); None: the fabric's
    cpu_bandwidth: float | None = None
    # with `core`: the processes are pinned one a core over this many cores (a pipeline's
    # stages, real/process/pipeline.py), device d computing on core d mod pinned; None: each on
    # a core of its own
    pinned: int | None = None
    # with `core`: bytes/s the compute of all a host's processes shares (a pipeline's
    # stages, slower side by side than alone: memory and caches); None: not modelled
    beside: float | None = None

    @classmethod
    def of(cls, cluster: ClusterSpec, memory: float | None = None) -> Links:
        """The catalog's links of a cluster: each link's bandwidth times its goodput."""
        return cls(
            fabric_bandwidth=cluster.host_link.bandwidth * cluster.host_link.goodput,
            fabric_latency=cluster.host_link.latency,
            network_bandwidth=cluster.network.bandwidth * cluster.network.goodput,
            network_latency=cluster.network.latency,
            oversubscription=cluster.network.oversubscription,
            memory=memory,
            cpu_bandwidth=cluster.cpu_link.bandwidth * cluster.cpu_link.goodput,
        )


@dataclass(frozen=True)
class CollectiveCosts:
    """What a collective costs beyond the bytes its steps move (seconds)."""

    launch_s: float = 0.0  # before its first step (NCCL's base latency)
    # each step's latency inside a host and between hosts; None: the route's own latency
    step_s: tuple[float, float] | None = None
    # bytes/s one transfer between hosts moves at most over TCP: the library's connections
    # per peer x what one connection carries; None: its share of the links alone
    ceiling: float | None = None
    # a ring phase walks the whole buffer in this many chunks per rank (Gloo's chunked
    # ring: 2, so 2N steps of S / 2N); 0: N - 1 steps of S / N (NCCL's, gRPC's)
    ring_chunks_per_rank: int = 0


NO_COLLECTIVE_COSTS = CollectiveCosts()


@dataclass(frozen=True)
class ServerCosts:
    """What a parameter server's round costs beyond moving its bytes (seconds)."""

    dispatch_s: float = 0.0  # a closure reaches its worker, before the pull
    call_s: float = 0.0  # a pull or push issued as a call of its own, beyond its messages
    update_s: float = 0.0  # the synchronous round's update, one call on the servers
    # a closure's pull and push alone on the calibrated machine (their bytes then share the
    # host's cores); None: pulls and pushes move the shards' bytes over the links
    closure_s: tuple[float, float] | None = None
    apply_s: float = 0.0  # an asynchronous closure's update after its push
    # bytes/s a pull or push between hosts moves at most over TCP: its worker's one
    # connection to the server x what one connection carries; None: its share of the
    # links alone (over RDMA, without a per-connection figure, or where the connection
    # carries at least a NIC's bandwidth and so never binds)
    ceiling: float | None = None


@dataclass(frozen=True)
class CostModel:
    """Every cost the engine asks for one point."""

    compute: ComputeModel
    links: Links
    servers: ServerCosts
    restart_s: float  # relaunching the job after a fatal failure
    collective: CollectiveCosts = NO_COLLECTIVE_COSTS
    # on the calibrated machine: bytes (in the cores' unit) one second of measured compute
    # is, so that compute and transfers share the host's cores; None elsewhere
    compute_rate: float | None = None
    # a pipeline stage's core, for each activation or gradient it sends or receives
    stage_message_s: float = 0.0
    # one evaluation of the held-out samples: a calibration's measured time for the model
    # and data, else one worker's forward pass over them
    evaluation_s: float = 0.0
    # one checkpoint: what it writes (`checkpoint_size`) and the seconds writing it takes at
    # the scenario's `checkpoint.write_bandwidth` (no profile measures checkpoints)
    checkpoint_bytes: float = 0.0
    checkpoint_s: float = 0.0
    # in graph on the calibrated machine: the measured all-reduce among one process's
    # devices, which crosses no process; None: the collective runs over the fabric
    in_graph: Fit | None = None
    # a calibration measured run-real's closures, which move the whole model in one call
    # each way: a parameter-server step then pulls it all, computes, and pushes it all
    whole_model_closures: bool = False
    calibration: Calibration | None = None  # for `summary` alone: the engine never reads it

    def in_graph_s(self, nbytes: float) -> float | None:
        """Seconds an in-graph all-reduce of `nbytes` takes on the calibrated machine, or
        None where the collective runs over the links."""
        fit = self.in_graph
        return None if fit is None else fit.latency + nbytes / fit.bandwidth

    def summary(self, spec: ScenarioSpec) -> dict[str, Any] | None:
        """meta.json's account of the calibration profile's numbers, if one was named."""
        return None if self.calibration is None else explain.summary(spec, self.calibration)


def cost_model(spec: ScenarioSpec, profile: Profile | None = None) -> CostModel:
    """The costs of one point: the catalog's, or the calibration profile's where
    `cluster.profile` names one (`profile`: that profile, already read)."""
    if profile is None and spec.cluster.profile is not None:
        profile = load_profile(spec.cluster.profile)
    cal = calibrate(spec, profile)
    compute = ComputeModel(spec, cal.step_s if cal else None)
    evaluation_s = evaluation_seconds(spec, float(compute.forward_s.sum()))
    written = checkpoint_size(spec, compute)
    checkpoint_s = written / spec.checkpoint.write_bandwidth
    if cal is None:
        nccl = catalog.entry("collective", "nccl")
        links = Links.of(spec.cluster, _reduction_rate(spec, nccl))
        return CostModel(
            compute=compute,
            links=links,
            servers=ServerCosts(ceiling=_server_ceiling(spec, links.network_bandwidth)),
            restart_s=spec.checkpoint.restart_overhead,
            collective=_collective(spec, nccl),
            evaluation_s=evaluation_s,
            checkpoint_bytes=written,
            checkpoint_s=checkpoint_s,
        )
    # on the calibrated machine compute is CPU work the transfers share the cores with: a
    # second of measured compute is this many bytes in the cores' unit (the cores the
    # measured step held x what one core moves); only in the flow network (the analytical
    # one has no contention: there compute keeps its measured time)
    compute_rate = None
    if cal.compute_cores is not None and cal.core_rate is not None:
        compute_rate = cal.compute_cores * cal.core_rate
    links = Links.of(spec.cluster)
    if cal.transfer is not None:
        links = Links(
            fabric_bandwidth=cal.transfer.bandwidth,
            fabric_latency=cal.message_s,
            network_bandwidth=links.network_bandwidth,
            network_latency=links.network_latency,
            oversubscription=links.oversubscription,
            loopback=cal.loopback_capacity,
            duplex=cal.duplex,
            core=cal.core_rate if compute_rate is not None else None,
            one_machine=cal.one_machine,
            pinned=cal.cpus if spec.strategy.pipelined else None,
            beside=cal.beside_capacity if compute_rate is not None else None,
        )
    coordinator = cal.coordinator or (0.0, 0.0)
    servers = ServerCosts(
        dispatch_s=coordinator[0],
        call_s=cal.call_s,
        update_s=cal.update_s if cal.update_s is not None else coordinator[1],
        closure_s=cal.closure_s,
        apply_s=cal.apply_s or 0.0,
    )
    return CostModel(
        compute=compute,
        links=links,
        servers=servers,
        restart_s=cal.restart_s if cal.restart_s is not None else spec.checkpoint.restart_overhead,
        compute_rate=compute_rate,
        stage_message_s=cal.stage_message_s,
        evaluation_s=float(cal.eval_s) if cal.eval_s is not None else evaluation_s,
        checkpoint_bytes=written,
        checkpoint_s=checkpoint_s,
        in_graph=cal.in_graph,
        whole_model_closures=True,
        calibration=cal,
    )


def checkpoint_size(spec: ScenarioSpec, compute: ComputeModel) -> float:
    """Bytes one checkpoint writes: the parameters and the optimizer's state
    (`training.optimizer_state` bytes per parameter; by default one slot the size of a
    parameter, momentum's)."""
    params, size = compute.params.sum(), compute.bytes_per_param
    state = spec.training.optimizer_state
    slots = 1 + 1  # parameters and one optimizer slot
    return float(slots * params * size if state is None else params * (size + state))


def evaluation_seconds(spec: ScenarioSpec, forward_s: float) -> float:
    """One evaluation: the held-out samples through the forward pass of one worker,
    whose batch's forward takes `forward_s`."""
    return forward_s * spec.training.eval_samples / spec.training.batch_per_worker


def _collective(spec: ScenarioSpec, nccl: dict[str, Any]) -> CollectiveCosts:
    """The catalog's collective costs: NCCL's on GPUs (its launch, and each step paying
    the larger of the link's latency and NCCL's per-step latency on that kind of link);
    on CPU devices TensorFlow's gRPC ring, whose steps pay the links' own latency; Gloo's
    (`strategy.library: gloo`) its chunked ring, its steps the links' own latency. Over
    TCP either moves at most its connections x one connection's payload between hosts."""
    link, network = spec.cluster.host_link, spec.cluster.network
    if spec.strategy.library == "gloo":
        gloo = catalog.entry("collective", "gloo")
        return CollectiveCosts(
            ceiling=tcp_ceiling(network, connections(gloo)),
            ring_chunks_per_rank=int(gloo["ring_chunks_per_rank"]),
        )
    if spec.cluster.device.kind != "gpu":
        grpc = catalog.entry("collective", "grpc")
        return CollectiveCosts(ceiling=tcp_ceiling(network, connections(grpc)))
    return CollectiveCosts(
        launch_s=parse(nccl["launch"], "time"),
        step_s=(
            max(link.latency, link.step_latency),
            max(network.latency, network.step_latency),
        ),
        ceiling=tcp_ceiling(network, connections(nccl)),
    )


def _server_ceiling(spec: ScenarioSpec, nic: float) -> float | None:
    """What one pull or push between hosts moves at most over TCP: a worker keeps one
    connection to each server (TensorFlow's gRPC channel, the catalog's `grpc`), so a
    transfer's flows between one worker and one server share one connection's payload.
    None where that is no less than `nic`, a NIC's bandwidth: every such flow crosses a
    NIC too, so the connection could never be the tighter link."""
    ceiling = tcp_ceiling(spec.cluster.network, connections(catalog.entry("collective", "grpc")))
    return ceiling if ceiling is not None and ceiling < nic else None


def connections(library: dict[str, Any]) -> int:
    """The TCP connections a collective library's catalog entry opens between two peers:
    NCCL's channels x socket threads x sockets per thread, or its `connections`."""
    if "connections" in library:
        return int(library["connections"])
    return (
        int(library["channels"])
        * int(library["socket_threads"])
        * int(library["sockets_per_thread"])
    )


def tcp_ceiling(network: NetworkSpec, connections: int) -> float | None:
    """Bytes/s one transfer between hosts moves at most over `connections` TCP
    connections (the network's `stream_bandwidth` each); None over RDMA, or where the
    network gives no per-connection figure."""
    if network.protocol != "tcp" or network.stream_bandwidth is None:
        return None
    return connections * network.stream_bandwidth


def _reduction_rate(spec: ScenarioSpec, nccl: dict[str, Any]) -> float | None:
    """Bytes/s of received data one device reduces: its memory bandwidth over the bytes a
    reduction reads and writes per byte received (the catalog's `reduce_traffic`)."""
    bandwidth = spec.cluster.device.memory_bandwidth
    if bandwidth is None or not spec.strategy.all_reduces:
        return None
    traffic = float(nccl["reduce_traffic"])
    return bandwidth / traffic


__all__ = [
    "NO_COLLECTIVE_COSTS",
    "CollectiveCosts",
    "CostModel",
    "Links",
    "ServerCosts",
    "connections",
    "cost_model",
    "tcp_ceiling",
]
