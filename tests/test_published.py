"""The published validation set (scenarios/published/, tools/validate_published.py): every
file names its source and each figure its point, and the simulator's errors against the
published numbers stay where docs/validation-published.md reports them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from measured.published import figures, stated
from scenarios import load
from scenarios.errors import ScenarioError
from scenarios.loader import loads

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import validate_published  # noqa: E402

FILES = sorted((ROOT / "scenarios" / "published").glob("*.yaml"))


def test_the_set_spans_sources_strategies_and_scale() -> None:
    found = [f for path in FILES for f in figures(load(path))]
    assert len(found) >= 20
    assert len({f.spec.source for f in found}) >= 4
    kinds = {f.point.spec.strategy.kind for f in found}
    assert kinds == {"allreduce", "parameter_server", "pipeline"}
    gpus = [f.point.spec.workers for f in found]
    assert min(gpus) <= 8 and max(gpus) >= 256
    networks = {
        f.point.spec.cluster.network.bandwidth for f in found if f.point.spec.cluster.hosts > 1
    }
    assert min(networks) <= 10e9 / 8 and max(networks) >= 100e9 / 8


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_figure_names_its_source_and_point(path: Path) -> None:
    for figure in figures(load(path)):
        assert figure.spec.source and figure.spec.url.startswith("https://") and figure.spec.table
        assert figure.published.value > 0


def test_a_figure_must_pick_one_point() -> None:
    text = """
version: 1
name: t
model: resnet50
cluster: {hosts: 1, devices_per_host: 2, device: v100}
sweep: {cluster.hosts: [1, 2]}
published:
  source: s
  url: https://example.org
  table: t
  points: [{at: {cluster.hosts: 3}, value: 100}]
"""
    with pytest.raises(ScenarioError, match=r"published.points\[0\].at: .* picks 0 sweep points"):
        figures(loads(text))
    with pytest.raises(ScenarioError, match="'cluster.devices_per_host' is not swept"):
        figures(loads(text.replace("cluster.hosts: 3", "cluster.devices_per_host: 2")))


def test_the_simulator_against_the_published_set() -> None:
    # the targets: throughput MAPE <= 10%, 90% of figures within tolerance, every
    # pair of a table ordered. The last two are not met yet (docs/validation-published.md
    # says which figures and why): these bounds keep what is met from slipping
    compared = validate_published.compare(FILES, jobs=2)
    throughput = [c for c in compared if not c.efficiency]
    assert validate_published.mape(throughput) <= validate_published.MAPE_TARGET
    within = sum(c.within for c in compared) / len(compared)
    assert within >= 0.85
    judged, ordered, _ = validate_published.pairs(compared)
    assert ordered >= judged - 2


def test_relative_figures_name_their_reference(tmp_path: Path) -> None:
    """relative_throughput comes with a reference point, and only it does; each figure is
    paired with that point."""
    path = ROOT / "scenarios" / "published" / "gpipe-transformer24-p100.yaml"
    found = figures(load(path))
    assert {f.reference.values["strategy.stages"] for f in found if f.reference} == {2}
    text = path.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  reference: {strategy.stages: 2}\n", ""))
    with pytest.raises(ScenarioError, match="reference"):
        load(bad)


def test_readme_figures_are_the_generated_documents() -> None:
    """The README's published-validation sentence says what docs/validation-published.md
    (written by `make validate-published` only) says: figures, sources, throughput MAPE,
    figures within tolerance and pairs ordered."""
    import re

    doc = (ROOT / "docs" / "validation-published.md").read_text(encoding="utf-8")
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    made = re.search(r"(\d+) figures from (\d+) sources", doc)
    mape = re.search(r"\*\*Throughput MAPE: ([\d.]+%)\*\*", doc)
    within = re.search(r"\*\*(\d+) of (\d+) figures \(\d+%\) within tolerance\*\*", doc)
    ordered = re.search(r"\*\*Order: (\d+) of (\d+) pairs\*\*", doc)
    assert made and mape and within and ordered, "the document's summary changed form"
    figures, sources = made.groups()
    assert within.group(2) == figures
    sentence = readme.split("Published GPU clusters, catalog alone", 1)[1].split("- **", 1)[0]
    assert f"{figures} published figures from {sources} sources" in sentence
    names = re.search(r"sources \(([^)]*)\)", sentence)  # named, one by one
    assert names and len(names.group(1).split(", ")) == int(sources)
    assert f"Throughput MAPE {mape.group(1)}," in sentence
    assert f"{within.group(1)} of {figures} figures within" in sentence
    assert f"{ordered.group(1)} of {ordered.group(2)} pairs" in sentence


LLM_FILES = sorted((ROOT / "scenarios" / "published" / "llm").glob("*.yaml"))


@pytest.mark.parametrize("path", LLM_FILES, ids=[p.stem for p in LLM_FILES])
def test_every_llm_figure_names_its_source_and_point(path: Path) -> None:
    scenario = load(path)
    found = figures(scenario)
    orders = stated(scenario)
    assert found or orders
    for figure in found:
        assert figure.spec.source and figure.spec.url.startswith("https://") and figure.spec.table
        assert figure.point.spec.strategy.hybrid
    for order in orders:
        assert order.order.note and order.faster.id != order.slower.id


def test_a_stated_ordering_picks_two_points_of_the_sweep() -> None:
    text = (ROOT / "scenarios" / "published" / "llm" / "narayanan-2021-schedules.yaml").read_text()
    with pytest.raises(ScenarioError, match=r"published.orders\[0\].faster"):
        stated(
            loads(
                text.replace(
                    "faster: {training.global_batch: 12,", "faster: {training.global_batch: 13,", 1
                )
            )
        )
    with pytest.raises(ScenarioError, match="orders"):
        loads(text.split("  orders:")[0])  # neither figures nor orderings


def test_the_transformer_layouts_against_the_published_runs() -> None:
    # the targets: throughput MAPE <= 5% over the set, no ordering of a source's
    # table reversed (full against selective recomputation among them), and GPT-3 175B
    # on 1,024 A100s within 10% of 140 TFLOP/s a GPU with compute most of its step
    compared, orders = validate_published.check(LLM_FILES, jobs=1)
    assert len(compared) >= 28
    # what the sources state in words: interleaving faster than plain 1F1B at every
    # batch of Figure 12, scatter/gather faster than without it (Figure 18)
    assert len(orders) >= 10 and all(o.kept for o in orders)
    assert validate_published.mape(compared) <= validate_published.LLM.mape_target
    judged, ordered, wrong = validate_published.pairs(compared)
    assert judged >= 60 and ordered >= judged - 1
    # every layout against another of the same model on as many GPUs is ordered as
    # published: ZeRO-3 against tensor x pipeline x data, full against selective
    for a, b in wrong:
        same = (a.figure.point.spec.model.name, a.figure.point.spec.workers)
        assert same != (b.figure.point.spec.model.name, b.figure.point.spec.workers)
    gpt3 = next(
        c
        for c in compared
        if c.scenario == "narayanan-2021-ptdp" and c.figure.point.spec.workers == 1024
    )
    assert abs(gpt3.error) <= 0.10
    doc = (ROOT / "docs" / "validation-llm.md").read_text(encoding="utf-8")
    assert f"**Throughput MAPE: {100 * validate_published.mape(compared):.1f}%**" in doc
