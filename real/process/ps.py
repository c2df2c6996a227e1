"""Parameter servers with TensorFlow's ParameterServerStrategy, asynchronous and synchronous.

Worker and parameter-server processes only serve (real/process/server.py);
the chief process is the coordinator: it builds the model under the strategy (variables
on the parameter servers: round-robin by default, or every variable sliced over all shards
with a `FixedShardsPartitioner` for `partition: sliced`) and schedules one closure per
update with `ClusterCoordinator.schedule`. Asynchronous: each closure reads the
parameters, computes, and applies its gradients at once. Synchronous: each round
schedules one closure per worker that adds its gradients to accumulators beside the
variables (on the servers); once the round's closures are in, the coordinator applies the
mean on the servers and zeroes the accumulators (with backup workers, the first N - b
closures of a round count; later ones are dropped and counted).

Inside every closure the host clock is read at its start, once every gradient exists and
after the update; the optimizer's iteration counter (a variable on a parameter server) is
read before the forward pass and after the update, so the staleness of the push is the
number of other updates applied in between: the simulator's definition.
"""

from __future__ import annotations

import time
from typing import Any

from .. import protocol
from ..job import Coordinator
from .evaluate import Evaluator
from .models import build_for_training
from .training import checkpointing, digits_split


def coordinate(job: Coordinator) -> None:
    """The chief: schedule `warmup + steps` updates over the workers, report each."""
    launched = time.time()
    import tensorflow as tf

    strategy, coordinator = _connect(tf, job.servers if job.partition == "sliced" else 0)
    batch = job.batch_per_worker
    model, optimizer, loss_fn, shape, classes = build_for_training(tf, job, strategy)
    dataset_fn = _synthetic(tf, job, batch, shape, classes, job.seed)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    replica_step = _async_step(tf, model, optimizer, loss_fn, _straggler_delay(tf, job))

    @tf.function
    def update(iterator: Any) -> Any:
        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    protocol.ready(-1, launched, int(model.count_params()))
    total = job.warmup_steps + job.steps
    done, save = checkpointing(tf, job, None, model, optimizer)
    every = job.checkpoint_every or total
    evaluator = Evaluator.of(tf, job, model, shape)
    evaluate = evaluator.job.eval_every if evaluator is not None else total
    iterations: dict[int, int] = {}  # per worker: its closures so far
    chunks = 0
    while done < total:  # a checkpoint (or an evaluation) is a barrier: in-flight updates end
        ahead = min(every - done % every, total - done, evaluate - done % evaluate)
        chunk = [coordinator.schedule(update, args=(iterator,)) for _ in range(ahead)]
        fetched = []
        for value in chunk:  # progress as updates complete (failures are injected on it)
            fetched.append(_fetch(tf, value))
            protocol.emit({"event": "progress", "worker": -1, "step": done, "time": time.time()})
            done += 1
        coordinator.join()
        _report_updates(fetched, chunks, iterations)
        chunks += 1
        save(done)
        if evaluator is not None and evaluator.due(done, total) and evaluator(done, -1):
            break
    protocol.emit({"event": "done", "worker": -1, "time": time.time()})


def _connect(tf: Any, shards: int = 0) -> tuple[Any, Any]:
    """The coordinator's threads, its ParameterServerStrategy (every variable sliced over
    `shards` servers where `shards` > 1, else placed round-robin) and its
    ClusterCoordinator."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None
    if shards > 1:
        partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(
            num_shards=shards
        )
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=partitioner
    )
    return strategy, tf.distribute.coordinator.ClusterCoordinator(strategy)


def _async_step(tf: Any, model: Any, optimizer: Any, loss_fn: Any, delay: Any) -> Any:
    """An asynchronous closure's replica function `(x, y) -> record`: read the clock and
    the update counter, compute the gradients, wait any straggler delay, apply them at
    once, read the counter and the clock again."""

    def replica_step(x: Any, y: Any) -> Any:
        started = tf.timestamp()
        with tf.control_dependencies([started]):
            before = tf.identity(optimizer.iterations)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, model.trainable_variables)
        with tf.control_dependencies([g for g in grads if g is not None]):
            computed = tf.timestamp()
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        with tf.control_dependencies([delay(worker, computed - started)]):
            computed = tf.timestamp()  # a straggler's compute is stretched by its sleep
        with tf.control_dependencies([computed]):
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        with tf.control_dependencies([optimizer.iterations]):
            after = tf.identity(optimizer.iterations)
            ended = tf.timestamp()
        return _record(tf, loss, started, computed, ended, before, after, worker)

    return replica_step


def _report_updates(fetched: list[Any], chunk: int, iterations: dict[int, int]) -> None:
    """One record per asynchronous update, in order of start; the step is the worker's
    iteration (`iterations`: per worker, its closures so far, advanced here); `chunk`: the
    updates between two checkpoints (a barrier: in-flight updates end)."""
    for values in sorted((v for v in fetched if v is not None), key=lambda v: float(v[1])):
        loss, started, computed, ended, before, after, worker = values
        step = iterations.get(int(worker), 0)
        iterations[int(worker)] = step + 1
        protocol.emit(
            {
                "event": "step",
                "worker": int(worker),
                "step": step,
                "update": int(after) - 1,  # the global update it was (the counter)
                "start": float(started),
                "compute_end": float(computed),
                "end": float(ended),
                "loss": float(loss),
                "staleness": max(int(after) - int(before) - 1, 0),
                "chunk": chunk,
            }
        )


def _record(tf: Any, *values: Any) -> Any:
    """A closure's record (loss, clock readings, counters) as one float64 tensor: the
    coordinator fetches a closure's outputs one tensor at a time, and with six or seven
    of them a synchronous round of 2 workers took 78.6 ms against 69.5, one of 3 workers
    132 against 96.5 (docs/real-backend.md). Clock readings and counters are exact in
    float64."""
    return tf.stack([tf.cast(v, tf.float64) for v in values])


def _fetch(tf: Any, value: Any) -> tuple[float, ...] | None:
    """A closure's record as numbers, or None when it died with the worker holding it (a
    worker killed after running it: its update was applied, its record is lost) or has no
    value (a closure the coordinator gave up once the run met its target: fetched, it
    returns None)."""
    try:
        record = value.fetch()
    except (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError):
        return None
    return None if record is None else tuple(float(v) for v in record)


def _synthetic(tf: Any, job: Coordinator, batch: int, shape: Any, classes: int, seed: int) -> Any:
    """The per-worker dataset function: synthetic data made once, repeated (tf_cnn_benchmarks'
    way), or the digits data set (`training.data: digits`)."""
    if job.data == "digits":
        x_all, y_all, _, _ = digits_split(shape, job.holdout, job.seed)  # the training split

        def digits_fn() -> Any:
            # each worker its own order (seeded by the run's seed and the worker): with
            # one seed for all, every worker would read the same batches in step, and a
            # round's gradients would be one batch's, N times
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            order = tf.cast(seed * 1000 + worker, tf.int64)
            return (
                tf.data.Dataset.from_tensor_slices((x_all, y_all))
                .shuffle(len(y_all), seed=order)
                .repeat()
                .batch(batch, drop_remainder=True)
            )

        return digits_fn

    def dataset_fn() -> Any:
        x = tf.random.uniform((batch, *shape), seed=seed)
        y = tf.random.uniform((batch,), maxval=classes, dtype=tf.int32, seed=seed)
        return tf.data.Dataset.from_tensors((x, y)).repeat()

    return dataset_fn


def _straggler_delay(tf: Any, job: Coordinator) -> Any:
    """`delay(worker, compute_s)`: a tensor that exists once the worker has waited its
    straggler delay for this closure. Workers run no Python of ours, so the sleep is a
    `tf.py_function` (it runs in the coordinator; the worker's closure waits for it):
    (jitter x slow - 1) x the compute time just measured, plus any transient hiccup, from
    the simulator's own seeded streams, drawn in the order of each worker's closures."""
    slowdowns = job.slowdowns
    if not slowdowns or not any(any(s) for s in slowdowns):
        return lambda worker, compute_s: tf.constant(0.0, tf.float64)
    done = [0] * len(slowdowns)
    hiccups = job.worker_hiccups

    def sleep(worker: Any, compute_s: Any) -> Any:
        w = int(worker)
        k = done[w]
        done[w] += 1
        extra = 0.0
        if k < len(slowdowns[w]):
            extra = slowdowns[w][k] * float(compute_s) + hiccups[w][k]
        if extra > 0:
            time.sleep(extra)
        return extra

    def delay(worker: Any, compute_s: Any) -> Any:
        slept = tf.py_function(sleep, [worker, compute_s], tf.float64)
        slept.set_shape([])
        return slept

    return delay


#: ticket space per round: a closure of round r takes a ticket in [r * ROUND, (r + 1) * ROUND)
ROUND = 1 << 32


def sync_update(tf: Any, strategy: Any, model: Any, optimizer: Any) -> tuple[Any, ...]:
    """The server-side state of a synchronous round and the call that ends it.

    Returns (accumulators, ticket, gathered, apply): a gradient accumulator beside each
    weight on its server, the round's ticket counter and count of gradients gathered, and
    `apply(count)`, the tf.function the coordinator calls once a round has `count`
    gradients: it applies their mean with the optimizer, zeroes the accumulators and opens
    the next round. `run-real --calibrate` times the same call (`probe.update`)."""
    weights = model.trainable_variables
    with strategy.scope():
        accumulators = []
        for w in weights:
            with strategy.extended.colocate_vars_with(w.value):
                accumulators.append(
                    tf.Variable(tf.zeros(w.shape, w.dtype), trainable=False, name="grad_acc")
                )
        ticket = tf.Variable(0, dtype=tf.int64, trainable=False, name="ticket")
        gathered = tf.Variable(0, dtype=tf.int64, trainable=False, name="gathered")

    @tf.function
    def apply(count: Any) -> Any:
        # every op beside its accumulator, on the parameter server: nothing of the size of
        # the model crosses to the coordinator (the optimizer's update is colocated too)
        scale = 1.0 / tf.cast(count, accumulators[0].dtype)
        means = []
        for a in accumulators:
            with tf.device(a.device):
                means.append(a * scale)
        optimizer.apply_gradients(zip(means, weights, strict=True))
        for a in accumulators:
            with tf.device(a.device):
                a.assign(tf.zeros_like(a))
        gathered.assign(0)
        ticket.assign((optimizer.iterations) * ROUND)
        return optimizer.iterations

    return accumulators, ticket, gathered, apply


def coordinate_sync(job: Coordinator) -> None:
    """The chief of a synchronous parameter-server job, on TensorFlow's PS machinery.

    Beside each weight, on its parameter server, lives a gradient accumulator
    (`colocate_vars_with`). Each round (a global step) schedules one closure per worker;
    a closure computes its gradients and adds them to the accumulators. With backup
    workers it first takes a ticket from a counter on a parameter server (an atomic
    `assign_add`) and adds them only if it is among the first `workers - backup_workers`
    of the round; later ones are dropped (SyncReplicasOptimizer's
    `replicas_to_aggregate`). Without, every closure adds: no ticket, no conditional
    (those cost a closure its own round trips to the servers). Once the round has its
    gradients the coordinator applies their mean with the same Keras optimizer (the update
    runs on the parameter servers, colocated with each weight), zeroes the accumulators and
    opens the next round. Closures of a closed round still running are dropped; the
    coordinator checks that every round got its gradients and schedules more if not.
    """
    launched = time.time()
    import tensorflow as tf

    strategy, coordinator = _connect(tf)
    batch = job.batch_per_worker
    workers = job.workers
    needed = workers - job.backup_workers
    model, optimizer, loss_fn, shape, classes = build_for_training(tf, job, strategy)
    accumulators, ticket, gathered, apply = sync_update(tf, strategy, model, optimizer)
    dataset_fn = _synthetic(tf, job, batch, shape, classes, job.seed)
    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    delay = _straggler_delay(tf, job)
    state = (accumulators, ticket, gathered)
    replica_step = _sync_step(tf, model, loss_fn, state, delay, (needed, workers))

    @tf.function
    def step(iterator: Any, round_: Any) -> Any:
        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y, round_))

    @tf.function
    def reopen(first: Any) -> Any:
        return ticket.assign(first)

    protocol.ready(-1, launched, int(model.count_params()))
    total = job.warmup_steps + job.steps
    closures: list[tuple[int, Any]] = []

    first, save = checkpointing(tf, job, None, model, optimizer)

    def schedule(round_: int, count: int) -> None:
        r = tf.constant(round_, tf.int64)
        closures.extend(
            (round_, coordinator.schedule(step, args=(iterator, r))) for _ in range(count)
        )

    reopen(tf.constant(first * ROUND, tf.int64))  # a restored job resumes at round `first`
    evaluator = Evaluator.of(tf, job, model, shape)
    for round_ in range(first, total):
        opened = time.time()
        schedule(round_, workers)
        if needed == workers:  # every closure of the round contributes
            for _, value in closures[-workers:]:
                _fetch(tf, value)
        else:
            while (have := int(gathered.read_value())) < needed:
                if coordinator.done():  # all ran, too few accepted (a ticket race): more
                    reopen(tf.constant(round_ * ROUND + have, tf.int64))
                    schedule(round_, needed - have)
                time.sleep(0.0005)
        _emit_round(round_, opened, int(apply(tf.constant(needed, tf.int64))))
        save(round_ + 1)
        if evaluator is not None and evaluator.due(round_ + 1, total) and evaluator(round_ + 1, -1):
            break
    coordinator.join()
    _report_closures(tf, closures)
    protocol.emit({"event": "done", "worker": -1, "time": time.time()})


def _sync_step(
    tf: Any,
    model: Any,
    loss_fn: Any,
    state: tuple[Any, Any, Any],
    delay: Any,
    counts: tuple[int, int],
) -> Any:
    """A synchronous closure's replica function `(x, y, round_) -> record`: compute the
    gradients, wait any straggler delay, and add them to the accumulators. `state`: the
    accumulators, the ticket and the count gathered (`sync_update`); `counts`: the
    gradients a round needs and the workers. With backup workers (fewer needed than
    workers) a closure adds only among the round's first tickets."""
    accumulators, ticket, gathered = state
    needed, workers = counts
    weights = model.trainable_variables

    def replica_step(x: Any, y: Any, round_: Any) -> Any:
        started = tf.timestamp()
        worker = tf.distribute.coordinator.experimental_get_current_worker_index()
        with tf.control_dependencies([started]):
            x = tf.identity(x)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
        grads = tape.gradient(loss, weights)
        with tf.control_dependencies([g for g in grads if g is not None]):
            computed = tf.timestamp()
        with tf.control_dependencies([delay(worker, computed - started)]):
            computed = tf.timestamp()  # a straggler's compute is stretched by its sleep

        def push() -> Any:
            adds = [a.assign_add(g) for a, g in zip(accumulators, grads, strict=True)]
            with tf.control_dependencies(adds):
                return gathered.assign_add(1)

        if needed == workers:
            # every closure of a round contributes and the round waits for all of them:
            # no ticket to take, and no conditional over the servers' variables (it would
            # cost each closure round trips to them for nothing)
            with tf.control_dependencies([computed]):
                pushed = push()
            with tf.control_dependencies([pushed]):
                ended = tf.timestamp()
            return _record(tf, loss, started, computed, ended, True, worker)
        with tf.control_dependencies([computed]):
            # a closure of a closed round takes no ticket (it would crowd out the next round's)
            mine = tf.cond(
                tf.equal(ticket.read_value() // ROUND, round_),
                lambda: ticket.assign_add(1) - 1,
                lambda: tf.constant(-1, tf.int64),
            )
        accepted = tf.logical_and(tf.equal(mine // ROUND, round_), mine % ROUND < needed)
        with tf.control_dependencies([tf.cond(accepted, push, lambda: gathered.read_value())]):
            ended = tf.timestamp()
        return _record(tf, loss, started, computed, ended, accepted, worker)

    return replica_step


def _emit_round(round_: int, opened: float, applied: int) -> None:
    """The coordinator's record of a synchronous round: from when its closures were
    scheduled to now, its update applied (`applied`: the optimizer's counter after it)."""
    protocol.emit(
        {
            "event": "round",
            "worker": -1,
            "step": round_,
            "start": opened,
            "end": time.time(),
            "applied": applied,
        }
    )


def _report_closures(tf: Any, closures: list[tuple[int, Any]]) -> None:
    """One record per synchronous closure that came back, in order of scheduling: its
    round as the step, which of the worker's closures in that round it was (with backup
    workers a worker may run two in a round), and whether its gradients were dropped."""
    seen: dict[tuple[int, int], int] = {}
    for round_, value in closures:
        values = _fetch(tf, value)
        if values is None:
            continue
        loss, started, computed, ended, accepted, worker = values
        key = (int(worker), round_)
        seen[key] = seen.get(key, -1) + 1
        protocol.emit(
            {
                "event": "step",
                "worker": int(worker),
                "closure": seen[key],
                "step": round_,
                "start": float(started),
                "compute_end": float(computed),
                "end": float(ended),
                "loss": float(loss),
                "dropped": not bool(accepted),
            }
        )
