"""Sharded data parallelism (sim/strategies/sharded.py, `strategy: {kind: sharded, stage}`) against
the ZeRO paper's figures (Rajbhandari et al. 2020) and closed forms on an idle network."""

from __future__ import annotations

import pytest

from real.runner import check_supported
from scenarios import loads
from scenarios.errors import NotModelledError
from sim import run
from workloads.pipeline import memory_of

ALPHA = 10e-6  # s, the route between two hosts
B = 10e9 / 8  # 10 Gbit/s in bytes/s
LAYERS, PARAMS = 4, 4e6  # 1 M parameters a layer
S = PARAMS * 2  # bytes of float16 parameters (or gradients)
COMPUTE_S = 3 * 1e9 * 8 / 5e12  # forward + backward (2x), 1 GFLOP a sample, 8 samples


def scenario(n: int, strategy: str, optimizer: str = "", jitter: float = 0.0) -> str:
    return (
        "version: 1\nname: zero\n"
        f"model: {{name: toy, layers: {LAYERS}, params: {PARAMS:g}, flops_per_sample: 1 GFLOP,"
        " dtype: float16, activations: 0}\n"
        f"cluster: {{hosts: {n}, devices_per_host: 1,"
        " device: {kind: cpu, peak_flops: 10 TFLOP/s, efficiency: 0.5},"
        " host_link: {bandwidth: 100 GB/s, latency: 1 us},"
        " network: {bandwidth: 10 Gbit/s, latency: 10 us}}\n"
        f"training: {{batch_per_worker: 8, steps: 4, warmup_steps: 1{optimizer}}}\n"
        f"strategy: {strategy}\nstragglers: {{jitter: {jitter}}}\n"
        "sim: {network_model: analytical}\n"
    )


@pytest.mark.parametrize("n", [4, 8, 64])
def test_memory_per_device_is_the_papers(n: int) -> None:
    # section 5 (Figure 1), Adam in mixed precision (K = 12), activations aside:
    # stage 1: 4P + 12P/N, stage 2: 2P + 14P/N, stage 3: 16P/N bytes
    expected = {
        1: 4 * PARAMS + 12 * PARAMS / n,
        2: 2 * PARAMS + 14 * PARAMS / n,
        3: 16 * PARAMS / n,
    }
    for stage, figure in expected.items():
        text = scenario(
            n, f"{{kind: sharded, stage: {stage}, fusion_buffer: 0 B}}", ", optimizer_state: 12 B"
        )
        (use,) = memory_of(loads(text).points[0].spec)
        assert use.weights + use.gradients + use.optimizer == pytest.approx(figure, rel=1e-12)
        # stage 3 also holds two gathered layers (computing, prefetched) and one gradient
        assert use.buffers == (3 * 1e6 * 2 if stage == 3 else 0.0)
    plain = scenario(n, "{kind: allreduce, fusion_buffer: 0 B}", ", optimizer_state: 12 B")
    (use,) = memory_of(loads(plain).points[0].spec)
    assert use.total == 16 * PARAMS  # the paper's baseline: 16 bytes a parameter


@pytest.mark.parametrize("n", [2, 4, 8])
def test_traffic_per_step_is_2p_for_stages_1_and_2_and_3p_for_stage_3(n: int) -> None:
    # section 7: stages 1 and 2 move what all-reduce moves, stage 3 half as much again;
    # a ring moves (N-1)/N of the bytes per device per collective: 2(N-1) S in all
    rows = run(
        loads(
            scenario(n, "{kind: allreduce}")
            + "sweep:\n  strategy:\n    - {kind: allreduce}\n"
            + "".join(f"    - {{kind: sharded, stage: {s}}}\n" for s in (1, 2, 3))
        )
    ).results.set_index("point")
    per_step = rows["bytes_on_network"] / rows["steps"]
    assert per_step["allreduce"] == pytest.approx(2 * (n - 1) * S, rel=1e-12)
    assert per_step["sharded,stage=1"] == per_step["sharded,stage=2"] == per_step["allreduce"]
    assert per_step["sharded,stage=3"] == pytest.approx(3 * (n - 1) * S, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_step_on_an_idle_network_without_overlap(n: int) -> None:
    # stages 1-2, one bucket: compute, then a ring reduce-scatter and all-gather of S,
    # each (N-1)(alpha + S/(N B)); stage 3: before each layer's forward and backward a
    # gather of its s = S/L, after its backward a reduce-scatter: 3L (N-1)(alpha + s/(N B))
    half = (n - 1) * (ALPHA + S / (n * B))
    layer = (n - 1) * (ALPHA + S / LAYERS / (n * B))
    for stage, comm in ((1, 2 * half), (2, 2 * half), (3, 3 * LAYERS * layer)):
        text = scenario(
            n, f"{{kind: sharded, stage: {stage}, overlap: false, fusion_buffer: 1 GB}}"
        )
        (row,) = run(loads(text)).results.to_dict(orient="records")
        assert row["step_time_mean_s"] == pytest.approx(COMPUTE_S + comm, rel=1e-9)


def test_overlap_hides_stage_3s_collectives_behind_the_compute() -> None:
    def step(overlap: str) -> float:
        text = scenario(8, f"{{kind: sharded, stage: 3, overlap: {overlap}}}")
        return float(run(loads(text)).results["step_time_mean_s"].iloc[0])

    apart, together = step("false"), step("true")
    assert together < apart
    assert together >= COMPUTE_S  # never faster than the compute alone


def test_sharded_needs_sync_and_run_real_refuses_it_in_one_line() -> None:
    from scenarios import ScenarioError

    with pytest.raises(ScenarioError, match="kind sharded is synchronous"):
        loads(scenario(2, "{kind: sharded, sync: false}"))
    spec = loads(scenario(2, "{kind: sharded, stage: 2}"), backend="real").points[0].spec
    with pytest.raises(NotModelledError) as info:
        check_supported(spec)
    assert str(info.value) == "strategy.kind: sharded: not implemented yet by run-real"
