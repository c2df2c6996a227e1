"""How a point is named: the sweep keys and the ids of the points they make (stable,
file-name safe, as a person would write the swept values), and a point's name in words
from its resolved scenario, as a person would say it: "256 H100 in 32 p5.48xlarge,
hierarchical all-reduce, 32 per GPU", or for a transformer layout "TP 8 x PP 8 x DP 16,
ZeRO-1, selective recompute, micro-batch 1".

The plan's page and the report's name their points with these words (`describe`), the id
in a tooltip beside them. A name reads the resolved scenario as meta.json holds it
(`ScenarioSpec.model_dump(mode="json")`), so `reports` names the points of result files
without the simulator.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .sections.strategy import StrategySpec

K = TypeVar("K")


def sweep_paths(key: str) -> list[str]:
    """The field paths a sweep key sets: one, or several joined by commas
    (`cluster.hosts,strategy.servers`), whose values are then lists of as many values."""
    return [part.strip() for part in str(key).split(",")]


def sweep_varying(sweep: Mapping[str, Any]) -> dict[str, set[str]]:
    """Per swept path, the fields of its values that differ between them (what a point's
    id names)."""
    return {
        path: _varying([v[i] if len(sweep_paths(k)) > 1 else v for v in sweep[k]])
        for k in sweep
        for i, path in enumerate(sweep_paths(k))
    }


def point_id_for(values: Mapping[str, Any], varying: Mapping[str, set[str]] | None = None) -> str:
    """A stable, file-name-safe id from the swept values, as a person would write them:
    `hosts=4_parameter_server,servers=2,sync=false`.

    A swept scalar is `name=value` (the last part of its path); a swept mapping names only
    its fields that differ between the sweep's values, `field=value` joined by commas, a
    `kind` by its value alone.
    """
    if not values:
        return "base"
    parts = []
    for key, value in values.items():
        keep = (varying or {}).get(key)
        if isinstance(value, dict):
            shown = {k: v for k, v in value.items() if keep is None or k in keep} or value
            parts.append(
                ",".join(_label(v) if k == "kind" else f"{k}={_label(v)}" for k, v in shown.items())
            )
        else:
            parts.append(f"{key.rsplit('.', 1)[-1]}={_label(value)}")
    return re.sub(r"[^A-Za-z0-9.,=_-]+", "-", "_".join(parts))


def _varying(values: list[Any]) -> set[str]:
    """Keys whose values differ between the mappings of one sweep list."""
    mappings = [v for v in values if isinstance(v, dict)]
    keys = {k for m in mappings for k in m}
    return {k for k in keys if len({repr(m.get(k)) for m in mappings}) > 1}


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(_label(v) for v in value.values())
    if isinstance(value, list):
        return "-".join(_label(v) for v in value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value).replace(" ", "")


def unique_id(candidate: str, seen: set[str]) -> str:
    point_id, n = candidate, 2
    while point_id in seen:
        point_id, n = f"{candidate}-{n}", n + 1
    seen.add(point_id)
    return point_id


# ---------------------------------------------------------------- names in words

def names_apart(named: Mapping[K, str], mark: Callable[[K], str]) -> dict[K, str]:
    """Names that tell their points apart: where points share a name, each gets its
    `mark` (its id, its candidate number) beside it."""
    counts = Counter(named.values())
    return {k: n if counts[n] == 1 else f"{n} ({mark(k)})" for k, n in named.items()}


def describe(resolved: Mapping[str, Any]) -> str:
    """The point's devices, where they are, how they train together and its batch."""
    cluster = _mapping(resolved.get("cluster"))
    training = _mapping(resolved.get("training"))
    strategy = strategy_of(resolved)
    parts = [devices(cluster), strategy.words(_workers(cluster))]
    if not strategy.hybrid:
        batch = training.get("batch_per_worker")
        if batch is not None:
            parts.append(f"{batch} per {_unit(cluster)}")
    return ", ".join(parts)


def strategy_of(resolved: Mapping[str, Any]) -> StrategySpec:
    """The resolved scenario's strategy section (as meta.json holds it) read back as it
    is: resolved already, its values in SI (which validation would take for bare numbers
    without their units)."""
    return StrategySpec.model_construct(**_mapping(resolved.get("strategy")))


def devices(cluster: Mapping[str, Any]) -> str:
    """'256 H100 in 32 p5.48xlarge', '8 V100 on 1 host', '4 CPU workers on 4 hosts'."""
    hosts = int(cluster.get("hosts", 1))
    workers = _workers(cluster)
    device = _name(cluster.get("device"))
    what = f"{workers} {device.upper()}" if _kind(cluster) == "gpu" else (
        f"{workers} {device.upper()} worker{'s' if workers != 1 else ''}"
    )
    price = cluster.get("price")
    if price:
        return f"{what} in {hosts} {_name(price)}"
    return f"{what} on {hosts} host{'s' if hosts != 1 else ''}"


def _workers(cluster: Mapping[str, Any]) -> int:
    return int(cluster.get("hosts", 1)) * int(cluster.get("devices_per_host", 1))


def _kind(cluster: Mapping[str, Any]) -> str:
    device = cluster.get("device")
    return str(device.get("kind", "gpu")) if isinstance(device, Mapping) else "gpu"


def _unit(cluster: Mapping[str, Any]) -> str:
    return "GPU" if _kind(cluster) == "gpu" else "worker"


def _name(value: Any) -> str:
    """A catalog entry's name (a resolved entry is a mapping with its name)."""
    if isinstance(value, Mapping):
        return str(value.get("name") or value.get("base") or "?")
    return str(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
