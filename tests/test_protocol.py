"""real/protocol.py: every record a process writes comes back as its typed record, one
frozen dataclass per event; what a process prints besides is no record; an unknown event
or field is refused in one line. No TensorFlow needed: the lines are those the writers
in real/process/ print."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from real import protocol
from real.protocol import (
    EVENTS,
    Busy,
    Checkpoint,
    Done,
    Error,
    Eval,
    ProbeSample,
    Progress,
    ProtocolError,
    Ready,
    Round,
    Serving,
    Step,
    parse,
    record_of,
    when,
)

#: a record of every event, as real/process/ writes them (the optional fields of a step
#: under asynchronous and synchronous parameter servers too)
WRITTEN: list[tuple[dict[str, Any], object]] = [
    (
        {"event": "ready", "worker": -1, "time": 5.0, "launched": 1.0, "params": 1000},
        Ready(worker=-1, time=5.0, launched=1.0, params=1000),
    ),
    ({"event": "ready", "worker": 0, "time": 5.0}, Ready(worker=0, time=5.0)),  # a probe's
    (
        {"event": "serving", "role": "worker", "index": 1, "time": 2.0},
        Serving(role="worker", index=1, time=2.0),
    ),
    (
        {
            "event": "step",
            "worker": 1,
            "step": 3,
            "start": 1.0,
            "compute_end": 1.5,
            "end": 2.0,
            "loss": 0.25,
        },
        Step(worker=1, step=3, start=1.0, compute_end=1.5, end=2.0, loss=0.25),
    ),
    (
        {
            "event": "step",
            "worker": 0,
            "step": 2,
            "update": 7,
            "start": 1.0,
            "compute_end": 1.5,
            "end": 2.0,
            "loss": 0.5,
            "staleness": 1,
            "chunk": 0,
        },
        Step(
            worker=0,
            step=2,
            update=7,
            start=1.0,
            compute_end=1.5,
            end=2.0,
            loss=0.5,
            staleness=1,
            chunk=0,
        ),
    ),
    (
        {
            "event": "step",
            "worker": 0,
            "closure": 1,
            "step": 2,
            "start": 1.0,
            "compute_end": 1.5,
            "end": 2.0,
            "loss": 0.5,
            "dropped": True,
        },
        Step(
            worker=0, closure=1, step=2, start=1.0, compute_end=1.5, end=2.0, loss=0.5, dropped=True
        ),
    ),
    (
        {"event": "round", "worker": -1, "step": 4, "start": 1.0, "end": 2.0, "applied": 5},
        Round(worker=-1, step=4, start=1.0, end=2.0, applied=5),
    ),
    (
        {"event": "progress", "worker": -1, "step": 9, "time": 3.0},
        Progress(worker=-1, step=9, time=3.0),
    ),
    (
        {
            "event": "eval",
            "worker": 0,
            "step": 5,
            "start": 1.0,
            "end": 1.2,
            "loss": 0.3,
            "accuracy": 0.9,
        },
        Eval(worker=0, step=5, start=1.0, end=1.2, loss=0.3, accuracy=0.9),
    ),
    (
        {"event": "checkpoint", "worker": 0, "step": 5, "start": 1.0, "end": 1.1},
        Checkpoint(worker=0, step=5, start=1.0, end=1.1),
    ),
    (
        {"event": "probe", "worker": 0, "kind": "pull", "bytes": 1024, "time_s": 0.01},
        ProbeSample(worker=0, kind="pull", bytes=1024, time_s=0.01),
    ),
    (
        {
            "event": "probe",
            "worker": 0,
            "kind": "chain",
            "messages": 8,
            "bytes": 1024,
            "time_s": 0.01,
        },
        ProbeSample(worker=0, kind="chain", messages=8, bytes=1024, time_s=0.01),
    ),
    (
        {"event": "busy", "worker": 1, "samples": [[1.0, 0.5], [1.005, 0.505]]},
        Busy(worker=1, samples=[[1.0, 0.5], [1.005, 0.505]]),
    ),
    ({"event": "done", "worker": 0, "time": 9.0}, Done(worker=0, time=9.0)),
    (
        {"event": "error", "worker": 0, "error": "ValueError: no"},
        Error(worker=0, error="ValueError: no"),
    ),
]


def printed(record: dict[str, Any]) -> str:
    """The line a process prints for `record` (`protocol.emit`)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        protocol.emit(record)
    return out.getvalue().rstrip("\n")


@pytest.mark.parametrize("written, typed", WRITTEN, ids=lambda x: getattr(x, "event", ""))
def test_a_record_comes_back_as_its_type(written: dict[str, Any], typed: object) -> None:
    assert parse(printed(written)) == typed and type(parse(printed(written))) is type(typed)
    # as a Spark task's file or its pickled result holds it: the JSON object
    assert record_of(json.loads(json.dumps(written))) == typed


def test_every_event_has_a_type() -> None:
    assert sorted(EVENTS) == sorted({w["event"] for w, _ in WRITTEN})


def test_what_else_a_process_prints_is_no_record() -> None:
    assert parse("2026-12-03 I tensorflow/core: started") is None
    assert parse(protocol.PREFIX + "{not json") is None
    assert parse(protocol.PREFIX + "[1, 2]") is None


def test_an_unknown_event_or_field_is_refused_in_one_line() -> None:
    with pytest.raises(
        ProtocolError, match=r"^record: unknown event 'nope' \(one of ready, "
    ) as info:
        parse(printed({"event": "nope", "worker": 0}))
    assert "\n" not in str(info.value)
    with pytest.raises(ProtocolError, match="^record: unknown event None"):
        record_of({"worker": 0})
    with pytest.raises(ProtocolError, match="^record: unknown field 'bogus' for event done$"):
        record_of({"event": "done", "worker": 0, "time": 1.0, "bogus": 1})
    with pytest.raises(ProtocolError, match="^record: event checkpoint: ") as info:
        record_of({"event": "checkpoint", "worker": 0, "step": 1, "start": 1.0})  # no end
    assert "\n" not in str(info.value)


def test_records_of_several_processes_order_by_their_end_else_time_else_start() -> None:
    typed = [t for _, t in WRITTEN]
    assert [when(t) for t in typed] == [  # type: ignore[arg-type]
        5.0,
        5.0,
        2.0,
        2.0,
        2.0,
        2.0,
        2.0,
        3.0,
        1.2,
        1.1,
        0.0,
        0.0,
        0.0,
        9.0,
        0.0,
    ]
