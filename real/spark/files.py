"""The files a Spark job's tasks and its driver share (`task.py`,
`stage.py`), and the failures the tasks inject.

Tasks and the driver share one directory (`RunDir`: under `real.shared_dir` on a cluster),
which outlives every attempt of the stage:

- `attempt-G-I`: task I's mark of attempt G (the first G whose mark it could create), so
  every task of an attempt knows which attempt it is;
- `task-G-I.json`: where and when task I of attempt G ran, and how it ended;
- `records-G-I.jsonl`: its process's records, a line each as they come (the JSON
  objects it printed; read back typed, `RunDir.records`);
- `done-G-I`: its process reported `done` (servers stop once every reporting one has);
- `origin.json`: the host clock of the run's first step (`at_time` counts from it);
- `request-F`, `struck-F.json`, `restarted-F.json`: failure F of the scenario is due (said
  by the task that watches for it), has struck (the task of the process it kills), and
  the process is back (a parameter-server worker, which rejoins);
- `alive-G-I`: task I's beat, its count every `BEAT_S` while its process runs. A task
  whose process fails while another task's beat has stopped (its executor was lost, or
  Spark killed it) says so (`lost` in its `task-G-I.json`) instead of failing on its own:
  the job was stopped from outside, and the next attempt restores the last checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import protocol
from ..protocol import Progressing, Record

#: seconds between a task's beats (`alive-G-I`), and without one before another task
#: that saw its process fail counts it lost (its executor died, or Spark killed it)
BEAT_S, LOST_S = 0.5, 2.5


@dataclass(frozen=True)
class Planned:
    """One failure of the scenario, as the tasks inject it: SIGKILL process `process` once
    process `watch` has reported step `at_step - 1`, or `at_time` seconds after the run's
    first step. With `restart_after` the process starts again that many seconds later
    (it rejoins); otherwise the job stops, and starts again after `downtime`."""

    process: int
    watch: int
    at_step: int | None
    at_time: float | None
    restart_after: float | None
    downtime: float


class RunDir:
    """The directory one run of a job shares between its tasks and the driver."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def attempt(self, index: int) -> int:
        """Mark task `index`'s attempt: the first attempt it has not marked yet."""
        attempt = 0
        while True:
            try:
                os.close(os.open(self.path / f"attempt-{attempt}-{index}", os.O_CREAT | os.O_EXCL))
                return attempt
            except FileExistsError:
                attempt += 1

    def attempts(self) -> list[int]:
        """Every attempt some task marked, in order."""
        found = {int(p.name.split("-")[1]) for p in self.path.glob("attempt-*-*")}
        return sorted(found)

    def write(self, name: str, data: dict[str, Any]) -> None:
        """`data` as `name`, whole or not at all (written aside, then renamed)."""
        part = self.path / f".{name}.{os.getpid()}"
        part.write_text(json.dumps(data))
        part.replace(self.path / name)

    def read(self, name: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def has(self, name: str) -> bool:
        return (self.path / name).exists()

    def claim(self, name: str, data: dict[str, Any]) -> bool:
        """Write `name` unless some task already did; whether this one did."""
        try:
            fd = os.open(self.path / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(data))
        return True

    def records(self, attempt: int) -> list[Record]:
        """Every record of an attempt's processes (`real/protocol.py`)."""
        found: list[Record] = []
        for path in sorted(self.path.glob(f"records-{attempt}-*.jsonl")):
            for line in path.read_text().splitlines():
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                found.append(protocol.record_of(data))
        return found

    def tasks(self, attempt: int) -> dict[int, dict[str, Any]]:
        """What each task of an attempt wrote of itself, by process index."""
        found = {}
        for path in self.path.glob(f"task-{attempt}-*.json"):
            data = self.read(path.name)
            if data is not None:
                found[int(data["index"])] = data
        return found

    def lost(self, attempt: int, index: int, tasks: int) -> int | None:
        """A task of `attempt` other than `index` that is gone without finishing (its
        beat unchanged for `LOST_S`), if one is."""
        others = [i for i in range(tasks) if i != index]
        before = {i: self.read(f"alive-{attempt}-{i}") for i in others}
        time.sleep(LOST_S)
        for i in others:
            finished = "finished" in (self.read(f"task-{attempt}-{i}.json") or {})
            if not finished and self.read(f"alive-{attempt}-{i}") == before[i]:
                return i
        return None

    def lost_in(self, attempt: int) -> tuple[int, float] | None:
        """The process lost in `attempt`, and when, if its job was stopped from outside
        after its first step: as a task that saw it gone says, or else (Spark stopped that
        task first) the task that never finished whose beat stopped first."""
        tasks = self.tasks(attempt)
        for _, task in sorted(tasks.items()):
            if task.get("lost") is not None:
                return int(task["lost"]), float(task["lost_at"])
        if not any(isinstance(r, Progressing) for r in self.records(attempt)):
            return None  # stopped before its first step: started again at once
        beats = {
            i: (self.path / f"alive-{attempt}-{i}").stat().st_mtime
            for i, task in tasks.items()
            if "finished" not in task and self.has(f"alive-{attempt}-{i}")
        }
        first = min(beats, key=lambda i: beats[i], default=None)
        return None if first is None else (first, beats[first])

    def struck(self, failure: int) -> dict[str, Any] | None:
        return self.read(f"struck-{failure}.json")

    def stopped(self, attempt: int, failures: list[Planned]) -> tuple[int, dict[str, Any]] | None:
        """The failure that stopped `attempt` (its number and when it struck), if one did."""
        for number, failure in enumerate(failures):
            struck = self.struck(number)
            if failure.restart_after is None and struck and struck["attempt"] == attempt:
                return number, struck
        return None
