"""`strategy.kind: parameter_server` for real: TensorFlow's ParameterServerStrategy and
ClusterCoordinator, synchronous or asynchronous (real/process/ps.py). The coordinator is
the chief; the workers and the servers only serve."""

from __future__ import annotations

from scenarios.spec import ScenarioSpec

from ..job import AllReduceWorker, Coordinator, Job, Place, Server, Training, make
from .base import Probe, stragglers_of


class ParameterServers:
    def problems(self, spec: ScenarioSpec) -> list[str]:
        st = spec.strategy
        if st.sync and st.partition == "sliced" and st.servers > 1:
            return ["strategy.partition: sliced with synchronous parameter servers"]
        if st.partition == "greedy":
            return ["strategy.partition: greedy (TF 2 has no greedy placement)"]
        if st.partition == "mxnet":
            return ["strategy.partition: mxnet (TF 2 places variables its own way)"]
        if st.placement != "dedicated":
            return [f"strategy.placement: {st.placement}"]
        if st.local_aggregation:
            return ["strategy.local_aggregation"]
        if st.staleness is not None or st.max_iterations_ahead is not None:
            name = "staleness" if st.staleness is not None else "max_iterations_ahead"
            return [f"strategy.{name} (TensorFlow has no SSP bound)"]
        return []

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        """The coordinator first (it injects every worker's stragglers into the closures it
        schedules: workers run no Python of their own), then the workers and the servers,
        which serve. Even alone, a worker talks to its servers."""
        st, n = spec.strategy, place.workers
        total = spec.training.warmup_steps + spec.training.steps
        injected = [
            make(AllReduceWorker, place, training, **stragglers_of(spec, i)).replace(index=i)
            for i in range(n)
        ]
        chief = make(
            Coordinator,
            place,
            training,
            role="chief",
            servers=st.servers,
            partition=st.partition,
            sync=st.sync,
            backup_workers=min(st.backup_workers, n - 1) if st.sync else 0,  # alone: none
            slowdowns=[job.step_slowdowns(total) for job in injected],
            worker_hiccups=[job.hiccups for job in injected],
        )
        server = make(Server, place)
        workers_ = [server.replace(role="worker", index=i) for i in range(n)]
        servers = [server.replace(role="ps", index=j) for j in range(st.servers)]
        return [chief, *workers_, *servers]

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        """The all-reduce on 2 processes (what a busy core moves), the coordinator's round
        trips, and a synchronous round's update on the point's servers."""
        model = spec.model
        return [
            ("allreduce", 2),
            ("coordinator",),
            ("update", model.name, model.dtype, spec.strategy.servers),
        ]
