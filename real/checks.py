"""What run-real refuses before anything starts: what it cannot run as specified
(`check_supported`, a line that names the field: `... not implemented yet by run-real`;
never run something else under its name; what each kind cannot run, its plug-in says,
real/strategies/), and `real.device: gpu` where TensorFlow sees no GPU (`require_gpu`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scenarios.errors import NotModelledError, ScenarioError
from scenarios.keras_layers import resolve_spec
from scenarios.spec import ScenarioSpec

from .job import DIGITS_CLASSES, DIGITS_FEATURES
from .strategies import strategy_of


def check_supported(spec: ScenarioSpec) -> None:
    """Refuse, before anything starts, what run-real cannot (yet) run as specified."""
    plugin = strategy_of(spec.strategy)  # None: a kind with no job of its own here
    problems = [f"strategy.kind: {spec.strategy.kind}"] if plugin is None else plugin.problems(spec)
    spark = spec.real.engine == "spark"
    if spark and not spec.real.spark.master.startswith("local") and not spec.real.shared_dir:
        problems.append(
            f"real.spark.master: {spec.real.spark.master} without real.shared_dir (a "
            "directory every executor sees)"
        )
    if spec.cluster.hosts > 1 and not spark:
        problems.append("cluster.hosts > 1 (local processes run on this host only)")
    if problems:
        raise NotModelledError(f"{problems[0]}: not implemented yet by run-real")
    shared = spec.real.shared_dir
    if spark and shared is not None and not Path(shared).is_dir():
        raise ScenarioError(f"real.shared_dir: {shared} is not a directory here")
    if spec.training.target is not None and spec.training.data != "digits":
        raise ScenarioError(
            f"training.target: run-real measures it on held-out real data, and "
            f"training.data is {spec.training.data} (use data: digits)"
        )
    if spec.model.transformer is not None and spec.training.data == "digits":
        raise ScenarioError(
            "training.data: digits: a transformer trains on synthetic tokens here (data: "
            "synthetic)"
        )
    if spec.model.keras is None:
        raise ScenarioError(
            f"model: {spec.model.name} has no keras builder, so run-real cannot build it"
        )
    if spec.training.data == "digits":
        keras = resolve_spec(spec.model.keras.model_dump())
        shape = keras.get("input_shape") or [keras.get("inputs", 0)]
        if int(np.prod(shape)) != DIGITS_FEATURES or keras.get("classes") != DIGITS_CLASSES:
            raise ScenarioError(
                f"training.data: digits needs a model with {DIGITS_FEATURES} inputs and "
                f"{DIGITS_CLASSES} classes (mlp or small_cnn with input_shape [8, 8, 1]); "
                f"model {spec.model.name} takes {shape} and {keras.get('classes')} classes"
            )


def require_gpu() -> None:
    """Refuse `real.device: gpu` where TensorFlow sees no GPU."""
    import subprocess
    import sys

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    count = probe.stdout.strip().splitlines()[-1] if probe.stdout.strip() else "0"
    if probe.returncode != 0 or count == "0":
        raise ScenarioError("real.device: gpu, but TensorFlow sees no GPU on this machine")
