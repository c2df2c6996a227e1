"""A decoder-only transformer's shape and what the model section resolves from it: its
parameters and its forward FLOPs by part (the counting rules of `model: {transformer:
...}`, as `keras_layers.py` is for Keras builders). What follows from them for training
(FLOPs an iteration, activation and model-state bytes, each collective's volume) is
`workloads/transformer.py`.

Symbols: B batch (sequences), s sequence, h hidden, l layers, a heads, g KV heads,
d_h = h / a, f FFN width, V vocabulary, k experts a token goes to.

Sources: [N21] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", SC'21, arXiv 2104.04473 (Eq. 2 and its appendix);
[MLM] NVIDIA/Megatron-LM megatron/training/training.py (`num_floating_point_operations`)
for grouped-query attention, gated MLPs and mixtures of experts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

PARAM_STYLES = ("gpt", "llama")


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's shape: sizes in elements (hidden, ffn_hidden, vocab),
    sequence in tokens, counts of layers, heads, KV heads and experts."""

    layers: int  # l
    hidden: int  # h
    heads: int  # a
    kv_heads: int  # g (== heads: multi-head attention; fewer: grouped-query)
    ffn_hidden: int  # f (4h for GPT; e.g. 11008 for Llama 2 7B)
    sequence: int  # s
    vocab: int  # V
    gated: bool = False  # SwiGLU-style MLP: three h x f matrices instead of two
    experts: int = 1  # MoE experts per layer (1: dense)
    top_k: int = 1  # experts each token goes to
    tied_embeddings: bool = False  # output layer shares the input embedding

    def __post_init__(self) -> None:
        sizes = {f.name: getattr(self, f.name) for f in fields(self) if f.type == "int"}
        bad = [f"{name}={value}" for name, value in sizes.items() if value < 1]
        if bad:
            raise ValueError(f"shape sizes must be at least 1: {', '.join(bad)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts}")

    @property
    def head_dim(self) -> int:
        """d_h = h / a, elements per head."""
        return self.hidden // self.heads


def mlp_matrices(shape: Shape) -> int:
    """h x f matrices of one expert's MLP: 3 gated (gate, up, down), else 2."""
    return 3 if shape.gated else 2


# --- parameters ------------------------------------------------------------------------


def params(shape: Shape, *, style: str = "gpt") -> float:
    """Trainable parameters (elements), as N21 Eq. 2 counts them for GPT:

        P = 12lh²(1 + 13/(12h) + (V + s)/(12lh)) = 12lh² + 13lh + Vh + sh

    Eq. 2's terms, per layer: QKV weights 3h² and biases 3h, output projection h² + h, MLP
    h·4h + 4h + 4h·h + h, two LayerNorms 2h each (12h² + 13h); once: token embedding Vh,
    learned position embedding sh. It has no output matrix (GPT ties it to the embedding:
    pass `tied_embeddings=True` for Eq. 2) and no final LayerNorm, whose 2h Megatron's GPT
    has; `style="gpt"` leaves it out too, so that the count is Eq. 2 exactly.

    Generalised, per layer: attention weights h·(a + 2g)·d_h + h·h (query, key, value,
    output), the MLP 3hf gated or 2hf, times `experts`, plus a router h·experts (no bias)
    when experts > 1. `style` sets the rest:

    * "gpt": a bias on every linear ((a + 2g)·d_h + h attention, f + h or 2f + h MLP),
      LayerNorm with weight and bias (2h), learned positions sh, no final norm (Eq. 2).
    * "llama": no biases, RMSNorm with h weights (two a layer and a final one), rotary
      positions (no position parameters). Llama 2 7B gives 6,738,415,616.

    An untied output layer adds Vh.
    """
    if style not in PARAM_STYLES:
        raise ValueError(f"style {style!r} is not one of {PARAM_STYLES}")
    gpt = style == "gpt"
    h, f, d_h = shape.hidden, shape.ffn_hidden, shape.head_dim
    qkv_width = (shape.heads + 2 * shape.kv_heads) * d_h
    attention = h * qkv_width + h * h + (qkv_width + h if gpt else 0)
    mlp = mlp_matrices(shape) * h * f
    if gpt:
        mlp += (mlp_matrices(shape) - 1) * f + h
    router = h * shape.experts if shape.experts > 1 else 0
    norm = 2 * h if gpt else h
    layer = attention + shape.experts * mlp + router + 2 * norm
    embedding = shape.vocab * h + (shape.sequence * h if gpt else 0)
    final_norm = 0 if gpt else h
    output = 0 if shape.tied_embeddings else shape.vocab * h
    return float(shape.layers * layer + embedding + final_norm + output)


# --- FLOPs -------------------------------------------------------------------------------


def flops_per_layer_forward(shape: Shape, batch: float) -> dict[str, float]:
    """Forward GEMM FLOPs of one layer for `batch` sequences, by part, as N21's appendix
    counts them (2 FLOP a multiply-add; the full s x s score matrix, no causal halving).
    For GPT (g = a, f = 4h, dense):

        qkv 6Bsh², scores (QKᵀ) 2Bs²h, attention_over_values 2Bs²h, projection 2Bsh²,
        mlp 16Bsh²; in all 24Bsh² + 4Bs²h

    Generalised: qkv 2Bs·h·(a + 2g)·d_h (grouped-query keys and values are g heads wide);
    scores and attention_over_values 2Bs²·a·d_h each (every query head); projection
    2Bs·a·d_h·h; mlp 2Bs·h·f·(3 gated, else 2)·k (each token passes k experts); router
    2Bsh·experts for a mixture of experts, 0 for a dense layer.
    """
    b, s, h = float(batch), float(shape.sequence), float(shape.hidden)
    inner = float(shape.heads * shape.head_dim)
    qkv_width = float((shape.heads + 2 * shape.kv_heads) * shape.head_dim)
    return {
        "qkv": 2 * b * s * h * qkv_width,
        "scores": 2 * b * s * s * inner,
        "attention_over_values": 2 * b * s * s * inner,
        "projection": 2 * b * s * inner * h,
        "mlp": 2 * b * s * h * shape.ffn_hidden * mlp_matrices(shape) * shape.top_k,
        "router": 2 * b * s * h * shape.experts if shape.experts > 1 else 0.0,
    }


def logits_flops(shape: Shape, batch: float) -> float:
    """GEMM FLOPs of the output layer over one iteration, forward and backward: 6BshV
    (N21 §5.1: 2BshV forward, twice that backward; never recomputed)."""
    return 6.0 * batch * shape.sequence * shape.hidden * shape.vocab
