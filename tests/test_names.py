"""A point named in words (scenarios/point_ids.py, `describe`): the words the plan's and
the report's pages use, checked against the wording the pages' readers were promised
(issue 60's examples) and against the configuration each name must state."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import yaml

from scenarios import load
from scenarios.point_ids import describe

ROOT = Path(__file__).resolve().parents[1]
RESNET_PLAN = ROOT / "scenarios/plans/resnet50-imagenet.yaml"
LLAMA_PLAN = ROOT / "scenarios/plans/llama2-70b-layouts.yaml"


def _name(path: Path, *sets: str) -> str:
    """The name of the scenario at `path` (a plan: its base scenario) with `sets`."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document.pop("plan", None)
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder) / "base.yaml"
        base.write_text(yaml.safe_dump(document), encoding="utf-8")
        spec = load(base, sets).points[0].spec
    return describe(spec.model_dump(mode="json"))


def test_a_gpu_instance_plan_candidate_reads_as_devices_instances_strategy_batch() -> None:
    name = _name(
        RESNET_PLAN,
        "cluster.device=h100",
        "cluster.host_link=nvlink4",
        "cluster.network=400GbE",
        "cluster.price=p5.48xlarge",
        "cluster.hosts=32",
        "strategy.algorithm=hierarchical",
    )
    assert name == "256 H100 in 32 p5.48xlarge, hierarchical all-reduce, 32 per GPU"


def test_a_transformer_layout_reads_as_its_degrees_zero_recompute_micro_batch() -> None:
    # 128 hosts x 8 = 1,024 GPUs over TP 8 x PP 8: DP 16
    name = _name(
        LLAMA_PLAN,
        "cluster.hosts=128",
        "strategy.pipeline=8",
        "strategy.recompute=selective",
        "strategy.stage=1",
    )
    assert name.startswith("1024 H100 in 128 p5.48xlarge, TP 8 x PP 8 x DP 16, ZeRO-1, ")
    assert name.endswith("selective recompute, micro-batch 1")
    plain = _name(LLAMA_PLAN, "strategy.stage=0", "strategy.recompute=none")
    assert "TP 8 x PP 4 x DP 16, no ZeRO, no recompute, micro-batch 1" in plain


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (("strategy.kind=parameter_server", "strategy.servers=8"), "8 parameter servers"),
        (
            ("strategy.kind=parameter_server", "strategy.servers=1", "strategy.sync=false"),
            "1 parameter server (dedicated), asynchronous",
        ),
        (("strategy.algorithm=halving_doubling",), "halving-doubling all-reduce"),
        (("cluster.hosts=1",), "8 V100 in 1 p3.16xlarge"),
    ],
)
def test_each_strategy_and_count_is_said(sets: tuple[str, ...], words: str) -> None:
    assert words in _name(RESNET_PLAN, *sets)


def test_cpu_workers_without_a_price_are_counted_on_their_hosts() -> None:
    name = _name(ROOT / "scenarios/library/mlp-localhost.yaml")
    spec = load(ROOT / "scenarios/library/mlp-localhost.yaml").points[0].spec
    workers, hosts = spec.cluster.workers, spec.cluster.hosts
    assert name.startswith(f"{workers} CPU worker{'s' if workers != 1 else ''} on {hosts} host")
    assert f"{spec.training.batch_per_worker} per worker" in name
