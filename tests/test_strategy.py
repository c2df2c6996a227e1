"""scenarios/sections/strategy.py: what follows from a strategy's kind, against figures
worked out by hand, and the rule that nothing outside the spec compares kind strings
(STYLE.md rule 23)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import ROOT, make_spec

from scenarios.sections import strategy
from scenarios.sections.strategy import StrategySpec

#: a kind compared by string: `.kind ==`, `!=` or `in` a kind's name, or a results row's
#: `strategy` column `==` or `!=` one
KIND_COMPARISON = re.compile(
    r'kind ?(==|!=|in) ?\(?"(parameter_server|allreduce|pipeline|independent|sharded)"'
    r'|(==|!=) ?"(parameter_server|allreduce|pipeline|independent|sharded)"'
)
#: the packages that ask the spec rather than compare kinds (real/ keeps its own check)
PACKAGES = ("sim", "reports", "scenarios", "workloads", "results", "commands", "engines")
PACKAGES += ("measured", "trainscale", "costing", "planner")


def spec(**fields: Any) -> StrategySpec:
    return StrategySpec.model_validate(fields)


@pytest.mark.parametrize(
    ("fields", "workers", "copies", "averaged", "kept"),
    [
        # every device a copy, every copy's gradient in the update
        ({"kind": "allreduce"}, 8, 8, 8, 8),
        # backup workers: the update averages 8 and applies the first 6 (Chen et al. 2016)
        ({"kind": "parameter_server", "backup_workers": 2}, 8, 8, 8, 6),
        # asynchronous: each push an update of its own; backups wait for no round
        ({"kind": "parameter_server", "sync": False}, 8, 8, 1, 1),
        ({"kind": "parameter_server", "sync": False, "backup_workers": 2}, 8, 8, 1, 1),
        # 2 stages x 2 tensor shares: 16 devices hold 4 copies, each a batch of the update
        ({"kind": "pipeline", "stages": 2, "tensor": 2}, 16, 4, 4, 4),
        # trials train alone: no update averages two of them
        ({"kind": "independent", "trials": {"seed": [1, 2]}}, 8, 8, 1, 1),
    ],
)
def test_copies_averaged_and_kept(
    fields: dict[str, Any], workers: int, copies: int, averaged: int, kept: int
) -> None:
    st = spec(**fields)
    assert (st.copies(workers), st.averaged(workers), st.kept(workers)) == (
        copies,
        averaged,
        kept,
    )


def test_what_each_kind_is() -> None:
    ring, ps = spec(kind="allreduce"), spec(kind="parameter_server", servers=3)
    asynchronous = spec(kind="parameter_server", sync=False)
    pipeline = spec(kind="pipeline", stages=2)
    trials = spec(kind="independent", trials={"seed": [1]})
    every = (ring, ps, asynchronous, pipeline, trials)
    assert [s.all_reduces for s in every] == [True, False, False, False, False]
    assert [s.serves_parameters for s in every] == [False, True, True, False, False]
    assert [s.pipelined for s in every] == [False, False, False, True, False]
    assert [s.trains_alone for s in every] == [False, False, False, False, True]
    assert [s.averages_gradients for s in every] == [True, True, True, True, False]
    assert [s.counts_updates for s in every] == [False, False, True, False, False]
    assert [s.parameter_servers for s in every] == [0, 3, 1, 0, 0]
    assert spec(kind="pipeline", stages=2, servers=2).parameter_servers == 2
    assert spec(kind="allreduce", replication="in_graph").in_graph
    assert not ring.in_graph


def test_a_results_row_asks_by_its_strategy_column() -> None:
    assert strategy.counts_updates("parameter_server", False)
    assert not strategy.counts_updates("parameter_server", True)
    assert not strategy.counts_updates("allreduce", False)
    assert strategy.trains_alone("independent") and not strategy.trains_alone("pipeline")
    assert strategy.serves_parameters("parameter_server")
    assert not strategy.serves_parameters("allreduce")


def test_for_backend_fills_what_the_file_leaves_unset() -> None:
    ring = spec(kind="allreduce")
    assert ring.for_backend("sim") is ring
    assert ring.for_backend("real").overlap is False
    given = spec(kind="allreduce", overlap=True)
    assert given.for_backend("real") is given
    ps = spec(kind="parameter_server")
    assert ps.for_backend("real") is ps


def test_samples_per_step_is_the_batches_an_update_applies() -> None:
    """4 hosts x 2 devices, batch 10: 6 kept of 8 with 2 backups; one worker's batch
    asynchronous; every trial's batch (a pipeline's: tests/test_pipeline.py)."""
    eight = {"cluster.devices_per_host": 2}
    backups = make_spec(**eight, strategy={"kind": "parameter_server", "backup_workers": 2})
    assert backups.samples_per_step == 6 * 10
    asynchronous = {"kind": "parameter_server", "sync": False}
    updates = {"training.steps": 8}  # at least one update per asynchronous worker
    assert make_spec(**eight, **updates, strategy=asynchronous).samples_per_step == 10
    trials = make_spec(**eight, strategy={"kind": "independent", "trials": {"seed": [1, 2]}})
    assert trials.samples_per_step == 8 * 10


def test_nothing_outside_the_spec_compares_kind_strings() -> None:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "scenarios" / "sections" / "strategy.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if KIND_COMPARISON.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    ask = "ask StrategySpec (scenarios/sections/strategy.py) instead:\n"
    assert not found, ask + "\n".join(found)


def test_the_check_finds_a_comparison() -> None:
    # written from templates, so that this file holds no comparison itself
    for template, kind in (
        ('if spec.strategy.kind == "{}":', "pipeline"),
        ('x = st.kind != "{}"', "allreduce"),
        ('if kind in ("{}", "pipeline"):', "parameter_server"),
        ('if r["strategy"] != "{}"', "independent"),
    ):
        line = template.format(kind)
        assert KIND_COMPARISON.search(line), line
    assert not KIND_COMPARISON.search('ALLREDUCE = "allreduce"')
