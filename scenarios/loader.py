"""Read a scenario file: YAML -> overrides -> sweep expansion -> validated points.

`load(path)` returns a frozen `Scenario`: one resolved `ScenarioSpec` per sweep point, each
with a stable point id. Where `cluster.profile` names a calibration file, the path is
relative to the scenario file's directory, and the resolved spec holds it made absolute;
the file itself is read by `measured.profile.profiles_of`. Every error is a
`ScenarioError` whose one line names the field path and the value, and suggests a fix
where one is known.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import itertools
import math
import re
import reprlib
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import ScenarioError
from .point_ids import point_id_for, sweep_paths, sweep_varying, unique_id
from .reading import read_yaml
from .sections.strategy import Backend
from .spec import ScenarioSpec, _LocatedError

SUPPORTED_VERSION = 1


@dataclass(frozen=True)
class Point:
    """One combination of the sweep: its stable id, the swept values, the resolved spec."""

    id: str
    index: int
    values: Mapping[str, Any]
    spec: ScenarioSpec


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario file: provenance plus one resolved spec per sweep point."""

    name: str
    path: str
    sha256: str
    document: Mapping[str, Any]  # the file as read, after --set overrides
    sets: tuple[str, ...]
    points: tuple[Point, ...] = field(default=())
    # what the file leaves to chance, one line each (the CLI prints them as warnings)
    warnings: tuple[str, ...] = ()

    @property
    def seed(self) -> int:
        return self.points[0].spec.seed


def load(path: str | Path, sets: Sequence[str] = (), backend: Backend = "sim") -> Scenario:
    """Load, override, expand and validate a scenario file, the fields it leaves unset
    filled with `backend`'s defaults (`StrategySpec.for_backend`). Raises ScenarioError."""
    path = Path(path)
    try:
        raw_bytes = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except IsADirectoryError:
        raise ScenarioError(f"{path}: is a directory, not a scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    return _build(raw_bytes, str(path), sets, path.parent, backend, _name_of(path))


def loads(
    text: str,
    sets: Sequence[str] = (),
    source: str = "<string>",
    base_dir: str | Path | None = None,
    backend: Backend = "sim",
) -> Scenario:
    """Like `load`, from YAML text (tests, notebooks); a relative `cluster.profile` is
    taken from `base_dir` (default: the working directory)."""
    base = Path(base_dir) if base_dir else Path.cwd()
    return _build(text.encode(), source, sets, base, backend, "scenario")


def _name_of(path: Path) -> str:
    """The name a file without `name` gets: its stem, made file-name safe."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._") or "scenario"


def _build(
    raw: bytes, source: str, sets: Sequence[str], base_dir: Path, backend: Backend, name: str
) -> Scenario:
    document = parse_document(raw, source)
    for item in sets:
        apply_set(document, item)
    if "plan" in document:
        raise ScenarioError(
            f"plan: {source} is a plan, not a scenario: run `trainscale plan {source}`"
        )
    document.setdefault("name", name)
    points = with_profile_paths(expand(document), base_dir)
    points = [
        dataclasses.replace(p, spec=p.spec.model_copy(update={"strategy": strategy}))
        if (strategy := p.spec.strategy.for_backend(backend)) is not p.spec.strategy
        else p
        for p in points
    ]
    return Scenario(
        name=points[0].spec.name,
        path=source,
        sha256=hashlib.sha256(raw).hexdigest(),
        document=document,
        sets=tuple(sets),
        points=tuple(points),
        warnings=rate_warnings([p.spec for p in points]),
    )


def rate_warnings(specs: Sequence[ScenarioSpec]) -> tuple[str, ...]:
    """Where points scale the rate with their workers (no `base_batch`) and differ in
    batch per worker, their rates ignore the batch: one line saying so."""
    batches = sorted(
        {
            s.training.batch_per_worker
            for s in specs
            if s.training.learning_rate.base_batch is None
            and s.training.learning_rate.scaling != "none"
            and s.strategy.averages_gradients
        }
    )
    if len(batches) < 2:
        return ()
    shown = ", ".join(map(str, batches[:4])) + (", ..." if len(batches) > 4 else "")
    return (
        "training.learning_rate: without base_batch the rate scales with the workers, not "
        f"the batch, and the points' batch per worker differs ({shown}): at equal workers "
        "they train at the same rate; give base_batch (the batch `base` is the rate for, "
        "e.g. {base: 0.1, base_batch: 256}) to scale it with the batch",
    )


def parse_document(raw: bytes, source: str) -> dict[str, Any]:
    """Safe-load YAML and check the version before anything else."""
    document = read_yaml(raw, source)
    if not isinstance(document, dict):
        raise ScenarioError(f"{source}: a scenario is a YAML mapping, not {_kind(document)}")
    if "version" not in document:
        raise ScenarioError(f"version: missing; add 'version: {SUPPORTED_VERSION}' at the top")
    version = document["version"]
    if version != SUPPORTED_VERSION or isinstance(version, bool):
        raise ScenarioError(
            f"version: {version!r} is not supported; this trainscale reads version "
            f"{SUPPORTED_VERSION} (see docs/scenarios.md), so write the file for "
            f"version {SUPPORTED_VERSION} or upgrade trainscale"
        )
    return document


# ------------------------------------------------------------------ --set PATH=VALUE


def apply_set(document: dict[str, Any], item: str) -> None:
    """Apply one `--set a.b.c=VALUE` override in place; VALUE is read as YAML."""
    if "=" not in item:
        raise ScenarioError(f"--set {item}: expected PATH=VALUE, e.g. cluster.hosts=4")
    path, text = item.split("=", 1)
    path = path.strip()
    value = read_yaml(text, f"--set {path}") if text.strip() else ""
    sweep = document.get("sweep")
    if path.startswith("sweep."):
        # sweep keys are dotted paths themselves: --set sweep.cluster.hosts=[1,2]
        key = path[len("sweep.") :]
        for part in sweep_paths(key):
            check_path(part, f"--set {path}")
        if not isinstance(sweep, dict):
            sweep = document["sweep"] = {}
        sweep[key] = value
        return
    check_path(path, f"--set {path}")
    if isinstance(sweep, dict):
        for key in sweep:
            if any(
                part == path or part.startswith(path + ".") or path.startswith(part + ".")
                for part in sweep_paths(key)
            ):
                raise ScenarioError(
                    f"--set {path}: the sweep sets {key}; change the swept values with "
                    f"--set sweep.{key}=[...]"
                )
    set_path(document, path, value)


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path in a nested mapping, creating mappings on the way."""
    keys = path.split(".")
    node = document
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {} if not isinstance(child, str) else {"base": child}
            node[key] = child
        node = child
    node[keys[-1]] = copy.deepcopy(value)


def check_path(path: str, what: str) -> None:
    """Refuse a dotted path that names no field, suggesting the closest one."""
    model: Any = ScenarioSpec
    for depth, key in enumerate(path.split(".")):
        if model is None:
            return  # inside a free-form mapping (peak_flops, trials, keras ...)
        if key not in model.model_fields:
            prefix = ".".join(path.split(".")[:depth])
            close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.5)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            where = f"{prefix}.{key}" if prefix else key
            raise ScenarioError(f"{what}: unknown key '{where}'{hint}")
        model = _submodel(model.model_fields[key].annotation)


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (through Optional / Annotated), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _submodel(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _submodel(arg)
            if found is not None:
                return found
    return None


# ------------------------------------------------------------------ sweep


def check_sweep(sweep: Any, where: str) -> None:
    """Refuses, in one line, a sweep (or a plan's options, `where`) that is not a mapping
    of field paths to non-empty lists, or that sets a field before a key replacing it."""
    if not isinstance(sweep, dict):
        raise ScenarioError(f"{where}: must map field paths to lists of values, not {_kind(sweep)}")
    for key, listed in sweep.items():
        paths = sweep_paths(key)
        for path in paths:
            check_path(path, where)
        if not isinstance(listed, list) or not listed:
            raise ScenarioError(
                f"{where}.{key}: must be a non-empty list of values, got {listed!r}"
            )
        if len(paths) > 1:
            for value in listed:
                if not isinstance(value, list) or len(value) != len(paths):
                    raise ScenarioError(
                        f"{where}.{key}: each value must be a list of {len(paths)} values, one "
                        f"per path, got {value!r}"
                    )
    set_before: list[tuple[str, str]] = []
    for key in sweep:
        for path in sweep_paths(key):
            for earlier_key, earlier in set_before:
                if earlier.startswith(path + "."):
                    raise ScenarioError(
                        f"{where}.{key}: replaces all of {path}, which {where}.{earlier_key} sets "
                        f"before it ({earlier}); list {key} first"
                    )
            set_before.append((str(key), path))


#: the most points a sweep may expand to (each is validated, then run)
MAX_POINTS = 10_000


def expand(document: Mapping[str, Any]) -> list[Point]:
    """The cartesian product of `sweep`, in file order, each point validated. A key that
    joins several paths with commas sets them together: its values are lists with one
    value per path (`cluster.hosts,strategy.servers: [[2, 2], [4, 4]]`)."""
    sweep = document.get("sweep") or {}
    check_sweep(sweep, "sweep")
    size = math.prod(len(listed) for listed in sweep.values())
    if size > MAX_POINTS:
        factors = " x ".join(str(len(listed)) for listed in sweep.values())
        raise ScenarioError(
            f"sweep: {factors} = {size:,} points, more than the {MAX_POINTS:,} one scenario "
            "may hold; sweep fewer values, or search a large space with a plan "
            "(docs/planning.md)"
        )
    base = {k: v for k, v in document.items() if k != "sweep"}
    keys = list(sweep)
    varying = sweep_varying(sweep)
    points: list[Point] = []
    seen: set[str] = set()

    def resolve(combo: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
        doc = copy.deepcopy(base)
        values: dict[str, Any] = {}
        for key, value in zip(keys, combo, strict=True):
            paths = sweep_paths(key)
            for path, one in zip(paths, value if len(paths) > 1 else [value], strict=True):
                set_path(doc, path, one)
                values[path] = one
        return doc, values

    combos: list[tuple[Any, ...]] = list(itertools.product(*(sweep[k] for k in keys)))
    for index, combo in enumerate(combos):
        doc, values = resolve(combo)
        point_id = unique_id(point_id_for(values, varying), seen)
        try:
            spec = validate(doc)
        except ScenarioError as exc:
            # name the point only where the problem is the point's: an error every point
            # has is the file's
            if keys and not all(_fails_alike(resolve(c)[0], str(exc)) for c in combos):
                raise ScenarioError(f"{exc} (sweep point {point_id})") from None
            raise
        points.append(Point(id=point_id, index=index, values=values, spec=spec))
    return points


def _fails_alike(document: dict[str, Any], message: str) -> bool:
    try:
        validate(document)
    except ScenarioError as exc:
        return str(exc) == message
    return False


# ------------------------------------------------------------------ calibration


def with_profile_paths(points: Sequence[Point], base_dir: Path) -> list[Point]:
    """Each point's `cluster.profile` made absolute, so it names the same file from
    anywhere: a relative path is taken from `base_dir` (the scenario file's directory).
    The language keeps the path; `measured.profile.profiles_of` reads the file."""
    out = []
    for point in points:
        name = point.spec.cluster.profile
        if name is None:
            out.append(point)
            continue
        path = Path(name).expanduser()
        if not path.is_absolute():
            path = base_dir.absolute() / path
        cluster = point.spec.cluster.model_copy(update={"profile": str(path)})
        spec = point.spec.model_copy(update={"cluster": cluster})
        out.append(dataclasses.replace(point, spec=spec))
    return out


# ------------------------------------------------------------------ errors


def validate(document: Mapping[str, Any], context: str = "") -> ScenarioSpec:
    """Validate one document; turn the first pydantic error into one readable line."""
    try:
        return ScenarioSpec.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(format_error(exc, document) + context) from None


def format_error(exc: ValidationError, document: Mapping[str, Any]) -> str:
    """`path: problem (got VALUE)` for the first error, with a suggestion where known."""
    errors = exc.errors(include_url=False)
    # an unknown key first: it is often why a required one is missing (a misspelt section)
    # (not inside a union, whose other members' unknown keys are no mistake of the file)
    unknown = (
        e
        for e in errors
        if e["type"] == "extra_forbidden" and not any(map(_is_union_tag, e["loc"]))
    )
    err = next(unknown, errors[0])
    loc = tuple(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _LocatedError):
        loc = loc + cause.loc
    loc = tuple(part for part in loc if not _is_union_tag(part))
    path = _dotted(loc) or "scenario"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent: type[BaseModel] | None = ScenarioSpec
        for part in loc[:-1]:
            if isinstance(part, int) or parent is None:
                continue
            field_info = parent.model_fields.get(str(part))
            parent = _submodel(field_info.annotation) if field_info else None
        known = list(parent.model_fields) if parent is not None else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{path}: unknown key{hint}"
    if kind == "missing":
        return f"{path}: required, but missing"
    message = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix) :]
    value = _lookup(document, loc)
    shown = (
        f" (got {_shown(value)})" if value is not _MISSING and not isinstance(value, dict) else ""
    )
    return f"{path}: {message}{shown}"


def _shown(value: Any) -> str:
    """The value as a message quotes it: its repr, shortened past 200 characters (a list
    of a million values is not repeated back)."""
    text = repr(value)
    return text if len(text) <= 200 else _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = 8
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 100


def _is_union_tag(part: Any) -> bool:
    # pydantic inserts the member type's name into locs of union fields.
    return isinstance(part, str) and (
        part in {"ScheduledFailure", "RandomFailure"} or part.startswith("function-")
    )


def _dotted(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_MISSING = object()


def _lookup(document: Any, loc: Sequence[Any]) -> Any:
    node = document
    for part in loc:
        if (
            isinstance(node, dict)
            and part in node
            or isinstance(node, list)
            and isinstance(part, int)
            and part < len(node)
        ):
            node = node[part]
        else:
            return _MISSING
    return node


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"
