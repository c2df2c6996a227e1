"""Spark as an engine, shared by both backends: the process's SparkSession.

`run-real` runs a job as a barrier stage on it (`real/spark/stage.py`), `simulate` its sweep
points as tasks (`sim/runner.py`). The master and Spark properties are the scenario's
`real.spark` (`--master` on either command); a `local` master keeps every listener on
127.0.0.1. A standalone master (`spark://`) is spoken to with Spark's shared-secret
authentication (`spark.authenticate`): the cluster's secret comes from the environment
(`SECRET_ENV`), is handed to the driver's JVM over its gateway, never on a command line,
and is kept from every process the run starts. Without pyspark or a Java runtime, or
a standalone master without its secret, `session` raises a `UserError` saying so.
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

#: the environment variable that holds a standalone cluster's shared secret
SECRET_ENV = "TRAINSCALE_SPARK_SECRET"
#: where Spark's workers hand the secret to the executors they start (and so to every
#: process an executor starts, unless it is removed: `real/launcher.py` does)
SPARK_SECRET_ENV = "_SPARK_AUTH_SECRET"
#: the Spark property of the secret, never taken from a scenario (whose resolved copy is
#: written to meta.json)
SECRET_CONF = "spark.authenticate.secret"

_secret: str | None = None

_session: Any = None
_session_key: tuple[str, tuple[tuple[str, str], ...]] | None = None


def is_local(master: str) -> bool:
    """Whether every task of this master runs on this machine."""
    return master.startswith("local")


def authenticated(master: str) -> bool:
    """Whether sessions on this master use Spark's shared-secret authentication."""
    return master.startswith("spark://")


def security(master: str) -> dict[str, Any]:
    """What meta.json says of the run's Spark session: whether it authenticated."""
    return {"master": master, "authenticate": authenticated(master)}


def secret_of(master: str, conf: Mapping[str, str]) -> str | None:
    """The shared secret of a standalone master's cluster (None for any other master),
    read once from `SECRET_ENV` and removed from this process's environment, so that no
    process it starts inherits it."""
    global _secret
    if SECRET_CONF in conf:
        raise UserError(
            f"real.spark.conf: {SECRET_CONF}: not in the scenario (its resolved copy is "
            f"written to meta.json); give the cluster's secret in {SECRET_ENV}"
        )
    _secret = os.environ.pop(SECRET_ENV, None) or _secret
    if not authenticated(master):
        return None
    if not _secret:
        raise UserError(
            f"real.spark.master: {master}: a standalone master is spoken to with Spark's "
            f"shared-secret authentication (spark.authenticate): give its cluster's secret "
            f"in {SECRET_ENV}"
        )
    return _secret


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
    secret = secret_of(master, conf)
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
    if secret is not None:
        builder = _authenticating(builder, secret)
    with warnings.catch_warnings():  # pyspark's pandas check: we hand it no pandas objects
        warnings.simplefilter("ignore", FutureWarning)
        _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    _session_key = key
    return _session


def _authenticating(builder: Any, secret: str) -> Any:
    """`builder` with Spark's shared-secret authentication. pyspark puts the settings of
    a driver JVM it starts on that JVM's command line, which every local user may read:
    start the JVM first with every setting but the secret, which then goes to it over
    the gateway."""
    from pyspark import SparkConf, SparkContext

    settings = dict(builder._options)  # what the builder holds so far: no secret
    SparkContext._ensure_initialized(
        conf=SparkConf(loadDefaults=False).setAll(list(settings.items()))
    )
    return builder.config("spark.authenticate", "true").config(SECRET_CONF, secret)


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
