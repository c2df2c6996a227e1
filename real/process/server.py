"""A TensorFlow process that only serves: `tf.distribute.Server(...).join()`.

A parameter-server job's workers and servers (the coordinator, real/process/ps.py,
schedules work on them) and a pipeline's stages (its chief, real/process/pipeline.py,
places their layers) are such tasks. A stage is one device: on CPU its process is pinned
to one core, and it may sample its CPU time for the launcher (`busy` records).
"""

from __future__ import annotations

import os
import threading
import time

from .. import protocol
from ..job import Server


def pin_to_core(index: int) -> None:
    """Pin this process to one core of those it may use: stage `index`'s device."""
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[index % len(cores)]})


#: a stage's CPU samples go to the launcher this many at a time (every 0.1 s at 5 ms)
BUSY_BATCH = 20


def sample_busy(job: Server) -> None:
    """Start a thread that samples this process's CPU time (every thread's, ns) with the
    host clock every `job.busy_every_s`, and emits them `BUSY_BATCH` at a time as `busy`
    records: [[time, cpu seconds], ...]. A stage pinned to one core computes where its
    CPU time grows as fast as the clock (`real.summary.busy_spans`)."""

    def sample() -> None:
        samples: list[list[float]] = []
        while True:
            samples.append([time.time(), time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID)])
            if len(samples) >= BUSY_BATCH:
                protocol.emit({"event": "busy", "worker": job.index, "samples": samples})
                samples = []
            time.sleep(job.busy_every_s)

    threading.Thread(target=sample, name="busy", daemon=True).start()


def serve(job: Server) -> None:
    """A worker, parameter-server or pipeline-stage task: serve until the launcher ends the
    process."""
    import tensorflow as tf

    if job.pin and job.device == "cpu":
        # a pipeline stage: one device, one core
        pin_to_core(job.index if job.core is None else job.core)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # inter_op_parallelism_threads=1 on these servers deadlocks coordinator.join()
    # (docs/tf-notes.md); 2 works
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=1, inter_op_parallelism_threads=2
    )
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=job.role,
        task_index=job.index,
        protocol="grpc",
        config=config,
    )
    protocol.emit({"event": "serving", "role": job.role, "index": job.index, "time": time.time()})
    if job.busy_every_s > 0:
        sample_busy(job)
    server.join()
