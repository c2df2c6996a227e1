"""Closed-form counts of a decoder-only transformer's training: GEMM FLOPs an iteration,
activation and model-state bytes, and the volume of each collective of a layout. The
shape, its parameters and its forward FLOPs by part are the language's
(`scenarios/transformer.py`) and are re-exported here.

Each count is one function with its source's equation in its docstring (STYLE.md rule 27),
so that a test can hold every term to the paper. Units are SI and every result is a float:
FLOP, bytes, or elements where a name says so. Symbols: B global batch and b micro-batch
(sequences), s sequence, h hidden, l layers, a heads, g KV heads, d_h = h / a head dim, f FFN
width, V vocabulary, k experts a token goes to; t, p, d, e the tensor, pipeline, data and
expert parallel sizes; v model chunks per device; m micro-batches per pipeline; Ψ parameters.

Sources:

* [N21] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC'21, arXiv 2104.04473.
* [K22] Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", MLSys'23, arXiv 2205.05198.
* [Z20] Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", SC'20, arXiv 1910.02054.
* [MLM] NVIDIA/Megatron-LM: megatron/training/training.py
  (`num_floating_point_operations`), megatron/training/theoretical_memory_usage.py,
  docs/user-guide/features/dist_optimizer.md, megatron/core/pipeline_parallel/schedules.py,
  megatron/core/transformer/moe/README.md.

The papers count GPT (multi-head attention, f = 4h, GeLU MLP, dense). The functions take
grouped-query attention (g < a), a gated (SwiGLU) MLP and mixture-of-experts layers too;
each docstring says how a generalised term follows from the paper's breakdown.
"""

from __future__ import annotations

from scenarios.transformer import (
    PARAM_STYLES,
    Shape,
    flops_per_layer_forward,
    logits_flops,
    mlp_matrices,
    params,
)

__all__ = [
    "PARAM_STYLES",
    "RECOMPUTE_MODES",
    "SCHEDULES",
    "Shape",
    "activation_bytes_per_layer",
    "data_parallel_bytes",
    "expert_all_to_all_bytes",
    "flops_per_iteration",
    "flops_per_layer_forward",
    "logits_flops",
    "mlp_matrices",
    "model_flops_per_token",
    "model_state_bytes",
    "params",
    "pipeline_activation_factor",
    "pipeline_p2p_bytes",
    "tensor_parallel_bytes_per_layer",
    "zero3_bytes",
]

RECOMPUTE_MODES = ("none", "selective", "full")
SCHEDULES = ("1f1b", "gpipe")


def _check_recompute(recompute: str) -> None:
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute {recompute!r} is not one of {RECOMPUTE_MODES}")


def flops_per_iteration(shape: Shape, batch: float, recompute: str = "none") -> float:
    """GEMM FLOPs of one training iteration of `batch` sequences: every layer's forward
    three times (forward, and backward's two GEMMs a forward one), plus the logits 6BshV,
    plus what `recompute` runs again:

    * "none", K22 Eq. 7: `F = 72BLsh²(1 + s/(6h) + V/(12hL))` for GPT;
    * "selective": every layer's scores and attention_over_values forward again, +4Bs²h a
      layer for GPT (K22 App. A). That is `72BLsh²(1 + 2s/(9h) + V/(12hL))`; K22 Eq. 8
      prints s/(3h), which over-counts by 8Bs²h a layer;
    * "full", N21 Eq. 3: every layer's forward again, `F = 96Bslh²(1 + s/(6h) + V/(16lh))`.

    Model FLOPs (what MFU counts) are the "none" count whatever the run recomputes.
    """
    _check_recompute(recompute)
    parts = flops_per_layer_forward(shape, batch)
    forward = sum(parts.values())
    again = {
        "none": 0.0,
        "selective": parts["scores"] + parts["attention_over_values"],
        "full": forward,
    }[recompute]
    return shape.layers * (3 * forward + again) + logits_flops(shape, batch)


def model_flops_per_token(shape: Shape) -> float:
    """Model FLOPs a trained token costs: the iteration of one sequence without
    recomputation over s tokens, 72lh²(1 + s/(6h) + V/(12lh)) for GPT (K22 Eq. 7 / Bs).
    MFU = this x tokens per second / peak FLOP/s."""
    return flops_per_iteration(shape, 1.0, "none") / shape.sequence


# --- memory --------------------------------------------------------------------------------


def _activation_parts(shape: Shape) -> tuple[float, float, float]:
    """Bytes per token of one layer's stored activations in K22's breakdown (16-bit
    values, 1-byte dropout masks), split by how tensor parallelism holds them:
    (kept whole without sequence parallelism, split t ways, score terms per token
    split t ways). For GPT: 10h, 24h and 5as."""
    h, s = float(shape.hidden), float(shape.sequence)
    q = float(shape.heads * shape.head_dim)
    kv = float(shape.kv_heads * shape.head_dim)
    # two norms' inputs 2h each, QKV input 2h, MLP input 2h, two dropout masks h each
    whole = 4 * h + 2 * h + 2 * h + 2 * h
    # Q and K for QKᵀ, V, the projection's input; MLP: GeLU input and output (2f each),
    # or the gated activation's two inputs and the down GEMM's input (2f each)
    mlp = (6.0 if shape.gated else 4.0) * shape.ffn_hidden
    split = 2 * q + 2 * kv + 2 * kv + 2 * q + mlp
    # softmax output 2as, its dropout mask as, dropout output 2as (per token)
    scores = 5.0 * shape.heads * s
    return whole, split, scores


def activation_bytes_per_layer(
    shape: Shape,
    micro_batch: float,
    tensor: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "none",
) -> float:
    """Bytes one layer keeps for its backward, per device, for a micro-batch of b
    sequences: K22 Table 2 and Eqs. 1-6 (16-bit activations, 1-byte dropout masks),
    t = `tensor`, SP = `sequence_parallel`:

    * none: `sbh(34 + 5as/h)` at t = 1; `sbh(10 + 24/t + 5as/(ht))`; with SP
      `sbh(34/t + 5as/(ht))`;
    * selective: `sbh(10 + 24/t)`; with SP `34sbh/t`;
    * full: `2sbh`, the layer's input; with SP `2sbh/t`, the input being split along s.

    K22's breakdown: attention 11sbh + 5as²b (QKV input 2, Q and K 4, V 2, projection
    input 2, dropout mask 1; softmax output 2as²b, its mask as²b, dropout output 2as²b),
    MLP 19sbh (input 2, first GEMM output 2·4h, GeLU output 2·4h, dropout mask 1), two
    LayerNorms' inputs 4sbh. Without SP, tensor parallelism splits all but the norms'
    inputs, the two GEMMs' inputs and the dropout masks (10sbh); selective recomputation
    keeps no as²b term.

    Generalised term by term: the MLP's 16sbh is 4sbf (2 bytes for each of the GeLU's
    input and output); a gated MLP keeps 6sbf (its activation's two inputs, gate and up,
    and the down GEMM's input), so f = 4h non-gated gives K22's count and Megatron's
    `sbh(18 + 4f/h)/t` (TP + SP + selective). Grouped-query K and V are 2sb·g·d_h each;
    Q and the projection's input 2sb·a·d_h. Mixture-of-experts layers are not modelled.
    """
    _check_recompute(recompute)
    if tensor < 1:
        raise ValueError(f"tensor {tensor} must be at least 1")
    if shape.experts > 1:
        raise NotImplementedError(
            "activation memory of mixture-of-experts layers is not modelled (K22 counts dense)"
        )
    tokens = float(shape.sequence) * micro_batch
    t = float(tensor)
    if recompute == "full":
        return 2.0 * tokens * shape.hidden / (t if sequence_parallel else 1.0)
    whole, split, scores = _activation_parts(shape)
    per_token = (whole / t if sequence_parallel else whole) + split / t
    if recompute == "none":
        per_token += scores / t
    return tokens * per_token


def pipeline_activation_factor(
    stages: int, micro_batches: int, virtual: int = 1, schedule: str = "1f1b"
) -> float:
    """Micro-batches' worth of activations the first pipeline stage holds at its peak, in
    units of one micro-batch on L/p layers: the stage's activation bytes are this times
    L/p times `activation_bytes_per_layer`.

    * GPipe: every forward runs before the first backward, m.
    * 1F1B (N21 §2.2.1; K22 §4.2.3): p in flight, so the first stage holds L layers'
      worth whatever p is (K22 Eq. 5, `(sbhL/t)(34 + 5as/h)`); min(p, m) when m < p.
    * Interleaved 1F1B with v chunks a device: K22 multiplies by `1 + (p - 1)/(p·v)`, p
      becoming `p + (p - 1)/v`. That is Megatron's schedule (schedules.py): the first
      stage warms up 2(p - 1) + (v - 1)·p chunks of L/(pv) layers and holds one more in
      the steady state. When the m·v chunks are fewer than that (m = p: Megatron then
      runs every forward first), all m micro-batches are in flight: min(m, p + (p - 1)/v).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule {schedule!r} is not one of {SCHEDULES}")
    if min(stages, micro_batches, virtual) < 1:
        raise ValueError(
            f"stages {stages}, micro_batches {micro_batches}, virtual {virtual}: each >= 1"
        )
    if schedule == "gpipe":
        if virtual > 1:
            raise ValueError("GPipe has no interleaved (virtual-stage) schedule")
        return float(micro_batches)
    p, m, v = float(stages), float(micro_batches), float(virtual)
    if virtual == 1:
        return min(p, m)
    return min(m, p * (1.0 + (p - 1.0) / (p * v)))


def _state_bytes(precision: str) -> tuple[float, float, float]:
    """Bytes a parameter keeps in `precision`: (weights, gradients, optimizer state)."""
    if precision == "mixed":  # Z20 §III-A: fp16 w and g; fp32 master, momentum, variance
        return 2.0, 2.0, 12.0
    if precision == "megatron_bf16":  # bf16 w, fp32 main grads; fp32 master, m, v
        return 2.0, 4.0, 12.0
    if precision == "fp16":  # Megatron fp16: fp32 master and main grads, m, v
        return 2.0, 2.0, 16.0
    if precision == "fp32":  # fp32 w and g; m, v
        return 4.0, 4.0, 8.0
    raise ValueError(
        f"precision {precision!r} is not one of ('mixed', 'megatron_bf16', 'fp16', 'fp32')"
    )


def model_state_bytes(
    params: float, data: int, zero_stage: int = 0, precision: str = "mixed"
) -> float:
    """Bytes per device of weights, gradients and Adam's state for the `params` (Ψ) a
    member of the model-parallel group holds, with `data` (N_d) data-parallel ranks.

    "mixed" (Z20 §III-A, Fig. 1; K = 12): stage 0 `16Ψ`; 1 (optimizer state sharded)
    `4Ψ + 12Ψ/N_d`; 2 (and gradients) `2Ψ + 14Ψ/N_d`; 3 (and weights) `16Ψ/N_d`.

    Megatron's precisions ([MLM] dist_optimizer.md), stage 0 or 1 only (1 is its
    distributed optimizer, which shards the optimizer state, fp32 main copies included):
    "megatron_bf16" (fp32 main gradients) `18Ψ` or `(6 + 12/d)Ψ`; "fp16" `20Ψ` or
    `(4 + 16/d)Ψ`; "fp32" `16Ψ` or `(8 + 8/d)Ψ`.
    """
    weights, grads, optimizer = _state_bytes(precision)
    top = 3 if precision == "mixed" else 1
    if not 0 <= zero_stage <= top:
        raise ValueError(f"zero_stage {zero_stage} with {precision!r}: 0 to {top}")
    if data < 1:
        raise ValueError(f"data {data} must be at least 1")
    # what each stage shards: nothing, the optimizer state, and the gradients, and the weights
    sharded = (0.0, optimizer, optimizer + grads, optimizer + grads + weights)[zero_stage]
    whole = weights + grads + optimizer - sharded
    return params * (whole + sharded / data)


# --- collectives ---------------------------------------------------------------------------


def tensor_parallel_bytes_per_layer(
    shape: Shape,
    micro_batch: float,
    tensor: int,
    element_bytes: float = 2,
    recompute: str = "none",
) -> float:
    """Bytes a device sends for one layer's tensor-parallel collectives, one micro-batch,
    forward and backward: N21 §3.2's two all-reduces of b·s·h forward and two backward,
    each a ring's 2(t - 1)/t, so `8bsh(t - 1)/t` elements. Full recomputation runs the
    two forward all-reduces again (Z20 §VII-C counts 6 a block): `12bsh(t - 1)/t`;
    selective recomputation repeats none. With sequence parallelism the all-reduces are
    4 all-gathers and 4 reduce-scatters of the same volume (K22 §4.2.2)."""
    _check_recompute(recompute)
    if tensor < 1:
        raise ValueError(f"tensor {tensor} must be at least 1")
    all_reduces = 6 if recompute == "full" else 4
    size = micro_batch * shape.sequence * shape.hidden
    return all_reduces * 2.0 * size * (tensor - 1) / tensor * element_bytes


def pipeline_p2p_bytes(
    shape: Shape,
    micro_batch: float,
    element_bytes: float = 2,
    tensor: int = 1,
    scatter_gather: bool = False,
) -> float:
    """Bytes a device sends across one pipeline-stage boundary for one micro-batch in one
    direction (activations forward, their gradients backward): `bsh` elements (N21 §3.2).
    With N21's scatter/gather optimisation (§4.1) each of the t tensor-parallel ranks sends
    `bsh/t` and the receivers all-gather over NVLink (not counted here); without it `tensor`
    does not matter."""
    if tensor < 1:
        raise ValueError(f"tensor {tensor} must be at least 1")
    size = micro_batch * shape.sequence * shape.hidden * element_bytes
    return size / tensor if scatter_gather else float(size)


def data_parallel_bytes(params_local: float, data: int, element_bytes: float = 4) -> float:
    """Bytes a device sends to average its Ψ gradients over d data-parallel ranks, per
    iteration: a ring all-reduce, `2Ψ(d - 1)/d` elements (Z20 §VII-A). ZeRO-1/2 and
    Megatron's distributed optimizer reduce-scatter the gradients and all-gather the
    weights instead, the same volume (Z20 §VII-B1). 4-byte elements: Megatron reduces
    bf16 gradients in fp32 by default."""
    if data < 1:
        raise ValueError(f"data {data} must be at least 1")
    return 2.0 * params_local * (data - 1) / data * element_bytes


def zero3_bytes(params_local: float, data: int, element_bytes: float = 2) -> float:
    """Bytes a device sends per iteration under ZeRO-3 (Z20 §VII-B2): the weights
    all-gathered for the forward and again for the backward, the gradients
    reduce-scattered, `3Ψ(d - 1)/d` elements. Z20 writes 3Ψ, "1.5x" data parallelism's 2Ψ;
    the ring's (d - 1)/d is kept here as in `data_parallel_bytes`, so the ratio is 1.5
    exactly."""
    if data < 1:
        raise ValueError(f"data {data} must be at least 1")
    return 3.0 * params_local * (data - 1) / data * element_bytes


def expert_all_to_all_bytes(
    shape: Shape, micro_batch: float, expert: int, element_bytes: float = 2
) -> float:
    """Bytes a device sends in one MoE layer's all-to-alls for one micro-batch without
    recomputation: a dispatch and a combine forward and two more backward ([MLM]
    moe/README.md), each `b·s·k·h·(e - 1)/e` elements with uniform routing (each of the
    b·s tokens goes to k experts, (e - 1)/e of them on other ranks of the e expert-parallel
    ranks): `4bskh(e - 1)/e`. A dense shape sends nothing."""
    if expert < 1:
        raise ValueError(f"expert {expert} must be at least 1")
    if shape.experts == 1:
        return 0.0
    per_all_to_all = micro_batch * shape.sequence * shape.top_k * shape.hidden
    return 4.0 * per_all_to_all * (expert - 1) / expert * element_bytes
