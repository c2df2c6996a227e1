"""What one simulated run leaves: its worker-step records (`Records`, one `StepRecord` per
worker and step, kept as columns) and its `SimulationOutcome`, which both engines (the event
engine, `sim/simulation.py`, and the lockstep engine,
`sim/strategies/allreduce/lockstep.py`) return."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np


class StepRecord(NamedTuple):
    """One (worker, step): times in seconds from the start of the run (STYLE.md rule 11)."""

    worker: int
    step: int  # global step (sync), or the worker's own iteration (async parameter server)
    start: float
    compute_end: float
    comm_end: float
    end: float
    comm_s: float  # communication the worker waited on (not hidden behind compute)
    generation: int  # incremented by every job restart; older generations' steps were lost
    staleness: int  # updates applied between this worker's pull and its push (async)
    trial: int = -1  # independent trials: which trial this step belongs to
    # seconds between start and compute_end that the worker waited on communication (a
    # parameter server's pulls that gate its forward), counted in comm_s too
    stall: float = 0.0
    # seconds between start and compute_end that the worker had nothing to do: a
    # pipeline's bubble (its stage waiting on another stage's compute)
    idle: float = 0.0


Span = tuple[str, float, float]  # (phase, start, end)


class Records:
    """Every worker-step of a run, kept as columns (one numpy array per `StepRecord` field).

    The event engine appends one record at a time; the lockstep engine
    (`sim/strategies/allreduce/lockstep.py`) adds a whole step of workers at once
    (`extend`). Iterating yields `StepRecord`s in the order they were added."""

    FIELDS = StepRecord._fields
    _INTS = frozenset({"worker", "step", "generation", "staleness", "trial"})

    def __init__(self) -> None:
        self._rows: list[StepRecord] = []
        self._blocks: list[dict[str, np.ndarray]] = []
        # each field joined on first use only: at 65,536 workers a field is 50 MB
        self._columns: dict[str, np.ndarray] = {}

    def append(self, record: StepRecord) -> None:
        self._rows.append(record)
        self._columns = {}

    def extend(self, **columns: np.ndarray | float | int) -> None:
        """Add records given column by column: arrays of one length, or scalars for all."""
        self._flush()
        n = max(np.size(v) for v in columns.values())
        block = {}
        for name in self.FIELDS:
            value = columns.get(name, StepRecord._field_defaults.get(name))
            dtype = np.int64 if name in self._INTS else float
            block[name] = np.broadcast_to(np.asarray(value, dtype=dtype), (n,))
        self._blocks.append(block)
        self._columns = {}

    def _flush(self) -> None:
        if self._rows:
            rows = list(zip(*self._rows, strict=True))
            self._blocks.append(
                {
                    name: np.array(rows[i], dtype=np.int64 if name in self._INTS else float)
                    for i, name in enumerate(self.FIELDS)
                }
            )
            self._rows = []

    def column(self, name: str) -> np.ndarray:
        """One field of every record, in order."""
        if name not in self._columns:
            self._flush()
            self._columns[name] = (
                np.concatenate([b[name] for b in self._blocks])
                if self._blocks
                else np.empty(0, dtype=np.int64 if name in self._INTS else float)
            )
        return self._columns[name]

    def chunks(self, names: Sequence[str], rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
        """The given fields of every record, in order, a piece of about `rows` records at
        a time (whole blocks: a lockstep step is never split), so that a pass over a
        large run holds one piece of each field at a time."""
        self._flush()
        if all(n in self._columns for n in names):
            if len(self):
                yield {n: self._columns[n] for n in names}
            return
        piece: list[dict[str, np.ndarray]] = []
        size = 0
        for block in self._blocks:
            piece.append(block)
            size += len(block["worker"])
            if size >= rows:
                yield _joined(piece, names)
                piece, size = [], 0
        if piece:
            yield _joined(piece, names)

    def __len__(self) -> int:
        return sum(len(b["worker"]) for b in self._blocks) + len(self._rows)

    def __iter__(self) -> Iterator[StepRecord]:
        columns = [self.column(name).tolist() for name in self.FIELDS]
        return (StepRecord(*row) for row in zip(*columns, strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Records):
            return NotImplemented
        return len(self) == len(other) and all(
            np.array_equal(self.column(n), other.column(n)) for n in self.FIELDS
        )


def _joined(blocks: list[dict[str, np.ndarray]], names: Sequence[str]) -> dict[str, np.ndarray]:
    if len(blocks) == 1:
        return {n: blocks[0][n] for n in names}
    return {n: np.concatenate([b[n] for b in blocks]) for n in names}


def exposed(spans: Sequence[Span], lo: float, hi: float) -> float:
    """Length of the union of disjoint spans that falls inside [lo, hi]."""
    total = 0.0
    for _, start, end in spans:
        total += max(0.0, min(end, hi) - max(start, lo))
    return total


class SimulationOutcome(NamedTuple):
    records: Records
    step_ends: np.ndarray
    measure_start: float
    bytes_on_network: float
    tracer: Any
    failures: int
    lost_steps: int
    lost_work_time: float
    recovery_time: float
    checkpoint_time: float
    dropped_gradients: int
    dropped_measured: int
    generation: int
    checkpoints: int
    trials: Any
    #: the engine that timed the run: `events` (SimPy), `lockstep` or `ps-lockstep`
    engine: str = "events"
