"""Evaluation on the held-out split, for time to target (`training.target`).

Every `eval_every` updates, and after the last, the process that owns the updates (each
all-reduce worker: their replicas hold the same weights, so each decides alike without
talking; a parameter-server coordinator) runs the model over the held-out images, reports
an `eval` record (the update count, the host clock at its start and end, loss and
accuracy) and stops training once the target is met. The evaluation's time is the job's:
the updates after it wait for it, so time to target includes it, and the simulator
charges it the same way (sim/engine/convergence.py).
"""

from __future__ import annotations

import time
from typing import Any

from .. import protocol
from ..job import Trainer
from .training import digits_split


class Evaluator:
    """The held-out images as tensors, and one compiled forward pass over them."""

    def __init__(self, tf: Any, job: Trainer, model: Any, x_held: Any, y_held: Any):
        self.job = job
        x, y = tf.constant(x_held), tf.constant(y_held)
        entropy = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def measure() -> Any:
            logits = model(x, training=False)
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct = tf.reduce_mean(tf.cast(tf.equal(predicted, y), tf.float32))
            return entropy(y, logits), correct

        self._measure = measure
        measure()  # traced now, before training: tracing is no part of the time to target

    @classmethod
    def of(cls, tf: Any, job: Trainer, model: Any, shape: Any) -> Evaluator | None:
        """The job's evaluator, or None where it evaluates nothing."""
        if not job.eval_every or job.holdout <= 0:
            return None
        _, _, x_held, y_held = digits_split(shape, job.holdout, job.seed)
        return cls(tf, job, model, x_held, y_held)

    def due(self, done: int, total: int) -> bool:
        return done % self.job.eval_every == 0 or done == total

    def __call__(self, done: int, worker: int) -> bool:
        """Evaluate after `done` updates; True once the target is met."""
        start = time.time()
        loss, accuracy = (float(v) for v in self._measure())
        protocol.emit(
            {
                "event": "eval",
                "worker": worker,
                "step": done,
                "start": start,
                "end": time.time(),
                "loss": loss,
                "accuracy": accuracy,
            }
        )
        target = self.job.target
        if target is None:
            return False
        return target.met(accuracy if target.metric == "accuracy" else loss)
