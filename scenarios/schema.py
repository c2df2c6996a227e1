"""`scenarios/schema.json`: the JSON Schema of the scenario language, for editors.

Generated from the pydantic models (STYLE.md rule 9) and kept in sync by a test:
`python -m scenarios.schema > scenarios/schema.json`.
"""

from __future__ import annotations

import json
from typing import Any

from . import catalog
from .spec import ScenarioSpec

SCHEMA_PATH = catalog.CATALOG_DIR.parent / "schema.json"

# Fields where a catalog name may stand for a mapping (docs/scenarios.md, "Rules for every field").
_CATALOG_FIELDS: dict[tuple[str, str], catalog.CatalogKind] = {
    ("ScenarioSpec", "model"): "model",
    ("ClusterSpec", "device"): "device",
    ("ClusterSpec", "host_link"): "link",
    ("ClusterSpec", "network"): "network",
    ("ClusterSpec", "price"): "price",
}


def json_schema() -> dict[str, Any]:
    schema = ScenarioSpec.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "trainscale scenario, version 1"
    defs = schema.get("$defs", {})
    for (owner, field), kind in _CATALOG_FIELDS.items():
        props = schema["properties"] if owner == "ScenarioSpec" else defs[owner]["properties"]
        prop = props[field]
        mapping = {k: v for k, v in prop.items() if k not in ("default", "description", "title")}
        extra = {k: v for k, v in prop.items() if k in ("default", "title")}
        props[field] = {
            "anyOf": [{"type": "string", "enum": catalog.names(kind)}, mapping],
            "description": f"a {kind} from the catalog, or a mapping (may start from 'base')",
            **extra,
        }
    return schema


def render() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    print(render(), end="")
