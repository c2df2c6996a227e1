"""What a worker process tells the launcher: one JSON object per line on standard output,
prefixed so that TensorFlow's own chatter on the same stream is never mistaken for it.

Events: `ready` (model built, cluster joined: the end of start-up), `serving` (a server
task is up), `step` (one step's host clock times: start, compute_end, end; and the loss),
`round` and `progress` (the parameter-server coordinator's), `checkpoint`, `probe` (a
calibration probe's measurements), `busy` (a pipeline stage's CPU time samples), `done`,
`error`.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

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


def parse(line: str) -> dict[str, Any] | None:
    """The record on a line, or None for anything else a worker printed."""
    if not line.startswith(PREFIX):
        return None
    try:
        record = json.loads(line[len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None
