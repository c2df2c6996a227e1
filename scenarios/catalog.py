"""The catalog: named models, devices, host links, networks and cloud instances' prices,
read from YAML data files.

Every number in `catalog/*.yaml` carries its source in a comment. A scenario may name an
entry (`device: v100`) or start from one and override fields (`{base: v100, efficiency: 0.4}`).
"""

from __future__ import annotations

import copy
import difflib
import functools
from pathlib import Path
from typing import Any, Literal

import yaml

CatalogKind = Literal[
    "model", "device", "link", "network", "collective", "convergence", "price"
]

CATALOG_DIR = Path(__file__).parent / "catalog"
_FILES = {
    "device": "devices.yaml",
    "link": "links.yaml",
    "network": "networks.yaml",
    "collective": "collectives.yaml",
    "convergence": "convergence.yaml",
    "price": "prices.yaml",
}


# the catalog is ours and large (per-layer model tables): libyaml's parser where installed
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=_Loader)  # noqa: S506 - a safe loader


@functools.cache
def _entries(kind: CatalogKind) -> dict[str, dict[str, Any]]:
    if kind == "model":
        out = {}
        for path in sorted((CATALOG_DIR / "models").glob("*.yaml")):
            data = _read(path)
            out[data.get("name", path.stem)] = data
        return out
    path = CATALOG_DIR / _FILES[kind]
    if not path.exists():
        return {}
    return dict(_read(path) or {})


def names(kind: CatalogKind) -> list[str]:
    """Catalog names of one kind, sorted."""
    return sorted(_entries(kind))


def listed(kind: CatalogKind) -> list[str]:
    """Catalog names of one kind in the order their file lists them (models: by file
    name), which the files choose to read well: devices by age, networks by speed."""
    return list(_entries(kind))


def entry(kind: CatalogKind, name: str) -> dict[str, Any]:
    """A deep copy of one catalog entry, with `name` and `base` filled in.

    Raises ValueError naming the closest entries when `name` is unknown.
    """
    entries = _entries(kind)
    if name not in entries:
        close = difflib.get_close_matches(name, list(entries), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown {kind} {name!r} in the catalog{hint} (known: {', '.join(sorted(entries))})"
        )
    data = copy.deepcopy(entries[name])
    data.setdefault("name", name)
    data["base"] = name
    return data


def _computable_builders() -> tuple[str, ...]:
    from .keras_layers import DEFAULT_SPECS  # builders whose layer table needs no TensorFlow

    return tuple(DEFAULT_SPECS)


def resolve(kind: CatalogKind, value: Any) -> Any:
    """Turn a catalog reference into the mapping it stands for.

    A string is a catalog name; a mapping with `base` starts from that entry and overrides
    its fields (a shallow merge: an overridden mapping replaces the entry's whole mapping).
    Anything else is returned unchanged for the schema to judge.
    """
    if isinstance(value, str):
        return entry(kind, value)
    if isinstance(value, dict) and "base" in value:
        base = value["base"]
        if not isinstance(base, str):
            raise ValueError(f"'base' must be a catalog name, not {base!r}")
        merged = entry(kind, base)
        overrides = dict(value)
        keras = overrides.get("keras")
        computable = isinstance(keras, dict) and keras.get("builder") in _computable_builders()
        totals = {"params", "flops_per_sample"} & overrides.keys() | (
            {"keras"} if computable else set()
        )
        if kind == "model" and totals and "layers" not in overrides:
            # The entry's layer table no longer adds up to the overridden totals, nor
            # describes another keras builder spec (which recomputes it where it can)
            merged.pop("layers", None)
            if "keras" in overrides and not {"params", "flops_per_sample"} & overrides.keys():
                merged.pop("params", None)
                merged.pop("flops_per_sample", None)
        rates = {"per_host_hour", "per_device_hour"} & overrides.keys()
        if kind == "price" and rates:
            # a price of the scenario's own: the entry's other rate, and its source and
            # date, no longer apply
            for key in {"per_host_hour", "per_device_hour", "source", "date"} - overrides.keys():
                merged.pop(key, None)
        if "name" not in overrides and len(overrides) > 1:
            merged["name"] = base  # an override keeps the entry's name unless renamed
        merged.update(overrides)
        return merged
    return value
