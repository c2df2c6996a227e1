"""What run-real refuses before anything starts, and how it maps the scenario onto
TensorFlow's options (real/runner.py); no process is started here."""

from __future__ import annotations

import textwrap

import pytest

from real.runner import bytes_per_pack, check_supported
from scenarios import loads
from scenarios.errors import NotModelledError

SCENARIO = """
version: 1
name: refusals
model: mlp
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
"""


def spec_of(strategy: str):  # type: ignore[no-untyped-def]
    (point,) = loads(textwrap.dedent(SCENARIO) + f"strategy: {strategy}\n").points
    return point.spec


def test_overlap_is_refused_in_one_line() -> None:
    with pytest.raises(NotModelledError) as info:
        check_supported(spec_of("{kind: allreduce, algorithm: ring}"))  # overlap by default
    message = str(info.value)
    assert message.startswith("strategy.overlap: true (MultiWorkerMirroredStrategy")
    assert message.endswith("not implemented yet by run-real") and "\n" not in message
    check_supported(spec_of("{kind: allreduce, algorithm: ring, overlap: false}"))


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


def test_a_pipeline_is_refused_in_one_line() -> None:
    with pytest.raises(NotModelledError) as info:
        check_supported(spec_of("{kind: pipeline, stages: 2}"))
    message = str(info.value)
    assert message.startswith("strategy.kind: pipeline (simulated only")
    assert "\n" not in message
