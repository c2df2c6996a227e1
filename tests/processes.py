"""The processes a test started, told apart from every other process on the machine.

A test marks what it starts with an environment variable that children inherit
(`TRAINSCALE_TEST_TAG`, a fresh value per test): run-real's workers and servers, and
anything they start, carry it, and no process started by anyone else does. `/proc/PID/
environ` holds the environment a process was started with, so pytest itself, which only
set the variable in `os.environ`, is never among them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

TAG = "TRAINSCALE_TEST_TAG"
ROOT = Path(__file__).resolve().parent.parent


def new_tag() -> str:
    return uuid.uuid4().hex


def tagged(tag: str, *, command: str = "") -> list[int]:
    """PIDs of the live processes started with `TAG=tag` whose command line has `command`."""
    mark = f"{TAG}={tag}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark not in (entry / "environ").read_bytes():
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if state != "Z" and command.encode() in cmdline:
            found.append(int(entry.name))
    return found


def kill_tagged(tag: str) -> list[int]:
    """SIGKILL every live process started with `TAG=tag`; the PIDs that were killed."""
    pids = tagged(tag)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def own_processes(monkeypatch: object) -> Iterator[str]:
    """Body of a fixture: tag what the test starts, kill what it left when it ends."""
    tag = new_tag()
    monkeypatch.setenv(TAG, tag)  # type: ignore[attr-defined]
    try:
        yield tag
    finally:
        kill_tagged(tag)


def workers_alive() -> list[int]:
    """PIDs of the real.process.worker processes the running test started."""
    return tagged(os.environ[TAG], command="real.process.worker")


def on_terminal(
    command: list[str], timeout: float, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run `command` from the checkout with its stderr on a pseudo-terminal of 40 x 160
    characters (stdout piped, as a user's progress bar sees it); its exit status and all
    it wrote on the terminal."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=follower, cwd=ROOT, env=env
    ) as proc:
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        proc.communicate(timeout=timeout)
    os.close(leader)
    return proc.returncode, seen.decode(errors="replace")


def run_real(*args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    """`run-real ARGS` from the checkout, as a test starts it (tagged by its environment)."""
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "real.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        **kw,
    )
