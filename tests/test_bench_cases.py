"""The cases `make bench` times (tools/bench_cases.py): each one's scenario loads with its
`--set`s, and the planner's cases hold the candidates their descriptions count."""

from __future__ import annotations

import sys
from math import prod

import pytest
from conftest import ROOT

from planner.space import load_plan
from scenarios import load

sys.path.insert(0, str(ROOT / "tools"))
from bench_cases import CASES, PLAN, PLAN_1000, Case  # noqa: E402

SIMULATED = [case for case in CASES if case.command == "sim.cli"]


@pytest.mark.parametrize("case", SIMULATED, ids=[case.name for case in SIMULATED])
def test_every_simulated_case_loads(case: Case) -> None:
    assert load(ROOT / case.scenario, case.sets).points


def test_the_thousand_candidate_plan_is_the_product_of_its_options() -> None:
    space = load_plan(ROOT / PLAN, PLAN_1000)
    # 3 instances x 8 host counts x 6 strategies x 7 batches
    assert space.size == prod((3, 8, 6, 7)) == 1008
    assert space.plan.method(space.size) == "grid"  # each one simulated, not a sample


def test_the_eight_device_cases_are_the_shape_they_name() -> None:
    shapes = {
        case.name: load(ROOT / case.scenario, case.sets).points[0].spec
        for case in CASES
        if "128x8x64" in case.name
    }
    assert set(shapes) == {
        "ps-sync-128x8x64",
        "ps-async-128x8x64-equal",
        "ps-sync-128x8x64-exact",
        "ps-async-128x8x64-equal-exact",
        "ps-sync-128x8x64-agg",
        "ps-async-128x8x64-agg-equal",
    }
    for name in ("ps-sync-128x8x64", "ps-async-128x8x64-equal"):
        # the exact engine's twin: the same job, every worker timed
        twin = shapes[f"{name}-exact"]
        assert twin.sim.timing == "exact" and shapes[name].sim.timing == "auto"
        assert twin.model_copy(update={"sim": shapes[name].sim}) == shapes[name]
    sync, equal = shapes["ps-sync-128x8x64"], shapes["ps-async-128x8x64-equal"]
    for spec in (sync, equal):
        assert (spec.cluster.hosts, spec.cluster.devices_per_host) == (128, 8)
        assert spec.strategy.servers == 64 and spec.strategy.placement == "dedicated"
    # equal samples: one update is one worker's batch, a synchronous step every worker's
    assert equal.training.steps == sync.training.steps * sync.workers
    assert sync.strategy.sync and not equal.strategy.sync
    # host aggregation: the same jobs, an update a host's devices' batches
    hosted, hosted_equal = shapes["ps-sync-128x8x64-agg"], shapes["ps-async-128x8x64-agg-equal"]
    for spec, plain in ((hosted, sync), (hosted_equal, equal)):
        assert spec.strategy.local_aggregation and not plain.strategy.local_aggregation
        relaxed = spec.strategy.model_copy(update={"local_aggregation": False})
        assert relaxed == plain.strategy and spec.cluster == plain.cluster
    assert hosted_equal.training.steps * hosted_equal.samples_per_step == (
        sync.training.steps * sync.samples_per_step
    )
