"""Dimensioned values in scenario files, parsed by pint into SI floats.

Inside trainscale every number is an SI float: seconds, bytes, bytes/s, FLOP, FLOP/s.
Files carry explicit unit strings (`25 Gbit/s`, `64 MiB`, `10 us`; networking's `10 Gbps`
is 10 Gbit/s, `10 GBps` 10 GB/s). A bare number where a unit is needed is refused,
because bits versus bytes is the classic mistake; so is a unit that pint reads more than
one way, and pint's own warning about it never reaches the terminal.

pint treats bits and bytes as dimensionless; this registry gives them their own dimension
(`[information]`) so that `64 MiB` can never be read as a plain count, and adds `FLOP`
and `USD` (a dimension of its own, `[currency]`: a price is never a plain number).

Building the registry takes a fifth of a second, more than a small simulation, so the
values read are kept between runs: `units-<key>.json` in the user's cache directory
(`$TRAINSCALE_CACHE_DIR`, else `$XDG_CACHE_HOME/trainscale`, else `~/.cache/trainscale`;
`TRAINSCALE_CACHE_DIR=off`: none), its key a hash of this module, pint's version and its
definitions, so that a change to any of them starts a new file. A run that finds every
value it reads there never imports pint. Only values read are kept, never a refusal; the
file is written whole (a temporary file renamed) and one that cannot be read is ignored.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import math
import os
import re
import tempfile
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import pint

Kind = Literal["time", "bytes", "bandwidth", "flops", "flop_rate", "count", "power", "money"]

#: The pint dimensionality each kind must have, and the SI unit it is converted to.
_KINDS: dict[str, tuple[str, str, str]] = {
    # kind: (dimensionality, SI unit, example)
    "time": ("[time]", "s", "10 us"),
    "bytes": ("[information]", "B", "64 MiB"),
    "bandwidth": ("[information] / [time]", "B/s", "25 Gbit/s"),
    "flops": ("[flop]", "FLOP", "4.1 GFLOP"),
    "flop_rate": ("[flop] / [time]", "FLOP/s", "15.7 TFLOP/s"),
    "count": ("dimensionless", "", "25.6e6"),
    "power": ("[power]", "W", "300 W"),
    # prices: US dollars only (no exchange rates are modelled); `USD` is the unit
    "money": ("[currency]", "USD", "32.77 USD"),
}


def _pint_dir() -> str:
    spec = importlib.util.find_spec("pint")
    assert spec is not None and spec.origin is not None
    return os.path.dirname(spec.origin)


@functools.cache
def registry() -> pint.UnitRegistry:
    """pint's default definitions with bit as a dimension of its own, plus FLOP."""
    import pint

    here = _pint_dir()
    lines: list[str] = []
    with open(os.path.join(here, "default_en.txt"), encoding="utf-8") as f:
        for line in f.read().splitlines():
            if line.strip() == "@import constants_en.txt":
                # load_definitions(list) cannot follow @import: inline the file instead.
                with open(os.path.join(here, "constants_en.txt"), encoding="utf-8") as c:
                    lines.extend(c.read().splitlines())
            elif line.strip() == "bit = []":
                lines.append("bit = [information]")
            else:
                lines.append(line)
    lines.append("FLOP = [flop] = flop")
    lines.append("USD = [currency]")
    ureg: pint.UnitRegistry = pint.UnitRegistry(None)
    ureg.load_definitions(lines)
    ureg._build_cache()  # noqa: SLF001 - load_definitions does not build it by itself
    return ureg


def parse(value: object, kind: Kind) -> float:
    """Return `value` as an SI float of the given kind; raise ValueError with a hint.

    Strings are parsed with pint; plain numbers are accepted only for counts.
    """
    dim, si_unit, example = _KINDS[kind]
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind.replace('_', ' ')} such as '{example}'")
    if isinstance(value, int | float):
        if kind == "count":
            return _finite(float(value), example)
        if kind == "money":
            raise ValueError(f"a price needs its currency, e.g. '{value} USD'")
        raise ValueError(
            f"a bare number needs a unit here, e.g. '{value} {example.split(' ', 1)[1]}'"
        )
    if not isinstance(value, str):
        raise ValueError(f"expected a string with a unit such as '{example}'")
    return _parse_text(value, kind)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str, kind: Kind) -> float:
    """`parse` of a string, remembered: loading a scenario reads the catalog's few
    hundred values once per point, and pint takes a fraction of a millisecond for each.
    A string refused raises each time (an exception is never cached)."""
    dim, si_unit, example = _KINDS[kind]
    if len(value) > MAX_LENGTH or len(_POWER.findall(value)) > 1 or _LONG_POWER.search(value):
        # pint evaluates what it reads: a power tower (9**9**9) would take hours and a
        # long expression overflows the stack
        raise ValueError(f"not a number with a unit; write it like '{example}'")
    known = _kept().get(_key(kind, value))
    if known is not None:
        return known
    import pint

    ureg = registry()
    text = _PER_SECOND.sub(_per_second, value.strip())
    try:
        with _ambiguity() as ambiguous:
            q: pint.Quantity = ureg.Quantity(text)
    except (
        pint.errors.PintError,
        ValueError,
        TypeError,
        AttributeError,
        SyntaxError,
        tokenize.TokenError,  # an unclosed bracket: '0(B'
        ArithmeticError,  # 1/0 s, 9**999 B
        RecursionError,
    ) as exc:
        raise ValueError(f"cannot read units ({exc}); write it like '{example}'") from None
    if ambiguous:
        raise ValueError(f"units that read more than one way; write it like '{example}'")
    if kind == "count":
        if not q.dimensionless:
            raise ValueError(f"expected a plain count such as '{example}', not {q.units:~}")
        return _keep(kind, value, _si(q, "dimensionless", example))
    if q.dimensionality != ureg.get_dimensionality(dim):
        if kind == "money":
            raise ValueError(f"a price needs its currency in USD, e.g. '{example}'")
        hint = " ('Gb' is the gilbert: write 'Gbit')" if "gilbert" in str(q.units) else ""
        raise ValueError(f"expected a {kind.replace('_', ' ')} such as '{example}'{hint}")
    return _keep(kind, value, _si(q, si_unit, example))


#: the most values the file keeps (a run that reads more keeps the first ones)
KEPT_MOST = 20_000


@functools.cache
def _kept_path() -> Path | None:
    """The file of values kept between runs (None: keep none); hashed once a run."""
    root = os.environ.get("TRAINSCALE_CACHE_DIR")
    if root == "off":
        return None
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "trainscale")
    digest = hashlib.sha256()
    try:
        digest.update(Path(__file__).read_bytes())
        digest.update(importlib.metadata.version("pint").encode())
        for name in ("default_en.txt", "constants_en.txt"):
            digest.update(Path(_pint_dir(), name).read_bytes())
    except (OSError, ValueError, ImportError, AssertionError):
        return None
    return Path(root) / f"units-{digest.hexdigest()[:16]}.json"


@functools.cache
def _kept() -> dict[str, float]:
    """The values kept by earlier runs (empty where there is no file or it is unreadable);
    the ones this run adds are written back at its exit."""
    path = _kept_path()
    values: dict[str, float] = {}
    if path is not None:
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(found, dict):
                values = {
                    k: float(v)
                    for k, v in found.items()
                    if isinstance(k, str) and isinstance(v, int | float)
                }
        except (OSError, ValueError):
            values = {}
    return values


#: whether this run kept a value the file does not have yet (its write is registered
#: at exit with the first)
_unsaved = False


def _key(kind: Kind, value: str) -> str:
    return f"{kind}\t{value}"


def _keep(kind: Kind, value: str, si: float) -> float:
    global _unsaved
    kept = _kept()
    if len(kept) < KEPT_MOST:
        kept[_key(kind, value)] = si
        if not _unsaved:
            atexit.register(_write_kept)
            _unsaved = True
    return si


def _write_kept() -> None:
    """The values kept, with this run's, written whole (a temporary file renamed); a
    directory that cannot be written keeps nothing."""
    global _unsaved
    path = _kept_path()
    if path is None or not _unsaved:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            found = json.loads(path.read_text(encoding="utf-8"))  # another run's since
            merged = found if isinstance(found, dict) else {}
        except (OSError, ValueError):
            merged = {}
        merged.update(_kept())
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(list(merged.items())[:KEPT_MOST]), f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass
    _unsaved = False


def _si(q: pint.Quantity, unit: str, example: str) -> float:
    """q's magnitude in `unit`, a finite float (an integer too large for one is not)."""
    try:
        magnitude = float(q.to(unit).magnitude)
    except (OverflowError, ZeroDivisionError):
        magnitude = math.inf
    return _finite(magnitude, example)


#: the longest value with units read (`1.2345e+12 GFLOP/s` is 18 characters)
MAX_LENGTH = 100
_POWER = re.compile(r"\*\*|\^")
_LONG_POWER = re.compile(r"(\*\*|\^)\s*[-+(]*\s*\d{4}")


#: networking's rates, which pint reads ambiguously (`Gbps`: gigabaud or giga-point-seconds,
#: with a warning): bps is bits per second, Bps bytes per second, after an SI prefix
_PER_SECOND = re.compile(r"(?<![A-Za-z])([kKMGTP]?)(bps|Bps)$")


def _per_second(found: re.Match[str]) -> str:
    prefix = "k" if found.group(1) == "K" else found.group(1)
    return f"{prefix}{'bit' if found.group(2) == 'bps' else 'B'}/s"


@contextlib.contextmanager
def _ambiguity() -> Iterator[list[str]]:
    """pint's warnings while it parses, kept from the terminal (pint logs a unit it can
    read more than one way, and goes on with one of them): the caller refuses instead."""
    said: list[str] = []

    class Keep(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            said.append(record.getMessage())
            return False

    loggers = [logging.getLogger(name) for name in ("pint", "pint.util")]
    keep = Keep()
    for logger in loggers:
        logger.addFilter(keep)
    try:
        yield said
    finally:
        for logger in loggers:
            logger.removeFilter(keep)


def _finite(x: float, example: str) -> float:
    if not math.isfinite(x):
        raise ValueError(f"must be a finite number such as '{example}'")
    return x


def fmt(value: float, kind: Kind) -> str:
    """Format an SI float back into a readable unit string (for messages and docs)."""
    if kind == "time":
        for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if abs(value) >= scale or unit == "ns":
                return f"{value / scale:.4g} {unit}"
    if kind == "bytes":
        for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0)):
            if abs(value) >= scale or unit == "B":
                return f"{value / scale:.4g} {unit}"
    if kind == "bandwidth":
        return f"{value * 8 / 1e9:.4g} Gbit/s"
    if kind == "flops":
        return f"{value / 1e9:.4g} GFLOP"
    if kind == "flop_rate":
        return f"{value / 1e12:.4g} TFLOP/s"
    if kind == "power":
        return f"{value:.4g} W"
    if kind == "money":
        return f"{value:.4g} USD"
    return f"{value:.6g}"
