"""Pipelines and device memory, as both backends and the report need them.

A pipeline (`strategy.kind: pipeline`) cuts the model's layers into `stages` consecutive
stages, one device each (T devices with `tensor: T`); the cluster's devices hold
`replicas` = devices / (stages T) copies of it, device d running share d mod T of stage
(d // T) mod stages of replica d // (stages T). A replica's batch
(`training.batch_per_worker`) is cut into `micro_batches` micro-batches of equal size.

Memory per device (`memory_of`), in bytes of the model's dtype:

* weights, their gradients, and the optimizer's slots (SGD with momentum, as run-real
  trains: one slot per parameter) of the layers the device holds;
* activations: what every layer keeps for its backward (`Layer.activations`, elements per
  sample: for a transformer many times its output, docs/scenarios.md) for every
  sample whose backward has not run yet: a whole batch for data parallelism; for stage k
  of P, the micro-batches in flight at once: all M under GPipe (every forward before the
  first backward), min(P - k, M) under 1F1B (Narayanan et al. 2019, PipeDream-Flush);
* communication buffers: all-reduce's fusion buffer (data parallelism), or a
  micro-batch's activations received and its gradient sent (a pipeline's stage).

With tensor parallelism (`strategy.tensor: T`) a device holds 1 / T of its stage's
weights, gradients, slots and activations (Megatron's splits; the few activations it
keeps whole, its layer norms', are not told apart). A model whose layers give no
`activations` counts none (`MemoryUse.activations_known` says so).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from scenarios.spec import ScenarioSpec
from scenarios.transformer import Shape, mlp_matrices

from .transformer import activation_bytes_per_layer, model_state_bytes

#: optimizer slots per parameter: SGD with momentum (real/process/models.py trains with it)
OPTIMIZER_SLOTS = 1


def balanced_split(costs: list[float], stages: int) -> list[int]:
    """The number of consecutive layers of each of `stages` stages that makes the
    costliest stage the cheapest it can be (the linear partition problem, by dynamic
    programming); each stage at least one layer. Ties go to the earlier cut."""
    n = len(costs)
    if not 1 <= stages <= n:
        raise ValueError(f"{stages} stage(s) for {n} layer(s)")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    # best[p][i]: the least max-stage cost of the first i layers in p stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for p in range(1, stages + 1):
        for i in range(p, n - (stages - p) + 1):
            for j in range(p - 1, i):
                value = max(best[p - 1][j], prefix[i] - prefix[j])
                if value < best[p][i] - 1e-12 * max(1.0, abs(value)):
                    best[p][i], cut[p][i] = value, j
    counts, i = [], n
    for p in range(stages, 0, -1):
        j = cut[p][i]
        counts.append(i - j)
        i = j
    return counts[::-1]


def stage_layers(spec: ScenarioSpec) -> list[range]:
    """The layer indices (of `model.layer_table()`) of each stage: one stage of every
    layer unless the strategy is a pipeline."""
    table = spec.model.layer_table()
    strategy = spec.strategy
    if not strategy.pipelined:
        return [range(len(table))]
    if isinstance(strategy.split, tuple):
        counts = list(strategy.split)
    else:
        costs = [fwd + bwd for _, _, fwd, bwd in table]
        if sum(costs) <= 0:
            costs = [params for _, params, _, _ in table]
        counts = balanced_split(costs, strategy.stages)
    out, first = [], 0
    for count in counts:
        out.append(range(first, first + count))
        first += count
    return out


def replicas(spec: ScenarioSpec) -> int:
    """Copies of the model the devices hold (each device one stage, or a tensor share of
    one, of one copy)."""
    return spec.strategy.copies(spec.cluster.workers)


def in_flight(schedule: str, stages: int, micro_batches: int, stage: int) -> int:
    """Micro-batches whose activations stage `stage` (0-based) of a pipeline holds at
    once: all of them under GPipe, at most stages - stage under 1F1B."""
    if schedule == "gpipe":
        return micro_batches
    return min(stages - stage, micro_batches)


def schedule_of(kind: str, stages: int, micro: int, stage: int) -> list[tuple[str, int]]:
    """The order of a stage's work in one step: ("F" | "B", micro-batch)."""
    if kind == "gpipe":
        return [("F", j) for j in range(micro)] + [("B", j) for j in reversed(range(micro))]
    warm = min(stages - stage - 1, micro)
    ops = [("F", j) for j in range(warm)]
    forward, backward = warm, 0
    while backward < micro:
        if forward < micro:
            ops.append(("F", forward))
            forward += 1
        ops.append(("B", backward))
        backward += 1
    return ops


def interleaved_order(
    stages: int, micro: int, stage: int, virtual: int
) -> list[tuple[str, int, int]]:
    """The order of a stage's work in one step of the interleaved 1F1B schedule over
    `virtual` chunks a device: ("F" | "B", micro-batch, chunk). Micro-batches go in groups
    of `stages`; the k-th forward is chunk (k // p) mod v of micro-batch (k // (p v)) p +
    k mod p, the k-th backward the same with the chunks from the last; a stage warms up
    with 2 (p - stage - 1) + (v - 1) p forwards (all of them when m = p), then alternates
    one forward and one backward (Megatron-LM's schedules.py,
    forward_backward_pipelining_with_interleaving; Narayanan et al. 2021, section
    2.2.2). Needs micro divisible by stages (`ScenarioSpec` checks)."""
    total = micro * virtual

    def chunk_micro(k: int, forward: bool) -> tuple[int, int]:
        chunk = (k // stages) % virtual
        return (chunk if forward else virtual - 1 - chunk), (
            k // (stages * virtual)
        ) * stages + k % stages

    if micro == stages:
        warm = total
    else:
        warm = min(total, 2 * (stages - stage - 1) + (virtual - 1) * stages)
    ops: list[tuple[str, int, int]] = []
    for k in range(warm):
        chunk, j = chunk_micro(k, True)
        ops.append(("F", j, chunk))
    for k in range(total - warm):
        chunk, j = chunk_micro(warm + k, True)
        ops.append(("F", j, chunk))
        chunk, j = chunk_micro(k, False)
        ops.append(("B", j, chunk))
    for k in range(total - warm, total):
        chunk, j = chunk_micro(k, False)
        ops.append(("B", j, chunk))
    return ops


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """GPipe's (and non-interleaved 1F1B's) idle share of a step with uniform stages and
    free transfers: (p - 1) / (m + p - 1) (Huang et al. 2019)."""
    return (stages - 1) / (micro_batches + stages - 1)


@dataclass(frozen=True)
class MemoryUse:
    """What one device holds at its peak, bytes."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    activations_known: bool

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers


def dense_equivalent(shape: Shape) -> Shape:
    """A mixture of experts' layer as a dense one whose MLP is top_k experts wide: what a
    token passes through and what it keeps (K22's breakdown counts dense layers)."""
    if shape.experts == 1:
        return shape
    return replace(shape, ffn_hidden=shape.ffn_hidden * shape.top_k, experts=1, top_k=1)


def chunk_layers(spec: ScenarioSpec) -> list[list[int]]:
    """A hybrid layout's transformer layers per stage and chunk: l / (p v) each, or
    `first_layers` (`last_layers`) in the pipeline's first (last) virtual stage, the one
    holding the embedding (the output layer), and the rest evenly over the others
    (Llama 3 405B's 126 layers on 16 stages: one fewer on the first and the last, Dubey
    et al. 2024, section 3.3.2). Virtual stage chunk x p + stage is the chunk's place in
    the pipeline."""
    s = spec.strategy
    assert spec.model.transformer is not None
    layers = spec.model.transformer.shape().layers
    p, v = s.pipeline, s.virtual_stages
    last = p * v - 1
    fixed = {at: n for at, n in ((0, s.first_layers), (last, s.last_layers)) if n is not None}
    rest = (layers - sum(fixed.values())) // max(p * v - len(fixed), 1)
    return [[fixed.get(chunk * p + stage, rest) for chunk in range(v)] for stage in range(p)]


def stage_params(spec: ScenarioSpec) -> list[list[float]]:
    """A hybrid layout's parameters on one device, per stage and chunk: its layers
    (`chunk_layers`) over the tensor group (their experts' MLPs over the expert group
    too), the embedding on stage 0's first chunk and the output layer (and final norm)
    on the last stage's last chunk."""
    s, model = spec.strategy, spec.model
    assert model.transformer is not None  # ScenarioSpec checks it for kind hybrid
    shape = model.transformer.shape()
    table = model.layer_table()
    embedding, output, per_layer = table[0][1], table[-1][1] + table[-2][1], table[1][1]
    if shape.experts > 1 and s.expert > 1:
        experts = shape.experts * mlp_matrices(shape) * shape.hidden * shape.ffn_hidden
        per_layer -= experts * (1.0 - 1.0 / s.expert)
    p, t = s.pipeline, s.tensor
    out = []
    for stage, layers in enumerate(chunk_layers(spec)):
        chunks = [n * per_layer / t for n in layers]
        if stage == 0:
            chunks[0] += embedding / t
        if stage == p - 1:
            chunks[-1] += output / t
        out.append(chunks)
    return out


def layout_memory(spec: ScenarioSpec) -> list[MemoryUse]:
    """A hybrid layout's device memory at its peak, per stage: Adam's mixed-precision state
    by ZeRO's stage (Megatron's: bf16 weights with fp32 main gradients, 18 bytes a parameter
    or 6 + 12/d with the distributed optimizer; fp16 20 or 4 + 16/d; ZeRO's stages 2 and 3
    by Rajbhandari et al. 2020, 16 bytes a parameter in all), and the activations of the
    layers and micro-batches in flight: a stage holds min(m, p - k) micro-batches of its l/p
    layers under 1F1B (Korthikanti et al. 2022, eq. 5), the chunks its interleaved warm-up
    runs plus one (Megatron's schedule), all m under GPipe; each layer's by Korthikanti et
    al.'s Table 2 for its tensor split, sequence parallelism and recomputation (flash
    attention keeps no s x s scores: their selective form); full recomputation adds one
    layer's whole activations (the layer recomputed). Buffers: a micro-batch's activations
    received and its gradient sent, and on the last stage its fp32 logits."""
    s, model = spec.strategy, spec.model
    assert model.transformer is not None
    shape = dense_equivalent(model.transformer.shape())
    data = s.layout_data(spec.workers)
    precision = {"bfloat16": "megatron_bf16", "float16": "fp16", "float32": "fp32"}.get(
        model.dtype, "mixed"
    )
    if s.stage >= 2:
        precision = "mixed"
    element = model.bytes_per_param
    b, t, c, p, v = s.micro_batch, s.tensor, s.context, s.pipeline, s.virtual_stages
    micro = spec.training.batch_per_worker // b
    # flash attention keeps no s x s scores: the selective form (what a layer keeps
    # without recomputation, or while it is recomputed)
    keeps = "selective" if s.attention == "flash" and s.recompute == "none" else s.recompute
    whole = "selective" if s.attention == "flash" else "none"
    layer = activation_bytes_per_layer(shape, b, t, s.sequence_parallel, keeps) / c
    whole_layer = activation_bytes_per_layer(shape, b, t, s.sequence_parallel, whole) / c
    layers_of = chunk_layers(spec)
    boundary = b * shape.sequence / c * shape.hidden * element / (t if s.sequence_parallel else 1)
    out = []
    for stage, chunks in enumerate(stage_params(spec)):
        per_chunk = max(layers_of[stage])  # uneven chunks: each held at the largest
        params = sum(chunks)
        state = model_state_bytes(params, data, s.stage, precision)
        weights = params * element / (data if s.stage >= 3 else 1)
        grads = params * (4.0 if precision == "megatron_bf16" else 2.0)
        grads /= data if s.stage >= 2 else 1
        if s.schedule == "gpipe":
            held = micro * per_chunk
        elif v == 1:
            held = min(micro, p - stage) * per_chunk
        else:
            warm = 2 * (p - stage - 1) + (v - 1) * p
            held = min(micro * v, warm + 1) * per_chunk
        activations = held * layer + (whole_layer if s.recompute == "full" else 0.0)
        buffers = 2 * boundary if p > 1 else 0.0
        if s.stage >= 3:  # a layer's gathered weights, and the next one's prefetched
            buffers += 2 * chunks[-1] / layers_of[stage][-1] * element
        if stage == p - 1:
            buffers += 4.0 * b * shape.sequence * shape.vocab / (t * c)
        out.append(
            MemoryUse(
                weights=weights,
                gradients=grads,
                optimizer=state - weights - grads,
                activations=activations,
                buffers=buffers,
                activations_known=True,
            )
        )
    return out


def memory_of(spec: ScenarioSpec) -> list[MemoryUse]:
    """Each stage's device memory at its peak (one entry unless a pipeline)."""
    if spec.strategy.hybrid:
        return layout_memory(spec)
    model, strategy = spec.model, spec.strategy
    size = model.bytes_per_param
    table = model.layer_table()
    outputs = [layer.activations for layer in model.layers] if model.layers else [None]
    known = all(a is not None for a in outputs)
    batch = spec.training.batch_per_worker
    pipeline = strategy.pipelined
    micro = batch / strategy.micro_batches if pipeline else batch
    cuts = stage_layers(spec)
    out = []
    split = strategy.tensor if pipeline else 1  # tensor parallelism: 1 / T of each layer
    # with parameter servers the optimizer's slots live on the servers, not the devices
    slots = 0 if strategy.parameter_servers else OPTIMIZER_SLOTS
    state = spec.training.optimizer_state  # per parameter, where given
    # sharded data parallelism: each device holds its share of the state (ZeRO's stages)
    shares = strategy.state_shares(spec.workers)
    for k, layers in enumerate(cuts):
        params = sum(table[i][1] for i in layers) * size / split
        if state is not None:
            optimizer = 0.0 if strategy.parameter_servers else params / size * state
        else:
            optimizer = slots * params
        if strategy.shards_state:
            weights, gradients = params * shares[0], params * shares[1]
            optimizer *= shares[2]
        else:
            weights = gradients = params
        kept = sum(outputs[i] or 0.0 for i in layers) * size / split  # per sample
        if pipeline:
            held = in_flight(strategy.schedule, len(cuts), strategy.micro_batches, k)
            cut_in = [layers.start - 1] if k > 0 else []
            cut_out = [layers.stop - 1] if k < len(cuts) - 1 else []
            boundary = [outputs[i] or 0.0 for i in cut_in + cut_out]
            buffers = sum(boundary) * size * micro  # one micro-batch in, its gradient out
            activations = kept * micro * held
        elif strategy.shards_state and strategy.stage >= 3:
            # the gathered parameters of the layer computing and of the one prefetched,
            # and the whole gradient of a layer before its reduce-scatter
            largest = max(table[i][1] for i in layers) * size
            buffers = 3 * largest
            activations = kept * batch
        else:
            buffers = (
                strategy.fusion_buffer if strategy.all_reduces or strategy.shards_state else 0.0
            )
            activations = kept * batch
        out.append(
            MemoryUse(
                weights=weights,
                gradients=gradients,
                optimizer=optimizer,
                activations=activations,
                buffers=buffers,
                activations_known=known,
            )
        )
    return out


def memory_summary(spec: ScenarioSpec) -> dict[str, object]:
    """meta.json's `memory` entry of a point: the peak over its devices, whether it fits
    the device's memory (None where the device gives none), and each stage's parts."""
    uses = memory_of(spec)
    peak = max(u.total for u in uses)
    capacity = spec.cluster.device.memory
    return {
        "peak_memory_bytes": peak,
        "capacity_bytes": capacity,
        "fits": None if capacity is None else peak <= capacity,
        "activations_known": all(u.activations_known for u in uses),
        "stages": [
            {
                "weights_bytes": u.weights,
                "gradients_bytes": u.gradients,
                "optimizer_bytes": u.optimizer,
                "activations_bytes": u.activations,
                "buffers_bytes": u.buffers,
                "total_bytes": u.total,
            }
            for u in uses
        ],
    }


def fits_line(point: str, summary: dict[str, object]) -> str:
    """The one-line warning for a point that does not fit its devices."""
    peak, capacity = summary["peak_memory_bytes"], summary["capacity_bytes"]
    assert isinstance(peak, float) and isinstance(capacity, float)
    return (
        f"point {point}: does not fit: {peak / 2**30:.3g} GiB per device at its peak, "
        f"the device has {capacity / 2**30:.3g} GiB; not timed"
    )
