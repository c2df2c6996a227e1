"""A transformer's layout for real: tensor x data parallelism over processes with
TensorFlow's DTensor (`strategy.kind: hybrid`, real/strategies/hybrid.py).

Every process is one DTensor client with one device (a CPU, or its GPU); together they
form a mesh of `data` x `tensor` devices ("batch" x "model"), each process taking its
place from TF_CONFIG (its task index, every task's address). The GPT decoder
(`model.transformer`, style gpt: learned positions, pre-norm blocks with causal
multi-head attention and a GeLU MLP, a final norm, logits through the tied embedding)
is laid out as Megatron-LM lays it out (Narayanan et al. 2021, section 3.2): the query,
key, value and first MLP matrices split by columns over "model", the attention's output
and second MLP matrices by rows, so each device holds a/t heads and f/t of the MLP, and
DTensor's SPMD expansion inserts the all-reduce after each row-split product in
forward and the one before each column-split product in backward; the embedding and the
norms are whole on every device. The batch is split over "batch": a copy's batch
(`batch_per_worker`) runs in `micro_batches` micro-batches whose gradients add up
(gradient accumulation), and DTensor reduces the gradients over the data-parallel
devices. SGD with momentum 0.9 at the job's schedule, as the data-parallel builder's.

Tensor parallelism changes where the arithmetic runs, not what it computes: one process
and a mesh of any layout reach the same losses from the same seed (tests/test_real_tensor.py).

Each step reports its start and end on every process (`compute_end` is its end: the
collectives run inside the step's one program, between its products).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from .. import protocol
from ..job import TensorWorker

#: the layout of each weight of a block: which dimension is split over "model"
#: (Megatron-LM's column- and row-parallel linear layers)
COLUMN, ROW, WHOLE = "column", "row", "whole"


def dtensor_environment(job: TensorWorker) -> dict[str, str]:
    """DTensor's multi-client settings from TF_CONFIG: this client's id (its task index)
    and every client's address; none for a process alone."""
    config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    workers = config.get("cluster", {}).get("worker", [])
    if len(workers) <= 1:
        return {}
    return {
        "DTENSOR_CLIENT_ID": str(job.index),
        "DTENSOR_NUM_CLIENTS": str(len(workers)),
        "DTENSOR_JOB_NAME": "worker",
        "DTENSOR_JOBS": ",".join(workers),
    }


def shapes(spec: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every weight by name: its shape and how it is split (`COLUMN`, `ROW`, `WHOLE`;
    a column-split matrix's bias is split with it, a row-split one's is whole)."""
    h, f, v, s = spec["hidden"], spec["ffn_hidden"], spec["vocab"], spec["sequence"]
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "embeddings": ((v, h), WHOLE),
        "positions": ((s, h), WHOLE),
    }
    for i in range(spec["layers"]):
        block = {
            "norm1_gamma": ((h,), WHOLE), "norm1_beta": ((h,), WHOLE),
            "query": ((h, h), COLUMN), "query_bias": ((h,), COLUMN),
            "key": ((h, h), COLUMN), "key_bias": ((h,), COLUMN),
            "value": ((h, h), COLUMN), "value_bias": ((h,), COLUMN),
            "output": ((h, h), ROW), "output_bias": ((h,), WHOLE),
            "norm2_gamma": ((h,), WHOLE), "norm2_beta": ((h,), WHOLE),
            "mlp1": ((h, f), COLUMN), "mlp1_bias": ((f,), COLUMN),
            "mlp2": ((f, h), ROW), "mlp2_bias": ((h,), WHOLE),
        }  # fmt: skip
        out.update({f"layer{i}_{name}": value for name, value in block.items()})
    out["final_norm_gamma"] = ((h,), WHOLE)
    out["final_norm_beta"] = ((h,), WHOLE)
    return out


def parameter_count(spec: dict[str, Any]) -> int:
    """The model's parameters (Narayanan et al. 2021's Eq. 2 and the final norm's 2h)."""
    return int(sum(np.prod(shape) for shape, _ in shapes(spec).values()))


def initial(name: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A weight's first value, the same on every process: norms' gains 1, biases and
    norms' shifts 0, matrices normal with deviation 0.02 (GPT-2's)."""
    if name.endswith("_gamma"):
        return np.ones(shape, np.float32)
    if name.endswith(("_beta", "_bias")):
        return np.zeros(shape, np.float32)
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    return (0.02 * rng.standard_normal(shape)).astype(np.float32)


def run(job: TensorWorker) -> None:
    """Join the mesh, lay the model out, run warm-up and measured steps, report each."""
    launched = time.time()
    os.environ.update(dtensor_environment(job))
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    tf.config.threading.set_intra_op_parallelism_threads(job.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(job.inter_op_threads)
    device = "GPU" if job.device == "gpu" else "CPU"
    dtensor.initialize_accelerator_system(device)
    mesh = dtensor.create_distributed_mesh(
        [("batch", job.data_parallel), ("model", job.tensor)], device_type=device
    )
    spec = job.keras
    model = Laid(tf, dtensor, mesh, spec, job.seed)
    tokens, labels = model.batch(job)
    rates = job.schedule.rates(np.arange(job.warmup_steps + job.steps, dtype=float)) if (
        job.schedule is not None
    ) else np.full(job.warmup_steps + job.steps, job.learning_rate)

    @tf.function
    def train_step(tokens: Any, labels: Any, rate: Any) -> Any:
        return model.step(tokens, labels, rate, job.micro_batches)

    protocol.ready(job.index, launched, parameter_count(spec))
    for step in range(job.warmup_steps + job.steps):
        start = time.time()
        rate = dtensor.copy_to_mesh(
            tf.constant(float(rates[step]), tf.float32), dtensor.Layout.replicated(mesh, 0)
        )
        loss = float(train_step(tokens, labels, rate))
        end = time.time()
        protocol.emit(
            {
                "event": "step",
                "worker": job.index,
                "step": step,
                "start": start,
                "compute_end": end,
                "end": end,
                "loss": loss,
            }
        )
    protocol.emit({"event": "done", "worker": job.index, "time": time.time()})


class Laid:
    """The GPT decoder's weights laid out on the mesh, and its training step."""

    def __init__(self, tf: Any, dtensor: Any, mesh: Any, spec: dict[str, Any], seed: int):
        self.tf, self.dtensor, self.mesh, self.spec = tf, dtensor, mesh, spec
        split = dtensor.UNSHARDED
        self.layouts = {
            COLUMN: lambda rank: dtensor.Layout([split] * (rank - 1) + ["model"], mesh),
            ROW: lambda rank: dtensor.Layout(["model"] + [split] * (rank - 1), mesh),
            WHOLE: lambda rank: dtensor.Layout.replicated(mesh, rank),
        }
        self.weights: dict[str, Any] = {}
        self.momenta: dict[str, Any] = {}
        for name, (shape, how) in shapes(spec).items():
            layout = self.layouts[how](len(shape))
            self.weights[name] = dtensor.DVariable(self._placed(initial(name, shape, seed), layout))
            zeros = np.zeros(shape, np.float32)
            self.momenta[name] = dtensor.DVariable(self._placed(zeros, layout))
        self.names = sorted(self.weights)

    def _placed(self, value: Any, layout: Any) -> Any:
        """`value` (the same on every client) as a tensor of `layout` on the mesh."""
        whole = self.dtensor.copy_to_mesh(
            self.tf.constant(value), self.dtensor.Layout.replicated(self.mesh, np.ndim(value))
        )
        return self.dtensor.relayout(whole, layout)

    def batch(self, job: TensorWorker) -> tuple[Any, Any]:
        """Synthetic tokens made once (as tf_cnn_benchmarks makes its images), every
        copy's batch in micro-batches: [micro-batches, data x micro-batch, sequence],
        split over "batch"; the labels the tokens shifted by one."""
        s, v = self.spec["sequence"], self.spec["vocab"]
        rows = job.batch_per_worker * job.data_parallel
        rng = np.random.default_rng([job.seed, 7])
        drawn = rng.integers(0, v, size=(rows, s + 1), dtype=np.int32)
        m = job.micro_batches
        split = self.dtensor.UNSHARDED
        layout = self.dtensor.Layout([split, "batch", split], self.mesh)
        shaped = [
            drawn[:, part].reshape(job.data_parallel, m, -1, s).transpose(1, 0, 2, 3)
            for part in (slice(0, -1), slice(1, None))
        ]
        return tuple(self._placed(x.reshape(m, rows // m, s), layout) for x in shaped)  # type: ignore[return-value]

    def logits(self, tokens: Any) -> Any:
        tf, w, spec = self.tf, self.weights, self.spec
        b, s = tokens.shape
        h, a = spec["hidden"], spec["heads"]
        d = h // a
        x = tf.gather(w["embeddings"], tokens) + w["positions"]
        causal = tf.linalg.band_part(tf.ones((s, s)), -1, 0)

        def norm(y: Any, name: str) -> Any:
            mean, var = tf.nn.moments(y, axes=[-1], keepdims=True)
            return (y - mean) * tf.math.rsqrt(var + 1e-5) * w[f"{name}_gamma"] + w[f"{name}_beta"]

        for i in range(spec["layers"]):
            p = f"layer{i}_"
            y = norm(x, p + "norm1")

            def heads(name: str, y: Any = y, p: str = p) -> Any:
                z = tf.matmul(y, w[p + name]) + w[p + name + "_bias"]
                return tf.transpose(tf.reshape(z, [b, s, a, d]), [0, 2, 1, 3])

            q, k, v = heads("query"), heads("key"), heads("value")
            scores = tf.matmul(q, k, transpose_b=True) / d**0.5 - 1e9 * (1.0 - causal)
            att = tf.matmul(tf.nn.softmax(scores), v)
            att = tf.reshape(tf.transpose(att, [0, 2, 1, 3]), [b, s, h])
            x = x + tf.matmul(att, w[p + "output"]) + w[p + "output_bias"]
            y = tf.nn.gelu(tf.matmul(norm(x, p + "norm2"), w[p + "mlp1"]) + w[p + "mlp1_bias"])
            x = x + tf.matmul(y, w[p + "mlp2"]) + w[p + "mlp2_bias"]
        return tf.matmul(norm(x, "final_norm"), w["embeddings"], transpose_b=True)

    def step(self, tokens: Any, labels: Any, rate: Any, micro_batches: int) -> Any:
        """One update: every micro-batch's gradients summed (their mean loss's), then SGD
        with momentum 0.9; the step's mean loss."""
        tf = self.tf
        variables = [self.weights[n] for n in self.names]
        total, summed = None, None
        for j in range(micro_batches):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(
                        labels[j], self.logits(tokens[j])
                    )
                ) / micro_batches
            grads = tape.gradient(loss, variables)
            if summed is None:
                summed, total = grads, loss
            else:
                summed = [a + g for a, g in zip(summed, grads, strict=True)]
                total += loss
        for name, grad in zip(self.names, summed or [], strict=True):
            velocity = 0.9 * self.momenta[name] - rate * grad
            self.momenta[name].assign(velocity)
            self.weights[name].assign_add(velocity)
        return total
