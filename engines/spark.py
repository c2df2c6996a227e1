"""Spark as an engine, shared by both backends: the process's SparkSession.

`run-real` runs a job as a barrier stage on it (`real/spark.py`), `simulate` its sweep
points as tasks (`sim/runner.py`). The master and Spark properties are the scenario's
`real.spark` (`--master` on either command); a `local` master keeps every listener on
127.0.0.1. Without pyspark or a Java runtime, `session` raises a `UserError` saying so.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scenarios.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
#: the master a scenario with `real.engine: spark` and no master runs on
DEFAULT_MASTER = "local[*]"

#: seconds to wait for a standalone master to answer
CONNECT_S = 5.0

_session: Any = None
_session_key: tuple[str, tuple[tuple[str, str], ...]] | None = None


def is_local(master: str) -> bool:
    """Whether every task of this master runs on this machine."""
    return master.startswith("local")


def session(master: str, conf: Mapping[str, str]) -> Any:
    """The process's SparkSession for this master and configuration (made once)."""
    global _session, _session_key
    key = (master, tuple(sorted(conf.items())))
    if _session is not None and _session_key == key:
        return _session
    stop_session()  # another master or configuration: one session at a time
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise UserError(
            "real.engine: spark needs pyspark (pip install -e '.[spark]'; make test installs it)"
        ) from None
    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise UserError(
            "real.engine: spark needs a Java runtime (Java 17): none on PATH or in JAVA_HOME"
        )

    if master.startswith("spark://"):
        _reachable(master)
    # the tasks import this package: give its root to the Python workers Spark starts
    path = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = path
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName("trainscale run-real")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", path)
        .config("spark.task.maxFailures", "1")
        # a barrier stage needs its slots at once: start once every executor asked for has
        # registered (Spark waits at most spark.scheduler.maxRegisteredResourcesWaitingTime),
        # not with the first, or the slots are too few and the tasks crowd onto it
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
    )
    if is_local(master):  # nothing listens beyond this host (local-cluster's daemons too)
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    log = Path(__file__).with_name("spark-log4j2.properties")
    builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log}")
    for name, value in conf.items():
        builder = builder.config(name, value)
    with warnings.catch_warnings():  # pyspark's pandas check: we hand it no pandas objects
        warnings.simplefilter("ignore", FutureWarning)
        _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    _session_key = key
    return _session


def _reachable(master: str) -> None:
    """A standalone master (spark://host:port[,host:port...]) that answers at one of its
    addresses; else one line (Spark itself retries for a minute before it gives up)."""
    addresses = master[len("spark://") :].split(",")
    why = ""
    for address in addresses:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=CONNECT_S):
                return
        except ValueError:
            why = f"{address} is not host:port"
        except OSError as exc:
            why = f"no Spark master answers at {address} ({exc.strerror or exc})"
    raise UserError(f"real.spark.master: {master}: {why}")


def stop_session() -> None:
    global _session, _session_key
    if _session is not None:
        with contextlib.suppress(Exception):
            _session.stop()
    _session, _session_key = None, None


atexit.register(stop_session)  # once: stops whichever session is live at exit
