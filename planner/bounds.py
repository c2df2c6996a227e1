"""What a candidate is sure to miss, known before it is simulated.

A synchronous data-parallel job's updates do not depend on its timing: each averages the
global batch, at the rate its schedule gives, with no staleness. So the update at which
the model's curve first reaches the target is known from the scenario alone, and so is
whether the run reaches it at all. Each of those updates takes at least one step's
compute (forward and backward, without jitter), so its time to the target is at least
that many steps' compute, and its cost at least that time's price. A candidate whose
bound already misses the target, the deadline or the budget is out without simulating.

Where the bound would not be sure, none is made: asynchronous updates (their staleness
is timed), backup workers (a step averages the gradients that arrive), failures,
stragglers (a step's compute varies), calibration profiles (their step times win over
the catalog's) and strategies other than all-reduce and parameter servers.
"""

from __future__ import annotations

import numpy as np

from costing import cost_usd
from scenarios.loader import Point
from scenarios.sections.plan import PlanSpec
from sim.costs.compute import ComputeModel
from workloads import convergence
from workloads.schedule import schedule_of


def sure_status(plan: PlanSpec, point: Point) -> str | None:
    """`misses target`, `over deadline` or `over budget` where the candidate is sure to
    be, None where only simulating it tells."""
    spec = point.spec
    target, model = spec.training.target, spec.model.convergence
    strategy = spec.strategy
    if (
        target is None
        or model is None
        or model.metric != target.metric
        or not (strategy.all_reduces or strategy.serves_parameters)
        or strategy.counts_updates
        or strategy.backup_workers
        or spec.failures
        or spec.cluster.profile is not None
        or spec.stragglers.jitter
        or spec.stragglers.variability
        or spec.stragglers.slow
        or spec.stragglers.transient is not None
    ):
        return None
    n = spec.training.warmup_steps + spec.training.steps
    updates = convergence.Updates(
        rates=schedule_of(spec).rates(np.arange(n)),
        batches=np.full(n, float(spec.samples_per_step)),
        staleness=np.zeros(n),
        epoch_samples=spec.training.epoch_samples,
    )
    metric = convergence.values(model, updates)
    reached = metric >= target.value if target.metric == "accuracy" else metric <= target.value
    if not reached.any():
        return "misses target"
    least_s = (int(np.argmax(reached)) + 1) * ComputeModel(spec).step_s
    limits = plan.constraints
    if limits.deadline is not None and least_s > limits.deadline:
        return "over deadline"
    budget = limits.budget
    if (
        budget is not None
        and spec.cluster.price is not None
        and cost_usd(spec.cluster, least_s) > budget
    ):
        return "over budget"
    return None
