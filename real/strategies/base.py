"""What every strategy plug-in of run-real shares: the interface (`Strategy`), a probe's
description, and the pieces more than one kind uses (what a worker injects, what a job of
one client driving several devices cannot run)."""

from __future__ import annotations

from typing import Any, Protocol

from results.streams import device_factor, stream
from scenarios.spec import ScenarioSpec

from ..job import Job, Place, Training

#: one probe of the machine besides compute (real/calibrate/measure.py `measure_probe`):
#: ("transfer",), ("allreduce", processes), ("in_graph", devices), ("dispatch", model,
#: batch, devices), ("fed", model, batch, micro_batches), ("coordinator",) or ("update",
#: model, dtype, servers)
Probe = tuple[Any, ...]


class Strategy(Protocol):
    """What run-real needs to know of a strategy kind, and nothing else asks."""

    def problems(self, spec: ScenarioSpec) -> list[str]:
        """What of `spec` run-real cannot run under this kind, one line each naming the
        field (the first is reported: `... not implemented yet by run-real`)."""
        ...

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        """The processes of the point's job on `place.workers` workers, each made of the
        point's `place` (task 0) and `training` (real/runner.py `common_of`)."""
        ...

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        """The calibration probes the point's simulation takes numbers from, besides the
        compute and the transfer every point measures."""
        ...


def stragglers_of(spec: ScenarioSpec, worker: int) -> dict[str, Any]:
    """What worker `worker` injects: jitter, persistent slowness, transient hiccups (seconds
    per step), from the same seeded streams as the simulator."""
    total = spec.training.warmup_steps + spec.training.steps
    slow = device_factor(spec.seed, 0, worker, spec.stragglers.variability)
    for group in spec.stragglers.slow:
        if worker in group.workers:
            slow *= group.factor
    hiccups = [0.0] * total
    transient = spec.stragglers.transient
    if transient is not None and transient.probability > 0:
        hit = stream(spec.seed, 0, "transient", worker).random(total) < transient.probability
        hiccups = [transient.delay if h else 0.0 for h in hit.tolist()]
    return {"jitter": spec.stragglers.jitter, "slow": slow, "hiccups": hiccups}


def one_client_problems(spec: ScenarioSpec, what: str, data: bool = False) -> list[str]:
    """What a job whose one client drives several devices (a pipeline, in-graph
    replication) cannot run: targets and digits data unless `data`, stragglers (a
    client's sleep would slow every device), failures and checkpoints."""
    problems = []
    if not data and (spec.training.target is not None or spec.training.data != "synthetic"):
        problems.append(f"training.target or training.data: digits with {what}")
    s = spec.stragglers
    if (
        s.jitter
        or s.variability
        or s.slow
        or (s.transient is not None and s.transient.probability > 0)
    ):
        problems.append(f"stragglers with {what}")
    if spec.failures or spec.checkpoint.every_steps:
        problems.append(f"failures or checkpoints with {what}")
    return problems
