"""The scenario's `published` section: the measurements a source published for its setup
(read by `make validate-published`, measured/published.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ..fields import Strict


class PublishedPoint(Strict):
    """One published figure: the sweep point it belongs to and its value."""

    # the swept fields and values that pick the point out of the sweep ({}: no sweep)
    at: dict[str, Any] = {}
    value: float = Field(gt=0)  # samples/s, or a scaling efficiency as a fraction
    note: str = ""


class PublishedOrder(Strict):
    """An ordering a source states in words rather than figures: the point at `faster`
    trains faster than the point at `slower` (each `at` as a figure's)."""

    faster: dict[str, Any]
    slower: dict[str, Any]
    note: str = ""  # where the source says it


class PublishedSpec(Strict):
    """Where a scenario's published measurements come from (`scenarios/published/`).

    Read by `make validate-published` only: `simulate` and `run-real` ignore it. The rest
    of the file is the source's setup (hardware, network, model, batch, framework), never
    fitted to the figures."""

    source: str = Field(min_length=1)  # the citation
    url: str = Field(min_length=1)
    table: str = Field(min_length=1)  # the table or figure, row and column
    setup: str = ""  # how the scenario's setup follows from the source, and what it assumes
    # relative_throughput: each point's throughput over the `reference` point's (a source
    # that publishes normalised figures)
    metric: Literal["throughput_samples_per_s", "scaling_efficiency", "relative_throughput"] = (
        "throughput_samples_per_s"
    )
    reference: dict[str, Any] | None = None  # relative_throughput: the `at` of the 1x point
    points: tuple[PublishedPoint, ...] = ()
    orders: tuple[PublishedOrder, ...] = ()

    @model_validator(mode="after")
    def _reference_with_relative(self) -> PublishedSpec:
        if (self.metric == "relative_throughput") != (self.reference is not None):
            raise ValueError("reference: give it with metric relative_throughput, and only then")
        if not self.points and not self.orders:
            raise ValueError("points: give at least one figure, or an ordering in orders")
        return self
