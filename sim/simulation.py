"""`sim.Simulation`: one run of one sweep point, timed by the engine that applies.

The engine's `Simulation` (`sim/engine/simulation.py`) holds the run and knows no
strategy; this one finds the plug-in of the scenario's strategy kind
(`sim/strategies/__init__.py`) and runs it: on the plug-in's faster engine where that
engine applies (`Engine.eligible`), else on the event engine, the `Supervisor`
(`sim/engine/failures.py`) starting the job and restarting it after a fatal failure.
"""

from __future__ import annotations

from collections.abc import Callable

from measured.profile import Profile
from scenarios.spec import ScenarioSpec

from .engine import simulation
from .engine.failures import Supervisor
from .engine.metrics import summarize
from .engine.outcome import SimulationOutcome
from .engine.plugin import Engine
from .strategies import strategy_of


class Simulation(simulation.Simulation):
    """Simulate one resolved scenario point: `Simulation(spec).run()`.

    `profile`: the calibration profile `spec.cluster.profile` names, as
    `measured.profile.profiles_of` read it; read from the path when not given.
    `lockstep`: False forces the event engine (the tests compare the engines).
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
        super().__init__(spec, trace, replication, profile, lockstep, progress)
        #: the plug-in of the scenario's strategy kind
        self.plugin = strategy_of(spec.strategy)

    def engine(self) -> Engine | None:
        """The faster engine that times this run, or None where the event engine does."""
        fast = self.plugin.engine(self.spec.strategy)
        return fast if self.lockstep and fast is not None and fast.eligible(self) else None

    def run(self) -> SimulationOutcome:
        fast = self.engine()
        if fast is not None:
            return fast.run(self)
        self.supervisor = Supervisor(self, self.plugin)
        self.env.run(until=self.finished)
        if not self.counts_updates:
            # let the workers finish their last step (a parameter-server worker still
            # pulls the final parameters); asynchronous ones are cut at the last update
            alive = [w.process for w in self.supervisor.training.workers if w.process.is_alive]
            if alive:
                self.env.run(until=self.env.all_of(alive))
        if self.completed < self.total_steps:
            raise RuntimeError(
                f"simulation ended early: {self.completed} of {self.total_steps} steps done"
            )
        return self.outcome()


def by_round(spec: ScenarioSpec, profile: Profile | None) -> list[float]:
    """The throughput (samples/s) predicted from each round of `profile` alone
    (`Profile.rounds`, `as_measured_in`), replication 0 each: how far the calibration's
    spread moves the prediction; empty where the profile holds fewer than two rounds."""
    if profile is None or len(profile.rounds) < 2:
        return []
    return [
        float(summarize(spec, Simulation(spec, profile=profile.as_measured_in(i)).run())[
            "throughput_samples_per_s"
        ])
        for i in range(len(profile.rounds))
    ]
