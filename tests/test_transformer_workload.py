"""A transformer's closed-form counts against the published numbers and equations.

- Parameters: N21 Eq. 2 and every size of N21 Table 1; the published exact counts of
  Llama 2 7B and 70B, Llama 3 8B and Mixtral 8x7B.
- FLOPs: N21's per-layer appendix counts, N21 Eq. 3 (full recompute), K22 Eq. 7 (none),
  Eq. 7 + 4Bs²h a layer (selective); K22 Table 5's MFU; N21's 175B iteration time.
- Activations: K22 Table 2 (Eqs. 1-6) row by row, 5as/h = 80 for 175B, Megatron's
  sbh(18 + 4f/h)/t for f != 4h.
- Pipelines: 1F1B, interleaved (K22's factor and Megatron's warm-up), GPipe.
- Model state: Z20's 7.5B on 64 GPUs (Fig. 1), Megatron's bytes per parameter.
- Collectives: N21 §3.2 (TP, PP), Z20 §VII (DP, ZeRO-3), Megatron's MoE all-to-alls.
"""

from __future__ import annotations

import math

import pytest

from workloads.transformer import (
    Shape,
    activation_bytes_per_layer,
    data_parallel_bytes,
    expert_all_to_all_bytes,
    flops_per_iteration,
    flops_per_layer_forward,
    logits_flops,
    model_flops_per_token,
    model_state_bytes,
    params,
    pipeline_activation_factor,
    pipeline_p2p_bytes,
    tensor_parallel_bytes_per_layer,
    zero3_bytes,
)

S, V = 2048, 51200  # N21 and K22: sequence and vocabulary


def gpt(a: int, h: int, layers: int) -> Shape:
    """A GPT shape as N21 and K22 train it: f = 4h, tied output layer."""
    return Shape(
        layers=layers,
        hidden=h,
        heads=a,
        kv_heads=a,
        ffn_hidden=4 * h,
        sequence=S,
        vocab=V,
        tied_embeddings=True,
    )


GPT_175B = gpt(96, 12288, 96)

# N21 Table 1: P (billions), a, h, l
TABLE_1 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


def llama(
    layers: int, h: int, a: int, g: int, f: int, vocab: int, experts: int = 1, top_k: int = 1
) -> Shape:
    """A Llama-style shape: gated MLP, 4096 tokens (no parameter depends on it)."""
    return Shape(
        layers=layers,
        hidden=h,
        heads=a,
        kv_heads=g,
        ffn_hidden=f,
        sequence=4096,
        vocab=vocab,
        gated=True,
        experts=experts,
        top_k=top_k,
    )


# --- parameters ------------------------------------------------------------------------


@pytest.mark.parametrize(("billions", "a", "h", "layers"), TABLE_1)
def test_params_reproduce_n21_table_1_and_eq_2(
    billions: float, a: int, h: int, layers: int
) -> None:
    got = params(gpt(a, h, layers))
    eq_2 = 12 * layers * h**2 * (1 + 13 / (12 * h) + (V + S) / (12 * layers * h))
    assert math.isclose(got, eq_2, rel_tol=1e-14)
    # Eq. 2 multiplied out, in integers: exactly
    assert got == 12 * layers * h * h + 13 * layers * h + V * h + S * h
    assert round(got / 1e9, 1) == billions


def test_untied_gpt_adds_the_output_matrix() -> None:
    tied = gpt(24, 2304, 24)
    untied = Shape(24, 2304, 24, 24, 4 * 2304, S, V)
    assert params(untied) - params(tied) == V * 2304


@pytest.mark.parametrize(
    ("shape", "published"),
    [
        (llama(32, 4096, 32, 32, 11008, 32000), 6_738_415_616),  # Llama 2 7B
        (llama(32, 4096, 32, 8, 14336, 128256), 8_030_261_248),  # Llama 3 8B
        (llama(80, 8192, 64, 8, 28672, 32000), 68_976_648_192),  # Llama 2 70B
        (llama(32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2), 46_702_792_704),  # Mixtral
    ],
    ids=["llama2-7b", "llama3-8b", "llama2-70b", "mixtral-8x7b"],
)
def test_params_reproduce_published_llama_counts(shape: Shape, published: int) -> None:
    assert params(shape, style="llama") == published


def test_params_refuse_an_unknown_style() -> None:
    with pytest.raises(ValueError, match="style"):
        params(GPT_175B, style="bert")


def test_shape_checks_its_sizes() -> None:
    with pytest.raises(ValueError, match="kv_heads"):
        Shape(2, 64, 8, 3, 256, 16, 100)
    with pytest.raises(ValueError, match="top_k"):
        Shape(2, 64, 8, 8, 256, 16, 100, experts=2, top_k=3)
    with pytest.raises(ValueError, match="layers=0"):
        Shape(0, 64, 8, 8, 256, 16, 100)
    assert Shape(2, 64, 8, 2, 256, 16, 100).head_dim == 8


# --- FLOPs -------------------------------------------------------------------------------


def test_layer_forward_is_n21_appendix() -> None:
    b, s, h = 3.0, float(S), 12288.0
    assert flops_per_layer_forward(GPT_175B, b) == {
        "qkv": 6 * b * s * h**2,
        "scores": 2 * b * s**2 * h,
        "attention_over_values": 2 * b * s**2 * h,
        "projection": 2 * b * s * h**2,
        "mlp": 16 * b * s * h**2,
        "router": 0.0,
    }


def test_layer_forward_generalises_to_gqa_swiglu_and_moe() -> None:
    # Mixtral 8x7B: h 4096, 32 heads of 128, 8 KV heads, f 14336, 8 experts, top 2
    mixtral = llama(32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2)
    b, s, h = 2.0, 4096.0, 4096.0
    parts = flops_per_layer_forward(mixtral, b)
    assert parts["qkv"] == 2 * b * s * h * (32 + 2 * 8) * 128
    assert parts["scores"] == parts["attention_over_values"] == 2 * b * s * s * h
    assert parts["projection"] == 2 * b * s * h * h
    assert parts["mlp"] == 6 * b * s * h * 14336 * 2
    assert parts["router"] == 2 * b * s * h * 8


@pytest.mark.parametrize(("a", "h", "l"), [(24, 2304, 24), (96, 12288, 96), (160, 25600, 128)])
def test_iteration_flops_are_the_closed_forms(a: int, h: int, l: int) -> None:  # noqa: E741
    shape, b, s = gpt(a, h, l), 8.0, float(S)
    n21_eq_3 = 96 * b * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    k22_eq_7 = 72 * b * l * s * h**2 * (1 + s / (6 * h) + V / (12 * h * l))
    selective = k22_eq_7 + l * 4 * b * s**2 * h
    assert math.isclose(
        selective, 72 * b * l * s * h**2 * (1 + 2 * s / (9 * h) + V / (12 * h * l)), rel_tol=1e-12
    )
    assert math.isclose(flops_per_iteration(shape, b, "full"), n21_eq_3, rel_tol=1e-12)
    assert math.isclose(flops_per_iteration(shape, b), k22_eq_7, rel_tol=1e-12)
    assert math.isclose(flops_per_iteration(shape, b, "selective"), selective, rel_tol=1e-12)
    # K22 Eq. 8's printed s/(3h) over-counts selective recomputation
    k22_eq_8 = 72 * b * l * s * h**2 * (1 + s / (3 * h) + V / (12 * h * l))
    assert flops_per_iteration(shape, b, "selective") < k22_eq_8
    assert logits_flops(shape, b) == 6 * b * s * h * V
    assert math.isclose(model_flops_per_token(shape), k22_eq_7 / b / s, rel_tol=1e-12)


def test_iteration_flops_refuse_an_unknown_recompute() -> None:
    with pytest.raises(ValueError, match="recompute"):
        flops_per_iteration(GPT_175B, 1, "some")


# K22 Table 5: (a, h, L), B, GPUs, SP + selective seconds, MFU %
TABLE_5 = [
    ((64, 6144, 48), 4, 8, 1.10, 41.5),
    ((96, 12288, 96), 64, 64, 13.75, 51.4),
    ((128, 20480, 105), 280, 280, 37.83, 56.0),
    ((160, 25600, 128), 512, 512, 71.49, 56.3),
]


@pytest.mark.parametrize(("size", "batch", "gpus", "seconds", "mfu"), TABLE_5)
def test_model_flops_give_k22_table_5_mfu(
    size: tuple[int, int, int], batch: int, gpus: int, seconds: float, mfu: float
) -> None:
    flops = flops_per_iteration(gpt(*size), batch, "none")

    def mfu_at(t: float) -> float:
        return 100 * flops / (gpus * t * 312e12)

    # the printed MFU lies within what the time's printed precision (10 ms) allows ...
    assert mfu_at(seconds + 0.005) - 0.05 <= mfu <= mfu_at(seconds - 0.005) + 0.05
    # ... and within 0.1 point of the printed time's, but for 22B (1.10 s gives 41.65%)
    if size[1] != 6144:
        assert abs(mfu_at(seconds) - mfu) < 0.1


def test_n21_175b_iteration_with_full_recompute() -> None:
    # N21 §5.1: 175B, B = 1536 on 1024 GPUs at 140 TFLOP/s each: about 31.5 s an iteration
    seconds = flops_per_iteration(GPT_175B, 1536, "full") / (1024 * 140e12)
    assert abs(seconds - 31.5) < 0.05


# --- activations ---------------------------------------------------------------------------


def test_activations_are_k22_table_2() -> None:
    a, h, s, b, t = 96, 12288.0, float(S), 2.0, 8
    sbh = s * b * h
    assert 5 * a * s / h == 80
    cases = [
        (1, False, "none", sbh * (34 + 5 * a * s / h)),
        (t, False, "none", sbh * (10 + 24 / t + 5 * a * s / (h * t))),
        (t, True, "none", sbh * (34 / t + 5 * a * s / (h * t))),
        (t, False, "selective", sbh * (10 + 24 / t)),
        (t, True, "selective", 34 * sbh / t),
        (t, False, "full", 2 * sbh),
        (t, True, "full", 2 * sbh / t),
    ]
    for tensor, sp, recompute, expected in cases:
        got = activation_bytes_per_layer(GPT_175B, b, tensor, sp, recompute)
        assert math.isclose(got, expected, rel_tol=1e-12), (tensor, sp, recompute)


def test_activations_of_any_ffn_width_are_megatrons() -> None:
    # megatron theoretical_memory_usage.py, TP + SP + selective: sbh(18 + 4f/h)/t
    h, f, s, b, t = 1024.0, 3000.0, 512.0, 4.0, 4
    shape = Shape(2, 1024, 16, 16, 3000, 512, 1000)
    got = activation_bytes_per_layer(shape, b, t, True, "selective")
    assert math.isclose(got, s * b * h * (18 + 4 * f / h) / t, rel_tol=1e-12)


def test_activations_of_gqa_and_gated_mlps() -> None:
    # K and V kept g heads wide (2sb·g·d_h each); gated MLP keeps 6sbf instead of 4sbf
    h, f, s, b, g, d_h, a = 4096.0, 14336.0, 4096.0, 1.0, 8, 128.0, 32
    shape = llama(32, 4096, 32, 8, 14336, 128256)
    # QKV input, Q, K, V, projection input (2 bytes each), dropout mask, score terms
    sb = s * b
    attention = 2 * sb * h + 2 * sb * h + 2 * sb * g * d_h * 2 + 2 * sb * h + sb * h
    attention += 5 * a * s * s * b
    mlp = 2 * sb * h + 6 * sb * f + sb * h
    norms = 4 * sb * h
    got = activation_bytes_per_layer(shape, b)
    assert math.isclose(got, attention + mlp + norms, rel_tol=1e-12)


def test_activations_of_moe_are_not_modelled() -> None:
    with pytest.raises(NotImplementedError):
        activation_bytes_per_layer(llama(2, 64, 8, 8, 128, 100, experts=4, top_k=2), 1)


# --- pipelines -------------------------------------------------------------------------------


def test_pipeline_factor_by_schedule() -> None:
    assert pipeline_activation_factor(8, 64) == 8  # 1F1B: p in flight
    assert pipeline_activation_factor(8, 4) == 4  # fewer micro-batches than stages
    assert pipeline_activation_factor(8, 64, schedule="gpipe") == 64
    # interleaved: K22's 1 + (p - 1)/(p v) on p ...
    assert math.isclose(pipeline_activation_factor(8, 64, 3), 8 * (1 + 7 / (8 * 3)))
    # ... which is Megatron's warm-up of 2(p - 1) + (v - 1)p chunks, one more in flight,
    # each 1/v of a micro-batch on the stage's layers
    p, v = 35, 3
    assert math.isclose(pipeline_activation_factor(p, 280, v), (2 * (p - 1) + (v - 1) * p + 1) / v)
    # with m = p Megatron runs every forward first: all m micro-batches, no more
    assert pipeline_activation_factor(4, 4, 2) == 4


def test_first_stage_holds_l_layers_worth_under_1f1b() -> None:
    # K22 Eq. 5: (sbhL/t)(34 + 5as/h) whatever p is
    a, h, layers, s, b, t, p = 96, 12288.0, 96, float(S), 1.0, 8, 8
    per_layer = activation_bytes_per_layer(GPT_175B, b, t, True)
    stage = pipeline_activation_factor(p, 64) * (layers / p) * per_layer
    assert math.isclose(stage, s * b * h * layers / t * (34 + 5 * a * s / h), rel_tol=1e-12)


def test_pipeline_factor_refuses_interleaved_gpipe() -> None:
    with pytest.raises(ValueError, match="GPipe"):
        pipeline_activation_factor(4, 8, 2, "gpipe")
    with pytest.raises(ValueError, match="schedule"):
        pipeline_activation_factor(4, 8, 1, "zb")


# --- model state -----------------------------------------------------------------------------


def test_zero_stages_give_z20_figure_1() -> None:
    psi, n_d = 7.5e9, 64  # Z20 Fig. 1: 120 / 31.4 / 16.6 / 1.9 GB
    got = [model_state_bytes(psi, n_d, stage) / 1e9 for stage in range(4)]
    assert [round(x, 1) for x in got] == [120.0, 31.4, 16.6, 1.9]
    expected = [16 * 7.5, 4 * 7.5 + 12 * 7.5 / 64, 2 * 7.5 + 14 * 7.5 / 64, 16 * 7.5 / 64]
    assert got == pytest.approx(expected, rel=1e-12)
    assert got[1:] == pytest.approx([31.40625, 16.640625, 1.875], rel=1e-12)


@pytest.mark.parametrize(
    ("precision", "whole", "distributed"),
    [("megatron_bf16", 18, (6, 12)), ("fp16", 20, (4, 16)), ("fp32", 16, (8, 8))],
)
def test_megatron_bytes_per_parameter(
    precision: str, whole: float, distributed: tuple[float, float]
) -> None:
    psi, d = 1e9, 16
    assert model_state_bytes(psi, d, 0, precision) == whole * psi
    assert model_state_bytes(psi, d, 1, precision) == pytest.approx(
        (distributed[0] + distributed[1] / d) * psi, rel=1e-12
    )
    with pytest.raises(ValueError, match="zero_stage"):
        model_state_bytes(psi, d, 2, precision)


def test_model_state_refuses_an_unknown_precision() -> None:
    with pytest.raises(ValueError, match="precision"):
        model_state_bytes(1e9, 8, 0, "int8")


# --- collectives -----------------------------------------------------------------------------


def test_tensor_parallel_volume_is_n21s() -> None:
    b, s, h, t = 2.0, float(S), 12288.0, 8
    assert tensor_parallel_bytes_per_layer(GPT_175B, b, t) == pytest.approx(
        8 * b * s * h * (t - 1) / t * 2, rel=1e-12
    )
    assert tensor_parallel_bytes_per_layer(GPT_175B, b, t, recompute="selective") == (
        pytest.approx(8 * b * s * h * (t - 1) / t * 2, rel=1e-12)
    )
    # full recompute: the two forward all-reduces again, 6 all-reduces (Z20 §VII-C)
    assert tensor_parallel_bytes_per_layer(GPT_175B, b, t, 4, "full") == pytest.approx(
        12 * b * s * h * (t - 1) / t * 4, rel=1e-12
    )
    assert tensor_parallel_bytes_per_layer(GPT_175B, b, 1) == 0


def test_pipeline_p2p_volume_is_n21s() -> None:
    b, s, h = 1.0, float(S), 12288.0
    assert pipeline_p2p_bytes(GPT_175B, b) == b * s * h * 2
    assert pipeline_p2p_bytes(GPT_175B, b, tensor=8) == b * s * h * 2
    assert pipeline_p2p_bytes(GPT_175B, b, 2, 8, scatter_gather=True) == b * s * h * 2 / 8


def test_data_parallel_and_zero3_volumes_are_z20s() -> None:
    psi, d = 1.3e9, 64
    assert data_parallel_bytes(psi, d) == pytest.approx(2 * psi * (d - 1) / d * 4, rel=1e-12)
    assert zero3_bytes(psi, d) == pytest.approx(3 * psi * (d - 1) / d * 2, rel=1e-12)
    # Z20 §VII-B2: ZeRO-3 moves 1.5x data parallelism's volume
    assert zero3_bytes(psi, d, 4) == pytest.approx(1.5 * data_parallel_bytes(psi, d, 4))
    assert data_parallel_bytes(psi, 1) == 0


def test_expert_all_to_all_volume() -> None:
    mixtral = llama(32, 4096, 32, 8, 14336, 32000, experts=8, top_k=2)
    b, s, k, h, e = 1.0, 4096.0, 2, 4096.0, 8
    # dispatch + combine forward, two more backward, b·s·k·h·(e - 1)/e each
    assert expert_all_to_all_bytes(mixtral, b, e) == pytest.approx(
        4 * b * s * k * h * (e - 1) / e * 2, rel=1e-12
    )
    assert expert_all_to_all_bytes(mixtral, b, 1) == 0
    assert expert_all_to_all_bytes(llama(2, 64, 8, 8, 128, 100), b, e) == 0
