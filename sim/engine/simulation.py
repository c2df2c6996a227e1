"""One simulated training run of one sweep point (and one replication).

A `Simulation` owns everything of the run (STYLE.md rule 3): the SimPy environment, the
resolved spec, the network, the tracer, the stragglers' and failures' seeded generators,
the records, and the bookkeeping of steps, checkpoints and failures. The training
strategy (`training.py`, `sim/strategies/`) runs inside it; the `Supervisor`
(`failures.py`) restarts it after a fatal failure. It knows no strategy:
`sim.Simulation` (`sim/simulation.py`) adds the run, with the plug-in of the scenario's
strategy kind.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, Protocol

import numpy as np
import simpy

from measured.profile import Profile
from results.streams import stream
from results.trace import ChromeTracer, NullTracer
from scenarios import vocab
from scenarios.spec import ScenarioSpec
from sim.costs import cost_model
from sim.network.backends import make_network
from sim.network.topology import Topology

from .outcome import Records, SimulationOutcome, Span, StepRecord, exposed
from .stragglers import Stragglers

Process = Generator[Any, Any, Any]


class Busy(Protocol):
    """What `Simulation.busy` needs of a worker (`training.py`'s `Worker`): its
    index and the events it waits on, stopped if it fails."""

    index: int
    inflight: list[simpy.Event]

#: how many times a run calls its `progress` callback, at most (evenly in steps)
PROGRESS_CALLS = 200


class Simulation:
    """Simulate one resolved scenario point: `Simulation(spec).run()`.

    `profile`: the calibration profile `spec.cluster.profile` names, as
    `measured.profile.profiles_of` read it; read from the path when not given. What
    everything costs comes from `sim.costs.cost_model`, asked once here.
    """

    def __init__(
        self,
        spec: ScenarioSpec,
        trace: bool = False,
        replication: int = 0,
        profile: Profile | None = None,
        lockstep: bool = True,
        progress: Callable[[int, float], None] | None = None,
    ):
        self.spec = spec
        #: called with the global steps (updates) done and the simulated time, about
        #: PROGRESS_CALLS times a run: what a progress bar shows within a point
        self.progress = progress
        #: run synchronous all-reduce in lockstep (`sim/strategies/allreduce/lockstep.py`)
        #: and synchronous parameter servers on their compiled engine
        #: (`sim/strategies/parameter_server/lockstep.py`) where they apply; False forces
        #: the event engine (the tests compare them)
        self.lockstep = lockstep
        self.replication = replication
        self.env = simpy.Environment()
        #: every cost this point's engine asks: the catalog's, or the profile's
        self.costs = cost_model(spec, profile)
        self.compute = self.costs.compute
        self.compute_rate = self.costs.compute_rate
        strategy = spec.strategy
        # a pipeline's servers are dedicated (the only placement it takes)
        dedicated = strategy.parameter_servers if strategy.placement == "dedicated" else 0
        self.topology = Topology(spec.cluster, dedicated_servers=dedicated, links=self.costs.links)
        self.network = make_network(
            spec.sim.network_model, self.env, self.topology, self.compute_rate
        )
        self.tracer: ChromeTracer | NullTracer = (
            ChromeTracer(spec.cluster.devices_per_host) if trace else NullTracer()
        )
        self.workers = spec.workers
        self.warmup = spec.training.warmup_steps
        self.total_steps = spec.training.warmup_steps + spec.training.steps
        self.stragglers = Stragglers(spec, replication)
        self.records = Records()
        # global step (or, async parameter server: update) end times, final generation
        self.step_ends = np.full(self.total_steps, np.nan)
        self.measure_start: tuple[float, float] | None = None  # (time, network bytes)
        self.completed = 0  # global steps / updates done (and not lost)
        self.generation = 0
        self.finished = self.env.event()
        # checkpoints and failures
        every = spec.checkpoint.every_steps
        self.checkpoint_every = every if not strategy.trains_alone else None
        self.last_checkpoint = (0, 0.0)  # (steps it holds, time it completed)
        self.checkpoint_time = 0.0
        self.checkpoints = 0
        self.failures = 0
        self.lost_steps = 0
        self.lost_work_time = 0.0
        self.recovery_time = 0.0
        self.dropped_gradients = 0
        self.dropped_measured = 0  # of them, those of measured steps (not warm-up)
        self.step_hooks: list[Any] = []  # called with the step about to start (at_step failures)
        self.supervisor: Any = None
        self.trials: Any = None  # independent trials: the scheduler, once all are done
        # asynchronous parameter servers count updates, not global steps
        self.counts_updates = strategy.counts_updates
        if self.counts_updates and self.warmup == 0:
            self.measure_start = (0.0, 0.0)
        self._progress_every = max(1, self.total_steps // PROGRESS_CALLS)
        self._progress_next = self._progress_every if progress is not None else self.total_steps + 1

    def report(self, done: int, now: float) -> None:
        """`done` global steps (updates) are done at simulated time `now`: tell `progress`,
        every total / PROGRESS_CALLS steps (one comparison a step when not due)."""
        if done >= self._progress_next and self.progress is not None:
            self._progress_next = done + self._progress_every
            self.progress(done, now)

    def stream(self, name: str, index: int = 0) -> np.random.Generator:
        """The seeded generator of one component (and worker or host)."""
        return stream(self.spec.seed, self.replication, name, index)

    # -- compute ------------------------------------------------------------------------

    def compute_factor(self, worker: int, step: int) -> float:
        """Multiplier of the worker's compute in a step: jitter x persistent slowness."""
        return self.stragglers.factor(worker, step)

    def compute_delay(self, worker: int, step: int) -> float:
        """Seconds a transient hiccup adds to the worker's compute in a step."""
        return self.stragglers.delay(worker, step)

    def busy(
        self, worker: Busy, seconds: float, factor: float = 1.0, delay: float = 0.0
    ) -> Process:
        """`seconds` of the worker's measured compute, stretched by `factor` (jitter x
        slowness), and `delay` seconds of a transient hiccup.

        On the calibrated machine (`compute_rate`) the compute is CPU work on the
        worker's cores, which the transfers in flight share (`Network.compute`): beside
        as many workers computing as when it was measured, and nothing else, it takes
        `seconds`; beside fewer it takes less (a core each at most), beside transfers
        more. A straggler then sleeps (factor - 1) x what its compute took,
        and the hiccup, as run-real injects them: a sleep holds no core, and jitter
        below 1 speeds nothing up. Elsewhere it is `seconds x factor + delay` of time."""
        env = self.env
        if self.compute_rate is None:
            if seconds * factor + delay > 0:
                yield env.timeout(seconds * factor + delay)
            return
        took = 0.0
        if seconds > 0:
            start = env.now
            event = self.network.compute(worker.index, seconds)
            worker.inflight.append(event)  # stopped if the worker fails
            yield event
            worker.inflight.remove(event)
            took = env.now - start
        sleep = max(factor - 1.0, 0.0) * took + delay
        if sleep > 0:
            yield env.timeout(sleep)

    # -- steps ----------------------------------------------------------------------------

    def begin_step(self, step: int) -> None:
        """Called by every worker as it starts a step."""
        if self.measure_start is None and step >= self.warmup and not self.counts_updates:
            self.measure_start = (self.env.now, self.network.bytes_on_network)

    def apply_update(self) -> None:
        """Asynchronous parameter servers: one worker's gradients were applied."""
        done = self.completed
        if done >= self.total_steps:
            return  # a push that lands after the last update counted
        self.step_ends[done] = self.env.now
        self.completed = done + 1
        self.report(done + 1, self.env.now)
        if self.measure_start is None and self.completed >= self.warmup:
            self.measure_start = (self.env.now, self.network.bytes_on_network)
        if self.completed >= self.total_steps:
            self.finished.succeed()
            return
        self._run_hooks(self.completed)

    def _run_hooks(self, done: int) -> None:
        # Called from inside a process of the job; a hook may stop the job, and a process
        # cannot interrupt itself, so the hooks run at the same instant, just after it.
        if not self.step_hooks:
            return

        def run(_: Any) -> None:
            for hook in list(self.step_hooks):
                hook(done)

        self.env.timeout(0).callbacks.append(run)

    def async_checkpoint(self) -> Process:
        """The chief of an asynchronous job writes a checkpoint when one is due."""
        every = self.checkpoint_every
        if not every or self.completed // every <= self.last_checkpoint[0] // every:
            return
        held = self.completed
        start = self.env.now
        yield self.env.timeout(self.costs.checkpoint_s)
        self.checkpoint_time += self.costs.checkpoint_s
        self.checkpoints += 1
        self.last_checkpoint = (held, self.env.now)
        self.tracer.span(0, vocab.CHECKPOINT, start, self.env.now)

    def end_of_step(self, step: int) -> Process:
        """The job completed global step `step`: write a checkpoint if one is due.

        Sync strategies run this in their coordinating process, so a checkpoint stalls
        everyone; asynchronous parameter servers run it in the chief only.
        """
        done = step + 1
        self.completed = done  # a failure during the checkpoint loses this step too
        if self.checkpoint_every and done % self.checkpoint_every == 0:
            start = self.env.now
            yield self.env.timeout(self.costs.checkpoint_s)
            self.checkpoint_time += self.costs.checkpoint_s
            self.checkpoints += 1
            self.last_checkpoint = (done, self.env.now)
            self.tracer.span(0, vocab.CHECKPOINT, start, self.env.now, step=step)
        # the step ends for everyone once its checkpoint (if any) is written
        self.step_ends[step] = self.env.now
        self.report(done, self.env.now)
        if done >= self.total_steps and not self.finished.triggered:
            self.finished.succeed()
            return
        self._run_hooks(done)

    def record(
        self,
        worker: int,
        step: int,
        start: float,
        compute_end: float,
        end: float,
        spans: Sequence[Span],
        staleness: int = 0,
        trial: int = -1,
        stall: float = 0.0,
        idle: float = 0.0,
        traced: bool = True,
    ) -> None:
        """Keep one worker-step and trace its phases: compute, then comm spans and waits.
        `stall`: communication waited on before compute_end (pulls gating the forward);
        `idle`: time before compute_end with nothing to do; `traced`: False where the
        strategy traces the step's phases itself (a pipeline's micro-batches)."""
        comm = exposed(spans, compute_end, end) + stall
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
                self.generation,
                staleness,
                trial,
                stall,
                idle,
            )
        )
        tracer = self.tracer
        if tracer.enabled and trial < 0 and traced:
            tracer.span(worker, vocab.COMPUTE, start, compute_end, step=step)
            cursor = compute_end
            for phase, s, e in spans:
                tracer.span(worker, phase, s, e, comm=True, step=step)
                if s > cursor:
                    tracer.span(worker, vocab.WAIT, cursor, min(s, end), step=step)
                cursor = max(cursor, e)
            if end > cursor:
                tracer.span(worker, vocab.WAIT, cursor, end, step=step)

    # -- the outcome -------------------------------------------------------------------------

    def uninterrupted(
        self, network_bytes: float, engine: str, dropped: int = 0, dropped_measured: int = 0
    ) -> SimulationOutcome:
        """The outcome of a run a faster engine ran, which it runs only without failures
        (the run's counters of losses and restarts at their start): `network_bytes` in
        all, `dropped` gradients (all, and those after the measured window began) where
        backup workers drop some."""
        start_bytes = (self.measure_start or (0.0, 0.0))[1]
        return self.outcome()._replace(
            bytes_on_network=network_bytes - start_bytes,
            dropped_gradients=dropped,
            dropped_measured=dropped_measured,
            engine=engine,
        )

    def outcome(self) -> SimulationOutcome:
        """The outcome of the run the event engine ran: failures, restarts and all."""
        start_time, start_bytes = self.measure_start or (0.0, 0.0)
        return SimulationOutcome(
            records=self.records,
            step_ends=self.step_ends,
            measure_start=start_time,
            bytes_on_network=self.network.bytes_on_network - start_bytes,
            tracer=self.tracer,
            failures=self.failures,
            lost_steps=self.lost_steps,
            lost_work_time=self.lost_work_time,
            recovery_time=self.recovery_time,
            checkpoint_time=self.checkpoint_time,
            dropped_gradients=self.dropped_gradients,
            dropped_measured=self.dropped_measured,
            generation=self.generation,
            checkpoints=self.checkpoints,
            trials=self.trials,
        )
