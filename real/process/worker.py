"""One TensorFlow process of `run-real`: `python -m real.process.worker JOB.json`.

The launcher (`real/launcher.py`, or a Spark task, `real/spark/task.py`) writes the job
(`real/job.py`), sets `TF_CONFIG`, and reads this process's standard output: one JSON
object per line (`real/protocol.py`). The job's kind says what the process is (`run`):

- `Probe`: a probe of `run-real --calibrate` (real/process/probe.py, `PROBES` by name);
- `Server`: a task that only serves (a parameter-server job's workers and servers, a
  pipeline's stages; real/process/server.py);
- `PipelineChief`: a pipeline's client (real/process/pipeline.py);
- `Coordinator`: the parameter-server chief, synchronous or not (real/process/ps.py);
- `TensorWorker`: a device of a transformer's tensor x data layout, a DTensor client
  (real/process/tensor.py);
- `AllReduceWorker` (a `Trial` too): an all-reduce worker, or one alone
  (real/process/allreduce.py).

TensorFlow is imported once, here, before the job starts; the modules of this package
take it as an argument.
"""

from __future__ import annotations

import os
import sys

from .. import protocol
from ..job import (
    AllReduceWorker,
    Coordinator,
    Job,
    PipelineChief,
    Probe,
    Server,
    TensorWorker,
    load_job,
)
from . import allreduce, pipeline, ps, tensor
from .probe import PROBES
from .server import serve


def import_tensorflow() -> None:
    """Import TensorFlow and Keras, without scikit-learn. Keras imports scikit-learn (and
    SciPy with it) for its scikit-learn wrappers whenever it is installed: about 1.5 s of
    every process's start-up on a 2-core machine, for wrappers no process here uses. So
    scikit-learn is hidden while they load (Keras then goes without its wrappers), and
    imports as usual afterwards (the digits data: real/process/training.py)."""
    hidden = "sklearn" not in sys.modules
    if hidden:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # importing it fails
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        if hidden:
            del sys.modules["sklearn"]


def run(job: Job) -> None:
    """Run what the job's kind names."""
    match job:
        case Probe():
            PROBES[job.probe](job)
        case Server():
            serve(job)
        case PipelineChief():
            pipeline.coordinate(job)
        case Coordinator(sync=True):
            ps.coordinate_sync(job)
        case Coordinator():
            ps.coordinate(job)
        case TensorWorker():
            tensor.run(job)
        case AllReduceWorker():  # a trial too
            allreduce.run(job)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as f:
        job = load_job(f.read())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import_tensorflow()
        run(job)
    except Exception as exc:  # report it to the launcher, then fail loudly
        protocol.emit(
            {
                "event": "error",
                "worker": job.index,
                "error": f"{type(exc).__name__}: {exc}"[-4000:],
            }
        )
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
