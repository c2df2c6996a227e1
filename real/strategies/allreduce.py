"""`strategy.kind: allreduce` for real: synchronous ring all-reduce with TensorFlow's
MultiWorkerMirroredStrategy, one process per worker (real/process/allreduce.py), or in
graph, one client driving the host's devices with MirroredStrategy."""

from __future__ import annotations

from scenarios.spec import ScenarioSpec

from ..job import AllReduceWorker, Job, Place, Training, make
from .base import Probe, one_client_problems, stragglers_of


class AllReduce:
    def problems(self, spec: ScenarioSpec) -> list[str]:
        st = spec.strategy
        if not st.sync:
            return ["strategy.sync: false (asynchronous all-reduce)"]
        if st.replication == "in_graph" and (found := in_graph_problems(spec)):
            return found
        if st.library == "gloo":
            return ["strategy.library: gloo (TensorFlow's collectives run NCCL or gRPC, not Gloo)"]
        if st.algorithm != "ring":
            return [
                f"strategy.algorithm: {st.algorithm} (TensorFlow's MultiWorkerMirroredStrategy "
                "offers ring on CPU and NCCL's own choice on GPU)"
            ]
        if st.overlap:
            return [
                "strategy.overlap: true (MultiWorkerMirroredStrategy all-reduces once the whole "
                "backward pass is done; leave overlap out, or set it false)"
            ]
        return []

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        common = make(AllReduceWorker, place, training, bytes_per_pack=bytes_per_pack(spec))
        n = place.workers
        if spec.strategy.in_graph and n > 1:
            # one client driving the host's devices (MirroredStrategy): one process
            return [common.replace(workers=1, local_devices=n)]
        return [common.replace(index=i, **stragglers_of(spec, i)) for i in range(n)]

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        """In graph, the all-reduce among one process's devices and the dispatch probe (its
        client's cost); else, on several workers, the collective among 2 processes (what
        each moves each way as it receives) and among as many as the point's."""
        if spec.workers <= 1:
            return []
        if spec.strategy.in_graph:
            devices = spec.cluster.devices_per_host
            model = (spec.model.name, spec.training.batch_per_worker)
            return [("in_graph", devices), ("dispatch", *model, devices)]
        return [("allreduce", n) for n in sorted({2, spec.workers})]


def in_graph_problems(spec: ScenarioSpec) -> list[str]:
    """What of in-graph replication run-real cannot run: more than one host's devices,
    and what `one_client_problems` says (its replicas train on the digits, to a target)."""
    problems = []
    if spec.cluster.hosts > 1:
        problems.append(
            f"cluster.hosts: {spec.cluster.hosts} with strategy.replication: in_graph "
            "(run-real drives one host's devices from one client)"
        )
    return problems + one_client_problems(spec, "in-graph replication", data=True)


def bytes_per_pack(spec: ScenarioSpec) -> int:
    """`strategy.fusion_buffer` as MultiWorkerMirroredStrategy's `bytes_per_pack`: packs
    close once they exceed it, in variable order, as the simulator's buckets close once
    they reach it; 0 (TensorFlow: one pack of every gradient) where one bucket holds them
    all. `fusion_buffer: 0` (one tensor a bucket) is 1 byte: every pack closes after its
    first tensor."""
    if not spec.strategy.all_reduces:
        return 0
    fusion = spec.strategy.fusion_buffer
    if fusion >= spec.model.gradient_bytes:
        return 0
    return max(1, int(fusion))
