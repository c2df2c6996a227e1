"""Reading YAML safely: a scenario, a plan, a profile or a `--set` value.

Data only (a safe loader, never code), and nothing that would take the loader minutes or
its memory: nesting deeper than the parser follows, aliases that hold themselves, and
aliases that expand to more than MAX_VALUES values are refused in one line.
"""

from __future__ import annotations

from typing import Any

import yaml

from .errors import ScenarioError


def read_yaml(raw: bytes | str, source: str) -> Any:
    """Safe-load YAML; refuse in one line naming `source` what is not YAML, what nests
    deeper than the parser can follow, and aliases that hold themselves or expand to more
    than MAX_VALUES values (a few lines of aliases can hold billions)."""
    try:
        document = yaml.load(raw, Loader=_SafeLoader)  # noqa: S506 - the safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{source}{where}: not valid YAML ({problem})") from None
    except RecursionError:
        raise ScenarioError(f"{source}: not valid YAML (nested too deeply)") from None
    size, depth = expanded_size(document)
    if size is None:
        raise ScenarioError(f"{source}: a YAML alias holds itself; write the value out")
    if size > MAX_VALUES:
        raise ScenarioError(
            f"{source}: holds {size:,} values with its aliases followed, more than the "
            f"{MAX_VALUES:,} a document may hold"
        )
    if depth > MAX_DEPTH:
        raise ScenarioError(f"{source}: nests {depth} levels deep, more than the {MAX_DEPTH} read")
    return document


#: libyaml's safe loader where PyYAML has it: it reads a file of megabytes in a second,
#: pure Python in a minute
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: the values (mappings, lists and scalars) one YAML document may hold, aliases followed
MAX_VALUES = 1_000_000
#: the deepest nesting of mappings and lists read (a scenario's is 5)
MAX_DEPTH = 100


def expanded_size(document: Any) -> tuple[int | None, int]:
    """How many values the document holds with every alias followed (each use of a shared
    mapping or list counts in full; None where one holds itself), and how deep its
    mappings and lists nest. Iterative: a deep document cannot exhaust the stack."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the ancestors of the node at hand
    deepest = 0
    stack: list[tuple[Any, bool, int]] = [(document, False, 0)]
    while stack:
        node, finished, depth = stack.pop()
        if not isinstance(node, dict | list) or (not finished and id(node) in sizes):
            continue
        children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if finished:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
            continue
        deepest = max(deepest, depth + 1)
        open_nodes.add(id(node))
        stack.append((node, True, depth))
        for child in children:
            if id(child) in open_nodes:
                return None, deepest
            stack.append((child, False, depth + 1))
    return sizes.get(id(document), 1), deepest
