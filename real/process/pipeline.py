"""Pipeline model parallelism for real: one client drives stages on TensorFlow processes.

The job is a chief (the client) and one worker process per stage. Each worker only
serves (`real/process/server.py`), pinned to one core of the host on CPU (a stage is one
device: unpinned, one process's inter-op threads run micro-batches side by side on every
core and a one-stage "pipeline" is already parallel). The chief connects to the cluster
(`tf.config.experimental_connect_to_cluster`), places each stage's Dense layers, their
momentum and the batch on its task (synthetic, made once; or the digits, written to the
first and last stages' tasks by the step itself), and runs the whole step as one
`tf.function` (docs/tf-notes.md: separate calls from one client run in turn):

    stage k, in the order of the schedule (workloads.pipeline.schedule_of):
        F j: the stage's layers on micro-batch j (its input arrives from task k - 1)
        B j: tf.gradients of the stage's output on micro-batch j, given the gradient
             that arrives from task k + 1 (the loss's, on the last stage)
    then each stage's momentum SGD update with the summed micro-batch gradients.

A stage's ops follow its schedule by control dependencies: left to itself, a task's
executor runs every micro-batch's first layer before any second layer, and the next stage
waits for the first micro-batch's activations until the first stage is nearly done.
Activations and their gradients go task to task (gRPC), never through the client.

Each stage reports one step record per step: `start` when its first input arrived,
`end` when its update was done (`tf.timestamp` on its task; every process shares the host
clock). The time between includes the stage's bubble: `compute_end` is `end`. With a
target, the chief evaluates the whole pipeline's forward on the held-out split every few
steps (real/process/evaluate.py) and stops once it is met.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from scenarios.keras_layers import resolve_spec
from workloads.pipeline import schedule_of

from .. import protocol
from ..job import PipelineChief
from .evaluate import Evaluator
from .training import batch_stream


def dense_layers(keras: dict[str, Any]) -> list[tuple[int, int, bool]]:
    """The mlp builder's Dense layers, input to output: (inputs, units, relu)."""
    spec = resolve_spec(keras)
    if spec["builder"] != "mlp":
        raise ValueError(
            f"model.keras.builder: {spec['builder']} (run-real pipelines build the mlp "
            "builder's Dense layers only)"
        )
    sizes = [spec["inputs"], *spec["hidden"], spec["classes"]]
    last = len(sizes) - 2
    return [(sizes[i], sizes[i + 1], i < last) for i in range(len(sizes) - 1)]


def coordinate(job: PipelineChief) -> None:
    """The chief: build the stages on their tasks, run `warmup + steps` steps, report
    each stage's start and end of every step."""
    launched = time.time()
    import tensorflow as tf

    stages, micro = job.stages, job.micro_batches
    devices = _connect(tf, job)
    layers = dense_layers(job.keras)
    if sum(job.split) != len(layers) or len(job.split) != stages:
        raise ValueError(f"split {job.split}: not {stages} stages of {len(layers)} layers")
    batch = job.batch_per_worker
    if batch % micro:
        raise ValueError(f"batch {batch} does not divide into {micro} micro-batches")
    rng = np.random.default_rng(job.seed)
    weights, slots = _build_stages(tf, job.split, layers, devices, rng)
    inputs, classes = layers[0][0], layers[-1][1]
    # the batch lives where it is used: its inputs on the first stage's task, its labels
    # on the last's; synthetic data are made once, digits written there every step
    with tf.device(devices[0]):
        x_all = tf.Variable(rng.uniform(0, 1, (batch, inputs)).astype(np.float32))
    with tf.device(devices[-1]):
        y_all = tf.Variable(rng.integers(0, classes, batch).astype(np.int32))
    batches = None
    if job.data == "digits":
        batches = batch_stream(tf, job, batch, (inputs,), classes)
    rates = job.schedule

    def forward(k: int, x: Any) -> Any:
        for kernel, bias, relu in weights[k]:
            x = tf.matmul(x, kernel) + bias
            if relu:
                x = tf.nn.relu(x)
        return x

    def model(x: Any, training: bool = False) -> Any:
        """The whole pipeline's forward, stage after stage on their tasks (evaluation)."""
        for k in range(stages):
            with tf.device(devices[k]):
                x = forward(k, x)
        return x

    def variables(k: int) -> list[Any]:
        return [v for kernel, bias, _ in weights[k] for v in (kernel, bias)]

    orders = [schedule_of(job.pipeline_schedule, stages, micro, k) for k in range(stages)]

    @tf.function
    def train_step(rate: Any, data: tuple[Any, Any] | None = None) -> Any:
        if data is not None:
            # the next batch onto the stages' tasks, inside the step: tf.function runs
            # a variable's write before the reads after it. A write issued eagerly by
            # the client is only queued on the task, and the step's read does not wait
            # for it (a step on the previous batch; docs/real-backend.md, Pipelines)
            with tf.device(devices[0]):
                x_all.assign(data[0])
            with tf.device(devices[-1]):
                y_all.assign(data[1])
        with tf.device(devices[0]):
            xs = tf.split(x_all.read_value(), micro)
        with tf.device(devices[-1]):
            ys = tf.split(y_all.read_value(), micro)
        traced = _Traced(tf, devices, forward, variables, batch)
        traced.schedule(orders, xs, ys)
        ends = traced.update(slots, rate)
        return tf.stack(traced.starts), tf.stack(ends), tf.add_n(traced.losses)

    evaluator = Evaluator.of(tf, job, model, (inputs,))
    params = sum(int(np.prod(v.shape)) for k in range(stages) for v in variables(k))
    protocol.ready(0, launched, params)
    total = job.warmup_steps + job.steps
    for step in range(total):
        rate = job.learning_rate if rates is None else rates.rate(step)
        data = None if batches is None else next(batches)
        starts, ends, loss = train_step(tf.constant(rate, tf.float32), data)
        _report_step(step, starts.numpy(), ends.numpy(), float(loss))
        if evaluator is not None and evaluator.due(step + 1, total) and evaluator(step + 1, 0):
            break  # the target is met
    protocol.emit({"event": "done", "worker": 0, "time": time.time()})


def _connect(tf: Any, job: PipelineChief) -> list[str]:
    """Connect the chief to the cluster; each stage's device, on its task."""
    # the client's threads carry the function's parts to every task at once
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(max(4, 2 * job.stages))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.config.experimental_connect_to_cluster(
        resolver.cluster_spec(), job_name="chief", task_index=0
    )
    kind = "GPU" if job.device == "gpu" else "CPU"
    return [f"/job:worker/replica:0/task:{k}/device:{kind}:0" for k in range(job.stages)]


def _build_stages(
    tf: Any,
    split: list[int],
    layers: list[tuple[int, int, bool]],
    devices: list[str],
    rng: np.random.Generator,
) -> tuple[list[list[tuple[Any, Any, bool]]], list[list[Any]]]:
    """Each stage's Dense layers (`split[k]` of `layers`) on its task, Keras'
    glorot_uniform drawn from `rng` in order: per stage, (kernel, bias, relu) a layer and
    its momentum slots."""
    weights: list[list[tuple[Any, Any, bool]]] = []  # per stage: (kernel, bias, relu)
    slots: list[list[Any]] = []
    first = 0
    for k, count in enumerate(split):
        with tf.device(devices[k]):
            stage, moments = [], []
            for fan_in, fan_out, relu in layers[first : first + count]:
                limit = float(np.sqrt(6.0 / (fan_in + fan_out)))  # Keras' glorot_uniform
                kernel = tf.Variable(
                    rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
                )
                bias = tf.Variable(np.zeros(fan_out, np.float32))
                stage.append((kernel, bias, relu))
                moments += [tf.Variable(tf.zeros_like(kernel)), tf.Variable(tf.zeros_like(bias))]
            weights.append(stage)
            slots.append(moments)
        first += count
    return weights, slots


class _Traced:
    """One pipeline step as it is traced: each stage's ops emitted in the order of its
    schedule, chained by control dependencies, then its update."""

    def __init__(
        self,
        tf: Any,
        devices: list[str],
        forward: Callable[[int, Any], Any],
        variables: Callable[[int], list[Any]],
        batch: int,
    ) -> None:
        self.tf, self.devices, self.batch = tf, devices, batch
        self.forward, self.variables = forward, variables
        stages = len(devices)
        self.given: dict[tuple[int, int], Any] = {}  # what stage k took in for micro-batch j
        self.made: dict[tuple[int, int], Any] = {}  # its output (the loss, on the last stage)
        self.sent_back: dict[tuple[int, int], Any] = {}  # gradient of its input
        self.grads: list[Any] = [None] * stages
        self.last: list[Any] = [None] * stages  # a stage's op before the next
        self.starts: list[Any] = [None] * stages
        self.losses: list[Any] = []

    def schedule(self, orders: list[list[tuple[str, int]]], xs: Any, ys: Any) -> None:
        """Emit the stages' ops round-robin, each as soon as its input exists."""
        stages = len(orders)
        done = [0] * stages
        while any(done[k] < len(orders[k]) for k in range(stages)):
            for k in range(stages):
                if done[k] == len(orders[k]):
                    continue
                op, j = orders[k][done[k]]
                if op == "F":
                    incoming = xs[j] if k == 0 else self.made.get((k - 1, j))
                    ready = incoming is not None
                elif k == stages - 1:  # the loss's own gradient starts the backward
                    incoming, ready = None, (k, j) in self.made
                else:
                    incoming = self.sent_back.get((k + 1, j))
                    ready = incoming is not None
                if not ready:
                    continue
                with self.tf.device(self.devices[k]):
                    after = self._after(k, incoming)
                    if op == "F":
                        self._forward(k, j, incoming, after, ys)
                    else:
                        self._backward(k, j, incoming, after)
                done[k] += 1

    def _after(self, k: int, incoming: Any) -> list[Any]:
        """What stage k's next op waits for: its previous op, and on its first the clock
        read once its input arrived (the stage's start)."""
        tf = self.tf
        after = [self.last[k]] if self.last[k] is not None else []
        if self.starts[k] is None:
            with tf.control_dependencies([incoming]):
                self.starts[k] = tf.timestamp()
            after.append(self.starts[k])
        return after

    def _forward(self, k: int, j: int, incoming: Any, after: list[Any], ys: Any) -> None:
        """F j on stage k: its layers on micro-batch j (the loss, on the last stage)."""
        tf = self.tf
        with tf.control_dependencies(after):
            self.given[k, j] = tf.identity(incoming)
        out = self.forward(k, self.given[k, j])
        if k == len(self.devices) - 1:
            per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ys[j], logits=out)
            out = tf.reduce_sum(per_sample) / self.batch
            self.losses.append(out)
        self.made[k, j] = out
        self.last[k] = out

    def _backward(self, k: int, j: int, incoming: Any, after: list[Any]) -> None:
        """B j on stage k: gradients of its output on micro-batch j given the gradient
        flowing in, summed into the stage's; its input's gradient sent back."""
        tf = self.tf
        # the gradient flowing in waits for the stage's previous op; on the last stage
        # the loss's own (a constant, else free to run every micro-batch's backward at
        # once as soon as it can)
        with tf.control_dependencies(after):
            upstream = tf.identity(tf.ones_like(self.made[k, j]) if incoming is None else incoming)
        # the first stage's input needs no gradient
        wrt = self.variables(k) if k == 0 else [self.given[k, j], *self.variables(k)]
        found = tf.gradients(self.made[k, j], wrt, grad_ys=upstream)
        part = found if k == 0 else found[1:]
        if k > 0:
            self.sent_back[k, j] = found[0]
        self.grads[k] = (
            part
            if self.grads[k] is None
            else [a + b for a, b in zip(self.grads[k], part, strict=True)]
        )
        with tf.control_dependencies(found):
            self.last[k] = tf.identity(upstream)

    def update(self, slots: list[list[Any]], rate: Any) -> list[Any]:
        """Each stage's momentum SGD update with its summed gradients, last stage first
        (it finishes first); per stage, the clock once its update (and its last op) is
        done."""
        tf = self.tf
        stages = len(self.devices)
        ends: list[Any] = [None] * stages
        for k in reversed(range(stages)):
            with tf.device(self.devices[k]):
                updates = []
                for var, slot, grad in zip(self.variables(k), slots[k], self.grads[k], strict=True):
                    velocity = slot.assign(0.9 * slot - rate * grad)  # Keras SGD momentum
                    updates.append(var.assign_add(velocity))
                with tf.control_dependencies([*updates, self.last[k]]):  # a stage may hold none
                    ends[k] = tf.timestamp()
        return ends


def _report_step(step: int, starts: Any, ends: Any, loss: float) -> None:
    """One step record per stage: its start and end of step `step` (host clock)."""
    for k in range(len(starts)):
        protocol.emit(
            {
                "event": "step",
                "worker": k,
                "step": step,
                "start": float(starts[k]),
                "compute_end": float(ends[k]),
                "end": float(ends[k]),
                "loss": loss,
            }
        )
