"""What every training process shares: its threads, its distribution strategy, its
batches, its data and its checkpoints.

`training.data: digits` is scikit-learn's bundled digits set: 1,797 images of handwritten
digits, 8 x 8 pixels of 0-16, ten classes, real data that ships with scikit-learn (no
download), so the loss of a real run really falls. Pixels are scaled to [0, 1] and
shaped to the model's input: 64 features for an MLP, or 8 x 8 x 1 for a small CNN.
Models whose input is not 64 values are refused before anything starts.

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


def digits(shape: Any) -> tuple[np.ndarray, np.ndarray]:
    """The whole digits set as (features shaped like the model's input, int32 labels)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32).reshape((-1, *tuple(shape)))
    return x, bunch.target.astype(np.int32)


def digits_split(shape: Any, holdout: int, seed: int) -> tuple[np.ndarray, ...]:
    """The digits set split into (x_train, y_train, x_held, y_held): `holdout` images
    drawn from a permutation seeded by the run's seed, the same in every process of a
    job; with `holdout` 0, all of it trains and nothing is held out."""
    x, y = digits(shape)
    if holdout <= 0:
        return x, y, x[:0], y[:0]
    order = np.random.default_rng([seed, 0x5EED]).permutation(len(y))
    held, train = order[:holdout], np.sort(order[holdout:])
    return x[train], y[train], x[held], y[held]
