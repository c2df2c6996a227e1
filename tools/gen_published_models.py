"""Write the catalog's models that have no Keras builder (`scenarios/catalog/models/`):
BERT-Large, GPT-3 175B and RetinaNet (ResNeXt-50 32x4d FPN), each a layer table computed in
closed form from its published architecture.

    python tools/gen_published_models.py [--out scenarios/catalog/models] [--check]

Counting rules (written into each file): parameters are every weight the published model
trains, biases included; forward FLOPs per sample are 2 x multiply-accumulates of the
matrix products and convolutions (Conv: 2*Kh*Kw*(Cin/groups)*Cout*Hout*Wout; Dense:
2*in*out per position), plus 2 FLOP per output element of a batch norm; layer norms,
softmax, activations, pooling and additions count 0. A transformer layer's attention adds
the score and weighted-sum products, 2 x 2 s^2 h per sequence (the full s x s matrix, no
causal saving). `--check` writes nothing and exits 1 if a file differs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from results.files import write_atomic  # noqa: E402 - needs the sys.path line above

DEFAULT_OUT = REPO_ROOT / "scenarios" / "catalog" / "models"
Row = dict[str, Any]


# ---- transformers ---------------------------------------------------------------------


def transformer_layer(name: str, h: int, ffn: int, heads: int, seq: int) -> Row:
    """One encoder/decoder layer: Q, K, V and output projections, a two-layer MLP, two
    layer norms; per sequence of `seq` tokens. It keeps s h (34 + 5 a s / h) bytes at
    16 bits for its backward (Korthikanti et al. 2022, eq. 1), half that in elements, and
    its tensor-parallel split all-reduces 2 s h elements each way (Shoeybi et al. 2019)."""
    weights = 4 * h * h + 2 * h * ffn
    params = weights + 4 * h + ffn + h + 4 * h  # biases, then two layer norms' gain and bias
    flops = 2 * seq * weights + 2 * 2 * seq * seq * h
    kept = seq * h * (34 + 5 * heads * seq // h) // 2
    return {
        "name": name,
        "params": params,
        "flops": flops,
        "activations": kept,
        "tensor_exchange": 2 * seq * h,
    }


def bert_large() -> list[Row]:
    """BERT-Large pre-training (Devlin et al. 2019) at MLPerf's 512 tokens: embeddings,
    24 layers, pooler, the masked-LM head over 76 predicted positions (the decoder shares
    the embedding's weights and adds a bias per word) and the next-sentence head."""
    h, ffn, heads, seq, vocab, preds = 1024, 4096, 16, 512, 30522, 76
    rows = [{"name": "embeddings", "params": (vocab + 512 + 2) * h + 2 * h, "flops": 0}]
    rows += [transformer_layer(f"layer{i}", h, ffn, heads, seq) for i in range(24)]
    rows.append({"name": "pooler", "params": h * h + h, "flops": 2 * h * h})
    rows.append(
        {
            "name": "masked_lm",
            "params": h * h + h + 2 * h + vocab,
            "flops": 2 * preds * (h * h + h * vocab),
        }
    )
    rows.append({"name": "next_sentence", "params": 2 * h + 2, "flops": 2 * 2 * h})
    return rows


def gpt3_175b() -> list[Row]:
    """GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12,288, 96 heads,
    2,048-token context, GPT-2's 50,257-token vocabulary; the output layer shares the
    token embedding's weights."""
    h, heads, seq, vocab, layers = 12288, 96, 2048, 50257, 96
    # Split over tensor-parallel devices as Megatron-LM splits them: the embedding by
    # vocabulary (its output all-reduced, s h), the final norm replicated (nothing), the
    # logits by vocabulary (the cross entropy all-reduces a max, a sum and the target's
    # logit per token, 3 s)
    rows = [
        {"name": "embeddings", "params": (vocab + seq) * h, "flops": 0, "tensor_exchange": seq * h}
    ]
    rows += [transformer_layer(f"layer{i}", h, 4 * h, heads, seq) for i in range(layers)]
    rows.append({"name": "final_norm", "params": 2 * h, "flops": 0, "tensor_exchange": 0})
    rows.append(
        {"name": "logits", "params": 0, "flops": 2 * seq * h * vocab, "tensor_exchange": 3 * seq}
    )
    return rows


# ---- convolutional networks -------------------------------------------------------------


@dataclass
class Convs:
    """A running table of convolutions over square feature maps."""

    rows: list[Row]
    batch_norm: bool  # BN after each conv: its gamma and beta trained, 2 FLOP per element
    trained_norm: bool = True

    def conv(
        self,
        name: str,
        size: int,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        *,
        groups: int = 1,
        bias: bool = False,
        norm: bool | None = None,
    ) -> int:
        """Append a k x k convolution (padding k // 2) on a size x size map; the output size."""
        out = (size + 2 * (k // 2) - k) // stride + 1
        macs = k * k * (cin // groups) * cout * out * out
        params = k * k * (cin // groups) * cout + (cout if bias else 0)
        flops = 2 * macs
        if self.batch_norm if norm is None else norm:
            params += 2 * cout if self.trained_norm else 0
            flops += 2 * cout * out * out
        self.rows.append({"name": name, "params": params, "flops": flops})
        return out


#: (blocks, width of the first stage's 3x3, groups) of the bottleneck ResNets
RESNETS = {"resnet50": ((3, 4, 6, 3), 64, 1), "resnext50_32x4d": ((3, 4, 6, 3), 128, 32)}


def bottleneck_backbone(t: Convs, kind: str, size: int) -> list[tuple[int, int]]:
    """torchvision's ResNet v1.5 / ResNeXt (stride in the 3x3): conv1, max pool, four
    stages; the (size, channels) after each stage."""
    blocks, width, groups = RESNETS[kind]
    size = t.conv("conv1", size, 3, 64, 7, 2)
    size = (size + 2 - 3) // 2 + 1  # 3x3 max pool, stride 2, padding 1
    cin, outs = 64, []
    for stage, n in enumerate(blocks):
        w, cout = width * 2**stage, 256 * 2**stage
        for b in range(n):
            stride = 2 if stage and b == 0 else 1
            p = f"layer{stage + 1}.{b}"
            t.conv(f"{p}.conv1", size, cin, w, 1)
            new = t.conv(f"{p}.conv2", size, w, w, 3, stride, groups=groups)
            t.conv(f"{p}.conv3", new, w, cout, 1)
            if b == 0:
                t.conv(f"{p}.downsample", size, cin, cout, 1, stride)
            size, cin = new, cout
        outs.append((size, cout))
    return outs


def classifier(kind: str, size: int = 224, classes: int = 1000) -> list[Row]:
    """The ImageNet classifier of torchvision (BN trained, a fully connected layer)."""
    t = Convs([], batch_norm=True)
    ((_, c),) = bottleneck_backbone(t, kind, size)[-1:]
    t.rows.append({"name": "fc", "params": c * classes + classes, "flops": 2 * c * classes})
    return t.rows


def retinanet(kind: str = "resnext50_32x4d", classes: int = 264, size: int = 800) -> list[Row]:
    """RetinaNet (Lin et al. 2017) as torchvision builds it: a backbone with frozen batch
    norms (no trained parameters, still 2 FLOP per element), an FPN over stages 2-4 with P6
    and P7 from P5 (LastLevelP6P7(256, 256)), and the classification and box heads, four
    3x3 convs of 256 each and 9 anchors per place, shared by the five levels."""
    t = Convs([], batch_norm=True, trained_norm=False)
    c3, c4, c5 = bottleneck_backbone(t, kind, size)[1:]
    t.batch_norm = False
    levels = []
    for i, (s, c) in enumerate((c3, c4, c5), start=3):
        t.conv(f"fpn.inner{i}", s, c, 256, 1, bias=True)
        t.conv(f"fpn.layer{i}", s, 256, 256, 3, bias=True)
        levels.append(s)
    s6 = t.conv("fpn.p6", c5[0], 256, 256, 3, 2, bias=True)
    s7 = t.conv("fpn.p7", s6, 256, 256, 3, 2, bias=True)
    levels += [s6, s7]
    for head, out in (("classification", 9 * classes), ("regression", 9 * 4)):
        for j in range(5):
            cout = 256 if j < 4 else out
            name = f"head.{head}.{'conv' + str(j) if j < 4 else 'logits'}"
            params = 9 * 256 * cout + cout
            flops = sum(2 * 9 * 256 * cout * s * s for s in levels)
            t.rows.append({"name": name, "params": params, "flops": flops})
    return t.rows


# ---- the files ------------------------------------------------------------------------

RULES = """\
# Counting rules: parameters are every weight the published model trains, biases included;
#   forward FLOPs per sample are 2 x multiply-accumulates of the matrix products and
#   convolutions (Conv: 2*Kh*Kw*(Cin/groups)*Cout*Hout*Wout; Dense: 2*in*out per position),
#   plus 2 FLOP per output element of a batch norm; layer norms, softmax, activations,
#   pooling and additions count 0. Attention adds its score and weighted-sum products,
#   2 x 2 s^2 h per sequence (the full s x s matrix, no causal saving)."""


@dataclass(frozen=True)
class Entry:
    name: str
    header: str  # the model, its sources and the published figures it is checked against
    description: str
    table: Callable[[], list[Row]]
    input_shape: tuple[int, ...]
    classes: int | None
    dtype: str = "float32"  # MLPerf's submissions train all three in mixed precision


ENTRIES = (
    Entry(
        "bert_large",
        """BERT-Large (Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers",
NAACL 2019): L=24, H=1024, A=16, "Total Parameters=340M" (sec. 3). Pre-training as
MLPerf Training's BERT benchmark runs it (mlcommons/training language_model/tensorflow/
bert/README.md): 512-token sequences, at most 76 masked positions, vocabulary 30,522.
The encoder alone (embeddings, layers, pooler) is 335,141,888 of the parameters.""",
        "BERT-Large pre-training, 512-token sequences, masked LM over 76 positions",
        bert_large,
        (512,),
        None,
        "float16",
    ),
    Entry(
        "gpt3_175b",
        """GPT-3 175B (Brown et al., "Language Models are Few-Shot Learners", NeurIPS 2020,
Table 2.1): 175.0 B parameters, 96 layers, d_model 12,288, 96 heads of 128, context
2,048; GPT-2's vocabulary of 50,257 (Radford et al. 2019). Kaplan et al. 2020 (Table 1)
put its forward pass at 2 N + 2 n_layer n_ctx d_model FLOP per token.""",
        "GPT-3 175B language model, 2,048-token sequences",
        gpt3_175b,
        (2048,),
        None,
        "bfloat16",
    ),
    Entry(
        "retinanet_resnext50",
        """RetinaNet (Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017) with a
ResNeXt-50 32x4d backbone (Xie et al. 2017) and FPN, as MLPerf Training's single-stage
detector benchmark runs it since v2.0 (mlcommons/training single_stage_detector/README.md):
800x800 images, 264 classes of OpenImages-MLPerf. The same table with torchvision's
ResNet-50 backbone and 91 classes is torchvision's retinanet_resnet50_fpn, 34,014,999
parameters (its model docs), which this generator reproduces exactly (a test checks).""",
        "RetinaNet, ResNeXt-50 32x4d FPN backbone, 800x800 input, 264 classes",
        retinanet,
        (800, 800, 3),
        264,
        "float16",
    ),
)


def render(entry: Entry) -> tuple[str, list[Row]]:
    rows = entry.table()
    params = sum(r["params"] for r in rows)
    flops = sum(r["flops"] for r in rows)
    lines = [f"# {line}" if line else "#" for line in entry.header.splitlines()]
    lines += [
        "# Generated by tools/gen_published_models.py (closed form); do not edit by hand.",
        RULES,
        f"name: {entry.name}",
        f"description: {entry.description}",
        f"params: {params}          # sum of layers",
        f"flops_per_sample: {flops} FLOP    # forward, sum of layers",
        f"dtype: {entry.dtype}",
        f"input_shape: [{', '.join(map(str, entry.input_shape))}]",
    ]
    if entry.classes:
        lines.append(f"classes: {entry.classes}")
    lines.append("layers:")
    for r in rows:
        cells = [f"name: {r['name']}", f"params: {r['params']}", f"flops: {r['flops']} FLOP"]
        cells += [f"{k}: {r[k]}" for k in ("activations", "tensor_exchange") if k in r]
        lines.append("  - {" + ", ".join(cells) + "}")
    text = "\n".join(lines) + "\n"
    doc = yaml.safe_load(text)
    assert doc["params"] == params and len(doc["layers"]) == len(rows), entry.name
    return text, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="write nothing; 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for entry in ENTRIES:
        text, _ = render(entry)
        path = args.out / f"{entry.name}.yaml"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            write_atomic(path, text)
    for path in stale:
        print(f"{path}: differs from what tools/gen_published_models.py generates")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
