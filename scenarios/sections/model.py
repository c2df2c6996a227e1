"""The model of a scenario (`model:`): its totals or its layers, and what follows from them.

A catalog name, totals (params, FLOP per sample), a per-layer table, a Keras builder
whose table is computed without TensorFlow, or a transformer's shape (`transformer:`,
its table by the published counts, `scenarios/transformer.py`); validated, every layer is
resolved to parameters, forward and backward FLOP per sample (docs/scenarios.md, "model").
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import catalog, keras_layers, transformer
from ..fields import (
    DTYPE_BYTES,
    Count,
    DType,
    Flops,
    Strict,
    _catalog_ref,
    _LocatedError,
)
from ..units import parse
from .convergence import ConvergenceSpec

#: the most layers a model may have (its table holds a row each)
MAX_LAYERS = 100_000


class Layer(Strict):
    """One layer with trainable parameters or compute, in input -> output order."""

    name: str
    params: Count = 0.0
    flops: Flops = 0.0  # forward, per sample
    backward_flops: Flops | None = None  # per sample; 2 x forward unless given
    # elements per sample its forward keeps for its backward (not its output: a transformer
    # layer keeps s h (34 + 5 a s / h) bytes at 16 bits, Korthikanti et al. 2022, eq. 1;
    # docs/scenarios.md), also what crosses to the next stage of a pipeline cut after it
    # (None: not known)
    activations: Count | None = None
    # elements per sample its tensor-parallel split all-reduces in its forward (the same
    # again in its backward): 2 s h for a transformer layer (Shoeybi et al. 2019); None:
    # the layer cannot be split
    tensor_exchange: Count | None = None


class TransformerSpec(Strict):
    """A decoder-only transformer by its shape, as its users write it (Megatron-LM's
    arguments): `style` gpt (GeLU MLP, biases, LayerNorm, learned positions, the output
    tied to the embedding) or llama (SwiGLU MLP, no biases, RMSNorm, rotary positions, an
    output layer of its own); `kv_heads` below `heads` for grouped-query attention;
    `experts` and `top_k` for a mixture of experts."""

    layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden: int = Field(ge=1)
    heads: int = Field(ge=1)
    kv_heads: int | None = Field(default=None, ge=1)  # default: heads
    ffn_hidden: int | None = Field(default=None, ge=1)  # default: 4 hidden
    sequence: int = Field(ge=1)
    vocab: int = Field(ge=1)
    experts: int = Field(default=1, ge=1)
    top_k: int = Field(default=1, ge=1)
    style: Literal["gpt", "llama"] = "gpt"
    tied_embeddings: bool | None = None  # default: gpt ties them, llama does not
    dtype: DType | None = None  # the model's dtype, where the block gives it

    @model_validator(mode="after")
    def _fits_together(self) -> TransformerSpec:
        for field, whole, part in (
            ("heads", self.hidden, self.heads),
            ("kv_heads", self.heads, self.kv_heads or self.heads),
        ):
            if whole % part:
                over = "hidden" if field == "heads" else "heads"
                raise _LocatedError((field,), f"{part} does not divide {over} {whole}")
        if self.top_k > self.experts:
            raise _LocatedError(("top_k",), f"{self.top_k} is more than experts {self.experts}")
        return self

    def shape(self) -> transformer.Shape:
        """The counting rules' shape (`scenarios/transformer.py`)."""
        return transformer.Shape(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads or self.heads,
            ffn_hidden=self.ffn_hidden or 4 * self.hidden,
            sequence=self.sequence,
            vocab=self.vocab,
            gated=self.style == "llama",
            experts=self.experts,
            top_k=self.top_k,
            tied_embeddings=self.style == "gpt"
            if self.tied_embeddings is None
            else self.tied_embeddings,
        )

    def builds(self) -> bool:
        """Whether run-real builds it (`real/process/models.py`'s transformer): a GPT
        decoder, multi-head attention, dense, its output tied to its embedding."""
        return (
            self.style == "gpt"
            and (self.kv_heads or self.heads) == self.heads
            and self.experts == 1
            and self.tied_embeddings in (None, True)
        )

    def keras(self) -> dict[str, Any]:
        """The `keras:` spec run-real builds it from."""
        shape = self.shape()
        return {
            "builder": "transformer",
            "layers": shape.layers,
            "hidden": shape.hidden,
            "heads": shape.heads,
            "ffn_hidden": shape.ffn_hidden,
            "sequence": shape.sequence,
            "vocab": shape.vocab,
        }

    def table(self) -> list[dict[str, Any]]:
        """The layer table (per sequence): the embeddings, every layer, the final norm and
        the output layer, their parameters adding up to `transformer.params`; a layer
        keeps `activations` elements for its backward (Korthikanti et al. 2022, eq. 1:
        sbh (34 + 5as/h) bytes of 16-bit values) and exchanges 2 s h elements across a
        tensor-parallel split (Shoeybi et al. 2019)."""
        shape = self.shape()
        h, s, v = shape.hidden, shape.sequence, shape.vocab
        gpt = self.style == "gpt"
        total = transformer.params(shape, style=self.style)
        embedding = v * h + (s * h if gpt else 0)
        output = 0 if shape.tied_embeddings else v * h
        final = 0 if gpt else h
        layer = (total - embedding - output - final) / shape.layers
        forward = sum(transformer.flops_per_layer_forward(shape, 1.0).values())
        kept = s * h * (34 + 5 * shape.heads * s / h) / 2
        rows: list[dict[str, Any]] = [{"name": "embeddings", "params": embedding}]
        rows += [
            {
                "name": f"layer{i}",
                "params": layer,
                "flops": f"{forward!r} FLOP",
                "activations": kept,
                "tensor_exchange": 2 * s * h,
            }
            for i in range(shape.layers)
        ]
        rows.append({"name": "final_norm", "params": final})
        rows.append(
            {
                "name": "logits",
                "params": output,
                "flops": f"{transformer.logits_flops(shape, 1.0) / 3!r} FLOP",
            }
        )
        return rows


class KerasSpec(BaseModel):
    """What run-real builds: a builder name and its arguments (free-form per builder)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    builder: str


class ModelSpec(Strict):
    """A model: catalog name, or totals, or a per-layer table."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    params: Count | None = None
    flops_per_sample: Flops | None = None
    backward_flops_per_sample: Flops | None = None
    dtype: DType = "float32"
    input_shape: tuple[int, ...] | None = None
    classes: int | None = Field(default=None, ge=1)
    keras: KerasSpec | None = None
    # a table, or a number N of identical layers sharing params and flops_per_sample
    # evenly, each keeping `activations` elements per sample for its backward
    layers: tuple[Layer, ...] | None = None
    activations: Count | None = None
    tensor_exchange: Count | None = None
    # statistical efficiency on its data set (scenarios/sections/convergence.py): a catalog name,
    # a mapping, or, for a catalog model, its own entry where the catalog has one
    convergence: Annotated[ConvergenceSpec | None, _catalog_ref("convergence")] = None
    # a decoder-only transformer by its shape: the layer table follows from it
    transformer: TransformerSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _catalog_convergence(cls, data: Any) -> Any:
        if (
            isinstance(data, dict)
            and "convergence" not in data
            and data.get("base") in catalog.names("convergence")
        ):
            data = {**data, "convergence": data["base"]}
        return data

    @model_validator(mode="before")
    @classmethod
    def _identical_layers(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if not isinstance(data.get("layers"), int):
            for field in ("activations", "tensor_exchange"):
                if data.get(field) is not None:
                    raise _LocatedError(
                        (field,), "applies to layers: N (a table gives each layer's own)"
                    )
            return data
        n, data = data["layers"], dict(data)
        if isinstance(n, bool) or n < 1:
            raise _LocatedError(("layers",), f"{n}: a number of layers is at least 1")
        if n > MAX_LAYERS:
            raise _LocatedError(
                ("layers",), f"{n:,}: more than the {MAX_LAYERS:,} layers a model may have"
            )
        if data.get("params") is None or data.get("flops_per_sample") is None:
            raise _LocatedError(
                ("layers",), f"{n} identical layers need the model's params and flops_per_sample"
            )
        totals = {}
        for field, kind in (
            ("params", "count"),
            ("flops_per_sample", "flops"),
            ("backward_flops_per_sample", "flops"),
        ):
            if data.get(field) is not None:
                try:
                    totals[field] = parse(data[field], kind)  # type: ignore[arg-type]
                except ValueError as exc:
                    raise _LocatedError((field,), str(exc)) from None
        layer: dict[str, Any] = {
            "params": totals["params"] / n,
            "flops": f"{totals['flops_per_sample'] / n!r} FLOP",
        }
        if "backward_flops_per_sample" in totals:
            layer["backward_flops"] = f"{totals['backward_flops_per_sample'] / n!r} FLOP"
        for field in ("activations", "tensor_exchange"):
            if data.get(field) is not None:
                layer[field] = data[field]
        data["layers"] = [{"name": f"layer{i}", **layer} for i in range(n)]
        return data

    @model_validator(mode="before")
    @classmethod
    def _layers_from_transformer(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("transformer"), dict):
            return data
        try:
            spec = TransformerSpec.model_validate(data["transformer"])
        except ValueError:
            return data  # the field's own validation names what is wrong
        data = dict(data)
        if spec.dtype is not None:
            if "dtype" in data and data["dtype"] != spec.dtype:
                raise _LocatedError(
                    ("transformer", "dtype"), f"{spec.dtype} disagrees with dtype {data['dtype']}"
                )
            data["dtype"] = spec.dtype
        data.setdefault("input_shape", [spec.sequence])
        if not data.get("layers") and data.get("params") is None:
            data["layers"] = spec.table()
        if "keras" not in data and spec.builds():
            data["keras"] = spec.keras()
        return data

    @model_validator(mode="before")
    @classmethod
    def _layers_from_builder(cls, data: Any) -> Any:
        # mlp and small_cnn tables are computable without TensorFlow.
        if isinstance(data, dict) and not data.get("layers") and data.get("params") is None:
            spec = data.get("keras")
            if isinstance(spec, dict) and spec.get("builder") in keras_layers.DEFAULT_SPECS:
                full = {**keras_layers.DEFAULT_SPECS[spec["builder"]], **spec}
                try:
                    table = keras_layers.layer_table(full)
                except ValueError as exc:
                    raise ValueError(f"keras: {exc}") from None
                layers = [
                    {**row, "flops": f"{row['flops']!r} FLOP", "activations": size}
                    for row, size in zip(table, keras_layers.output_sizes(full), strict=True)
                ]
                data = {**data, "keras": full, "layers": layers}
        return data

    @model_validator(mode="after")
    def _totals_agree(self) -> ModelSpec:
        if self.layers:
            if self.params is not None and not _close(self.params, self._sum("params")):
                raise ValueError(
                    f"params {self.params:.6g} disagrees with the sum of layers "
                    f"{self._sum('params'):.6g}; give one or the other"
                )
            if self.flops_per_sample is not None and not _close(
                self.flops_per_sample, self._sum("flops")
            ):
                raise ValueError(
                    f"flops_per_sample {self.flops_per_sample:.6g} FLOP disagrees with the sum "
                    f"of layers {self._sum('flops'):.6g} FLOP; give one or the other"
                )
        elif self.params is None:
            raise ValueError(
                "a model needs params, a layers table, a catalog name or a keras builder "
                f"({', '.join(keras_layers.DEFAULT_SPECS)})"
            )
        return self

    def _sum(self, field: str) -> float:
        return float(sum(getattr(layer, field) for layer in self.layers or ()))

    def variables(self) -> list[float]:
        """Trainable variable sizes (parameters) in creation order, which is how
        TensorFlow's ParameterServerStrategy deals them round-robin to the servers.

        Exact (kernel, then bias, per layer) for the builders computable without TensorFlow
        when the layer table is theirs; otherwise each layer is taken as one variable (the
        catalog lists layers, not variables), or the whole model as one."""
        if self.keras is not None and self.keras.builder in keras_layers.DEFAULT_SPECS:
            sizes = keras_layers.variable_sizes(self.keras.model_dump())
            if _close(float(sum(sizes)), self.total_params):
                return [float(n) for n in sizes]
        if self.layers:
            return [layer.params for layer in self.layers if layer.params > 0]
        return [self.total_params]

    @property
    def total_params(self) -> float:
        return self._sum("params") if self.layers else float(self.params or 0.0)

    @property
    def bytes_per_param(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def gradient_bytes(self) -> float:
        """Bytes of one full gradient (= one full copy of the parameters)."""
        return self.total_params * self.bytes_per_param

    @property
    def has_flops(self) -> bool:
        return bool(self.layers and self._sum("flops") > 0) or self.flops_per_sample is not None

    def layer_table(self) -> tuple[tuple[str, float, float, float], ...]:
        """(name, params, forward FLOP, backward FLOP) per layer, input -> output, per sample.

        A model given by totals is one layer; backward is 2 x forward unless given.
        """
        if self.layers:
            total_fwd = self._sum("flops")
            rows = []
            for layer in self.layers:
                bwd = layer.backward_flops
                if bwd is None:
                    if self.backward_flops_per_sample is not None and total_fwd > 0:
                        bwd = self.backward_flops_per_sample * layer.flops / total_fwd
                    else:
                        bwd = 2.0 * layer.flops
                rows.append((layer.name, layer.params, layer.flops, bwd))
            return tuple(rows)
        fwd = self.flops_per_sample or 0.0
        bwd = self.backward_flops_per_sample
        return (("all", float(self.params or 0.0), fwd, 2.0 * fwd if bwd is None else bwd),)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)
