"""What the engine asks of a strategy's plug-in (STYLE.md rule 23).

`sim/strategies/__init__.py` holds one plug-in per `strategy.kind` and is the one place
that knows them all; the engine and the strategies' own modules see a plug-in only as a
`Strategy`, handed to them, so nothing a strategy imports imports the registry back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from scenarios.sections.strategy import StrategySpec

if TYPE_CHECKING:
    from .outcome import SimulationOutcome
    from .simulation import Simulation
    from .training import Training


class Engine(Protocol):
    """An engine beside the event engine, faster on the runs it applies to and equal to it
    there (a differential test holds them equal): a module with these two functions."""

    def eligible(self, sim: Simulation) -> bool:
        """Whether it gives this run's results (else the event engine does): no failures,
        no trace, ... whatever it cannot time."""
        ...

    def run(self, sim: Simulation) -> SimulationOutcome:
        """Every step of the run."""
        ...


class Strategy(Protocol):
    def training(self, sim: Simulation, start_step: int) -> Training:
        """The training of one generation of the job, from `start_step`."""
        ...

    def baseline(self, strategy: StrategySpec) -> StrategySpec:
        """The strategy of the same point on one worker."""
        ...

    def engine(self, strategy: StrategySpec) -> Engine | None:
        """The faster engine that may time it (`None`: the event engine alone); the
        engine checks the rest (`Engine.eligible`) and leaves what it cannot time to the
        event engine."""
        ...

    def survives(self, role: str, index: int) -> bool:
        """Whether a failure of `role` `index` leaves the job running (the process is
        replaced) rather than restarting it from its last checkpoint."""
        ...
