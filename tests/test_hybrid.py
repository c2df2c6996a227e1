"""Transformer layouts (sim/strategies/hybrid/, `strategy.kind: hybrid`): the pipeline
schedules against their closed forms, the event engine and the laid-out engine equal on
random small layouts, each part of a pass against its formula, the refusals of layouts
that do not divide, and the GPT-3 175B case of Narayanan et al. 2021."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios.loader import set_path
from scenarios.spec import ScenarioSpec
from sim.engine.metrics import summarize
from sim.network import fabric
from sim.simulation import Simulation
from sim.strategies.hybrid import engine as hybrid_engine
from sim.strategies.hybrid import schedule
from sim.strategies.hybrid.costs import Layout, StageCosts, costs_of, size_derate
from workloads.pipeline import chunk_layers, layout_memory

SMALL = {"layers": 8, "hidden": 256, "heads": 8, "sequence": 128, "vocab": 1024}
BASE: dict[str, Any] = {
    "version": 1,
    "name": "hybrid-test",
    "model": {"name": "tiny-gpt", "transformer": SMALL, "dtype": "bfloat16"},
    "cluster": {
        "hosts": 2,
        "devices_per_host": 4,
        "device": "a100",
        "host_link": "nvlink3",
        "network": "dgx-a100-hdr",
    },
    "training": {"batch_per_worker": 8, "steps": 3, "warmup_steps": 1},
    "strategy": {"kind": "hybrid", "tensor": 2, "pipeline": 2, "micro_batch": 1},
}


def spec_of(**sets: Any) -> ScenarioSpec:
    doc = copy.deepcopy(BASE)
    for path, value in sets.items():
        set_path(doc, path, value)
    return ScenarioSpec.model_validate(doc)


# -- the schedules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "stages", "micro", "virtual"),
    [("1f1b", 4, 8, 1), ("gpipe", 4, 8, 1), ("1f1b", 4, 3, 1), ("1f1b", 4, 8, 2),
     ("1f1b", 8, 16, 4), ("1f1b", 4, 4, 3), ("1f1b", 1, 5, 1)],
)  # fmt: skip
def test_equal_stages_take_the_published_closed_forms(
    kind: str, stages: int, micro: int, virtual: int
) -> None:
    # (m + p - 1)(F + B) for GPipe and 1F1B (Narayanan et al. 2021, eq. 1); interleaved
    # over v chunks (m + (p - 1)/v)(F + B) (section 2.2.2), free transfers
    forward, backward = 1.0, 2.0
    orders = schedule.stage_orders(kind, stages, micro, virtual)
    timed = schedule.run(
        orders, lambda s, p: (forward if p[0] == "F" else backward) / virtual, 0.0, virtual
    )
    makespan = max(t.end for t in timed)
    assert makespan == pytest.approx((micro + (stages - 1) / virtual) * (forward + backward))
    # each stage runs every micro-batch's forward and backward of every chunk once
    for order in orders:
        assert sorted(order) == sorted(
            (op, j, c) for op in "FB" for j in range(micro) for c in range(virtual)
        )


def test_the_bubble_shrinks_by_the_chunks() -> None:
    # the idle share of a step, (p - 1)/(m v + p - 1) with v chunks: interleaving by v
    # divides the bubble time by v (Narayanan et al. 2021, section 2.2.2)
    stages, micro = 4, 8
    for virtual in (1, 2, 4):
        orders = schedule.stage_orders("1f1b", stages, micro, virtual)
        timed = schedule.run(orders, lambda s, p, v=virtual: 1.0 / v, 0.0, virtual)
        busy = sum(t.busy for t in timed)
        makespan = max(t.end for t in timed)
        bubble = 1 - busy / (stages * makespan)
        assert bubble == pytest.approx((stages - 1) / (micro * virtual + stages - 1))


def test_a_transfer_between_stages_is_on_the_critical_path() -> None:
    # 1F1B on two stages, forward 1, backward 2, a transfer of 0.25 each way that holds
    # its sender (Megatron-LM's blocking send), 4 micro-batches, worked by hand (stage 0
    # warms up with one forward and sends after each; stage 1 sends after each backward):
    #   stage 0: F0 0-1, F1 1.25-2.25, B0 4.5-6.5, F2 6.5-7.5, B1 7.75-9.75,
    #            F3 9.75-10.75, B2 11-13, B3 14.25-16.25
    #   stage 1: F0 1.25-2.25, B0 2.25-4.25, F1 4.5-5.5, B1 5.5-7.5, F2 7.75-8.75,
    #            B2 8.75-10.75, F3 11-12, B3 12-14, its last send until 14.25
    orders = schedule.stage_orders("1f1b", 2, 4)
    timed = schedule.run(orders, lambda s, p: 1.0 if p[0] == "F" else 2.0, 0.25)
    assert timed[0].starts == [0.0, 1.25, 4.5, 6.5, 7.75, 9.75, 11.0, 14.25]
    assert timed[1].starts == [1.25, 2.25, 4.5, 5.5, 7.75, 8.75, 11.0, 12.0]
    assert (timed[0].end, timed[1].end) == (16.25, 14.25)


def test_every_pass_but_the_ends_sends_on() -> None:
    # with v chunks on p stages, a micro-batch crosses p v - 1 boundaries each way:
    # every forward but the last virtual stage's sends, every backward but the first's
    for stages, virtual in ((2, 1), (4, 1), (4, 2), (3, 3)):
        orders = schedule.stage_orders("1f1b", stages, stages * 2, virtual)
        sent = sum(
            schedule.sends(pass_, stage, stages, virtual)
            for stage, order in enumerate(orders)
            for pass_ in order
        )
        assert sent == 2 * (stages * virtual - 1) * stages * 2
    assert not schedule.sends(("F", 0, 0), 0, 1, 1)


# -- the engines --------------------------------------------------------------------------------


def _same(spec: ScenarioSpec) -> None:
    fast = Simulation(spec)
    assert fast.engine() is hybrid_engine
    a = fast.run()
    b = Simulation(spec, lockstep=False).run()
    assert (a.engine, b.engine) == ("hybrid", "events")
    np.testing.assert_allclose(a.step_ends, b.step_ends, rtol=1e-9)
    ra, rb = a.records, b.records
    order_a = np.lexsort((ra.column("worker"), ra.column("step")))
    order_b = np.lexsort((rb.column("worker"), rb.column("step")))
    for name in ("worker", "step", "start", "end", "comm_s", "idle"):
        np.testing.assert_allclose(
            ra.column(name)[order_a], rb.column(name)[order_b], rtol=1e-9, atol=1e-12
        )
    sa, sb = summarize(spec, a), summarize(spec, b)
    for key in ("step_time_mean_s", "compute_time_frac", "comm_time_frac"):
        assert sa[key] == pytest.approx(sb[key], rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    tensor=st.sampled_from([1, 2, 4]),
    pipeline=st.sampled_from([1, 2, 4]),
    hosts=st.integers(1, 3),
    virtual=st.sampled_from([1, 2]),
    groups=st.integers(1, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
    attention=st.sampled_from(["flash", "unfused"]),
    zero=st.sampled_from([0, 1, 3]),
    kind=st.sampled_from(["1f1b", "gpipe"]),
    overlap=st.booleans(),
    lighter=st.booleans(),
)
def test_the_event_engine_and_the_laid_out_one_agree(
    tensor: int, pipeline: int, hosts: int, virtual: int, groups: int, recompute: str,
    attention: str, zero: int, kind: str, overlap: bool, lighter: bool,
) -> None:  # fmt: skip
    if zero == 3:  # ZeRO's stage 3 takes no pipeline
        pipeline = 1
    if pipeline == 1 or kind == "gpipe":
        virtual = 1
    devices = 4 * hosts
    if devices % (tensor * pipeline):
        return
    spec = spec_of(
        **{
            "cluster.hosts": hosts,
            "strategy.tensor": tensor,
            "strategy.pipeline": pipeline,
            "strategy.virtual_stages": virtual,
            "strategy.recompute": recompute,
            "strategy.attention": attention,
            "strategy.stage": zero,
            "strategy.schedule": kind,
            "strategy.overlap": overlap,
            "training.batch_per_worker": pipeline * groups,
        }
    )
    if lighter and pipeline * virtual == 4:  # 8 layers: 1 and 1 at the ends, 3 between
        ends = spec.strategy.model_copy(update={"first_layers": 1, "last_layers": 1})
        spec = spec.model_copy(update={"strategy": ends})
    _same(spec)


def test_uneven_end_stages_hold_the_layers_they_are_given() -> None:
    # Llama 3 405B's 126 layers on 16 stages: one fewer on the first and the last
    # (Dubey et al. 2024, section 3.3.2); interleaved, the ends are virtual stages 0
    # and p v - 1, chunk 0 of stage 0 and chunk v - 1 of stage p - 1
    sets = {"model": "llama3_405b", "cluster.hosts": 32, "strategy.tensor": 8,
            "strategy.pipeline": 16, "strategy.first_layers": 7, "strategy.last_layers": 7,
            "training.batch_per_worker": 16}  # fmt: skip
    assert chunk_layers(spec_of(**sets)) == [[7]] + [[8]] * 14 + [[7]]
    sets.update({"strategy.virtual_stages": 2, "strategy.first_layers": 3,
                 "strategy.last_layers": 3})  # fmt: skip
    layers = chunk_layers(spec_of(**sets))
    assert layers[0] == [3, 4] and layers[-1] == [4, 3] and layers[5] == [4, 4]
    assert sum(map(sum, layers)) == 126


def test_uneven_stages_move_work_without_adding_any() -> None:
    # the same 8 layers over 4 stages as 2, 2, 2, 2 or 1, 3, 3, 1: every stage's passes
    # sum to the same compute and parameters, the step's makespan set by the heaviest
    even = spec_of(**{"cluster.hosts": 4, "strategy.pipeline": 4})
    uneven = spec_of(**{"cluster.hosts": 4, "strategy.pipeline": 4,
                        "strategy.first_layers": 1, "strategy.last_layers": 1})  # fmt: skip
    a, b = costs_of(even), costs_of(uneven)
    for side in ("forward", "backward"):
        total_a = sum(getattr(s, side)[0].compute for s in a.stages)
        total_b = sum(getattr(s, side)[0].compute for s in b.stages)
        assert total_a == pytest.approx(total_b, rel=1e-12)
    assert sum(s.params for s in a.stages) == pytest.approx(sum(s.params for s in b.stages))
    assert b.stages[1].forward[0].compute == pytest.approx(
        3 / 2 * a.stages[1].forward[0].compute
    )
    assert b.stages[0].chunk_layers == [1] and b.stages[1].chunk_layers == [3]


#: a device that only multiplies: 0.1 TFLOP/s, every GEMM at its peak x the size curve,
#: no memory-bound kernels and no update (no memory bandwidth), so that a step is its
#: FLOPs, its schedule and its collectives; every GEMM of SMALL (h 256, d_h 32, s 128,
#: one sequence) has a side under 1,024, where the curve holds at 119.4 / 253.7
SLOW = {"name": "slow", "peak_flops": "0.1 TFLOP/s", "matmul_efficiency": {"any": 1.0}}
DERATE = 119.4 / 253.7


def _step(spec: ScenarioSpec, events: bool) -> float:
    sim = Simulation(spec, lockstep=not events)
    outcome = sim.run()
    assert outcome.engine == ("events" if events else "hybrid")
    return summarize(spec, outcome)["step_time_mean_s"]


def _layer_forward_s(b: int = 1, s: int = 128, h: int = 256, t: int = 1) -> float:
    # a GPT layer's forward, 24 b s h^2 + 4 b s^2 h FLOPs (Narayanan et al. 2021,
    # appendix), over t devices
    return (24 * b * s * h * h + 4 * b * s * s * h) / t / (0.1e12 * DERATE)


@pytest.mark.parametrize("events", [False, True], ids=["laid-out", "events"])
def test_a_step_is_its_flops_over_the_interleaved_schedule_on_both_engines(
    events: bool,
) -> None:
    # 8 layers on p = 4 stages in v = 2 chunks of one layer, m = 8 micro-batches, backward
    # twice the forward (no recomputation): (m + (p - 1)/v)(F + B) with F + B three
    # layers' forwards for each of a device's two chunks (Narayanan et al. 2021, section
    # 2.2.2). What else runs (the 8-token vocabulary's logits, transfers over NVLink, the
    # tied embedding's all-reduce) is under 0.3% of it
    spec = spec_of(**{
        "cluster.hosts": 1, "cluster.device": SLOW, "model.transformer.vocab": 8,
        "strategy.tensor": 1, "strategy.pipeline": 4, "strategy.virtual_stages": 2,
        "strategy.attention": "unfused",
    })  # fmt: skip
    f = _layer_forward_s()
    assert _step(spec, events) == pytest.approx((8 + 3 / 2) * 2 * 3 * f, rel=3e-3)


@pytest.mark.parametrize("events", [False, True], ids=["laid-out", "events"])
def test_data_parallel_gradients_follow_the_flush_on_both_engines(events: bool) -> None:
    # one device a host, d = 4 copies of the whole model, 8 micro-batches each: m (F + B)
    # of compute, then a ring all-reduce of every fp32 main gradient across the 2:1
    # oversubscribed leaves, 2 (d - 1)/d S / (B / 2) with no latency
    network = {
        "bandwidth": "100 Gbit/s", "protocol": "rdma", "step_latency": "0 us",
        "rails": 1, "tiers": [{"hosts": 2, "oversubscription": 2}, {"hosts": 4}],
    }  # fmt: skip
    spec = spec_of(**{
        "cluster.hosts": 4, "cluster.devices_per_host": 1, "cluster.network": network,
        "cluster.device": SLOW, "strategy.tensor": 1, "strategy.pipeline": 1,
        "strategy.attention": "unfused",
    })  # fmt: skip
    shape = spec.model.transformer.shape()
    logits = 2 * 128 * 256 * shape.vocab / (0.1e12 * DERATE)  # 2 b s h V, forward
    compute = 8 * 3 * (8 * _layer_forward_s() + logits)
    layers, h, v, seq = 8, 256, 1024, 128  # parameters by Narayanan et al. 2021's Eq. 2
    params = 12 * layers * h * h * (1 + 13 / (12 * h) + (v + seq) / (12 * layers * h))
    ring = 2 * 3 / 4 * params * 4 / (100e9 / 8 / 2)
    assert _step(spec, events) == pytest.approx(compute + ring, rel=1e-6)


def test_an_expert_all_to_all_crosses_the_rails() -> None:
    # experts over e = 4 data-parallel ranks on four hosts of one device: a dispatch and
    # a combine in forward and two in backward, each rank sending (e - 1)/e of its b s k
    # h 16-bit elements over its NIC (HDR, 25 GB/s x 0.96), (e - 1) steps of 9.6 us
    moe = {**SMALL, "experts": 4, "top_k": 2}
    spec = spec_of(**{
        "cluster.hosts": 4, "cluster.devices_per_host": 1, "model.transformer": moe,
        "strategy.tensor": 1, "strategy.pipeline": 1, "strategy.expert": 4,
    })  # fmt: skip
    moved = 1 * 128 * 2 * 256 * 2
    one = 3 / 4 * moved / (25e9 * 0.96) + 3 * 9.6e-6
    costs = costs_of(spec)
    assert costs.stages[0].forward[0].expert == pytest.approx(8 * 2 * one)
    assert costs.stages[0].backward[0].expert == pytest.approx(8 * 2 * one)


def test_stragglers_run_on_the_event_engine_alone() -> None:
    spec = spec_of(**{"stragglers": {"jitter": 0.1}})
    sim = Simulation(spec)
    assert sim.engine() is None
    jittered = summarize(spec, sim.run())["step_time_mean_s"]
    plain = summarize(spec_of(), Simulation(spec_of()).run())["step_time_mean_s"]
    assert jittered > plain  # a step waits for its slowest group


# -- the parts -------------------------------------------------------------------------------------


def test_the_tensor_all_reduces_are_rings_inside_the_host() -> None:
    # two all-reduces of b s h 16-bit elements a layer in forward, two in backward, each
    # 2 (t - 1)/t S / B + 2 (t - 1) a on NVLink 3 at 300 GB/s x 0.8 (a = 3.4 us)
    spec = spec_of()
    costs = costs_of(spec)
    nbytes = 1 * 128 * 256 * 2
    one = 2 * 1 / 2 * nbytes / (300e9 * 0.8) + 2 * 1 * 3.4e-6
    layers = SMALL["layers"] // 2
    assert costs.stages[0].forward[0].tensor == pytest.approx(layers * 2 * one)
    assert costs.stages[0].backward[0].tensor == pytest.approx(layers * 2 * one)


def test_a_pipeline_sends_one_micro_batch_between_hosts() -> None:
    # stage 1 sits tcd = 4 devices further: on the other host, over its own rail (HDR,
    # 200 Gbit/s x 0.96), b s h 16-bit elements, one step latency (9.6 us)
    costs = costs_of(spec_of())
    assert costs.p2p_s == pytest.approx(128 * 256 * 2 / (25e9 * 0.96) + 9.6e-6)


def test_data_parallel_gradients_cross_the_oversubscribed_tiers() -> None:
    # d = 4 over four hosts of one device each; leaves of 2 hosts at 2:1: the ring reaches
    # past the leaves, so a rank moves at the NIC's rate over 2
    network = {
        "bandwidth": "100 Gbit/s", "protocol": "rdma", "step_latency": "0 us",
        "rails": 1, "tiers": [{"hosts": 2, "oversubscription": 2}, {"hosts": 4}],
    }  # fmt: skip
    sets = {
        "cluster.hosts": 4,
        "cluster.devices_per_host": 1,
        "cluster.network": network,
        "strategy.tensor": 1,
        "strategy.pipeline": 1,
    }
    costs = costs_of(spec_of(**sets))
    params = costs.stages[0].params
    ring = 2 * 3 / 4 * params * 4 / (100e9 / 8 / 2)
    assert costs.stages[0].reduce_s == pytest.approx(ring)
    flat = {**network, "tiers": [{"hosts": 4, "oversubscription": 2}]}
    within = costs_of(spec_of(**{**sets, "cluster.network": flat}))
    assert within.stages[0].reduce_s == pytest.approx(ring / 2)  # one leaf: no taper


def test_each_tier_a_ring_reaches_past_tapers_it() -> None:
    # a three-tier fat-tree of hosts of 8 devices: leaves of 2 hosts at 2:1, spine groups
    # of 4 hosts at 3:1, the core above at 1:1 (oversubscription per tier: what the
    # switches below it take in over what they send up). A ring within a host runs on
    # NVLink; within a leaf at a NIC's rate; within a spine group at 1/2 of it; across
    # spine groups at 1/6. With 8 rails each device has its own NIC; with 2, four
    # devices share one
    network = {
        "bandwidth": "400 Gbit/s", "protocol": "rdma", "goodput": 1.0, "rails": 8,
        "tiers": [{"hosts": 2, "oversubscription": 2}, {"hosts": 4, "oversubscription": 3},
                  {"hosts": 16}],
    }  # fmt: skip
    spec = spec_of(**{"cluster.hosts": 16, "cluster.devices_per_host": 8,
                      "cluster.network": network, "strategy.tensor": 8})  # fmt: skip
    cluster, nic = spec.cluster, 400e9 / 8

    def rate(hosts: list[int]) -> float:
        return fabric.path_of(cluster, [8 * h for h in hosts]).bandwidth

    assert fabric.path_of(cluster, [0, 7]).bandwidth == pytest.approx(
        cluster.host_link.bandwidth * cluster.host_link.goodput
    )
    assert rate([0, 1]) == pytest.approx(nic)
    assert rate([0, 1, 2, 3]) == pytest.approx(nic / 2)
    assert rate([0, 4]) == pytest.approx(nic / 6)
    assert rate(list(range(16))) == pytest.approx(nic / 6)
    two_rails = spec_of(**{"cluster.hosts": 16, "cluster.devices_per_host": 8,
                           "cluster.network": {**network, "rails": 2},
                           "strategy.tensor": 8})  # fmt: skip
    assert fabric.path_of(two_rails.cluster, [0, 8]).bandwidth == pytest.approx(nic / 4)


def test_overlapping_the_reduction_hides_all_but_the_last_bucket() -> None:
    # one chunk of L = 8 layers whose last backward runs from 6 to 10 (half a second a
    # layer); its gradients' reduction R in 8 buckets, each as soon as its layer's
    # gradients are final and the bucket before is done (Megatron-LM's
    # --overlap-grad-reduce). R = 2 (buckets of 0.25 s keep up): only the last bucket is
    # exposed, 10.25; R = 8 (buckets of 1 s): from the first layer's gradients at 6.5,
    # 8 s of buckets, 14.5. Without overlap, R after the flush. What is not the
    # gradients' (here 1 s, the weights' all-gather) follows either way
    def part(gradients: float) -> StageCosts:
        return StageCosts([], [], 8.0, gradients + 1.0, 0.0, [8.0], gradients, [8])

    last = [(6.0, 10.0)]
    assert hybrid_engine.reduced(part(2.0), last, 10.0, False) == pytest.approx(13.0)
    assert hybrid_engine.reduced(part(2.0), last, 10.0, True) == pytest.approx(11.25)
    assert hybrid_engine.reduced(part(8.0), last, 10.0, True) == pytest.approx(15.5)


def test_a_gemm_reaches_less_the_smaller_it_is() -> None:
    # the measured A100 cubes: 8192^3 full rate, 1024^3 at 119.4 / 253.7, 2048^3 at 221.8
    assert size_derate(8192) == pytest.approx(1.0)
    assert size_derate(16384) == pytest.approx(1.0)
    assert size_derate(1024) == pytest.approx(119.4 / 253.7)
    assert size_derate(128) == pytest.approx(119.4 / 253.7)
    assert size_derate(2048) == pytest.approx(221.8 / 253.7)
    assert size_derate(4096) < size_derate(6000) < 1.0


def test_first_stage_activations_are_korthikantis_eq_5() -> None:
    # 1F1B, sequence parallel, selective: the first stage holds p micro-batches of its
    # L/p layers, (s b h L / t) 34 bytes (Korthikanti et al. 2022, eq. 5 and Table 2)
    spec = spec_of(
        **{
            "strategy.sequence_parallel": True,
            "strategy.recompute": "selective",
            "strategy.attention": "unfused",
        }
    )
    first = layout_memory(spec)[0]
    s, b, h, t = SMALL["sequence"], 1, SMALL["hidden"], 2
    assert first.activations == pytest.approx(34 * s * b * h * SMALL["layers"] / t)


# -- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ({"strategy.tensor": 3}, "tensor 3 x pipeline 2 x context 1 x data"),
        ({"strategy.tensor": 8, "strategy.pipeline": 1, "model.transformer.heads": 4},
         "tensor 8 does not divide model.transformer.heads 4"),
        ({"strategy.pipeline": 8}, "= 16, not the cluster's 8 devices"),
        ({"strategy.data": 4}, "data 4 = 16, not the cluster's 8 devices"),
        ({"strategy.micro_batch": 3}, "3 does not divide a copy's batch 8"),
        ({"strategy.virtual_stages": 3}, "pipeline x virtual_stages 6 does not divide"),
        ({"model": "resnet50"}, "kind hybrid lays out a transformer"),
        ({"strategy.sequence_parallel": True, "strategy.tensor": 1, "strategy.pipeline": 8},
         "sequence_parallel splits over the tensor group"),
        ({"strategy.first_layers": 3, "strategy.virtual_stages": 2},
         "first_layers 3 leave 5 of model.transformer.layers 8 for 3 other virtual stages"),
        ({"strategy.first_layers": 4, "strategy.last_layers": 4, "strategy.virtual_stages": 2},
         "leave 0 of model.transformer.layers 8 for 2 other virtual stages"),
        ({"strategy.last_layers": 1, "strategy.pipeline": 1, "strategy.tensor": 8},
         "last_layers sizes a pipeline's end stage: pipeline > 1"),
    ],
)  # fmt: skip
def test_a_layout_that_does_not_divide_is_one_line(
    tmp_path: Path, sets: dict[str, Any], says: str
) -> None:
    doc = copy.deepcopy(BASE)
    for path, value in sets.items():
        set_path(doc, path, value)

    scenario = tmp_path / "bad.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "sim.cli", str(scenario), "--out", str(out), "--quiet"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_layout_sizes_follow_megatrons_rank_order() -> None:
    layout = Layout(tensor=2, pipeline=2, data=2, context=1, expert=1, virtual=1,
                    micro_batch=1, micro_batches=2)  # fmt: skip
    assert layout.group("tensor") == [0, 1]
    assert layout.group("data", stage=1) == [4, 6]
    assert layout.group("p2p") == [0, 4]
