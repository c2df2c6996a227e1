"""Failures and recovery: injectors interrupt the job from outside (STYLE.md rule 2).

Recovery follows the contract (docs/scenarios.md): a failed non-chief worker under
parameter servers is back after `downtime` and rejoins (workers are stateless); a failed
parameter server or chief, and any failure under all-reduce, stops the job, which restarts
after `downtime + restart_overhead` from the last completed checkpoint; the steps since
are lost and redone.

Random failures are a Poisson process per host (exponential times between failures, mean
`mtbf_per_host`), drawn from the host's own seeded stream. A host carries the roles of what
runs on it: host 0 the chief, worker hosts their workers, dedicated server hosts (and
worker hosts with a colocated shard) a parameter server. The process keeps running while
the job recovers: a failure during a restart starts the restart over (as Daly's model
assumes).

Checkpoint interval, Young (1974) and Daly (2006): for checkpoint cost delta and system
MTBF M, tau = sqrt(2 delta M), refined by Daly to
tau = sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta (delta < 2M).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import simpy

from scenarios import vocab
from scenarios.errors import ScenarioError
from scenarios.sections.dynamics import RandomFailure, ScheduledFailure

from .training import Process, Training

if TYPE_CHECKING:
    from .plugin import Strategy
    from .simulation import Simulation


def young_interval(delta: float, mtbf: float) -> float:
    """Young's first-order optimum compute time between checkpoints: sqrt(2 delta M)."""
    return math.sqrt(2 * delta * mtbf)


def daly_interval(delta: float, mtbf: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (delta < 2M), else M."""
    if delta >= 2 * mtbf:
        return mtbf
    x = delta / (2 * mtbf)
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - delta


def daly_wall_time(solve: float, tau: float, delta: float, restart: float, mtbf: float) -> float:
    """Daly's complete model of the expected wall time: M e^(R/M) (e^((tau+delta)/M) - 1) Ts/tau."""
    return mtbf * math.exp(restart / mtbf) * math.expm1((tau + delta) / mtbf) * solve / tau


class Supervisor:
    """Starts the job, injects failures, restarts the job after fatal ones."""

    def __init__(self, sim: Simulation, strategy: Strategy):
        self.sim = sim
        self.env = sim.env
        spec = sim.spec
        #: the plug-in of the job's strategy kind: its training, and what it survives
        self.strategy = strategy
        self.restart_overhead = sim.costs.restart_s  # measured, or the scenario's
        self.recovery: simpy.Process | None = None
        self.resumed_at = 0.0
        self.training: Training = self.strategy.training(sim, 0)
        for failure in spec.failures:
            if isinstance(failure, RandomFailure):
                for host in range(self.hosts()):
                    self.env.process(self.random_failures(host, failure))
            elif failure.at_time is not None:
                self.env.process(self.scheduled_at_time(failure))
            else:
                sim.step_hooks.append(self._at_step_hook(failure))

    # -- where failures come from ---------------------------------------------------------

    def hosts(self) -> int:
        topo = self.sim.topology
        return topo.hosts + topo.dedicated_servers

    def host_roles(self, host: int) -> set[str]:
        topo, strategy = self.sim.topology, self.sim.spec.strategy
        if host >= topo.hosts:
            return {"ps"}
        roles = {"worker"}
        if host == 0:
            roles.add("chief")
        colocated = strategy.serves_parameters and strategy.placement == "colocated"
        if colocated and host < strategy.servers:
            roles.add("ps")
        return roles

    def random_failures(self, host: int, failure: RandomFailure) -> Process:
        params = failure.random
        rng = self.sim.stream("failures", host)
        roles = self.host_roles(host) & set(params.roles)
        if not roles:
            return
        while True:
            yield self.env.timeout(rng.exponential(params.mtbf_per_host))
            if self.sim.finished.triggered:
                return
            self.fail_host(host, roles, params.downtime)

    def scheduled_at_time(self, failure: ScheduledFailure) -> Process:
        assert failure.at_time is not None
        yield self.env.timeout(failure.at_time)
        if not self.sim.finished.triggered:
            self.fail(failure.role, failure.index, failure.downtime)

    def _at_step_hook(self, failure: ScheduledFailure) -> Any:
        fired = [False]

        def hook(step: int) -> None:
            if not fired[0] and step >= (failure.at_step or 0):
                fired[0] = True  # a scheduled failure happens once, not again on the redo
                self.fail(failure.role, failure.index, failure.downtime)

        return hook

    # -- what a failure does --------------------------------------------------------------

    def fail_host(self, host: int, roles: set[str], downtime: float) -> None:
        if "chief" in roles or "ps" in roles:
            self.fail("chief" if "chief" in roles else "ps", 0, downtime)
            return
        devices = self.sim.topology.devices_per_host
        self.sim.failures += 1
        if not self.survivable("worker", host * devices) or self.recovery is not None:
            self.stop_job(downtime)
            return
        for w in range(host * devices, (host + 1) * devices):
            self.training.fail_worker(w, downtime)
        self.sim.recovery_time += downtime

    def survivable(self, role: str, index: int) -> bool:
        """Whether the strategy replaces the process without a restart (only a non-chief
        worker under parameter servers does)."""
        return self.strategy.survives(role, index)

    def fail(self, role: str, index: int, downtime: float) -> None:
        self.sim.failures += 1
        if self.survivable(role, index) and self.recovery is None:
            self.training.fail_worker(index, downtime)
            self.sim.recovery_time += downtime
        else:
            self.stop_job(downtime)

    #: past this many failures a job that has not finished is taken to be unable to
    MAX_FAILURES = 20_000

    def stop_job(self, downtime: float) -> None:
        """Stop every process, drop the work since the last checkpoint, restart later."""
        sim, now = self.sim, self.env.now
        if sim.failures > self.MAX_FAILURES:
            raise ScenarioError(
                f"failures: the job had not finished after {sim.failures:,} failures "
                f"({sim.completed} of {sim.total_steps} steps kept at t = {now:.4g} s); "
                "failures come faster than it can recover and checkpoint"
            )
        if self.recovery is not None and self.recovery.is_alive:
            self.recovery.interrupt(downtime)  # failed while restarting: start over
            return
        held, written = sim.last_checkpoint
        sim.lost_steps += sim.completed - held
        sim.lost_work_time += now - max(written, self.resumed_at)
        self.training.stop()
        sim.network.abort()
        sim.generation += 1
        sim.completed = held
        self.recovery = self.env.process(self.recover(downtime, now))

    def recover(self, downtime: float, since: float) -> Process:
        """Wait out the downtime and the relaunch, then restart from the checkpoint."""
        back = self.env.now + downtime + self.restart_overhead
        while self.env.now < back:
            try:
                yield self.env.timeout(back - self.env.now)
            except simpy.Interrupt as again:
                back = self.env.now + float(again.cause or 0.0) + self.restart_overhead
        sim = self.sim
        sim.recovery_time += self.env.now - since
        for worker in range(sim.workers):
            sim.tracer.span(worker, vocab.RECOVER, since, self.env.now)
        self.resumed_at = self.env.now
        self.recovery = None
        self.training = self.strategy.training(sim, sim.last_checkpoint[0])
