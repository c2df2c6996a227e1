"""What every training process shares: its threads, its distribution strategy, its
batches and its checkpoints.

All-reduce workers (`real/process/allreduce.py`), the parameter-server coordinator
(`real/process/ps.py`), a pipeline's chief (`real/process/pipeline.py`) and the probes
(`real/process/probe.py`) take what they need from here. TensorFlow comes in as an
argument (`tf`): the process imports it once, at start (`real/process/worker.py`).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import numpy as np

from .. import protocol
from ..job import AllReduceWorker, Place, Probe, Trainer
from .data import digits_split


def configure_threads(tf: Any, job: Place) -> None:
    """One op at a time on one thread per device: a process per device (between graph)
    holds one core; in graph, the process's D replicas run side by side through D
    inter-op threads (fewer risk a hang, docs/tf-notes.md), on D logical CPUs split from
    the host's before the runtime starts."""
    devices = job.local_devices
    tf.config.threading.set_intra_op_parallelism_threads(job.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(max(job.inter_op_threads, devices))
    if devices > 1 and job.device == "cpu":
        (cpu,) = tf.config.list_physical_devices("CPU")
        logical = [tf.config.LogicalDeviceConfiguration() for _ in range(devices)]
        tf.config.set_logical_device_configuration(cpu, logical)


def strategy_of(tf: Any, job: AllReduceWorker | Probe) -> Any:
    if job.local_devices > 1:  # in graph: one client, every device of the host
        kind = "GPU" if job.device == "gpu" else "CPU"
        return tf.distribute.MirroredStrategy(
            [f"/device:{kind}:{i}" for i in range(job.local_devices)]
        )
    if job.workers == 1:
        return tf.distribute.get_strategy()  # the default: one device, no collectives
    comm = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=comm.NCCL if job.device == "gpu" else comm.RING,
        timeout_seconds=job.collective_timeout_s,
        bytes_per_pack=job.bytes_per_pack if isinstance(job, AllReduceWorker) else 0,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def batch_stream(tf: Any, job: Trainer, batch: int, shape: Any, classes: int) -> Any:
    """An endless iterator of this worker's batches: synthetic tensors made once (the same
    batch every step, tf_cnn_benchmarks' way), or this worker's shard of the digits data,
    shuffled from the run's seed."""
    seed = job.seed + job.index
    if job.data == "digits":
        x_all, y_all, _, _ = digits_split(shape, job.holdout, job.seed)  # the training split
        x_all, y_all = x_all[job.index :: job.workers], y_all[job.index :: job.workers]
        rng = np.random.default_rng(seed)

        def shuffled() -> Any:
            while True:
                order = rng.permutation(len(y_all))
                for start in range(0, len(order) - batch + 1, batch):
                    take = order[start : start + batch]
                    yield tf.constant(x_all[take]), tf.constant(y_all[take])

        return shuffled()
    if job.keras.get("builder") == "transformer":  # tokens in, the next token's class out
        x = tf.random.uniform((batch, *shape), maxval=classes, dtype=tf.int32, seed=seed)
        y = tf.random.uniform((batch, *shape), maxval=classes, dtype=tf.int32, seed=seed + 1)
    else:
        x = tf.random.uniform((batch, *shape), seed=seed)
        y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32, seed=seed)

    def same() -> Any:
        while True:
            yield x, y

    return same()


def checkpointing(
    tf: Any, job: Trainer, strategy: Any, model: Any, optimizer: Any
) -> tuple[int, Any]:
    """Restore the latest checkpoint, if any; return the first step and a saver writing
    one every `checkpoint_every` steps (rounds, or updates under parameter servers).

    Every all-reduce worker saves (MultiWorkerMirroredStrategy needs all of them to); the
    chief into the run's checkpoint directory, the others into a directory of their own
    (TF's way). A parameter-server coordinator (`strategy` None: its step counter is its
    own) saves the variables from the servers into the run's directory.
    """
    directory = job.checkpoint_dir
    every = job.checkpoint_every
    if not directory:
        return 0, lambda done: None
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    latest = tf.train.latest_checkpoint(directory)
    if latest:
        checkpoint.restore(latest).expect_partial()
    own = directory if job.index == 0 else os.path.join(directory, f"worker-{job.index}")
    manager = tf.train.CheckpointManager(checkpoint, own, max_to_keep=2)

    def save(done: int) -> None:
        if every and done % every == 0:
            started = time.time()
            step.assign(done)
            manager.save(checkpoint_number=done)
            protocol.emit(
                {
                    "event": "checkpoint",
                    "worker": job.index,
                    "step": done,
                    "start": started,
                    "end": time.time(),
                }
            )

    return int(step.numpy()), save
