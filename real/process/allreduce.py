"""Data parallelism by all-reduce: one worker process of MultiWorkerMirroredStrategy, or
one client driving its host's devices with MirroredStrategy (`replication: in_graph`).

A custom loop (Keras 3 `fit` fails under MultiWorkerMirroredStrategy, docs/tf-notes.md):

    strategy.run(step): gradients, tf.timestamp() -> compute_end,
                        apply_gradients (all-reduce + update) -> end
    then, with a target, every few steps: the held-out evaluation (real/process/evaluate.py)

Data are synthetic (random tensors made once, as tf_cnn_benchmarks does, so that input
never limits the step) or this worker's shard of the digits (real/process/training.py).
"""

from __future__ import annotations

import time
from typing import Any

from .. import protocol
from ..job import AllReduceWorker
from .evaluate import Evaluator
from .models import build_for_training
from .training import batch_stream, checkpointing, configure_threads, strategy_of


def run(job: AllReduceWorker) -> None:
    """Build the model, run warm-up and measured steps, report each step."""
    launched = time.time()
    import tensorflow as tf

    configure_threads(tf, job)
    strategy = strategy_of(tf, job)
    index, workers, replicas = job.index, job.workers, job.local_devices
    batch = job.batch_per_worker
    global_batch = batch * workers * replicas
    # TensorFlow's and Keras 3's own generators (Keras draws its initial weights from a
    # seed generator of its own, which tf.random.set_seed alone leaves unseeded)
    tf.keras.utils.set_random_seed(job.seed * 1000 + index)
    model, optimizer, loss_fn, shape, classes = build_for_training(tf, job, strategy)
    batches = batches_of(tf, job, strategy, shape, classes)
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
        straggle(job, step, slowdown[step], compute_s)
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


def batches_of(tf: Any, job: AllReduceWorker, strategy: Any, shape: Any, classes: int) -> Any:
    """An endless iterator of (x, y) for `train_step`: this worker's batches, or in graph
    one batch a replica, each as a worker of its own would have it (its shard of the
    digits, its seed), distributed over the devices; synthetic batches are placed on the
    devices once."""
    index, workers, replicas = job.index, job.workers, job.local_devices
    batch = job.batch_per_worker
    if replicas <= 1:
        return batch_stream(tf, job, batch, shape, classes)
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
        return iter(place, None)
    placed = place()
    return iter(lambda: placed, None)


def straggle(job: AllReduceWorker, step: int, slowdown: float, compute_s: float) -> None:
    """A straggler's sleep before step `step`: its compute stretched by `slowdown` x the
    compute time measured in the step before (the factor - 1), plus any transient hiccup."""
    if slowdown > 0 and compute_s > 0:
        time.sleep(slowdown * compute_s)
    hiccup = job.hiccups[step] if step < len(job.hiccups) else 0.0
    if hiccup > 0:
        time.sleep(hiccup)
