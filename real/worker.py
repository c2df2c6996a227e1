"""One TensorFlow worker process of `run-real`: `python -m real.worker JOB.json`.

The launcher (`real/launcher.py`) writes the job, sets `TF_CONFIG`, and reads this
process's standard output: one JSON object per line (`real/protocol.py`). Training is a
custom loop (Keras 3 `fit` fails under MultiWorkerMirroredStrategy, docs/tf-notes.md):

    strategy.run(step): gradients, tf.timestamp() -> compute_end,
                        apply_gradients (all-reduce + update) -> end
    then, with a target, every few steps: the held-out evaluation (real/evaluate.py)

Data are synthetic: random tensors made once, as tf_cnn_benchmarks does, so that input
never limits the step.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Any

from . import protocol
from .job import Job


def _configure_threads(tf: Any, job: Job) -> None:
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


def _strategy(tf: Any, job: Job) -> Any:
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
        bytes_per_pack=job.bytes_per_pack,
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def batch_stream(tf: Any, job: Job, batch: int, shape: Any, classes: int) -> Any:
    """An endless iterator of this worker's batches: synthetic tensors made once (the same
    batch every step, tf_cnn_benchmarks' way), or this worker's shard of the digits data,
    shuffled from the run's seed."""
    seed = job.seed + job.index
    if job.data == "digits":
        import numpy as np

        from .data import digits_split

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
    x = tf.random.uniform((batch, *shape), seed=seed)
    y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32, seed=seed)

    def same() -> Any:
        while True:
            yield x, y

    return same()


def checkpointing(tf: Any, job: Job, strategy: Any, model: Any, optimizer: Any) -> tuple[int, Any]:
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


def run(job: Job) -> None:
    """Build the model, run warm-up and measured steps, report each step."""
    launched = time.time()
    import tensorflow as tf

    from .models import build_for_training

    _configure_threads(tf, job)
    strategy = _strategy(tf, job)
    index, workers, replicas = job.index, job.workers, job.local_devices
    batch = job.batch_per_worker
    global_batch = batch * workers * replicas
    # TensorFlow's and Keras 3's own generators (Keras draws its initial weights from a
    # seed generator of its own, which tf.random.set_seed alone leaves unseeded)
    tf.keras.utils.set_random_seed(job.seed * 1000 + index)
    model, optimizer, loss_fn, shape, classes = build_for_training(tf, job, strategy)
    if replicas > 1:
        # each replica its own batch, as a worker of its own would have it (its shard of
        # the digits, its seed); synthetic batches are placed on the devices once
        own = [
            batch_stream(
                tf,
                job.replace(index=index * replicas + r, workers=workers * replicas),
                batch,
                shape,
                classes,
            )
            for r in range(replicas)
        ]

        def place() -> tuple[Any, Any]:
            made = [next(b) for b in own]
            return tuple(  # type: ignore[return-value]
                strategy.experimental_distribute_values_from_function(
                    lambda ctx, part=part: made[ctx.replica_id_in_sync_group][part]
                )
                for part in (0, 1)
            )

        if job.data == "digits":
            batches: Any = iter(place, None)
        else:
            placed = place()
            batches = iter(lambda: placed, None)
    else:
        batches = batch_stream(tf, job, batch, shape, classes)
    from .evaluate import Evaluator

    evaluator = Evaluator.of(tf, job, model, shape)

    def replica_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(loss_fn(y, logits), global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        # the host clock once every gradient exists: the end of compute (all processes
        # share the clock, so it compares with time.time() outside)
        with tf.control_dependencies([g for g in grads if g is not None]):
            computed = tf.timestamp()
        if job.gradients_only:  # the dispatch probe: every gradient made, none applied
            with tf.control_dependencies([computed]):
                return tf.identity(loss), computed
        with tf.control_dependencies([computed]):
            # Keras 3 optimizers all-reduce the gradients across replicas themselves
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss, computed

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        # one strategy.run: gradients passed between two runs cannot be all-reduced
        return strategy.run(replica_step, args=(x, y))

    protocol.ready(index, launched, int(model.count_params()))
    total = job.warmup_steps + job.steps
    slowdown = job.step_slowdowns(total)
    compute_s = 0.0
    first, save = checkpointing(tf, job, strategy, model, optimizer)
    for step in range(first, total):
        start = time.time()
        if slowdown[step] > 0 and compute_s > 0:
            # a straggler: stretch this step's compute by sleeping (factor - 1) x the
            # compute time measured in the step before, plus any transient hiccup
            time.sleep(slowdown[step] * compute_s)
        hiccup = job.hiccups[step] if step < len(job.hiccups) else 0.0
        if hiccup > 0:
            time.sleep(hiccup)
        began = time.time()
        x, y = next(batches)
        loss, computed = train_step(x, y)
        end = time.time()
        losses = strategy.experimental_local_results(loss)
        ends = [float(c) for c in strategy.experimental_local_results(computed)]
        compute_s = ends[0] - began
        for r, (replica_loss, compute_end) in enumerate(zip(losses, ends, strict=True)):
            protocol.emit(
                {
                    "event": "step",
                    "worker": index * replicas + r,  # in graph: each device a worker
                    "step": step,
                    "start": start,
                    "compute_end": compute_end,
                    "end": end,
                    # back from the global-batch average to its own batch's
                    "loss": float(replica_loss) * workers * replicas,
                }
            )
        save(step + 1)
        if evaluator is not None and evaluator.due(step + 1, total) and evaluator(step + 1, index):
            break  # the target is met (every replica decides alike: same weights)
    protocol.emit({"event": "done", "worker": index, "time": time.time()})


def import_tensorflow() -> None:
    """Import TensorFlow and Keras, without scikit-learn. Keras imports scikit-learn (and
    SciPy with it) for its scikit-learn wrappers whenever it is installed: about 1.5 s of
    every process's start-up on a 2-core machine, for wrappers no process here uses. So
    scikit-learn is hidden while they load (Keras then goes without its wrappers), and
    imports as usual afterwards (the digits data: real/data.py)."""
    hidden = "sklearn" not in sys.modules
    if hidden:
        sys.modules["sklearn"] = None  # type: ignore[assignment]  # importing it fails
    try:
        import keras  # noqa: F401
        import tensorflow  # noqa: F401
    finally:
        if hidden:
            del sys.modules["sklearn"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as f:
        job = Job.from_json(f.read())
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import_tensorflow()
        if job.probe:
            from . import probe

            getattr(probe, job.probe)(job)
        elif job.serve:
            from .ps import serve

            serve(job)
        elif job.role == "chief" and job.split:
            from .pipeline import coordinate

            coordinate(job)
        elif job.role == "chief":
            from .ps import coordinate, coordinate_sync

            (coordinate_sync if job.sync else coordinate)(job)
        else:
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
