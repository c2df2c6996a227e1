"""What a worker process tells the launcher: one JSON object per line on standard output,
prefixed so that TensorFlow's own chatter on the same stream is never mistaken for it.

The process side writes plain dicts (`emit`); the orchestration reads each line back as
its typed record (`parse`, or `record_of` for a record already read as JSON: a Spark
task's file or its pickled result), one frozen dataclass per `event`:

- `Ready`: model built, cluster joined (the end of start-up; -1: a coordinator);
- `Serving`: a server task is up;
- `Step`: one step's host clock times (start, compute_end, end) and its loss; under
  parameter servers also the update, staleness and checkpoint chunk (asynchronous) or
  the closure and whether its gradients were dropped (synchronous);
- `Round` and `Progress`: the parameter-server coordinator's;
- `Eval`: one evaluation on the held-out images;
- `Checkpoint`: one save;
- `ProbeSample`: one measurement of a calibration probe (`probe` on the wire);
- `Busy`: a pipeline stage's CPU time samples;
- `Done`, `Error`.

An unknown event or field is refused in one line (`ProtocolError`). `generation` is no
field on the wire: the runner numbers the launches of a job (real/failures.py).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

PREFIX = "@trainscale "


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(PREFIX + json.dumps(record, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def ready(worker: int, launched: float, params: int) -> None:
    """The end of a process's start-up: model built, cluster joined (-1: a coordinator)."""
    emit(
        {
            "event": "ready",
            "worker": worker,
            "time": time.time(),
            "launched": launched,
            "params": params,
        }
    )


class ProtocolError(ValueError):
    """A record of an event or with a field this protocol does not know."""


@dataclass(frozen=True, kw_only=True)
class _Record:
    event: ClassVar[str]
    generation: int = 0  # the launch of the job it came from (set by the runner)


@dataclass(frozen=True, kw_only=True)
class Ready(_Record):
    event: ClassVar[str] = "ready"
    worker: int
    time: float
    launched: float | None = None  # a probe's says neither when it started...
    params: int | None = None  # ...nor its model's parameters


@dataclass(frozen=True, kw_only=True)
class Serving(_Record):
    event: ClassVar[str] = "serving"
    role: str
    index: int
    time: float


@dataclass(frozen=True, kw_only=True)
class Step(_Record):
    event: ClassVar[str] = "step"
    worker: int
    step: int
    start: float
    compute_end: float
    end: float
    loss: float
    # asynchronous parameter servers: the global update it was, the other updates
    # between its read and its push, and the checkpoint interval it ran in
    update: int | None = None
    staleness: int = 0
    chunk: int | None = None
    # synchronous parameter servers: which of the worker's closures of the round it was,
    # and whether its gradients were dropped (backup workers)
    closure: int | None = None
    dropped: bool = False


@dataclass(frozen=True, kw_only=True)
class Round(_Record):
    event: ClassVar[str] = "round"
    worker: int
    step: int
    start: float
    end: float
    applied: int  # the optimizer's update counter after the round's update


@dataclass(frozen=True, kw_only=True)
class Progress(_Record):
    event: ClassVar[str] = "progress"
    worker: int
    step: int
    time: float


@dataclass(frozen=True, kw_only=True)
class Eval(_Record):
    event: ClassVar[str] = "eval"
    worker: int
    step: int
    start: float
    end: float
    loss: float
    accuracy: float


@dataclass(frozen=True, kw_only=True)
class Checkpoint(_Record):
    event: ClassVar[str] = "checkpoint"
    worker: int
    step: int
    start: float
    end: float


@dataclass(frozen=True, kw_only=True)
class ProbeSample(_Record):
    event: ClassVar[str] = "probe"
    worker: int
    kind: str
    bytes: int
    time_s: float
    messages: int | None = None  # reads chained in one call (`chain`)


@dataclass(frozen=True, kw_only=True)
class Busy(_Record):
    event: ClassVar[str] = "busy"
    worker: int
    samples: list[list[float]] = field(default_factory=list)  # [host clock, CPU seconds]


@dataclass(frozen=True, kw_only=True)
class Done(_Record):
    event: ClassVar[str] = "done"
    worker: int
    time: float


@dataclass(frozen=True, kw_only=True)
class Error(_Record):
    event: ClassVar[str] = "error"
    worker: int
    error: str


#: a record of any event
Record = (
    Ready
    | Serving
    | Step
    | Round
    | Progress
    | Eval
    | Checkpoint
    | ProbeSample
    | Busy
    | Done
    | Error
)
#: the records that count a job's progress: a step, a synchronous round, an update done
Progressing = Step | Round | Progress

#: the kinds of record by their event
EVENTS: dict[str, type[Record]] = {
    cls.event: cls
    for cls in (
        Ready,
        Serving,
        Step,
        Round,
        Progress,
        Eval,
        Checkpoint,
        ProbeSample,
        Busy,
        Done,
        Error,
    )
}
_FIELDS = {event: {f.name for f in dataclasses.fields(cls)} for event, cls in EVENTS.items()}

R = TypeVar("R", bound=_Record)


def record_of(data: Mapping[str, Any]) -> Record:
    """The typed record of a JSON object a process wrote, picked by its `event`. An
    unknown event or field is refused in one line."""
    fields = dict(data)
    event = fields.pop("event", None)
    cls = EVENTS.get(event) if isinstance(event, str) else None
    if cls is None:
        raise ProtocolError(f"record: unknown event {event!r} (one of {', '.join(EVENTS)})")
    unknown = sorted(set(fields) - _FIELDS[event])
    if unknown:
        raise ProtocolError(f"record: unknown field {unknown[0]!r} for event {event}")
    try:
        return cls(**fields)
    except TypeError as exc:  # a field it must have is missing
        raise ProtocolError(f"record: event {event}: {exc}") from None


def data_of(line: str) -> dict[str, Any] | None:
    """The JSON object on a line as a process wrote it, or None for anything else it
    printed."""
    if not line.startswith(PREFIX):
        return None
    try:
        data = json.loads(line[len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def parse(line: str) -> Record | None:
    """The record on a line, or None for anything else a worker printed; a record of an
    unknown event or field is refused in one line (`ProtocolError`)."""
    data = data_of(line)
    return None if data is None else record_of(data)


def of(records: list[Record], kind: type[R]) -> list[R]:
    """The records of one kind, in order."""
    return [r for r in records if isinstance(r, kind)]


def when(record: Record) -> float:
    """A record's place in time for ordering records gathered from several processes:
    its end, else its time, else its start, else 0."""
    for name in ("end", "time", "start"):
        value = getattr(record, name, None)
        if value is not None:
            return float(value)
    return 0.0


def started(record: Progressing) -> float:
    """When a record of progress began: its start (a step, a round), else its time."""
    return record.time if isinstance(record, Progress) else record.start
