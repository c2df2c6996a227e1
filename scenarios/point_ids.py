"""Sweep keys and the ids of the points they make: stable, file-name safe, as a person
would write the swept values."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


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
