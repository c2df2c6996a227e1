"""What run-real refuses before anything starts: what it cannot run as specified
(`check_supported`, a line that names the field: `... not implemented yet by run-real`;
never run something else under its name), and `real.device: gpu` where TensorFlow sees
no GPU (`require_gpu`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scenarios.errors import NotModelledError, ScenarioError
from scenarios.keras_layers import resolve_spec
from scenarios.spec import ScenarioSpec
from workloads.pipeline import replicas

from .job import DIGITS_CLASSES, DIGITS_FEATURES


def check_supported(spec: ScenarioSpec) -> None:
    """Refuse, before anything starts, what run-real cannot (yet) run as specified."""
    st = spec.strategy
    problems = []
    if st.serves_parameters:
        if st.sync and st.partition == "sliced" and st.servers > 1:
            problems.append("strategy.partition: sliced with synchronous parameter servers")
        elif st.partition == "greedy":
            problems.append("strategy.partition: greedy (TF 2 has no greedy placement)")
        elif st.placement != "dedicated":
            problems.append(f"strategy.placement: {st.placement}")
        elif st.local_aggregation:
            problems.append("strategy.local_aggregation")
        elif st.staleness is not None or st.max_iterations_ahead is not None:
            name = "staleness" if st.staleness is not None else "max_iterations_ahead"
            problems.append(f"strategy.{name} (TensorFlow has no SSP bound)")
    elif st.trains_alone:
        pass  # trials: single-worker processes on the slots (real/trials.py)
    elif st.pipelined:
        problems += pipeline_problems(spec)
    elif not st.all_reduces:  # a kind with no job of its own here
        problems.append(f"strategy.kind: {st.kind}")
    elif not st.sync:
        problems.append("strategy.sync: false (asynchronous all-reduce)")
    elif st.replication == "in_graph" and (found := in_graph_problems(spec)):
        problems += found
    elif st.algorithm != "ring":
        problems.append(
            f"strategy.algorithm: {st.algorithm} (TensorFlow's MultiWorkerMirroredStrategy "
            "offers ring on CPU and NCCL's own choice on GPU)"
        )
    elif st.overlap:
        problems.append(
            "strategy.overlap: true (MultiWorkerMirroredStrategy all-reduces once the whole "
            "backward pass is done; leave overlap out, or set it false)"
        )
    if st.trains_alone and spec.failures:
        problems.append("failures with independent trials")
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


def pipeline_problems(spec: ScenarioSpec) -> list[str]:
    """What of a pipeline run-real cannot run (real/process/pipeline.py runs one copy of an mlp
    model, on synthetic data or the digits, no stragglers, failures or checkpoints)."""
    st, problems = spec.strategy, []
    keras = spec.model.keras
    if keras is None or keras.builder != "mlp":
        builder = keras.builder if keras is not None else "none"
        problems.append(f"model.keras.builder: {builder} (run-real pipelines build mlp only)")
    if replicas(spec) > 1:
        problems.append(
            f"cluster: {spec.workers} devices for {st.stages} stages (run-real runs one "
            "copy of a pipeline)"
        )
    if st.tensor > 1:
        problems.append("strategy.tensor (run-real runs no tensor parallelism)")
    if st.parameter_servers:
        problems.append(
            f"strategy.servers: {st.servers} (run-real's pipeline keeps each stage's "
            "variables on the stage's own task)"
        )
    return problems + one_client_problems(spec, "a pipeline", data=True)


def in_graph_problems(spec: ScenarioSpec) -> list[str]:
    """What of in-graph replication run-real cannot run: more than one host's devices,
    and what `one_client_problems` says (its replicas train on the digits, to a target)."""
    problems = []
    if spec.cluster.hosts > 1:
        problems.append(
            f"cluster.hosts: {spec.cluster.hosts} with strategy.replication: in_graph "
            "(run-real drives one host's devices from one client)"
        )
    return problems + one_client_problems(spec, "in-graph replication", data=True)


def one_client_problems(spec: ScenarioSpec, what: str, data: bool = False) -> list[str]:
    """What a job whose one client drives several devices (a pipeline, in-graph
    replication) cannot run: targets and digits data unless `data`, stragglers (a
    client's sleep would slow every device), failures and checkpoints."""
    problems = []
    if not data and (spec.training.target is not None or spec.training.data != "synthetic"):
        problems.append(f"training.target or training.data: digits with {what}")
    s = spec.stragglers
    if s.jitter or s.slow or (s.transient is not None and s.transient.probability > 0):
        problems.append(f"stragglers with {what}")
    if spec.failures or spec.checkpoint.every_steps:
        problems.append(f"failures or checkpoints with {what}")
    return problems


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
