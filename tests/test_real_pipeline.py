"""run-real pipelines (real/process/pipeline.py) against a NumPy model of the same training, and
in-graph replication (one client, MirroredStrategy).

GPipe's micro-batches change when each part of the gradient is computed, never what it
sums to: a pipeline step is full-batch SGD. So the losses a 2-stage pipeline reports,
step after step, are the losses of the same MLP trained on the whole batch by momentum
SGD written out in NumPy (its forward, its softmax cross-entropy and their gradients by
hand), from the weights and data `real/process/pipeline.py` makes from the seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("tensorflow")

from processes import run_real, tagged  # noqa: E402

from scenarios import vocab  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("own")]

INPUTS, HIDDEN, CLASSES, BATCH, RATE, STEPS, SEED = 16, [32, 24], 4, 8, 0.1, 4, 5

SCENARIO = f"""
version: 1
name: real-pipeline-test
seed: {SEED}
model: {{name: tiny-mlp, keras: {{builder: mlp, inputs: {INPUTS}, hidden: {HIDDEN},
        classes: {CLASSES}}}}}
cluster: {{hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}}
training: {{batch_per_worker: {BATCH}, steps: {STEPS}, warmup_steps: 0,
           learning_rate: {{base: {RATE}}}}}
strategy: {{kind: pipeline, stages: 2, micro_batches: 4, schedule: SCHEDULE}}
real: {{timeout: 3 min, baseline: false}}
"""


def numpy_losses(
    steps: int,
    sizes: tuple[int, ...] = (INPUTS, *HIDDEN, CLASSES),
    rate: float = RATE,
    seed: int = SEED,
    batches: Iterator[tuple[np.ndarray, np.ndarray]] | None = None,
) -> list[float]:
    """The loss before each step of full-batch momentum SGD (Keras' SGD: v = 0.9 v - lr g,
    w += v) on the MLP, from real/process/pipeline.py's initial weights and synthetic batch: per
    layer in order a Glorot-uniform kernel and a zero bias, then the inputs and labels,
    all drawn from one numpy Generator seeded with the scenario's seed. With `batches`,
    step i trains on the i-th of them instead of the synthetic batch."""
    rng = np.random.default_rng(seed)
    params = []
    for fan_in, fan_out in zip(sizes, sizes[1:], strict=False):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        kernel = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
        params += [kernel.astype(np.float64), np.zeros(fan_out)]
    x = rng.uniform(0, 1, (BATCH, sizes[0])).astype(np.float32).astype(np.float64)
    y = rng.integers(0, sizes[-1], BATCH)
    velocity = [np.zeros_like(p) for p in params]
    losses = []
    for _ in range(steps):
        if batches is not None:
            x, y = next(batches)
            x = x.astype(np.float64)
        acts = [x]
        for i in range(0, len(params), 2):
            z = acts[-1] @ params[i] + params[i + 1]
            acts.append(np.maximum(z, 0) if i + 2 < len(params) else z)
        logits = acts[-1]
        shifted = logits - logits.max(axis=1, keepdims=True)
        prob = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        losses.append(float(-np.log(prob[rows, y]).mean()))
        grad = prob.copy()
        grad[rows, y] -= 1
        grad /= len(y)
        grads = [None] * len(params)
        for i in reversed(range(0, len(params), 2)):
            grads[i], grads[i + 1] = acts[i // 2].T @ grad, grad.sum(axis=0)
            grad = grad @ params[i].T
            if i > 0:
                grad = grad * (acts[i // 2] > 0)
        for p, v, g in zip(params, velocity, grads, strict=True):
            v *= 0.9
            v -= rate * g
            p += v
    return losses


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_trains_as_full_batch_sgd(schedule: str, tmp_path: Path, own: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(SCENARIO.replace("SCHEDULE", schedule))
    out = tmp_path / "out"
    proc = run_real(str(path), "--out", str(out), "--steps", "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert sorted(steps["worker"].unique()) == [0, 1]  # one record per stage and step
    assert len(steps) == 2 * STEPS
    reported = steps[steps["worker"] == 0].sort_values("step")["loss"].to_numpy()
    np.testing.assert_allclose(reported, numpy_losses(STEPS), rtol=2e-4)
    assert reported[-1] < reported[0]
    # the second stage starts once the first micro-batch has come through the first,
    # and ends first (its backward ends the step on the first stage)
    for _, step in steps.groupby("step"):
        first, second = (step[step["worker"] == k].iloc[0] for k in (0, 1))
        assert second["start_s"] > first["start_s"]
        assert second["end_s"] <= first["end_s"]
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["strategy"] == "pipeline" and row["workers"] == 2
    assert row["samples_trained"] == BATCH * STEPS
    assert not tagged(own)


def test_a_stage_fed_by_a_stage_of_no_layers_trains_alike(tmp_path: Path, own: str) -> None:
    # the calibration's fed stage (real/calibrate/stage.py, measure_stage): a first stage of no
    # layers only sends each micro-batch on and takes its gradient back; the training is
    # still the whole MLP's, full batch
    from real.launcher import Launcher
    from real.protocol import Step
    from real.runner import common_of
    from real.strategies.pipeline import pipeline_jobs
    from scenarios import loads

    spec = loads(SCENARIO.replace("SCHEDULE", "gpipe")).points[0].spec
    jobs = pipeline_jobs(*common_of(spec, 1), spec, [0, len(HIDDEN) + 1])
    result = Launcher(jobs, 120.0, "cpu").run()
    records = sorted((r for r in result.of(Step) if r.worker == 1), key=lambda r: r.step)
    np.testing.assert_allclose([r.loss for r in records], numpy_losses(STEPS), rtol=2e-4)
    assert not tagged(own)


DIGITS_STEPS = 20


def test_each_step_trains_on_the_batch_the_chief_sent(own: str) -> None:
    """With the digits the chief sends a new batch every step, and the step must read it,
    not the one before: step i's loss is the NumPy model's on the i-th batch of the
    shuffle (real/process/training.py `batch_stream`), every step and every run. A write
    that races the step's read shows as a step on the previous batch's images or labels,
    a loss off by percent."""
    from real.job import PipelineChief
    from real.launcher import Launcher
    from real.process.training import digits_split
    from real.protocol import Step
    from real.runner import jobs_for
    from scenarios import loads

    scenario = (
        SCENARIO.replace("SCHEDULE", "gpipe")
        .replace(f"inputs: {INPUTS}", "inputs: 64")
        .replace(f"classes: {CLASSES}", "classes: 10")
    )
    scenario = scenario.replace(f"steps: {STEPS},", f"steps: {DIGITS_STEPS}, data: digits,")
    (point,) = loads(scenario).points
    jobs = jobs_for(point.spec)
    chief = jobs[0]
    assert isinstance(chief, PipelineChief)
    x, y, _, _ = digits_split((64,), chief.holdout, chief.seed)
    x, y = x[chief.index :: chief.workers], y[chief.index :: chief.workers]
    rng = np.random.default_rng(chief.seed + chief.index)

    def shuffled() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        while True:
            order = rng.permutation(len(y))
            for start in range(0, len(order) - BATCH + 1, BATCH):
                yield x[order[start : start + BATCH]], y[order[start : start + BATCH]]

    expected = numpy_losses(DIGITS_STEPS, (64, *HIDDEN, 10), batches=shuffled())
    result = Launcher(jobs, 120.0, "cpu").run()
    records = sorted((r for r in result.of(Step) if r.worker == 0), key=lambda r: r.step)
    np.testing.assert_allclose([r.loss for r in records], expected, rtol=2e-4)
    assert not tagged(own)


#: big enough that a micro-batch's forward spans several 5 ms CPU samples
OVERLAP = """
version: 1
name: real-pipeline-overlap
seed: 1
model: {name: mlp-deep, keras: {builder: mlp, inputs: 1024,
        hidden: [1024, 1024, 1024, 1024, 1024, 1024], classes: 10}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training: {batch_per_worker: 512, steps: 10, warmup_steps: 2, learning_rate: {base: 0.01}}
strategy: {kind: pipeline, stages: 2, micro_batches: 4}
real: {timeout: 3 min, baseline: false}
"""


def test_the_trace_shows_the_stages_computing_at_once(tmp_path: Path, own: str) -> None:
    """Each stage's compute in the trace is where its process's CPU time grew as fast as
    the clock. GPipe with 2 stages and 4 micro-batches overlaps the stages for 3 of every
    5 micro-batch slots; stages that took turns would overlap for none. The bubble shows:
    neither stage computes throughout its steps."""
    import json

    path = tmp_path / "overlap.yaml"
    path.write_text(OVERLAP)
    out = tmp_path / "out"
    proc = run_real(str(path), "--out", str(out), "--steps", "all", "--trace")
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    measured = steps[~steps["warmup"]]
    window = (measured["start_s"].min(), measured["end_s"].max())
    (trace,) = out.glob("trace-*.json")
    events = json.loads(trace.read_text())["traceEvents"]
    busy = {0: [], 1: []}
    for e in events:
        if e["ph"] == "X" and e["name"] == vocab.COMPUTE:
            start, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
            start, end = max(start, window[0]), min(end, window[1])
            if end > start:
                busy[e["tid"] // 2].append((start, end))
    length = window[1] - window[0]
    both = sum(max(0.0, min(e0, e1) - max(s0, s1)) for s0, e0 in busy[0] for s1, e1 in busy[1])
    shares = [sum(e - s for s, e in busy[k]) / length for k in (0, 1)]
    assert both > 0.2 * length, (both / length, shares)
    assert all(0.2 < share < 0.95 for share in shares), shares
    assert not tagged(own)


def test_pipeline_replicas_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(SCENARIO.replace("SCHEDULE", "gpipe"))
    out = tmp_path / "never"
    proc = run_real(str(path), "--out", str(out), "--set", "cluster.devices_per_host=4")
    assert proc.returncode == 2
    assert "cluster: 4 devices for 2 stages" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


IN_GRAPH = """
version: 1
name: real-in-graph-test
seed: 2
model: {name: tiny-mlp, keras: {builder: mlp, inputs: 16, hidden: [32], classes: 4}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training: {batch_per_worker: 8, steps: 4, warmup_steps: 1, learning_rate: {base: 0.1}}
strategy: {kind: allreduce, algorithm: ring, overlap: false, replication: in_graph}
real: {timeout: 3 min, baseline: false}
"""


def test_in_graph_is_one_process_driving_both_devices(tmp_path: Path, own: str) -> None:
    path = tmp_path / "in-graph.yaml"
    path.write_text(IN_GRAPH)
    out = tmp_path / "out"
    proc = run_real(str(path), "--out", str(out), "--steps", "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    # a record per device (replica) and step, both from the one client: one start
    assert sorted(steps["worker"].unique()) == [0, 1] and len(steps) == 2 * 5
    for _, step in steps.groupby("step"):
        assert step["start_s"].nunique() == 1 and step["end_s"].nunique() == 1
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["workers"] == 2 and row["samples_trained"] == 2 * 8 * 4
    # the replicas' weights stay equal (one all-reduced update): their own batches'
    # losses differ at first, and both fall
    first, last = (steps[steps["step"] == s].sort_values("worker")["loss"] for s in (0, 4))
    assert first.iloc[0] != first.iloc[1]
    assert (last.to_numpy() < first.to_numpy()).all()
    assert not tagged(own)


def test_the_dispatch_probe_computes_gradients_and_applies_none(own: str) -> None:
    """The dispatch probe (real/calibrate/measure.py `measure_dispatch`): 2 processes at once,
    then one process driving 2 devices, each step's forward and backward only. Every
    step trains on the same synthetic batch, so with no update each process's loss is
    the same at every step; trained, it falls."""
    from real.calibrate.measure import measure_dispatch
    from real.launcher import Launcher
    from real.protocol import Step
    from real.runner import jobs_for
    from scenarios import loads

    (point,) = loads(IN_GRAPH).points
    apart, together = measure_dispatch(point.spec, steps=6)
    assert (apart.processes, apart.gradients_only, apart.in_graph) == (2, True, False)
    assert (together.processes, together.gradients_only, together.in_graph) == (2, True, True)
    assert apart.steps == together.steps == 2 * 6
    (job,) = jobs_for(point.spec)
    for gradients_only in (True, False):
        result = Launcher([job.replace(gradients_only=gradients_only)], 120.0, "cpu").run()
        for device in (0, 1):
            losses = [r.loss for r in result.of(Step) if r.worker == device]
            assert len(losses) == 5
            if gradients_only:
                assert losses == pytest.approx([losses[0]] * 5, rel=1e-6)
            else:
                assert losses[-1] < losses[0]
    assert not tagged(own)


DIGITS_IN_GRAPH = """
version: 1
name: real-in-graph-digits
seed: 3
model: {name: small-mlp, keras: {builder: mlp, inputs: 64, hidden: [32], classes: 10}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training:
  data: digits
  batch_per_worker: 16
  warmup_steps: 0
  max_steps: 60
  learning_rate: {base: 0.05}
  target: {metric: loss, value: 1.0}
  evaluation: {every_steps: 5}
strategy: {kind: allreduce, algorithm: ring, overlap: false, replication: REPLICATION}
real: {timeout: 3 min, baseline: false}
"""


def test_in_graph_trains_on_the_digits_to_a_target_as_between_graph_does(
    tmp_path: Path, own: str
) -> None:
    """Replica r of one process takes the shard, the shuffle and the initial weights that
    process r of the between-graph job takes, and both average the same two gradients
    each update: the held-out loss after every evaluation is the same, and so is the
    update at which it first meets the target."""
    curves = {}
    for replication in ("between_graph", "in_graph"):
        path = tmp_path / f"{replication}.yaml"
        path.write_text(DIGITS_IN_GRAPH.replace("REPLICATION", replication))
        out = tmp_path / replication
        proc = run_real(str(path), "--out", str(out), "--steps", "all")
        assert proc.returncode == 0, proc.stderr[-2000:]
        curves[replication] = pd.read_csv(out / vocab.CURVES_FILE)
        (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
        assert row["steps_to_target"] == curves[replication]["step"].iloc[-1]
    between, graph = curves["between_graph"], curves["in_graph"]
    assert len(between) >= 2 and graph["step"].tolist() == between["step"].tolist()
    assert graph["value"].to_numpy() == pytest.approx(between["value"].to_numpy(), rel=1e-4)
    assert graph["value"].iloc[-1] <= 1.0 < graph["value"].iloc[0]
    assert not tagged(own)


def test_a_pipeline_trains_on_the_digits_to_a_target(tmp_path: Path, own: str) -> None:
    """A 2-stage pipeline on the digits: the chief writes each batch to the stages' tasks,
    evaluates the whole pipeline's forward on the held-out split every 5 updates, and
    stops at the first evaluation that meets the target; its results say where."""
    scenario = (
        DIGITS_IN_GRAPH.replace(
            "{kind: allreduce, algorithm: ring, overlap: false, replication: REPLICATION}",
            "{kind: pipeline, stages: 2, micro_batches: 2}",
        )
        .replace("hidden: [32]", "hidden: [32, 32]")
        .replace("base: 0.05", "base: 0.02")  # one copy: the batch of 16 alone
        .replace("max_steps: 60", "max_steps: 200")
    )
    path = tmp_path / "pipeline.yaml"
    path.write_text(scenario)
    out = tmp_path / "out"
    proc = run_real(str(path), "--out", str(out), "--steps", "all")
    assert proc.returncode == 0, proc.stderr[-2000:]
    curve = pd.read_csv(out / vocab.CURVES_FILE)
    assert curve["step"].tolist() == list(range(5, 5 * len(curve) + 1, 5))
    assert (curve["value"].iloc[:-1] > 1.0).all() and curve["value"].iloc[-1] <= 1.0
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["steps_to_target"] == curve["step"].iloc[-1]
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert steps["step"].max() + 1 == row["steps_to_target"]  # no update past the target
    assert not tagged(own)
