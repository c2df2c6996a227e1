"""The launcher's failure injection, on stand-in processes (`sleep`; no TensorFlow): when
each failure strikes, and when a rejoining process is started again."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from real import launcher as launcher_module
from real.launcher import Kill, Launcher
from real.protocol import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Stand(Launcher):
    """A launcher whose processes are `sleep`s, started again as `sleep`s."""

    def __init__(self, processes: int, kills: list[Kill]) -> None:
        super().__init__([{"index": i} for i in range(processes)], 60.0, kills=kills)
        self.starts: list[int] = []
        self.processes = [self._spawn() for _ in range(processes)]
        self._stepping = True

    @staticmethod
    def _spawn() -> subprocess.Popen[str]:
        return subprocess.Popen(["sleep", "60"], start_new_session=True, text=True)

    def _start(self, index: int) -> subprocess.Popen[str]:
        self.starts.append(index)
        return self._spawn()

    def progress(self, step: int) -> None:
        """The coordinator (process 0) reports update `step` done."""
        self._inject(0, Progress(worker=-1, step=step, time=0.0))

    def down(self, index: int) -> bool:
        return self.processes[index].poll() is not None


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    c = Clock()
    monkeypatch.setattr(launcher_module.time, "time", c)
    yield c


def test_a_failure_strikes_while_a_rejoining_worker_is_down(clock: Clock) -> None:
    """Worker 1 is killed at update 8 with 1 s of downtime; the server (process 2) at
    update 22. The job goes on without the worker: when update 21 is done, within the
    worker's downtime, the server is killed all the same, and the job stops."""
    kills = [
        Kill(process=1, watch=0, at_step=8, restart_after=1.0),
        Kill(process=2, watch=0, at_step=22),
    ]
    stand = Stand(3, kills)
    try:
        stand.progress(6)
        assert kills[0].killed_at is None and not stand.down(1)
        stand.progress(7)
        assert kills[0].killed_at == clock.now and stand.down(1)
        clock.now += 0.3
        stand.progress(21)
        assert kills[1].killed_at == clock.now and stand.down(2)
        assert stand.killed_at == clock.now  # the job stops: a server failed
        assert stand.starts == []  # the worker was still down
    finally:
        stand.stop()


def test_a_rejoining_process_is_back_after_its_downtime(clock: Clock) -> None:
    """A second failure of the same worker waits until the worker is back."""
    kills = [
        Kill(process=1, watch=0, at_step=3, restart_after=1.0),
        Kill(process=1, watch=0, at_step=4, restart_after=1.0),
    ]
    stand = Stand(2, kills)
    try:
        stand.progress(2)
        first = clock.now
        clock.now += 0.5
        stand.progress(3)  # due, but worker 1 is still down
        assert kills[1].killed_at is None and stand.starts == []
        clock.now = first + 1.0
        stand.progress(4)  # back (restarted), then struck again
        assert stand.starts == [1] and kills[0].restarted_at == clock.now
        assert kills[1].killed_at == clock.now and stand.down(1)
        clock.now += 1.0
        stand._inject(-1, None)  # no record: the downtime alone starts it again
        assert stand.starts == [1, 1] and kills[1].restarted_at == clock.now
        assert not stand.down(1) and stand.killed_at is None
    finally:
        stand.stop()


def test_how_a_command_was_stopped() -> None:
    # exit statuses as a shell reports a death by signal: 128 + its number
    from real.interrupt import Terminated, how_stopped

    assert how_stopped(KeyboardInterrupt()) == ("interrupted", 130)
    assert how_stopped(Terminated(signal.SIGTERM)) == ("terminated (SIGTERM)", 128 + 15)
    assert how_stopped(Terminated(signal.SIGHUP)) == ("terminated (SIGHUP)", 128 + 1)
