"""Transfer probes run inside TensorFlow processes for `run-real --calibrate`.

- `transfer`: a client process and a server process (`tf.distribute.Server`); the client
  places a variable of S bytes on the server and times reading it back (server to client)
  and writing it (client to server): one tensor moved between two processes over gRPC, as
  a parameter server's pull and push move them.
- `update`: a coordinator, one worker and S servers under ParameterServerStrategy; the
  coordinator builds the scenario's model and times the call that applies a synchronous
  round's gradients on the servers (`real.process.ps.sync_update`), and closures that read the
  model, and push a gradient to it as a synchronous or an asynchronous closure does, and
  a bare closure that reads one scalar, with the CPU the machine spent on each.
- `allreduce`: N processes under MultiWorkerMirroredStrategy (RING on CPU) time a sum
  all-reduce of S bytes, as nccl-tests' all_reduce_perf does.

Each size is repeated and every repetition reported (`probe` events); the fit is done by
the launcher's side (`real/calibrate/probes.py`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from measured.profile import CLOSURES

from .. import protocol
from ..job import Probe
from .models import build_for_training
from .ps import sync_update
from .training import configure_threads, strategy_of


def transfer(job: Probe) -> None:
    """The client of the transfer probe: each size pulled, pushed and exchanged with the
    server, and chains of small reads, every size once per round, round after round."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver.cluster_spec(), job_name="chief")
    protocol.emit({"event": "ready", "worker": 0, "time": time.time()})
    probes = [_transfer_calls(tf, nbytes, job.warmup) for nbytes in job.sizes]
    calls = _chain_calls(tf, int(job.chain), job.warmup)
    # every size once per round, round after round: a slow spell of the machine falls on
    # all sizes alike instead of bending the fit at the sizes it happened to hit
    for _ in range(job.repeats):
        for count, call in calls:
            started = time.perf_counter()
            call().numpy()
            protocol.emit(
                {
                    "event": "probe",
                    "worker": 0,
                    "kind": "chain",
                    "messages": count,
                    "bytes": 1024,
                    "time_s": time.perf_counter() - started,
                }
            )
        for probe in probes:
            _time_transfer(*probe)
    protocol.emit({"event": "done", "worker": 0, "time": time.time()})


def _transfer_calls(tf: Any, nbytes: int, warmup: int) -> tuple[Any, ...]:
    """A variable of about `nbytes` on the server and the calls that move it, each run
    `warmup` times: (bytes, the variable, pull, push, the inbox, exchange)."""
    n = max(1, nbytes // 4)
    local = tf.random.uniform((n,))
    with tf.device("/job:ps/task:0"):
        remote = tf.Variable(tf.zeros((n,)))

    @tf.function
    def pull(v: Any = remote) -> Any:
        return tf.reduce_sum(tf.identity(v.read_value()))  # moved to the client, summed

    @tf.function
    def push(v: Any = remote, x: Any = local) -> None:
        with tf.device("/job:ps/task:0"):
            v.assign(x, read_value=False)

    with tf.device("/job:ps/task:0"):
        inbox = tf.Variable(tf.zeros((n,)))

    @tf.function
    def exchange(v: Any = remote, w: Any = inbox, x: Any = local) -> Any:
        # both ways at once: the read and the write do not wait for each other
        with tf.device("/job:ps/task:0"):
            w.assign(x, read_value=False)
        return tf.reduce_sum(tf.identity(v.read_value()))

    for _ in range(warmup):
        pull().numpy()
        push()
        exchange().numpy()
    return (n * 4, remote, pull, push, inbox, exchange)


def _chain_calls(tf: Any, chain: int, warmup: int) -> list[tuple[int, Any]]:
    """Small messages inside one call: one read, and a chain of `chain` reads each
    waiting for the one before (a collective's ring steps): the slope is what each
    further message costs. As (reads, call), each run `warmup` times; none under 2."""
    if chain <= 1:
        return []
    with tf.device("/job:ps/task:0"):
        links = [tf.Variable(tf.zeros((256,))) for _ in range(chain)]

    def chained(count: int) -> Any:
        @tf.function
        def run() -> Any:
            total = tf.constant(0.0)
            for v in links[:count]:
                with tf.control_dependencies([total]):
                    total = total + tf.reduce_sum(tf.identity(v.read_value()))
            return total

        return run

    calls = [(1, chained(1)), (chain, chained(chain))]
    for _ in range(warmup):
        for _count, call in calls:
            call().numpy()
    return calls


def _time_transfer(
    nbytes: int, remote: Any, pull: Any, push: Any, inbox: Any, exchange: Any
) -> None:
    """One round of one size: pull, push (waited for by a tiny read back) and exchange
    timed and reported."""
    started = time.perf_counter()
    pull().numpy()
    middle = time.perf_counter()
    push()
    remote.read_value()[0].numpy()  # wait for the write (a tiny read back)
    ended = time.perf_counter()
    exchange().numpy()
    inbox.read_value()[0].numpy()
    swapped = time.perf_counter()
    for kind, seconds in (
        ("pull", middle - started),
        ("push", ended - middle),
        ("exchange", swapped - ended),
    ):
        protocol.emit(
            {
                "event": "probe",
                "worker": 0,
                "kind": kind,
                "bytes": nbytes,
                "time_s": seconds,
            }
        )


def allreduce(job: Probe) -> None:
    import tensorflow as tf

    if job.local_devices > 1:  # in graph: among one process's devices (MirroredStrategy)
        configure_threads(tf, job)
        strategy = strategy_of(tf, job)
    else:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        comm = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=comm.NCCL if job.device == "gpu" else comm.RING,
            timeout_seconds=job.collective_timeout_s,
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    index = job.index
    protocol.emit({"event": "ready", "worker": index, "time": time.time()})
    for nbytes in job.sizes:
        n = max(1, nbytes // 4)
        x = tf.random.uniform((n,))

        @tf.function
        def reduce(x: Any = x) -> Any:
            def replica() -> Any:
                ctx = tf.distribute.get_replica_context()
                mine = tf.identity(x) * tf.cast(ctx.replica_id_in_sync_group + 1, x.dtype)
                return tf.reduce_sum(ctx.all_reduce(tf.distribute.ReduceOp.SUM, mine))

            # one value per device of this process: wait for every one
            return tf.add_n(strategy.experimental_local_results(strategy.run(replica)))

        for _ in range(job.warmup):
            reduce().numpy()
        for _ in range(job.repeats):
            started = time.perf_counter()
            reduce().numpy()
            protocol.emit(
                {
                    "event": "probe",
                    "worker": index,
                    "kind": "allreduce",
                    "bytes": n * 4,
                    "time_s": time.perf_counter() - started,
                }
            )
    protocol.emit({"event": "done", "worker": index, "time": time.time()})


def coordinator(job: Probe) -> None:
    """The cost of ClusterCoordinator's own round trips, with one worker and one server:
    `dispatch`: schedule a closure that touches a variable on the server and fetch its
    result (what a synchronous round's closures pay); `queued`: closures scheduled back to
    back and joined, per closure (what an asynchronous job's closures pay: the next is
    dispatched as the last ends, results are fetched later); `call`: a function the
    coordinator runs itself on a server variable (what a synchronous round's update
    pays). Nothing of any size moves: this is latency, not bandwidth."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coord = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        v = tf.Variable(0.0)

    @tf.function
    def closure() -> Any:
        return strategy.run(lambda: v.assign_add(1.0))

    @tf.function
    def call() -> Any:
        return v.assign_add(1.0)

    protocol.emit({"event": "ready", "worker": 0, "time": time.time()})
    for i in range(job.warmup + job.repeats):
        started = time.perf_counter()
        coord.schedule(closure).fetch()
        middle = time.perf_counter()
        call().numpy()
        ended = time.perf_counter()
        if i >= job.warmup:
            for kind, seconds in (("dispatch", middle - started), ("call", ended - middle)):
                protocol.emit(
                    {"event": "probe", "worker": 0, "kind": kind, "bytes": 4, "time_s": seconds}
                )
    # closures queued back to back, as an asynchronous job schedules them: what each costs
    # when the next is dispatched as the last ends and results are fetched later
    for _ in range(job.repeats):
        coord.schedule(closure)
    coord.join()  # warm-up
    for _ in range(job.warmup):
        started = time.perf_counter()
        queued = [coord.schedule(closure) for _ in range(job.repeats)]
        coord.join()
        seconds = (time.perf_counter() - started) / len(queued)
        protocol.emit(
            {"event": "probe", "worker": 0, "kind": "queued", "bytes": 4, "time_s": seconds}
        )
    protocol.emit({"event": "done", "worker": 0, "time": time.time()})


def busy_cpu_s() -> float | None:
    """CPU seconds the machine's cores have spent so far, all processes (Linux's
    /proc/stat: every state but idle and iowait, in clock ticks); None where there is no
    /proc/stat. The difference over a span is the CPU the machine spent in it."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(ticks) < 5:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def update(job: Probe) -> None:
    """The optimizer's update of the job's model on its parameter servers, applied by one
    coordinator call, exactly as a synchronous round ends (`real.process.ps.sync_update`); no
    worker computes. The update runs on the servers beside each weight; with two or more
    servers its ops also read the optimizer's scalars (learning rate, iterations) across
    servers, which is why it grows with the number of servers.

    Beside it, closures on the one worker, each scheduled and fetched alone, in turn:
    `closure_read` reads every weight; `closure_accumulate` also adds a gradient to every
    accumulator and counts it (a synchronous closure's push, without backup workers);
    `closure_apply` applies the gradient with the optimizer instead (an asynchronous
    closure's push and update); `closure_bare` reads one scalar on a server and nothing of
    the model (what every closure pays besides the model: the dispatch, the worker's
    function, the fetch). Around each the machine's CPU is read (`busy_cpu_s`).
    Their gradients are made on the worker from a value read at run time and nothing is
    computed, so each closure is what the job's closures pay besides their compute."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    model, optimizer, *_ = build_for_training(tf, job, strategy)
    accumulators, _ticket, gathered, apply = sync_update(tf, strategy, model, optimizer)
    weights = model.trainable_variables
    count = tf.constant(1, tf.int64)

    def read() -> Any:  # the closure's pull: every weight read on the worker, summed
        return tf.add_n([tf.reduce_sum(w) for w in weights])

    def grads(pulled: Any) -> list[Any]:
        # gradients made on the worker from a value read at run time (constants would be
        # folded and placed beside their variables, and nothing would cross)
        return [tf.fill(w.shape, tf.cast(pulled, w.dtype) * 0) for w in weights]

    def apply_() -> Any:  # an asynchronous closure's push and update
        pulled = read()
        g = grads(pulled)
        optimizer.apply_gradients(zip(g, weights, strict=True))
        with tf.control_dependencies([optimizer.iterations]):
            return tf.identity(pulled)

    def accumulate() -> Any:  # a synchronous closure's push (no backup workers): add, count
        pulled = read()
        g = grads(pulled)
        adds = [a.assign_add(x) for a, x in zip(accumulators, g, strict=True)]
        with tf.control_dependencies(adds):
            return gathered.assign_add(1)

    def bare() -> Any:  # what every closure pays: dispatch, a server's scalar, fetch
        return gathered.read_value()

    closures = [
        (kind, tf.function(lambda body=body: strategy.run(body)))
        for kind, body in zip(CLOSURES, (read, accumulate, apply_, bare), strict=True)
    ]
    protocol.emit({"event": "ready", "worker": 0, "time": time.time()})
    for i in range(job.warmup + job.repeats):
        timed = []
        started = time.perf_counter()
        apply(count).numpy()
        timed.append(("update", time.perf_counter() - started))
        first = i % len(closures)  # each closure in turn runs first after the update
        for kind, fn in closures[first:] + closures[:first]:
            cpu = busy_cpu_s()
            started = time.perf_counter()
            coordinator.schedule(fn).fetch()
            timed.append((kind, time.perf_counter() - started))
            if cpu is not None and (after := busy_cpu_s()) is not None:
                timed.append((f"{kind}_cpu", after - cpu))
        if i >= job.warmup:
            for kind, seconds in timed:
                protocol.emit(
                    {"event": "probe", "worker": 0, "kind": kind, "bytes": 0, "time_s": seconds}
                )
    protocol.emit({"event": "done", "worker": 0, "time": time.time()})


#: the probes a `Probe` job names (its `probe`), each run in place of training
PROBES: dict[str, Callable[[Probe], None]] = {
    "transfer": transfer,
    "allreduce": allreduce,
    "coordinator": coordinator,
    "update": update,
}
