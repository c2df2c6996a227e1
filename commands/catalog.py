"""`catalog [KIND] [--format text|markdown]`: the bundled catalog as one table per kind.

What a scenario gets when it names `v100`, `25GbE` or `resnet50`: every device's peak
FLOP/s, efficiency and memory, every link's and network's bandwidth and latency, every
model's size, every convergence entry's fitted figures. Read through `scenarios.catalog`
alone: the command loads neither backend.

The catalog's YAML gives each number its source in a comment beside it, which a YAML
loader cannot read; the tables show each entry's `description` (and a convergence
entry's `source` field) and name the file whose comments hold the sources.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from scenarios import catalog
from scenarios.sections.model import ModelSpec
from scenarios.units import Kind, parse

from .args import ArgumentParser, with_examples

# (title, file whose comments hold the sources)
_SOURCES = {
    "devices": "scenarios/catalog/devices.yaml",
    "links": "scenarios/catalog/links.yaml",
    "networks": "scenarios/catalog/networks.yaml",
    "models": "scenarios/catalog/models/<name>.yaml",
    "convergence": "scenarios/catalog/convergence.yaml",
    "collectives": "scenarios/catalog/collectives.yaml",
    "prices": "scenarios/catalog/prices.yaml",
}
_SHORT_DTYPE = {
    "float64": "fp64",
    "float32": "fp32",
    "tf32": "tf32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "any": "all",
}

Table = tuple[list[str], list[list[str]]]


def _num(value: float, digits: int = 4) -> str:
    """A number in at most `digits` significant figures, without an exponent."""
    text = f"{value:.{digits}g}"
    if "e" in text:
        text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text


def _scaled(value: float, unit: str, digits: int = 3) -> str:
    """`value` in `unit` with the SI prefix that keeps it between 1 and 1,000."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{_num(value / factor, digits)} {prefix}{unit}"
    return f"{_num(value, digits)} {unit}"


def _si(value: Any, kind: Kind) -> float | None:
    return None if value is None else parse(value, kind)


def _or_dash(value: float | None, show: Callable[[float], str]) -> str:
    return "-" if value is None else show(value)


def _per_dtype(mapping: Any) -> str:
    """`{float32: 0.56, float16: 0.23}` as `fp32 0.56, fp16 0.23`; one number as itself."""
    if mapping is None:
        return "-"
    if not isinstance(mapping, dict):
        return _num(float(mapping))
    return ", ".join(f"{_SHORT_DTYPE.get(k, k)} {_num(float(v))}" for k, v in mapping.items())


def devices() -> Table:
    entries = {name: catalog.entry("device", name) for name in catalog.listed("device")}
    dtypes = [
        d for d in _SHORT_DTYPE if any(d in (e.get("peak_flops") or {}) for e in entries.values())
    ]
    header = [
        "device",
        "kind",
        *(f"{_SHORT_DTYPE[d]} TFLOP/s" for d in dtypes),
        "efficiency",
        "memory",
        "memory bandwidth",
        "power tdp/idle",
        "description",
    ]
    rows = []
    for name, e in entries.items():
        peak = e.get("peak_flops") or {}
        rows.append(
            [
                name,
                e.get("kind", "gpu"),
                *(
                    _or_dash(_si(peak.get(d), "flop_rate"), lambda x: _num(x / 1e12))
                    for d in dtypes
                ),
                _per_dtype(e.get("efficiency")),
                _or_dash(_si(e.get("memory"), "bytes"), lambda x: f"{_num(x / 2**30)} GiB"),
                _or_dash(
                    _si(e.get("memory_bandwidth"), "bandwidth"), lambda x: f"{_num(x / 1e9)} GB/s"
                ),
                _power(e.get("power")),
                e.get("description", ""),
            ]
        )
    return header, rows


def _power(power: Any) -> str:
    """A device's `power` as `400/60 W` (tdp/idle), `-` where unknown."""
    if not isinstance(power, dict):
        return "-"
    return f"{_num(parse(power['tdp'], 'power'))}/{_num(parse(power['idle'], 'power'))} W"


def _usd(rate: Any, market: str) -> str:
    """An hourly price in one market: `32.77`, `-` where not listed."""
    if isinstance(rate, dict):
        return "-" if rate.get(market) is None else _num(parse(rate[market], "money"))
    # one amount: the entry's own market
    return _num(parse(rate, "money")) if market == "on_demand" and rate is not None else "-"


def prices() -> Table:
    header = ["instance", "where", "devices", "USD/h on-demand", "USD/h spot", "per", "date"]
    rows = []
    for name in catalog.listed("price"):
        e = catalog.entry("price", name)
        per = "host" if e.get("per_host_hour") is not None else "device"
        rate = e.get(f"per_{per}_hour")
        rows.append(
            [
                name,
                f"{e.get('provider', '')} {e.get('region', '')}".strip() or "-",
                f"{e.get('devices_per_host', '?')}x {e.get('device', '?')}",
                _usd(rate, "on_demand"),
                _usd(rate, "spot"),
                per,
                str(e.get("date", "-")),
            ]
        )
    return header, rows


def _microseconds(value: Any) -> str:
    return _or_dash(_si(value, "time"), lambda x: f"{_num(x * 1e6)} us")


def links() -> Table:
    header = ["host link", "Gbit/s", "GB/s", "latency", "goodput", "step latency", "description"]
    rows = []
    for name in catalog.listed("link"):
        e = catalog.entry("link", name)
        bandwidth = parse(e["bandwidth"], "bandwidth")
        rows.append(
            [
                name,
                _num(bandwidth * 8 / 1e9),
                _num(bandwidth / 1e9),
                _microseconds(e.get("latency")),
                _num(float(e.get("goodput", 1.0))),
                _microseconds(e.get("step_latency")),
                e.get("description", ""),
            ]
        )
    return header, rows


def networks() -> Table:
    header = [
        "network",
        "protocol",
        "Gbit/s",
        "latency",
        "goodput",
        "oversubscription",
        "step latency",
        "description",
    ]
    rows = []
    for name in catalog.listed("network"):
        e = catalog.entry("network", name)
        rows.append(
            [
                name,
                e.get("protocol", "tcp"),
                _num(parse(e["bandwidth"], "bandwidth") * 8 / 1e9),
                _microseconds(e.get("latency")),
                _num(float(e.get("goodput", 1.0))),
                _num(float(e.get("oversubscription", 1.0))),
                _microseconds(e.get("step_latency")),
                e.get("description", ""),
            ]
        )
    return header, rows


def models() -> Table:
    header = [
        "model",
        "params",
        "forward FLOP/sample",
        "dtype",
        "layers",
        "keras builder",
        "convergence",
        "description",
    ]
    rows = []
    convergence = set(catalog.names("convergence"))
    for name in catalog.names("model"):
        e = catalog.entry("model", name)
        layers = e.get("layers")
        count = len(layers) if isinstance(layers, list) else layers
        params, flops = e.get("params"), e.get("flops_per_sample")
        shape = e.get("transformer")
        if isinstance(shape, dict) and params is None:  # resolved by the counting rules
            model = ModelSpec.model_validate(e)
            params = model.total_params
            flops = f"{sum(row[2] for row in model.layer_table())!r} FLOP"
            count = shape.get("layers")
        rows.append(
            [
                name,
                _or_dash(_si(params, "count"), lambda x: _scaled(x, "")),
                _or_dash(_si(flops, "flops"), lambda x: _scaled(x, "FLOP")),
                e.get("dtype", "float32"),
                "-" if count is None else str(count),
                (e.get("keras") or {}).get("builder", "-"),
                name if name in convergence else "-",  # a catalog model takes its namesake
                e.get("description", ""),
            ]
        )
    return header, rows


def convergence() -> Table:
    header = ["convergence", "metric", "initial", "final", "noise scale", "lr_max", "source"]
    rows = []
    for name in catalog.listed("convergence"):
        e = catalog.entry("convergence", name)
        rows.append(
            [
                name,
                e.get("metric", "-"),
                _or_dash(e.get("initial"), _num),
                _or_dash(e.get("final"), _num),
                _or_dash(e.get("noise_scale"), lambda x: f"{_num(x)} samples"),
                _or_dash(e.get("lr_max"), _num),
                " ".join(str(e.get("source", "")).split()),
            ]
        )
    return header, rows


def collectives() -> Table:
    header = ["collective library", "launch", "reduce traffic", "description"]
    rows = []
    for name in catalog.listed("collective"):
        e = catalog.entry("collective", name)
        traffic = e.get("reduce_traffic")
        rows.append(
            [
                name,
                _microseconds(e.get("launch")),
                "-" if traffic is None else f"{_num(float(traffic))} x received bytes",
                e.get("description", ""),
            ]
        )
    return header, rows


#: kind -> its table, in the order `catalog` prints them
KINDS: dict[str, Callable[[], Table]] = {
    "devices": devices,
    "links": links,
    "networks": networks,
    "models": models,
    "convergence": convergence,
    "collectives": collectives,
    "prices": prices,
}


def _sources(kind: str) -> str:
    where = _SOURCES[kind]
    if kind == "models":
        return (
            f"Sources: the header comment of {where} (the Keras model it was generated "
            "from, the published parameter and FLOP counts)."
        )
    if kind == "convergence":
        return f"Sources: each entry's `source`; the fitted figures' details in {where}."
    if kind == "prices":
        return f"Sources: each entry's `source` and `date`; the details in {where}."
    return f"Sources: the comment beside each number in {where}."


def render_text(kind: str, table: Table) -> str:
    """Columns aligned with spaces, a rule under the header, the sources below."""
    header, rows = table
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    return "\n".join([*out, _sources(kind)])


def render_markdown(kind: str, table: Table) -> str:
    """A heading, a pipe table, the sources below."""
    header, rows = table

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [f"## {kind.capitalize()}", "", line(header), line(["---"] * len(header))]
    return "\n".join([*out, *(line(r) for r in rows), "", _sources(kind)])


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="catalog",
        description="Show the bundled catalog that scenarios name (`device: v100`): devices "
        "(peak FLOP/s, efficiency, memory), host links, networks, models, convergence "
        "entries and collective libraries, one table per kind.",
        **with_examples(
            [
                "catalog devices",
                "catalog models --format markdown",
                "catalog",
            ]
        ),
    )
    parser.add_argument(
        "kind",
        metavar="KIND",
        nargs="?",
        choices=list(KINDS),
        help=f"one of {', '.join(KINDS)} (default: all of them)",
    )
    parser.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="aligned text (default) or Markdown tables",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args: argparse.Namespace = build_parser().parse_args(argv)
    render = render_markdown if args.format == "markdown" else render_text
    kinds = [args.kind] if args.kind else list(KINDS)
    blocks = []
    for kind in kinds:
        block = render(kind, KINDS[kind]())
        blocks.append(block if args.format == "markdown" or len(kinds) == 1 else f"{kind}\n{block}")
    print("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
