"""Signals that stop a command which has started processes: they end it as Ctrl-C does.

SIGTERM and SIGHUP would otherwise kill `run-real` on the spot and leave its workers (in
sessions of their own) running; `compare` would leave its `run-real` step running.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the command stops as on Ctrl-C (every path that cleans up after
    a KeyboardInterrupt cleans up after this), and exits 128 + the signal's number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """While a command that starts processes runs (run-real, compare), SIGTERM and SIGHUP
    raise `Terminated` in the main thread, so its cleanup runs: the launcher stops every
    worker (they run in sessions of their own, where no signal to run-real reaches them),
    compare stops its step. The first such signal, or Ctrl-C, makes the others ignored: a
    second one must not cut that cleanup short. An ignored SIGINT (a background job's)
    stays ignored. The previous handlers come back afterwards."""
    handled = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        handled.append(signal.SIGINT)

    def stop(signum: int, _frame: object) -> None:
        for each in handled:
            signal.signal(each, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    previous = {each: signal.getsignal(each) for each in handled}
    for each in handled:
        signal.signal(each, stop)
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


def how_stopped(exc: KeyboardInterrupt) -> tuple[str, int]:
    """What a command says it was, and its exit status: ("interrupted", 130) on Ctrl-C,
    ("terminated (SIGTERM)", 143) or ("terminated (SIGHUP)", 129) on `Terminated`."""
    if isinstance(exc, Terminated):
        return f"terminated ({exc})", exc.code
    return "interrupted", 130
