"""What run-real refuses before anything starts, and how it maps the scenario onto
TensorFlow's options (real/runner.py); no process is started here."""

from __future__ import annotations

import textwrap

import pytest

from real.job import PipelineChief, Server
from real.runner import check_supported, jobs_for
from real.strategies.allreduce import bytes_per_pack
from scenarios import loads
from scenarios.errors import NotModelledError

SCENARIO = """
version: 1
name: refusals
model: mlp
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
"""


def spec_of(strategy: str):  # type: ignore[no-untyped-def]
    text = textwrap.dedent(SCENARIO) + f"strategy: {strategy}\n"
    (point,) = loads(text, backend="real").points
    return point.spec


def test_overlap_given_is_refused_in_one_line() -> None:
    with pytest.raises(NotModelledError) as info:
        check_supported(spec_of("{kind: allreduce, algorithm: ring, overlap: true}"))
    message = str(info.value)
    assert message.startswith("strategy.overlap: true (MultiWorkerMirroredStrategy")
    assert "leave overlap out" in message
    assert message.endswith("not implemented yet by run-real") and "\n" not in message
    check_supported(spec_of("{kind: allreduce, algorithm: ring, overlap: false}"))


def test_overlap_left_out_is_what_each_backend_does() -> None:
    # run-real reduces after backward (MultiWorkerMirroredStrategy), the simulator overlaps
    text = textwrap.dedent(SCENARIO) + "strategy: {kind: allreduce}\n"
    real = spec_of("{kind: allreduce}")
    check_supported(real)
    assert real.strategy.overlap is False
    assert loads(text).points[0].spec.strategy.overlap is True
    parameter_servers = spec_of("{kind: parameter_server}").strategy
    assert parameter_servers.overlap is True  # not an all-reduce: as given


def test_the_shortest_scenario_runs_for_real() -> None:
    # docs/scenarios.md: `version` and `model` are all a file needs
    (point,) = loads("version: 1\nmodel: mlp\n", source="min.yaml", backend="real").points
    check_supported(point.spec)
    assert point.spec.cluster.device.name == "cpu" and point.spec.workers == 1


def test_fusion_buffer_becomes_bytes_per_pack() -> None:
    # the mlp (64 -> 1024 -> 1024 -> 10): 64x1024+1024 + 1024x1024+1024 + 1024x10+10
    # = 1,126,410 parameters, 4,505,640 bytes of float32 gradients
    gradients = spec_of("{kind: allreduce, overlap: false}").model.gradient_bytes
    assert gradients == 4_505_640
    one_pack = spec_of("{kind: allreduce, overlap: false, fusion_buffer: 5 MB}")
    assert bytes_per_pack(one_pack) == 0  # TensorFlow's "every gradient in one pack"
    packs = spec_of("{kind: allreduce, overlap: false, fusion_buffer: 1 MB}")
    assert bytes_per_pack(packs) == 1_000_000
    per_tensor = spec_of("{kind: allreduce, overlap: false, fusion_buffer: 0 B}")
    assert bytes_per_pack(per_tensor) == 1
    assert bytes_per_pack(spec_of("{kind: parameter_server}")) == 0


def test_a_pipeline_is_a_chief_and_a_pinned_server_per_stage() -> None:
    # the mlp's three layers (hidden1, hidden2, logits) over two stages, balanced by
    # FLOPs (131,072, 2,097,152 and 20,480 forward): the slowest stage is least with
    # hidden1 alone first (2,117,632 FLOPs after it, against 2,228,224 before logits)
    spec = spec_of("{kind: pipeline, stages: 2, micro_batches: 4, schedule: 1f1b}")
    check_supported(spec)
    chief, *stages = jobs_for(spec)
    assert isinstance(chief, PipelineChief) and chief.role == "chief"
    assert (chief.stages, chief.micro_batches, chief.pipeline_schedule) == (2, 4, "1f1b")
    assert chief.split == [1, 2]
    assert all(isinstance(j, Server) for j in stages)
    assert [(j.role, j.index, j.pin) for j in stages] == [
        ("worker", 0, True),
        ("worker", 1, True),
    ]
    # alone (the baseline): every layer on one stage, the batch in one micro-batch
    alone, server = jobs_for(spec, 1)
    assert (alone.split, alone.micro_batches, server.pin) == ([3], 1, True)


@pytest.mark.parametrize(
    ("strategy", "field"),
    [
        ("{kind: pipeline, stages: 1}", "cluster: 2 devices for 1 stages"),
        ("{kind: pipeline, stages: 2, micro_batches: 2, split: [2, 1]}", None),
    ],
)
def test_what_a_real_pipeline_cannot_run_is_refused_in_one_line(
    strategy: str, field: str | None
) -> None:
    if field is None:  # one copy of the pipeline: runs
        check_supported(spec_of(strategy))
        return
    with pytest.raises(NotModelledError) as info:
        check_supported(spec_of(strategy))
    message = str(info.value)
    assert message.startswith(field) and "\n" not in message
    assert message.endswith("not implemented yet by run-real")


def test_both_backends_name_a_pipelines_collective_alike() -> None:
    # results rows pair only when `algorithm` matches (reports/compare.py): a pipeline's
    # is its replicas' collective in both backends, a parameter server has none
    from scenarios.sections.strategy import algorithm_column
    from sim.runner import _identity

    spec = spec_of("{kind: pipeline, stages: 2, micro_batches: 4}")
    assert _identity(spec)["algorithm"] == "ring"
    assert algorithm_column(spec.strategy) == "ring"
    pushed = spec_of("{kind: pipeline, stages: 2, micro_batches: 4, servers: 2}")
    assert algorithm_column(pushed.strategy) == ""  # its replicas push to servers
    assert _identity(pushed)["servers"] == 2
    for strategy, column in [
        ("{kind: allreduce, algorithm: tree}", "tree"),
        ("{kind: parameter_server}", ""),
        ("{kind: independent, trials: {seed: [1, 2]}}", ""),
    ]:
        assert algorithm_column(spec_of(strategy).strategy) == column
