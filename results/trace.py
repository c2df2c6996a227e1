"""Chrome trace event format (opens in Perfetto and chrome://tracing), for both backends.

Tracing costs nothing when off (STYLE.md rule 15): the default `NullTracer` drops
everything. `ChromeTracer` keeps complete ('X') events, one process per host and two
threads per worker (compute, and communication), and stops recording past a cap so that
a trace never grows to gigabytes.
"""

from __future__ import annotations

import json
from typing import Any

#: events kept per trace; past this the trace says it was truncated
DEFAULT_MAX_EVENTS = 300_000


class NullTracer:
    enabled = False

    def span(
        self, worker: int, phase: str, start: float, end: float, comm: bool = False, **args: Any
    ) -> None:
        pass


class ChromeTracer:
    enabled = True

    def __init__(self, devices_per_host: int, max_events: int = DEFAULT_MAX_EVENTS):
        self.devices_per_host = devices_per_host
        self.max_events = max_events
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self._named: set[int] = set()

    def span(
        self, worker: int, phase: str, start: float, end: float, comm: bool = False, **args: Any
    ) -> None:
        """One phase of one worker, from start to end (seconds of simulated time)."""
        if end <= start:
            return
        if len(self.events) >= self.max_events:
            self.dropped += 1
            return
        host, tid = divmod(worker, self.devices_per_host)
        event = {
            "name": phase,
            "cat": phase,
            "ph": "X",
            "ts": round(start * 1e6, 3),
            "dur": round((end - start) * 1e6, 3),
            "pid": host,
            "tid": 2 * tid + (1 if comm else 0),
        }
        if args:
            event["args"] = args
        self.events.append(event)
        if worker not in self._named:
            self._named.add(worker)

    def document(self, metadata: dict[str, Any]) -> dict[str, Any]:
        names = []
        for worker in sorted(self._named):
            host, local = divmod(worker, self.devices_per_host)
            names.append(
                {
                    "name": "process_name",
                    "ph": "M",
                    "pid": host,
                    "tid": 0,
                    "args": {"name": f"host {host}"},
                }
            )
            for comm, label in ((0, "compute"), (1, "comm")):
                names.append(
                    {
                        "name": "thread_name",
                        "ph": "M",
                        "pid": host,
                        "tid": 2 * local + comm,
                        "args": {"name": f"worker {worker} {label}"},
                    }
                )
        meta = dict(metadata, dropped_events=self.dropped, max_events=self.max_events)
        return {"traceEvents": names + self.events, "displayTimeUnit": "ms", "otherData": meta}

    def dumps(self, metadata: dict[str, Any]) -> str:
        return json.dumps(self.document(metadata), separators=(",", ":"))
