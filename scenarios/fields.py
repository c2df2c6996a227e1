"""The scenario language's building blocks: unit-string fields read as SI floats, and the
strict, frozen base of every section (STYLE.md rule 8)."""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema

from . import catalog
from .units import Kind, parse

DType = Literal["float16", "bfloat16", "float32", "float64"]
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
COMPUTE_DTYPES = ("float64", "float32", "tf32", "float16", "bfloat16", "any")

_EXAMPLES: dict[str, str] = {
    "time": "10 us",
    "bytes": "64 MiB",
    "bandwidth": "25 Gbit/s",
    "flops": "4.1 GFLOP",
    "flop_rate": "15.7 TFLOP/s",
    "count": "25.6e6",
    "power": "300 W",
    "money": "32.77 USD",
}


def _convert(kind: Kind, gt: float | None = None, ge: float | None = None) -> BeforeValidator:
    """A validator reading an SI float from a unit string (or a plain number, for counts)."""

    def convert(value: object) -> float:
        x = parse(value, kind)
        if gt is not None and not x > gt:
            raise ValueError(f"must be greater than {gt:g}")
        if ge is not None and not x >= ge:
            raise ValueError(f"must be at least {ge:g}")
        return x

    return BeforeValidator(convert)


def _schema(kind: Kind) -> WithJsonSchema:
    if kind == "count":
        return WithJsonSchema(
            {"type": ["number", "string"], "description": "a plain count", "examples": [25.6e6]}
        )
    return WithJsonSchema(
        {
            "type": "string",
            "description": f"{kind.replace('_', ' ')} with a unit",
            "examples": [_EXAMPLES[kind]],
        }
    )


Seconds = Annotated[float, _convert("time", ge=0), _schema("time")]
PositiveSeconds = Annotated[float, _convert("time", gt=0), _schema("time")]
Bytes = Annotated[float, _convert("bytes", ge=0), _schema("bytes")]
Bandwidth = Annotated[float, _convert("bandwidth", gt=0), _schema("bandwidth")]
Flops = Annotated[float, _convert("flops", ge=0), _schema("flops")]
FlopRate = Annotated[float, _convert("flop_rate", gt=0), _schema("flop_rate")]
Count = Annotated[float, _convert("count", ge=0), _schema("count")]
Watts = Annotated[float, _convert("power", ge=0), _schema("power")]
Dollars = Annotated[float, _convert("money", ge=0), _schema("money")]


def _catalog_ref(kind: catalog.CatalogKind) -> BeforeValidator:
    return BeforeValidator(functools.partial(catalog.resolve, kind))


class Strict(BaseModel):
    """Unknown keys are errors; validated objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _LocatedError(ValueError):
    """A cross-field error that knows which field it is about."""

    def __init__(self, loc: tuple[str | int, ...], message: str):
        super().__init__(message)
        self.loc = loc
