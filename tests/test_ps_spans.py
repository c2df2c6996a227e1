"""Synchronous parameter servers in spans of steps
(sim/strategies/parameter_server/spans.py): where a run is cut, and the spans' records, step
ends and summaries, moved and joined, against the event engine running the job in one
piece."""

from __future__ import annotations

import os
from typing import Any
from unittest import mock

import pytest
from conftest import make_spec
from hypothesis import given, settings
from hypothesis import strategies as st
from test_ps_lockstep import assert_same, queue_rule

from sim.simulation import Simulation
from sim.strategies.parameter_server import spans as ps_spans

PS = {"kind": "parameter_server", "servers": 2}


def _spans(**fields: Any) -> list[tuple[int, int]]:
    return ps_spans.spans(Simulation(make_spec(**fields)))


def test_spans_cover_the_steps_at_checkpoints() -> None:
    # 50 steps a span at least, 8 spans at most, each beginning at a checkpoint
    assert _spans(strategy=PS, **{"training.steps": 99, "training.warmup_steps": 0}) == [(0, 99)]
    assert _spans(strategy=PS, **{"training.steps": 95, "training.warmup_steps": 5}) == [
        (0, 50),
        (50, 50),
    ]
    cut = _spans(
        strategy=PS,
        checkpoint={"every_steps": 7},
        **{"training.steps": 1000, "training.warmup_steps": 0},
    )
    assert len(cut) == ps_spans.MOST_SPANS
    assert cut[0][0] == 0 and sum(steps for _, steps in cut) == 1000
    assert all(first % 7 == 0 for first, _ in cut)
    assert all(a + n == b for (a, n), (b, _) in zip(cut, cut[1:], strict=False))


@pytest.mark.parametrize(
    "strategy", [{**PS, "sync": False}, {**PS, "backup_workers": 1}], ids=["async", "backup"]
)
def test_one_span_where_a_step_may_leave_flows(strategy: dict[str, Any]) -> None:
    # asynchronous, or with backup workers (a late worker's pushes still in flight)
    fields = {"cluster.hosts": 3, "training.steps": 400, "training.warmup_steps": 0}
    assert _spans(strategy=strategy, **fields) == [(0, 400)]


@settings(max_examples=25, deadline=None)
@given(
    hosts=st.integers(1, 4),
    devices=st.integers(1, 2),
    servers=st.integers(1, 3),
    placement=st.sampled_from(["dedicated", "colocated"]),
    partition=st.sampled_from(["round_robin", "greedy", "sliced"]),
    overlap=st.booleans(),
    hiccups=st.booleans(),
    every=st.sampled_from([None, 2, 3]),
    warmup=st.integers(0, 4),
    stream=st.sampled_from([None, "2 Gbit/s"]),
    span=st.integers(1, 3),
    threads=st.sampled_from([1, 2]),
    budget=st.booleans(),
)
def test_spans_equal_one_run(
    hosts: int,
    devices: int,
    servers: int,
    placement: str,
    partition: str,
    overlap: bool,
    hiccups: bool,
    every: int | None,
    warmup: int,
    stream: str | None,
    span: int,
    threads: int,
    budget: bool,
) -> None:
    stragglers: dict[str, Any] = {"jitter": 0.1}
    if hiccups:
        stragglers["transient"] = {"probability": 0.3, "delay": "5 ms"}
    spec = make_spec(
        **{
            "model": "resnet50",
            "cluster.hosts": hosts,
            "cluster.devices_per_host": devices,
            "cluster.network.stream_bandwidth": stream,
            "strategy": {
                "kind": "parameter_server",
                "servers": servers,
                "placement": placement,
                "partition": partition,
                "overlap": overlap,
            },
            "stragglers": stragglers,
            "checkpoint": {"every_steps": every} if every else {},
            "training.steps": 7,
            "training.warmup_steps": warmup,
        }
    )
    with (
        mock.patch.object(ps_spans, "SPAN_STEPS", span),
        mock.patch.object(ps_spans, "cores", lambda: threads),
        queue_rule(budget),
    ):
        assert len(ps_spans.spans(Simulation(spec))) > 1
        assert_same(spec)


@pytest.mark.parametrize(
    ("count", "cores", "memory", "expected"),
    [
        (2, 2, 1e12, 2),  # a span a core
        (8, 2, 1e12, 2),  # no more than the cores
        (1, 16, 1e12, 1),  # no more than the spans
        (8, 16, 2.5e9, 2),  # as many as 2.5 GB holds at 1 GB a span
        (8, 16, 0.5e9, 1),  # one, whatever the memory
        (8, 4, float("inf"), 4),  # memory unknown (not Linux): the cores decide
    ],
)
def test_spans_at_once(count: int, cores: int, memory: float, expected: int) -> None:
    with (
        mock.patch.object(ps_spans, "cores", lambda: cores),
        mock.patch.object(ps_spans, "available", lambda: memory),
    ):
        assert ps_spans.threads(count, 1e9) == expected


@pytest.mark.skipif(not os.path.exists("/proc/meminfo"), reason="Linux's /proc/meminfo")
def test_memory_available_is_read() -> None:
    # Linux's MemAvailable, where there is one: more than nothing, less than the total
    with open("/proc/meminfo") as info:
        total = next(float(line.split()[1]) * 1024 for line in info if line.startswith("MemTotal"))
    assert 0 < ps_spans.available() <= total
