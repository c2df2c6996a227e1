"""One simulated training run of one sweep point.

A `Simulation` owns everything of the run (STYLE.md rule 3): the SimPy environment, the
resolved spec, the network, the tracer, and one seeded numpy Generator per component and
worker, derived from the scenario seed with `SeedSequence(seed, spawn_key=...)`, so that
adding a component never changes another's samples and worker w draws the same numbers
whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import simpy

from scenarios.errors import NotModelledError
from scenarios.spec import RandomFailure, ScenarioSpec

from .compute import ComputeModel
from .distributions import LogNormal
from .network import make_network
from .topology import Topology
from .trace import ChromeTracer, NullTracer

#: spawn_key ids of the random streams; new streams get new ids, old ones never change
STREAMS = {"jitter": 1, "slow": 2, "transient": 3, "failures": 4}


class StepRecord(NamedTuple):
    """One (worker, step): times in seconds from the start of the run (STYLE.md rule 11)."""

    worker: int
    step: int
    start: float
    compute_end: float
    comm_end: float
    end: float
    comm_s: float  # communication the worker waited on (not hidden behind compute)
    wait_s: float  # waiting for other workers


Span = tuple[str, float, float]  # (phase, start, end)


def exposed(spans: Sequence[Span], lo: float, hi: float) -> float:
    """Length of the union of disjoint spans that falls inside [lo, hi]."""
    total = 0.0
    for _, start, end in spans:
        total += max(0.0, min(end, hi) - max(start, lo))
    return total


def check_modelled(spec: ScenarioSpec) -> None:
    """Refuse valid features this simulator does not model yet: never ignore them."""
    st = spec.strategy
    missing: list[str] = []
    if st.kind == "independent":
        missing.append("strategy.kind independent")
    if not st.sync:
        missing.append("strategy.sync false (asynchronous training)")
    if st.kind == "parameter_server" and st.backup_workers:
        missing.append("strategy.backup_workers")
    if spec.stragglers.slow:
        missing.append("stragglers.slow")
    if spec.stragglers.transient is not None:
        missing.append("stragglers.transient")
    if spec.failures:
        kinds = {"random" if isinstance(f, RandomFailure) else f.role for f in spec.failures}
        missing.append(f"failures ({', '.join(sorted(kinds))})")
    if spec.checkpoint.every_steps is not None:
        missing.append("checkpoint.every_steps")
    if spec.sim.replications > 1:
        missing.append("sim.replications > 1")
    if spec.cluster.profile is not None:
        missing.append("cluster.profile")
    if missing:
        raise NotModelledError(f"{missing[0]}: not modelled yet by simulate")


class Simulation:
    """Simulate one resolved scenario point: `Simulation(spec).run()`."""

    def __init__(self, spec: ScenarioSpec, trace: bool = False, replication: int = 0):
        check_modelled(spec)
        self.spec = spec
        self.replication = replication
        self.env = simpy.Environment()
        self.compute = ComputeModel(spec)
        strategy = spec.strategy
        dedicated = (
            strategy.servers
            if strategy.kind == "parameter_server" and strategy.placement == "dedicated"
            else 0
        )
        self.topology = Topology(spec.cluster, dedicated)
        self.network = make_network(spec.sim.network_model, self.env, self.topology)
        self.tracer: ChromeTracer | NullTracer = (
            ChromeTracer(spec.cluster.devices_per_host) if trace else NullTracer()
        )
        self.workers = spec.workers
        self.warmup = spec.training.warmup_steps
        self.total_steps = spec.training.warmup_steps + spec.training.steps
        self.records: list[StepRecord] = []
        self.measure_start: tuple[float, float] | None = None  # (time, network bytes)
        self.jitter = self._jitter_factors()

    def stream(self, name: str, worker: int = 0) -> np.random.Generator:
        """The seeded generator of one component (and worker)."""
        seq = np.random.SeedSequence(
            self.spec.seed, spawn_key=(self.replication, STREAMS[name], worker)
        )
        return np.random.Generator(np.random.PCG64(seq))

    def _jitter_factors(self) -> np.ndarray:
        """(workers, steps) multipliers of compute time: lognormal, mean 1, CV = jitter."""
        dist = LogNormal(self.spec.stragglers.jitter)
        if dist.cv == 0:
            return np.ones((self.workers, self.total_steps))
        return np.stack(
            [dist.sample(self.stream("jitter", w), self.total_steps) for w in range(self.workers)]
        )

    def begin_step(self, step: int) -> None:
        """Called by every worker as it starts a step: marks the start of measurement."""
        if step == self.warmup and self.measure_start is None:
            self.measure_start = (self.env.now, self.network.bytes_on_network)

    def record(
        self,
        worker: int,
        step: int,
        start: float,
        compute_end: float,
        end: float,
        spans: Sequence[Span],
    ) -> None:
        """Keep one worker-step and trace its phases: compute, then comm spans and waits."""
        comm = exposed(spans, compute_end, end)
        comm_end = max((s[2] for s in spans), default=compute_end)
        self.records.append(
            StepRecord(
                worker,
                step,
                start,
                compute_end,
                comm_end,
                end,
                comm,
                max(0.0, end - compute_end - comm),
            )
        )
        tracer = self.tracer
        if tracer.enabled:
            tracer.span(worker, "compute", start, compute_end, step=step)
            cursor = compute_end
            for phase, s, e in spans:
                tracer.span(worker, phase, s, e, comm=True, step=step)
                if s > cursor:
                    tracer.span(worker, "wait", cursor, min(s, end), step=step)
                cursor = max(cursor, e)
            if end > cursor:
                tracer.span(worker, "wait", cursor, end, step=step)

    def run(self) -> SimulationOutcome:
        from .training import TRAININGS  # the strategies register there

        TRAININGS[self.spec.strategy.kind](self)
        self.env.run()
        if len(self.records) != self.workers * self.total_steps:
            raise RuntimeError(
                f"simulation ended early: {len(self.records)} of "
                f"{self.workers * self.total_steps} worker-steps done"
            )
        start_time, start_bytes = self.measure_start or (0.0, 0.0)
        return SimulationOutcome(
            records=self.records,
            measure_start=start_time,
            bytes_on_network=self.network.bytes_on_network - start_bytes,
            tracer=self.tracer,
        )


class SimulationOutcome(NamedTuple):
    records: list[StepRecord]
    measure_start: float
    bytes_on_network: float
    tracer: Any
