"""The 1-worker baseline that scaling efficiency divides by: the runner simulates the
point again on one host with one device (same model, device, strategy and seed; the
1-worker run's worker 0 draws the same jitter as worker 0 of the full run).
"""

from __future__ import annotations

from measured.profile import Profile
from scenarios.spec import ScenarioSpec

from .engine.metrics import summarize
from .simulation import Simulation
from .strategies import strategy_of

_BASELINES: dict[str, float] = {}  # per process: points of a sweep often share one


#: the 1-worker baseline times at most this many measured steps (without a target): one
#: worker's steps share nothing with one another, so their mean, what its throughput is,
#: holds long before (a 5% jitter leaves it a 0.05% standard error at 10,000)
BASELINE_STEPS = 10_000


def baseline_throughput(spec: ScenarioSpec, profile: Profile | None = None) -> float:
    """Simulated throughput of the same point on one worker (first replication), over
    its first `BASELINE_STEPS` measured steps at most."""
    single = one_worker(spec)
    training = single.training
    if training.target is None and training.steps > BASELINE_STEPS:
        cut = training.model_copy(update={"steps": BASELINE_STEPS})
        single = single.model_copy(update={"training": cut})
    key = single.model_dump_json() + (profile.model_dump_json() if profile else "")
    if key not in _BASELINES:
        outcome = Simulation(single, profile=profile).run()
        _BASELINES[key] = float(summarize(single, outcome)["throughput_samples_per_s"])
    return _BASELINES[key]


def one_worker(spec: ScenarioSpec) -> ScenarioSpec:
    """The same point on a single worker (one host, one device), without failures.

    Failures and stragglers named by worker index cannot apply to one worker; jitter and
    transient hiccups of worker 0 stay as they are.
    """
    cluster = spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1})
    stragglers = spec.stragglers.model_copy(update={"slow": ()})
    strategy = strategy_of(spec.strategy).baseline(spec.strategy)
    checkpoint = spec.checkpoint.model_copy(update={"every_steps": None})
    sim = spec.sim.model_copy(update={"replications": 1})
    return spec.model_copy(
        update={
            "cluster": cluster,
            "stragglers": stragglers,
            "strategy": strategy,
            "failures": (),
            "checkpoint": checkpoint,
            "sim": sim,
        }
    )
