"""Pipeline model parallelism and device memory against closed forms.

- GPipe's bubble (Huang et al. 2019): with P uniform stages, M micro-batches and free
  transfers, a step takes (M + P - 1) / (M P) of one device's whole step, the bubble
  (P - 1) / (M + P - 1) of it; non-interleaved 1F1B has the same bubble (Narayanan et al.
  2021).
- 1F1B's in-flight bound: stage k of P holds at most min(P - k, M) micro-batches'
  activations; GPipe all M.
- The linear partition problem: the balanced split minimises the costliest stage.
- Replicas of a pipeline all-reduce each stage's gradients: the ring's 2 (n - 1) / n x
  bytes / bandwidth is added to the step.
- Replicas that push to parameter servers instead: a step grows by a push and a pull of
  the last stage to finish's gradients, latency + bytes / bandwidth each way.
- Memory: weights, gradients and momentum of a device's layers, plus activations; with
  parameter servers the momentum lives on the servers.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scenarios import ScenarioError, load
from sim.runner import run as simulate
from sim.simulation import Simulation
from sim.strategies.allreduce.lockstep import collective_time
from sim.strategies.pipeline import schedule_of
from workloads.pipeline import balanced_split, bubble_fraction, in_flight, memory_of

LAYERS, FLOPS, PARAMS = 12, 12e9, 12e6  # per sample; 1 GFLOP and 1 M parameters a layer

#: 4 G parameters on 32 GiB V100s: as data parallelism on 4 devices, and as 4 stages
BIG = (
    "version: 1\nname: big\n"
    "model: {name: big, layers: 8, params: 4e9, flops_per_sample: 8 GFLOP, activations: 0}\n"
    "cluster: {hosts: 1, devices_per_host: 4, device: v100, network: 10GbE}\n"
    "training: {batch_per_worker: 8, steps: 2, warmup_steps: 0}\n"
    "sweep:\n  strategy:\n    - {kind: allreduce}\n"
    "    - {kind: pipeline, stages: 4, micro_batches: 4}\n"
)


def scenario(tmp_path: Path, strategy: str, devices: int = 4, **model: object) -> Path:
    extra = "".join(f", {k}: {v}" for k, v in model.items())
    path = tmp_path / "pipe.yaml"
    path.write_text(
        "version: 1\nname: pipe\n"
        f"model: {{name: uniform, layers: {LAYERS}, params: {PARAMS:g}, "
        f"flops_per_sample: {FLOPS:g} FLOP{extra}}}\n"
        f"cluster: {{hosts: 1, devices_per_host: {devices}, device: v100, network: 10GbE}}\n"
        "training: {batch_per_worker: 48, steps: 4, warmup_steps: 1}\n"
        f"strategy: {strategy}\n"
    )
    return path


def single_step_s(tmp_path: Path) -> float:
    """One device's step of the whole model: forward and backward (2 x forward) of the
    batch at the V100's float32 rate (the compute model's own formula)."""
    spec = load(scenario(tmp_path, "{kind: allreduce}", devices=1)).points[0].spec
    device = spec.cluster.device
    dtype = device.compute_dtype("float32")
    rate = device.peak_for(dtype) * device.efficiency_for(dtype)
    return 3 * FLOPS * 48 / rate


@pytest.mark.parametrize(
    ("stages", "micro", "schedule"),
    [(2, 1, "gpipe"), (4, 4, "gpipe"), (4, 12, "gpipe"), (3, 8, "1f1b"), (4, 16, "1f1b")],
)
def test_bubble_of_uniform_stages(tmp_path: Path, stages: int, micro: int, schedule: str) -> None:
    strategy = f"{{kind: pipeline, stages: {stages}, micro_batches: {micro}, schedule: {schedule}}}"
    result = simulate(load(scenario(tmp_path, strategy, devices=stages)))
    row = result.results.iloc[0]
    want = single_step_s(tmp_path) * (micro + stages - 1) / (micro * stages)
    assert row["step_time_mean_s"] == pytest.approx(want, rel=1e-9)
    assert row["wait_time_frac"] == pytest.approx(bubble_fraction(stages, micro), rel=1e-6)
    assert row["compute_time_frac"] == pytest.approx(1 - bubble_fraction(stages, micro))
    assert row["throughput_samples_per_s"] == pytest.approx(48 / want)


@pytest.mark.parametrize(("stages", "micro"), list(itertools.product((1, 2, 4, 7), (1, 3, 4, 16))))
def test_schedules_in_flight_bound_and_order(stages: int, micro: int) -> None:
    for stage in range(stages):
        for kind in ("gpipe", "1f1b"):
            ops = schedule_of(kind, stages, micro, stage)
            # every micro-batch once forward and once backward, forward first
            assert sorted(ops) == sorted(
                [("F", j) for j in range(micro)] + [("B", j) for j in range(micro)]
            )
            held, peak = 0, 0
            for op, j in ops:
                if op == "B":
                    assert ("F", j) in ops[: ops.index((op, j))]
                held += 1 if op == "F" else -1
                peak = max(peak, held)
            bound = micro if kind == "gpipe" else min(stages - stage, micro)
            assert peak == bound == in_flight(kind, stages, micro, stage)


def test_balanced_split_is_the_linear_partition_optimum() -> None:
    # Skiena's example: 1..9 into 3 stages, the costliest holds 17 (8 + 9)
    assert balanced_split([1, 2, 3, 4, 5, 6, 7, 8, 9], 3) == [5, 2, 2]
    costs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for stages in range(1, len(costs) + 1):
        split = balanced_split(costs, stages)
        assert sum(split) == len(costs) and min(split) >= 1
        worst = _worst(costs, split)
        # no other split into as many stages does better (exhaustive)
        for cuts in itertools.combinations(range(1, len(costs)), stages - 1):
            edges = [0, *cuts, len(costs)]
            other = [b - a for a, b in itertools.pairwise(edges)]
            assert worst <= _worst(costs, other) + 1e-12


def _worst(costs: list[float], split: list[int]) -> float:
    out, first = 0.0, 0
    for n in split:
        out, first = max(out, sum(costs[first : first + n])), first + n
    return out


def test_replicas_all_reduce_each_stage(tmp_path: Path) -> None:
    """2 stages x 2 replicas on one host: the step grows by the ring all-reduce of a
    stage's gradients among its 2 replicas."""
    one = simulate(
        load(scenario(tmp_path, "{kind: pipeline, stages: 2, micro_batches: 4}", devices=2))
    )
    two = simulate(
        load(scenario(tmp_path, "{kind: pipeline, stages: 2, micro_batches: 4}", devices=4))
    )
    step1 = one.results.iloc[0]["step_time_mean_s"]
    step2 = two.results.iloc[0]["step_time_mean_s"]
    assert (
        two.results.iloc[0]["throughput_samples_per_s"]
        > one.results.iloc[0]["throughput_samples_per_s"]
    )
    # the same ring on an idle network of two of these devices (the collective model's own
    # closed form, sim/strategies/allreduce/lockstep.py; the collectives are tested on their
    # own)
    pair = Simulation(load(scenario(tmp_path, "{kind: allreduce}", devices=2)).points[0].spec)
    ring, _ = collective_time(pair, PARAMS / 2 * 4)  # a stage's gradients, float32
    # GPipe: stage 0 is the last to finish its backward; its ring adds to the step
    assert step2 - step1 == pytest.approx(ring, rel=1e-6)


@pytest.mark.parametrize("network", ["10GbE", "25GbE"])
@pytest.mark.parametrize("servers", [1, 2])
def test_replicas_push_to_parameter_servers(tmp_path: Path, servers: int, network: str) -> None:
    """2 stages x 2 replicas, each stage's gradients pushed to dedicated servers and its
    variables pulled back, on the analytical network (no contention): GPipe's stage 0
    finishes last, and its 6 layers' 24 MB, dealt round-robin one variable a layer, go
    to each server in 24 / servers MB, a push and a pull added to the step. Over 25 GbE
    one TCP connection (13.7 Gbit/s, below the link's 23.7) carries each."""

    def step_of(strategy: str, devices: int) -> tuple[float, Simulation]:
        path = scenario(tmp_path, strategy, devices=devices)
        text = path.read_text().replace("network: 10GbE", f"network: {network}")
        path.write_text(text + "sim: {network_model: analytical}\n")
        result = simulate(load(path)).results.iloc[0]
        assert result["servers"] == (servers if "servers" in strategy else 0)
        return float(result["step_time_mean_s"]), Simulation(load(path).points[0].spec)

    alone, _ = step_of("{kind: pipeline, stages: 2, micro_batches: 4}", 2)
    pushed, sim = step_of(f"{{kind: pipeline, stages: 2, micro_batches: 4, servers: {servers}}}", 4)
    route = sim.topology.route(0, sim.topology.server(0))
    bandwidth = min(sim.topology.capacity[link] for link in route.links)
    if network == "25GbE":
        assert bandwidth == pytest.approx(25e9 / 8 * 0.9493)
        bandwidth = 13.7e9 / 8  # iperf -P 1 at 25 Gbit/s (networks.yaml)
    one_way = route.latency + 6 * PARAMS / LAYERS * 4 / servers / bandwidth
    assert pushed - alone == pytest.approx(2 * one_way, rel=1e-6)
    spec = sim.spec
    (use, _) = memory_of(spec)
    assert (use.weights, use.gradients, use.optimizer) == (24e6, 24e6, 0.0)


def test_memory_of_a_pipeline_stage(tmp_path: Path) -> None:
    """4 stages of 3 layers, 1 M parameters each; each layer outputs 4096 floats per
    sample; 48 samples in 8 micro-batches of 6. A stage buffers a micro-batch of what
    crosses each of its cuts (in from the stage before, out to the stage after)."""
    for schedule in ("gpipe", "1f1b"):
        strategy = f"{{kind: pipeline, stages: 4, micro_batches: 8, schedule: {schedule}}}"
        spec = load(scenario(tmp_path, strategy, activations=4096)).points[0].spec
        for k, use in enumerate(memory_of(spec)):
            params = 3 * 1e6 * 4
            assert (use.weights, use.gradients, use.optimizer) == (params, params, params)
            held = 8 if schedule == "gpipe" else min(4 - k, 8)
            assert use.activations == 3 * 4096 * 4 * 6 * held
            assert use.buffers == 4096 * 4 * 6 * ((k > 0) + (k < 3))
            assert use.activations_known


def test_adam_in_mixed_precision_holds_16_bytes_a_parameter(tmp_path: Path) -> None:
    # Rajbhandari et al. 2020, section 3.1: fp16 weights and gradients (2 + 2 bytes) and
    # K = 12 bytes of Adam's state (fp32 master weights, momentum, variance): 16 P bytes
    path = scenario(tmp_path, "{kind: allreduce, fusion_buffer: 0 B}", dtype="float16")
    text = path.read_text().replace("warmup_steps: 1}", "warmup_steps: 1, optimizer_state: 12 B}")
    path.write_text(text)
    (use,) = memory_of(load(path).points[0].spec)
    assert (use.weights, use.gradients, use.optimizer) == (2 * 12e6, 2 * 12e6, 12 * 12e6)
    assert use.weights + use.gradients + use.optimizer == 16 * 12e6
    sim = Simulation(load(path).points[0].spec)
    assert sim.costs.checkpoint_bytes == 12e6 * (2 + 12)  # the weights and the optimizer's state


def test_a_point_that_does_not_fit_is_marked_and_not_timed(tmp_path: Path) -> None:
    """32 GiB V100s: 4 G parameters (16 GB of weights, as much again in gradients and in
    momentum) do not fit one device; as 4 pipeline stages each device holds a quarter."""
    path = tmp_path / "big.yaml"
    path.write_text(BIG)
    result = simulate(load(path))
    rows = result.results.set_index("strategy")
    assert not rows.loc["allreduce", "fits"] and rows.loc["pipeline", "fits"]
    assert rows.loc["allreduce", "peak_memory_bytes"] == 3 * 4e9 * 4 + 64 * 2**20
    assert rows.loc["pipeline", "peak_memory_bytes"] == 3 * 1e9 * 4
    assert pd.isna(rows.loc["allreduce", "throughput_samples_per_s"])
    assert rows.loc["pipeline", "throughput_samples_per_s"] > 0
    (line,) = result.unfit
    assert "does not fit" in line and "44.8 GiB" in line and "32 GiB" in line


@pytest.mark.parametrize(
    ("strategy", "devices", "message"),
    [
        ("{kind: pipeline, stages: 13}", 13, "more stages than layers"),
        ("{kind: pipeline, stages: 3}", 4, "does not divide the 4 devices"),
        ("{kind: pipeline, stages: 2, micro_batches: 5}", 2, "does not divide batch_per_worker"),
        ("{kind: pipeline, stages: 2, split: [5, 5]}", 2, "10 layers, not 12"),
        ("{kind: pipeline, stages: 2, split: [12]}", 2, "split gives 1 stage(s)"),
        ("{kind: pipeline, stages: 2, sync: false}", 2, "synchronous"),
        ("{kind: allreduce, micro_batches: 2}", 2, "applies to kind pipeline only"),
        ("{kind: pipeline, stages: 2, servers: 1, algorithm: tree}", 2, "not both"),
        ("{kind: pipeline, stages: 2, servers: 1, placement: colocated}", 2, "placement"),
    ],
)
def test_bad_pipelines_are_one_line(
    tmp_path: Path, strategy: str, devices: int, message: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        load(scenario(tmp_path, strategy, devices=devices))
    text = str(info.value).strip()
    assert message in text and "\n" not in text and "strategy" in text


def test_identical_layers_share_the_totals(tmp_path: Path) -> None:
    spec = load(scenario(tmp_path, "{kind: allreduce}", activations=100)).points[0].spec
    layers = spec.model.layers
    assert layers is not None and len(layers) == LAYERS
    assert {(x.params, x.flops, x.activations) for x in layers} == {(1e6, 1e9, 100.0)}
    assert math.isclose(spec.model.total_params, PARAMS)


def test_the_trace_shows_each_stage_and_its_bubble(tmp_path: Path) -> None:
    """The report's timeline, from the trace: each stage's forwards and backwards of a
    step, and between them the bubble, (P - 1) (t_f + t_b) per stage (free transfers)."""
    import json

    from reports.timeline import from_trace

    stages, micro = 4, 4
    strategy = f"{{kind: pipeline, stages: {stages}, micro_batches: {micro}}}"
    result = simulate(load(scenario(tmp_path, strategy)), trace=True)
    (text,) = result.traces.values()
    line = from_trace(json.loads(text), None)
    step = single_step_s(tmp_path) * (micro + stages - 1) / (micro * stages)
    ends = result.steps.groupby("step")["end_s"].max()
    lo, hi = float(ends.iloc[0]), float(ends.iloc[1])  # the second step, all of it
    assert hi - lo == pytest.approx(step)
    per_op = single_step_s(tmp_path) / (micro * stages)  # t_f + t_b of a micro-batch
    for worker in range(stages):
        inside = (line.worker == worker) & (line.begin >= lo - 1e-6) & (line.finish <= hi + 1e-6)
        phases = {p for p, keep in zip(line.phase, inside, strict=True) if keep}
        assert phases == {"forward", "backward"}
        busy = float(np.sum((line.finish - line.begin)[inside]))
        assert busy == pytest.approx(micro * per_op)
        assert (hi - lo) - busy == pytest.approx((stages - 1) * per_op)


def test_the_report_shows_memory_and_skips_what_was_not_timed(tmp_path: Path) -> None:
    from reports import cli as report_cli
    from reports.report import build
    from sim import cli as sim_cli

    path = tmp_path / "big.yaml"
    path.write_text(BIG)
    out = tmp_path / "sim"
    assert sim_cli.main([str(path), "--out", str(out), "--quiet", "--trace"]) == 0
    report = build([out])
    assert "memory" in report.plots
    # the point in words (its id: pipeline,stages=4,micro_batches=4)
    [title] = [p.title for p in report.timelines]
    assert "4-stage GPIPE pipeline, 4 micro-batches" in title and title.endswith("[sim]")
    assert report_cli.main([str(out), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    # each point in words, its id after it
    assert "| 4 V100 on 1 host, ring all-reduce, 8 per GPU (`allreduce`) | sim | 44.8 GiB | " \
        "32 GiB | no: not timed |" in text
    assert "4-stage GPIPE pipeline, 4 micro-batches, 8 per GPU " \
        "(`pipeline,stages=4,micro_batches=4`) | sim | 11.2 GiB | 32 GiB | yes |" in text


def test_tensor_parallel_layers_all_reduce_megatrons_volume(tmp_path: Path) -> None:
    """Megatron (Shoeybi et al. 2019): a transformer layer split over T devices
    all-reduces its s x h activations twice in the forward and twice in the backward
    (tensor_exchange 2 s h per sample each way). One stage of 12 such layers on 2
    devices, 1 micro-batch: the step is half the compute plus one all-reduce of
    12 x 2 s h x batch floats per direction."""
    s, h = 128, 256
    path = scenario(tmp_path, "{kind: pipeline, stages: 1, tensor: 2}", devices=2)
    path.write_text(path.read_text().replace("FLOP}", f"FLOP, tensor_exchange: {2 * s * h}}}"))
    spec = load(path).points[0].spec
    result = simulate(load(path))
    row = result.results.iloc[0]
    pair = Simulation(load(scenario(tmp_path, "{kind: allreduce}", devices=2)).points[0].spec)
    volume = LAYERS * 2 * s * h * 48 * 4  # bytes each way: 4 all-reduces of s h per layer
    ring, _ = collective_time(pair, volume)
    assert row["step_time_mean_s"] == pytest.approx(single_step_s(tmp_path) / 2 + 2 * ring)
    assert row["throughput_samples_per_s"] == pytest.approx(48 / row["step_time_mean_s"])
    (use,) = memory_of(spec)
    assert use.weights == PARAMS * 4 / 2  # each device holds half of every layer


def test_hybrid_tensor_pipeline_and_replicas_place_devices(tmp_path: Path) -> None:
    """2 replicas x 2 stages x 2 tensor shares on 8 devices: device (r P + k) T + t; the
    step's samples are the 2 replicas' batches, and a layer without tensor_exchange
    cannot be split."""
    strategy = "{kind: pipeline, stages: 2, tensor: 2, micro_batches: 4}"
    path = scenario(tmp_path, strategy, devices=8)
    with pytest.raises(ScenarioError, match="gives no tensor_exchange"):
        load(path)
    path.write_text(path.read_text().replace("FLOP}", "FLOP, tensor_exchange: 1000}"))
    spec = load(path).points[0].spec
    assert spec.samples_per_step == 2 * 48
    result = simulate(load(path), steps="all")
    steps = result.steps
    assert sorted(steps["worker"].unique()) == list(range(8))
    assert result.results.iloc[0]["samples_trained"] == 2 * 48 * 4
