"""What one device of a transformer's layout spends, part by part (STYLE.md rule 27).

A layout (`strategy.kind: hybrid`) puts device r at tensor rank r mod t, context rank
(r // t) mod c, data rank (r // tc) mod d and pipeline stage r // tcd (Megatron-LM's
order, tensor fastest), so a tensor group is t neighbouring devices (one NVLink domain
where t divides devices_per_host), a data-parallel group strides tc, and neighbouring
stages are tcd apart. Each stage holds `virtual_stages` chunks of l / (p v) layers (the
first and last virtual stage `first_layers` and `last_layers` where given, the rest
evenly); the first chunk of stage 0 adds the embedding, the last chunk of stage p - 1
the output layer and its loss.

One micro-batch's pass over a chunk is a sum of named parts (`Pass`), at the rates of
the catalog's device and fabric given below, or of the calibrated machine (`machine.py`):

* `matmul`: its GEMMs (scenarios/transformer.py: forward 24bsh^2 + 4bs^2h a GPT layer;
  backward twice that) over t c devices, each at the device's peak x
  `matmul_efficiency` x how much of a large GEMM's rate one of its shape reaches
  (`size_derate` of its smallest dimension: a head's scores are s x s x d_h);
* `memory`: what its memory-bound kernels (norms, softmax, dropout, GeLU, residuals)
  move: every activation it stores (Korthikanti et al. 2022, Table 2) written once and
  read once in forward, and in backward read and its gradient written, at
  memory_bandwidth x `memory_efficiency`;
* `tensor`: two all-reduces of b (s/c) h elements in forward and two in backward
  (Narayanan et al. 2021, section 3.2; reduce-scatters and all-gathers of the same bytes
  with sequence parallelism);
* `context`: the keys and values all-gathered along the sequence, 2 b s g d_h elements a
  layer in forward and reduce-scattered in backward, hidden behind the attention's own
  GEMMs as far as they last (ring attention);
* `expert`: a mixture of experts' dispatch and combine all-to-alls, two in forward and two
  in backward, b s k h (e - 1)/e elements each;
* `sharded` (ZeRO's stage 3, Rajbhandari et al. 2020, section VII-B2): every pass first
  all-gathers its layers' 16-bit weights over the data-parallel group, and a backward
  reduce-scatters their gradients after it (3 Psi a step, 1.5 x data parallelism's
  traffic), not overlapped with the compute;
* `recompute`: in backward, the forward again (full: every part; selective: the
  attention's scores and weighted sum, their GEMMs and kernels; with flash attention
  the kernel's backward runs the scores' GEMM again, and selective recomputation adds
  nothing more).

With flash attention (`strategy.attention`) a layer keeps and moves no s x s matrix:
what it stores is Korthikanti et al.'s count without the 5as/h term (the selective
form).

Between stages a micro-batch's activations (forward) or their gradient (backward), b (s/c) h
elements, cross in `p2p_s`: over t with sequence parallelism, and with `scatter_gather`
each tensor rank sends its 1/t and the receivers all-gather the whole inside their node
(Narayanan et al. 2021, section 4.1). Once the pipeline is flushed
each stage reduces its gradients over its data-parallel group (`gradient_bytes`: fp32 for a
bf16 model, Megatron's main gradients; with ZeRO's stage 1, Megatron's distributed
optimizer: a reduce-scatter, the update on a 1/d shard, an all-gather of the 16-bit
weights), a pipeline whose output layer is tied to its embedding all-reduces that gradient
between its first and last stage, and each device runs Adam over what it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scenarios.fields import DTYPE_BYTES
from scenarios.spec import ScenarioSpec
from scenarios.transformer import Shape, flops_per_layer_forward, logits_flops
from sim.costs.measured import Calibration
from sim.network import fabric
from workloads.pipeline import chunk_layers, dense_equivalent, stage_params
from workloads.transformer import activation_bytes_per_layer

from .machine import Machine

#: bytes Adam moves per parameter in one update with mixed precision: it reads the fp32
#: master weight, the fp32 gradient, the two fp32 moments (16), writes the master weight
#: and the moments (12) and the 16-bit weight (2) (Megatron's fused Adam; derived)
ADAM_BYTES = 30
#: a GEMM's rate against a large one's, by its smallest dimension: cuBLASLt FP16 cubes on
#: an A100 SXM4 80GB reach 119.4, 221.8, 228.0 and 253.7 TFLOP/s at 1024^3, 2048^3, 4096^3
#: and 8192^3 (256.5 at 16384^3; Azure/AI-benchmarking-guide, ND_A100_v4_results.md),
#: taken against 8192^3's; interpolated in log size between them, held at the ends (a
#: skinny 802816 x 192 x 768 reaches 157.8, 0.62 of the large rate: more than the curve
#: gives it, 0.47). The same shape of curve is assumed for every device
SIZE_CURVE = ((1024.0, 119.4 / 253.7), (2048.0, 221.8 / 253.7), (4096.0, 228.0 / 253.7),
              (8192.0, 1.0))  # fmt: skip


def gradient_bytes(dtype: str) -> int:
    """Bytes of one main gradient element as Megatron-LM reduces it: fp32 for a bf16 model
    (--accumulate-allreduce-grads-in-fp32 is forced on with bf16; arguments.py), the
    model's own element otherwise."""
    return 4 if dtype == "bfloat16" else DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class Layout:
    """A hybrid point's sizes, resolved: tensor, pipeline, data, context, expert,
    virtual chunks, micro-batch and micro-batches a step."""

    tensor: int
    pipeline: int
    data: int
    context: int
    expert: int
    virtual: int
    micro_batch: int
    micro_batches: int

    @classmethod
    def of(cls, spec: ScenarioSpec) -> Layout:
        s = spec.strategy
        data = s.layout_data(spec.workers)
        return cls(
            tensor=s.tensor,
            pipeline=s.pipeline,
            data=data,
            context=s.context,
            expert=s.expert,
            virtual=s.virtual_stages,
            micro_batch=s.micro_batch,
            micro_batches=spec.training.batch_per_worker // s.micro_batch,
        )

    def device(self, tensor: int = 0, context: int = 0, data: int = 0, stage: int = 0) -> int:
        """The global index of a device by its ranks (Megatron's order, tensor fastest)."""
        return tensor + self.tensor * (context + self.context * (data + self.data * stage))

    def group(self, what: str, stage: int = 0) -> list[int]:
        """The devices of one group of `stage`: its tensor, context, data or expert
        group (the one holding device 0 of the stage), or the stage's first device and
        the next stage's ("p2p"), or the first and last stages' ("ends")."""
        d = self.device
        if what == "tensor":
            return [d(tensor=i, stage=stage) for i in range(self.tensor)]
        if what == "context":
            return [d(context=i, stage=stage) for i in range(self.context)]
        if what == "data":
            return [d(data=i, stage=stage) for i in range(self.data)]
        if what == "expert":
            return [d(data=i, stage=stage) for i in range(self.expert)]
        if what == "p2p":
            return [d(stage=stage), d(stage=(stage + 1) % self.pipeline)]
        return [d(stage=0), d(stage=self.pipeline - 1)]  # "ends"


@dataclass(frozen=True)
class Pass:
    """Seconds of one micro-batch's pass over one chunk on one device, by part."""

    matmul: float = 0.0
    memory: float = 0.0
    tensor: float = 0.0
    context: float = 0.0
    expert: float = 0.0
    recompute: float = 0.0
    # ZeRO's stage 3: the layers' weights all-gathered before the pass, and in backward
    # their gradients reduce-scattered
    sharded: float = 0.0

    @property
    def compute(self) -> float:
        return self.matmul + self.memory + self.recompute

    @property
    def comm(self) -> float:
        return self.tensor + self.context + self.expert + self.sharded

    @property
    def seconds(self) -> float:
        return self.compute + self.comm


@dataclass(frozen=True)
class StageCosts:
    """One stage's costs: its chunks' forward and backward passes, its parameters (on
    one device) and its step's end: reducing gradients, the update."""

    forward: list[Pass]
    backward: list[Pass]
    params: float
    reduce_s: float
    update_s: float
    # the parameters of each chunk on one device (their gradients' share of reduce_s)
    chunk_params: list[float] = field(default_factory=list)
    # of reduce_s, the gradients' reduction, which `overlap` runs during the backward
    # passes (the rest, the weights' all-gather and the embedding's all-reduce, after)
    gradients_s: float = 0.0
    # layers each chunk holds (the buckets `overlap` reduces one by one)
    chunk_layers: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Costs:
    layout: Layout
    stages: list[StageCosts]
    p2p_s: float


def size_derate(size: float) -> float:
    """How much of a large GEMM's rate a GEMM whose smallest dimension is `size` reaches
    (SIZE_CURVE)."""
    curve = SIZE_CURVE
    if size <= curve[0][0]:
        return curve[0][1]
    for (n0, e0), (n1, e1) in zip(curve, curve[1:], strict=False):
        if size <= n1:
            return e0 + (e1 - e0) * math.log(size / n0) / math.log(n1 / n0)
    return curve[-1][1]


def gemm_sizes(shape: Shape, micro_batch: float, tensor: int, context: int) -> dict[str, float]:
    """The smallest dimension of each part's GEMMs on one device: M tokens (b s / c) by N
    by K (Megatron's splits: the query, key and value and the MLP's first GEMMs by
    columns, the projection and the MLP's second by rows, t ways); a head's scores s/c x s
    x d_h and weighted sum s/c x d_h x s; an expert's MLP sees b s k / e tokens."""
    tokens = micro_batch * shape.sequence / context
    h, d_h, t = shape.hidden, shape.head_dim, tensor
    expert_tokens = tokens * shape.top_k / shape.experts
    return {
        "qkv": min(tokens, (shape.heads + 2 * shape.kv_heads) * d_h / t, h),
        "projection": min(tokens, h, shape.heads * d_h / t),
        "mlp": min(expert_tokens, shape.ffn_hidden / t, h),
        "scores": min(tokens, shape.sequence, d_h),
        "attention_over_values": min(tokens, d_h, shape.sequence),
        "router": min(tokens, shape.experts, h),
    }


def matmul_seconds(
    parts: dict[str, float], sizes: dict[str, float], split: int, rate: float
) -> float:
    """Seconds of one layer's forward GEMMs (`parts`, FLOPs by part for the micro-batch)
    on one of `split` devices, each part at `rate` FLOP/s (a large GEMM's) x its size's
    derate (`sizes`: each part's smallest dimension, `gemm_sizes`)."""
    return sum(
        flops / split / (rate * size_derate(sizes[name]))
        for name, flops in parts.items()
        if flops > 0
    )


def layer_passes(
    spec: ScenarioSpec, shape: Shape, layout: Layout, machine: Machine
) -> tuple[Pass, Pass]:
    """One layer's forward and backward pass of one micro-batch on one device."""
    strategy = spec.strategy
    t, c, b = layout.tensor, layout.context, layout.micro_batch
    element = DTYPE_BYTES[spec.model.dtype]
    flop_rate, memory_rate = machine.flops, machine.memory
    parts = flops_per_layer_forward(shape, b)
    sizes = gemm_sizes(shape, b, t, c)
    if not machine.derated:
        sizes = dict.fromkeys(sizes, math.inf)
    core = {k: parts[k] for k in ("scores", "attention_over_values")}
    core_s = matmul_seconds(core, sizes, t * c, flop_rate)
    dense = dense_equivalent(shape)
    flash = strategy.attention == "flash"
    kept = "selective" if flash else "none"  # flash keeps no s x s scores
    stored = activation_bytes_per_layer(dense, b, t, strategy.sequence_parallel, kept) / c
    core_bytes = 0.0 if flash else 5.0 * shape.heads * shape.sequence**2 * b / (t * c)
    tensor_path = machine.path(layout.group("tensor"))
    tokens = b * shape.sequence / c
    tensor_one = fabric.all_reduce_s(tokens * shape.hidden * element, t, tensor_path)
    context_s = 0.0
    if c > 1:
        kv = 2.0 * b * shape.sequence * shape.kv_heads * shape.head_dim * element
        context_s = fabric.gather_s(kv, c, machine.path(layout.group("context")))
    expert_one = 0.0
    if shape.experts > 1 and layout.expert > 1:
        moved = tokens * shape.top_k * shape.hidden * element
        path = machine.path(layout.group("expert"))
        expert_one = fabric.gather_s(moved, layout.expert, path)
    matmul_f = matmul_seconds(parts, sizes, t * c, flop_rate)
    memory_f = 2 * stored / memory_rate if memory_rate > 0 else 0.0
    context_exposed = max(0.0, context_s - core_s)
    forward = Pass(
        matmul=matmul_f,
        memory=memory_f,
        tensor=2 * tensor_one,
        context=context_exposed,
        expert=2 * expert_one,
    )
    scores_again = matmul_seconds({"scores": parts["scores"]}, sizes, t * c, flop_rate)
    recompute = {
        "none": scores_again if flash else 0.0,
        "selective": scores_again
        if flash
        else core_s + (2 * core_bytes / memory_rate if memory_rate else 0.0),
        "full": forward.seconds + (scores_again if flash else 0.0),
    }[strategy.recompute]
    backward = Pass(
        matmul=2 * matmul_f,
        memory=memory_f,
        tensor=2 * tensor_one,
        context=context_exposed,
        expert=2 * expert_one,
        recompute=recompute,
    )
    return forward, backward


def _scaled(one: Pass, layers: float) -> Pass:
    return Pass(*(layers * getattr(one, name) for name in Pass.__dataclass_fields__))


def _plus(a: Pass, b: Pass) -> Pass:
    return Pass(*(getattr(a, n) + getattr(b, n) for n in Pass.__dataclass_fields__))


def output_passes(
    spec: ScenarioSpec, shape: Shape, layout: Layout, machine: Machine
) -> tuple[Pass, Pass]:
    """The output layer's logits and loss for one micro-batch on one device of the last
    stage: 2bshV forward GEMM FLOPs and twice that backward over t c devices (never
    recomputed), and the fp32 logits (4 b s V / t c bytes) written, read by the loss and
    its gradient written and read."""
    flop_rate, memory_rate = machine.flops, machine.memory
    t, c, b = layout.tensor, layout.context, layout.micro_batch
    tokens = b * shape.sequence / c
    size = min(tokens, shape.vocab / t, shape.hidden) if machine.derated else math.inf
    gemm = logits_flops(shape, b) / 3 / (t * c) / (flop_rate * size_derate(size))
    logits = 4.0 * b * shape.sequence * shape.vocab / (t * c)
    memory = 2 * logits / memory_rate if memory_rate > 0 else 0.0
    return Pass(matmul=gemm, memory=memory), Pass(matmul=2 * gemm, memory=memory)


def costs_of(spec: ScenarioSpec, calibration: Calibration | None = None) -> Costs:
    """Every stage's passes and step-end costs, and the p2p time between stages: on the
    catalog's machine, or on the calibrated one (`machine.py`)."""
    model = spec.model
    assert model.transformer is not None  # ScenarioSpec checks it for kind hybrid
    shape = model.transformer.shape()
    layout = Layout.of(spec)
    p, v = layout.pipeline, layout.virtual
    layers_of = chunk_layers(spec)
    machine = Machine.of(spec, calibration)
    layer_f, layer_b = layer_passes(spec, shape, layout, machine)
    out_f, out_b = output_passes(spec, shape, layout, machine)
    t = layout.tensor
    stages = []
    for stage, chunk_params in enumerate(stage_params(spec)):
        forward, backward = [], []
        for chunk in range(v):
            layers = layers_of[stage][chunk]
            f, b = _scaled(layer_f, layers), _scaled(layer_b, layers)
            if stage == p - 1 and chunk == v - 1:
                f, b = _plus(f, out_f), _plus(b, out_b)
            if spec.strategy.stage >= 3:
                gather, scatter = _sharded_s(spec, layout, stage, chunk_params[chunk], machine)
                f, b = _plus(f, Pass(sharded=gather)), _plus(b, Pass(sharded=gather + scatter))
            forward.append(f)
            backward.append(b)
        params = sum(chunk_params)
        stages.append(
            StageCosts(
                forward,
                backward,
                params,
                _reduce_s(spec, layout, stage, params, shape, machine),
                _update_s(spec, layout, params, machine),
                chunk_params,
                _reduce_s(spec, layout, stage, params, shape, machine, gradients_only=True),
                layers_of[stage],
            )
        )
    element = DTYPE_BYTES[model.dtype]
    boundary = layout.micro_batch * shape.sequence / layout.context * shape.hidden * element
    p2p = 0.0
    if p > 1:
        path = fabric.path_of(spec.cluster, layout.group("p2p"))
        if spec.strategy.sequence_parallel:
            p2p = fabric.send_s(boundary / t, path)
        elif spec.strategy.scatter_gather and t > 1:
            tensor_path = machine.path(layout.group("tensor"))
            p2p = fabric.send_s(boundary / t, path) + fabric.gather_s(boundary, t, tensor_path)
        else:
            p2p = fabric.send_s(boundary, path)
    return Costs(layout, stages, p2p)


def _reduce_s(
    spec: ScenarioSpec,
    layout: Layout,
    stage: int,
    params: float,
    shape: Shape,
    machine: Machine,
    gradients_only: bool = False,
) -> float:
    """Seconds a stage's gradient reduction takes once its pipeline is flushed: an
    all-reduce over its data-parallel group (2(d - 1)/d x `gradient_bytes` a parameter), or
    with ZeRO's stage 1 a reduce-scatter of them and an all-gather of the 16-bit weights;
    and on the first and last stages of a pipeline whose output is tied to its embedding,
    that gradient's all-reduce between them (Megatron's embedding group)."""
    d = layout.data
    path = machine.path(layout.group("data", stage))
    grads = params * gradient_bytes(spec.model.dtype)
    if spec.strategy.stage >= 3:  # reduce-scattered in every backward, gathered before use
        return 0.0
    if spec.strategy.stage >= 1:
        weights = params * DTYPE_BYTES[spec.model.dtype]
        seconds = fabric.gather_s(grads, d, path)
        if gradients_only:
            return seconds
        seconds += fabric.gather_s(weights, d, path)
    else:
        seconds = machine.reduction_s(grads, d, path)
        if gradients_only:
            return seconds
    tied = spec.model.transformer is not None and shape.tied_embeddings
    if tied and layout.pipeline > 1 and stage in (0, layout.pipeline - 1):
        embedding = shape.vocab * shape.hidden / layout.tensor * gradient_bytes(spec.model.dtype)
        ends = machine.path(layout.group("ends"))
        seconds += fabric.all_reduce_s(embedding, 2, ends)
    return seconds


def _sharded_s(
    spec: ScenarioSpec, layout: Layout, stage: int, params: float, machine: Machine
) -> tuple[float, float]:
    """ZeRO's stage 3 for one chunk of `params` (on one device when whole): the all-gather
    of its 16-bit weights over the data-parallel group, and the reduce-scatter of its
    gradients (`gradient_bytes` each)."""
    path = machine.path(layout.group("data", stage))
    d = layout.data
    weights = params * DTYPE_BYTES[spec.model.dtype]
    grads = params * gradient_bytes(spec.model.dtype)
    return fabric.gather_s(weights, d, path), fabric.gather_s(grads, d, path)


def _update_s(spec: ScenarioSpec, layout: Layout, params: float, machine: Machine) -> float:
    """Seconds of Adam's update over what the device updates: its parameters, or with
    ZeRO's stage 1 its 1/d shard of them (ADAM_BYTES a parameter, memory-bound)."""
    memory_rate = machine.memory
    if memory_rate <= 0:
        return 0.0
    shard = params / layout.data if spec.strategy.stage >= 1 else params
    return shard * ADAM_BYTES / memory_rate
