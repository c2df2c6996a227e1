"""What every training strategy shares: the `Worker` entity, rendezvous counters, and the
`Training` base that a job restart stops as a whole.

Entities are plain classes that start their processes in `__init__` (STYLE.md rule 1).
A `Worker` runs `train_loop`; the strategy says what one step is (`run_step`) and which
step comes next. Failures come from outside (`failures.py`): a job restart interrupts
every process of the strategy with `JobStopped`; a parameter-server worker's failure
interrupts that worker with `WorkerFailure`, and it works out what is left.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import simpy

from scenarios import vocab

if TYPE_CHECKING:
    from .simulation import Simulation, Span

Process = Generator[Any, Any, Any]


@dataclass(frozen=True)
class JobStopped:
    """Interrupt cause: the job stops (a fatal failure); the supervisor restarts it."""

    time: float


@dataclass(frozen=True)
class WorkerFailure:
    """Interrupt cause: this worker's host failed; it is back after `downtime` seconds."""

    time: float
    downtime: float


class Counter:
    """An event that fires once `expected` distinct members have arrived."""

    __slots__ = ("event", "expected", "members")

    def __init__(self, env: simpy.Environment, expected: int):
        self.event = env.event()
        self.expected = expected
        self.members: set[int] = set()
        if expected <= 0:
            self.event.succeed()

    def arrive(self, member: int) -> bool:
        """Count one member (once); False if it came after the event fired (too late)."""
        if self.event.triggered:
            return False
        self.members.add(member)
        if len(self.members) >= self.expected:
            self.event.succeed()
        return True


class PerStep:
    """Counters created on first use, one per (step, key)."""

    def __init__(self, env: simpy.Environment, expected: int):
        self.env = env
        self.expected = expected
        self._counters: dict[tuple[int, int], Counter] = {}

    def __call__(self, step: int, key: int = 0) -> Counter:
        counter = self._counters.get((step, key))
        if counter is None:
            counter = self._counters[(step, key)] = Counter(self.env, self.expected)
        return counter

    def drop(self, step: int, keys: Iterable[int] | None = None) -> None:
        """Forget the step's counters (only those of `keys`, where given)."""
        if keys is not None:
            for key in keys:
                self._counters.pop((step, key), None)
            return
        for pair in [k for k in self._counters if k[0] == step]:
            del self._counters[pair]


class Events:
    """One plain event per key, created on first use."""

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._events: dict[Any, simpy.Event] = {}

    def __call__(self, key: Any) -> simpy.Event:
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = self.env.event()
        return event

    def forget(self, key: Any) -> None:
        """Drop a key's event once nobody waits for it any more."""
        self._events.pop(key, None)


class Training:
    """A strategy's processes for one generation of the job (until a restart stops it)."""

    #: whether the strategy traces its steps' phases itself (else `Simulation.record`)
    traces_steps = False

    def __init__(self, sim: Simulation, start_step: int):
        self.sim = sim
        self.start_step = start_step
        self.generation = sim.generation
        self.processes: list[simpy.Process] = []
        self.workers: list[Worker] = []

    def spawn(self, generator: Process) -> simpy.Process:
        process = self.sim.env.process(generator)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        """Interrupt every process of this generation (a fatal failure)."""
        cause = JobStopped(self.sim.env.now)
        for process in self.processes:
            if process.is_alive:
                process.interrupt(cause)

    def fail_worker(self, worker: int, downtime: float) -> None:
        """A worker's host failed and the job survives: interrupt that worker."""
        process = self.workers[worker].process
        if process.is_alive:
            process.interrupt(WorkerFailure(self.sim.env.now, downtime))

    # -- what a strategy defines ------------------------------------------------------------

    def first_step(self, worker: Worker) -> int:
        return self.start_step

    def next_step(self, worker: Worker, step: int) -> int:
        return step + 1

    def resume_step(self, worker: Worker, step: int) -> int:
        """The step a worker takes up after coming back from a failure."""
        return step

    def run_step(self, worker: Worker, step: int) -> Process:
        """Compute and communicate one step; sets worker.compute_end, worker.spans."""
        raise AssertionError("every strategy defines run_step")  # pragma: no cover

    def compute(self, worker: Worker, step: int) -> Process:
        """Forward and backward of one step, as one stretch of time (no buckets)."""
        sim = self.sim
        factor = sim.compute_factor(worker.index, step)
        delay = sim.compute_delay(worker.index, step)
        yield from sim.busy(worker, sim.compute.step_s, factor, delay)
        worker.compute_end = sim.env.now


class Worker:
    """One worker (one device): runs the strategy's steps until the job is done."""

    def __init__(self, training: Training, index: int):
        self.training = training
        self.sim = training.sim
        self.index = index
        self.compute_end = 0.0
        self.spans: list[Span] = []
        self.staleness = 0
        self.stall = 0.0  # seconds of the step's compute spent waiting for its parameters
        self.idle = 0.0  # seconds of it with nothing to do (a pipeline's bubble)
        self.step_start: float | None = None  # set by a step that first waited its turn
        self.inflight: list[simpy.Event] = []  # transfers to cancel if this worker fails
        self.process = training.spawn(self.train_loop())

    def train_loop(self) -> Process:
        sim, env, training = self.sim, self.sim.env, self.training
        step = training.first_step(self)
        while step < sim.total_steps:
            try:
                sim.begin_step(step)
                start = env.now
                self.staleness = 0
                self.stall = 0.0
                self.idle = 0.0
                self.step_start = None
                yield from training.run_step(self, step)
                if self.step_start is not None:
                    start = self.step_start
                sim.record(
                    self.index,
                    step,
                    start,
                    self.compute_end,
                    env.now,
                    self.spans,
                    self.staleness,
                    stall=self.stall,
                    idle=self.idle,
                    traced=not training.traces_steps,
                )
                step = training.next_step(self, step)
            except simpy.Interrupt as interrupt:
                if not isinstance(interrupt.cause, WorkerFailure):
                    return  # the job stopped: this generation is over
                for event in self.inflight:
                    sim.network.cancel(event)
                self.inflight = []
                failed_at = env.now
                back = env.now + interrupt.cause.downtime
                while env.now < back:
                    try:
                        yield env.timeout(back - env.now)
                    except simpy.Interrupt as again:
                        if not isinstance(again.cause, WorkerFailure):
                            return
                        back = max(back, env.now + again.cause.downtime)  # failed while down
                sim.tracer.span(self.index, vocab.RECOVER, failed_at, env.now)
                step = training.resume_step(self, step)
