"""Asynchronous parameter servers with TensorFlow's ParameterServerStrategy.

Worker and parameter-server processes only serve (`tf.distribute.Server(...).join()`);
the chief process is the coordinator: it builds the model under the strategy (variables
on the parameter servers: round-robin by default, or every variable sliced over all shards
with a `FixedShardsPartitioner` for `partition: sliced`) and schedules one closure per
update with `ClusterCoordinator.schedule`. Each closure reads the parameters, computes,
and applies its gradients at once (no aggregation across workers: asynchronous by nature).

Inside every closure the host clock is read at its start, once every gradient exists and
after the update; the optimizer's iteration counter (a variable on a parameter server) is
read before the forward pass and after the update, so the staleness of the push is the
number of other updates applied in between: the simulator's definition.
"""

from __future__ import annotations

import time
from typing import Any

from . import protocol


def serve(job: dict[str, Any]) -> None:
    """A worker or parameter-server task: serve until the launcher ends the process."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # inter_op_parallelism_threads=1 on these servers deadlocks coordinator.join()
    # (TF-NOTES.md); 2 works
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=1, inter_op_parallelism_threads=2
    )
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=job["role"],
        task_index=job["index"],
        protocol="grpc",
        config=config,
    )
    protocol.emit({"event": "serving", "role": job["role"], "index": job["index"]})
    server.join()


def coordinate(job: dict[str, Any]) -> None:
    """The chief: schedule `warmup + steps` updates over the workers, report each."""
    launched = time.time()
    import tensorflow as tf

    from .models import build_for_training

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None
    if job["partition"] == "sliced" and job["servers"] > 1:
        partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(
            num_shards=job["servers"]
        )
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    batch = job["batch_per_worker"]
    model, optimizer, loss_fn, shape, classes = build_for_training(tf, job, strategy)
    seed = job["seed"]

    def dataset_fn() -> Any:
        # synthetic data made once per worker, repeated (tf_cnn_benchmarks' way)
        x = tf.random.uniform((batch, *shape), seed=seed)
        y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32, seed=seed)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def replica_step(x: Any, y: Any) -> Any:
        started = tf.timestamp()
        with tf.control_dependencies([started]):
            before = tf.identity(optimizer.iterations)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        with tf.control_dependencies([g for g in grads if g is not None]):
            computed = tf.timestamp()
        with tf.control_dependencies([computed]):
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        with tf.control_dependencies([optimizer.iterations]):
            after = tf.identity(optimizer.iterations)
            ended = tf.timestamp()
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        return loss, started, computed, ended, before, after, worker

    @tf.function
    def update(iterator: Any) -> Any:
        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    protocol.emit(
        {
            "event": "ready",
            "worker": -1,
            "time": time.time(),
            "launched": launched,
            "params": int(model.count_params()),
        }
    )
    total = job["warmup_steps"] + job["steps"]
    scheduled = [coordinator.schedule(update, args=(iterator,)) for _ in range(total)]
    coordinator.join()
    rows = []
    for value in scheduled:
        loss, started, computed, ended, before, after, worker = (
            v.numpy() if hasattr(v, "numpy") else v for v in value.fetch()
        )
        rows.append(
            (
                float(started),
                float(computed),
                float(ended),
                float(loss),
                int(after) - int(before) - 1,
                int(worker),
            )
        )
    iterations: dict[int, int] = {}
    for started, computed, ended, loss, staleness, worker in sorted(rows):
        step = iterations.get(worker, 0)
        iterations[worker] = step + 1
        protocol.emit(
            {
                "event": "step",
                "worker": worker,
                "step": step,
                "start": started,
                "compute_end": computed,
                "end": ended,
                "loss": loss,
                "staleness": max(staleness, 0),
            }
        )
    protocol.emit({"event": "done", "worker": -1, "time": time.time()})
