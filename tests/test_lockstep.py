"""The lockstep engine (sim/strategies/allreduce/lockstep.py) against the event engine it
stands in for: the same results, to 1e-9 relative, on the catalog's models and on random
small jobs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import ROOT, make_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import load
from scenarios.spec import ScenarioSpec
from sim.engine.metrics import summarize
from sim.simulation import Simulation
from sim.strategies.allreduce import lockstep

RTOL = 1e-9


def both(spec: ScenarioSpec) -> tuple[Any, Any]:
    fast = Simulation(spec)
    assert fast.engine() is lockstep
    return fast.run(), Simulation(spec, lockstep=False).run()


def assert_same(spec: ScenarioSpec) -> None:
    fast, exact = both(spec)
    np.testing.assert_allclose(fast.step_ends, exact.step_ends, rtol=RTOL, atol=1e-15)
    a, b = summarize(spec, fast), summarize(spec, exact)
    assert a.keys() == b.keys()
    for key, value in b.items():
        assert a[key] == pytest.approx(value, rel=RTOL, abs=1e-12), key

    def rows(outcome: Any) -> np.ndarray:
        records = sorted(outcome.records, key=lambda r: (r.step, r.worker))
        return np.array([r[:10] for r in records], dtype=float)

    np.testing.assert_allclose(rows(fast), rows(exact), rtol=RTOL, atol=1e-15)


@pytest.mark.parametrize(
    "path",
    [
        "scenarios/published/lambda-rtx2080ti-resnet50.yaml",
        "scenarios/published/hkbu-resnet50-ib.yaml",
        "tests/benchmarks/per-tensor-resnet152.yaml",
    ],
)
def test_catalog_scenarios(path: str) -> None:
    for point in load(ROOT / path, ["training.steps=4", "training.warmup_steps=1"]).points:
        assert_same(point.spec)


@settings(max_examples=40, deadline=None)
@given(
    hosts=st.integers(1, 5),
    devices=st.integers(1, 3),
    algorithm=st.sampled_from(["ring", "tree", "halving_doubling", "hierarchical"]),
    network=st.sampled_from(["flow", "analytical"]),
    fusion=st.sampled_from(["0 B", "30 MB", "1 GiB"]),
    overlap=st.booleans(),
    jitter=st.sampled_from([0.0, 0.1]),
    hiccups=st.booleans(),
    slow=st.booleans(),
    every=st.sampled_from([None, 2]),
    warmup=st.integers(0, 2),
)
def test_random_jobs(
    hosts: int,
    devices: int,
    algorithm: str,
    network: str,
    fusion: str,
    overlap: bool,
    jitter: float,
    hiccups: bool,
    slow: bool,
    every: int | None,
    warmup: int,
) -> None:
    stragglers: dict[str, Any] = {"jitter": jitter}
    if hiccups:
        stragglers["transient"] = {"probability": 0.3, "delay": "5 ms"}
    if slow:
        stragglers["slow"] = [{"workers": [0], "factor": 1.5}]
    spec = make_spec(
        **{
            "model": "resnet50",
            "cluster.hosts": hosts,
            "cluster.devices_per_host": devices,
            "sim.network_model": network,
            "strategy.algorithm": algorithm,
            "strategy.fusion_buffer": fusion,
            "strategy.overlap": overlap,
            "stragglers": stragglers,
            "checkpoint": {"every_steps": every} if every else {},
            "training.steps": 3,
            "training.warmup_steps": warmup,
        }
    )
    assert_same(spec)


def test_only_where_it_applies() -> None:
    assert Simulation(make_spec()).engine() is lockstep
    ps = make_spec(strategy={"kind": "parameter_server", "servers": 2})
    asynchronous = make_spec(**{"strategy.sync": False})
    failing = make_spec(failures=[{"role": "worker", "at_step": 2, "downtime": "1 s"}])
    for spec in (ps, asynchronous, failing):
        assert Simulation(spec).engine() is not lockstep
    assert Simulation(make_spec(), trace=True).engine() is not lockstep


def test_collective_time_is_the_ring_closed_form() -> None:
    # 2(N-1)(alpha + S/(N B)) on an idle network, plus NCCL's launch of a ring all-reduce
    # (baseLat, ring, Simple protocol: 8.4 us in NCCL's src/graph/tuning.cc)
    spec = make_spec(**{"cluster.hosts": 4, "sim.network_model": "analytical"})
    seconds, moved = lockstep.collective_time(Simulation(spec), 1e8)
    alpha, bandwidth, launch = 10e-6, 10e9 / 8, 8.4e-6
    assert seconds == pytest.approx(2 * 3 * (alpha + 1e8 / (4 * bandwidth)) + launch, rel=1e-9)
    assert moved == pytest.approx(2 * 4 * 3 * 1e8 / 4, rel=1e-12)  # every ring link, both phases


def test_both_engines_report_progress_alike() -> None:
    """The progress callback (what `simulate`'s bar shows within a point): every
    total / PROGRESS_CALLS steps, with the steps done and the simulated time then, the
    same from both engines."""
    from sim.engine.simulation import PROGRESS_CALLS

    spec = make_spec(**{"training.steps": 450, "cluster.hosts": 3, "stragglers.jitter": 0.1})
    told: dict[bool, list[tuple[int, float]]] = {True: [], False: []}
    ends = {}
    for fast in (True, False):
        sim = Simulation(spec, lockstep=fast, progress=lambda d, t, f=fast: told[f].append((d, t)))
        assert (sim.engine() is lockstep) == fast
        ends[fast] = sim.run().step_ends
    total = spec.training.warmup_steps + spec.training.steps
    every = total // PROGRESS_CALLS
    steps = [d for d, _ in told[True]]
    assert steps == [d for d, _ in told[False]] == list(range(every, total + 1, every))
    for fast in (True, False):
        times = np.array([t for _, t in told[fast]])
        np.testing.assert_allclose(times, ends[fast][np.array(steps) - 1], rtol=RTOL)
