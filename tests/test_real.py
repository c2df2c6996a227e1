"""run-real with real TensorFlow processes (few and small: a tiny MLP, a handful of steps).

Skipped where TensorFlow is not installed. Every test also checks that no worker process
outlives the run.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("tensorflow")

from jobs import PS_FAILURES, check_ps_failures  # noqa: E402
from processes import (  # noqa: E402
    TAG,
    kill_tagged,
    new_tag,
    on_terminal,
    run_real,
    tagged,
    workers_alive,
)

from measured.profile import CLOSURES  # noqa: E402
from real.job import AllReduceWorker  # noqa: E402
from real.launcher import Launcher, RunError  # noqa: E402
from real.protocol import Step  # noqa: E402
from scenarios import vocab  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.usefixtures("own")]
ROOT = Path(__file__).resolve().parent.parent

SCENARIO = """
version: 1
name: real-test
seed: 3
model: {name: tiny-mlp, keras: {builder: mlp, inputs: 64, hidden: [128], classes: 10}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training: {batch_per_worker: 16, steps: 12, warmup_steps: 2, learning_rate: {base: 0.05}}
strategy: {kind: allreduce, algorithm: ring, overlap: false}
real: {timeout: 3 min, baseline: false}   # no 1-worker run: the ring test asks for one
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "real.yaml"
    path.write_text(SCENARIO)
    return path


def test_two_worker_ring_allreduce(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_real(
        str(scenario), "--out", str(out), "--steps", "all", "--trace", "--set", "real.baseline=true"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    (row,) = results.to_dict(orient="records")
    assert row["backend"] == "real" and row["workers"] == 2
    assert row["throughput_samples_per_s"] > 0 and row["scaling_efficiency"] > 0
    assert row["startup_time_s"] > 0
    trace = json.loads((out / vocab.trace_file(row["point"])).read_text())
    phases = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"compute", "allreduce"} <= phases
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert list(steps.columns[: len(vocab.STEP_COLUMNS)]) == list(vocab.STEP_COLUMNS)
    assert len(steps) == 2 * 14 and steps.warmup.sum() == 2 * 2
    assert (steps.start_s <= steps.compute_end_s + 1e-6).all()
    assert (steps.compute_end_s <= steps.end_s + 1e-6).all()
    # the loss falls: the workers really train (synthetic batches are learnable)
    losses = steps[steps.worker == 0].sort_values("step").loss.tolist()
    assert sum(losses[-3:]) < sum(losses[:3])
    assert workers_alive() == []


def test_async_parameter_server(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "ps"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--steps",
        "all",
        "--set",
        "strategy={kind: parameter_server, servers: 1, sync: false}",
        "--set",
        "training.steps=24",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["strategy"] == "parameter_server" and not row["sync"] and row["servers"] == 1
    assert math.isnan(row["scaling_efficiency"])  # real.baseline: false
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert len(steps) == 24 + 2  # one row per update (warm-up included)
    assert set(steps.worker) == {0, 1}  # both workers took closures
    # staleness from the shard's update counter: never negative, below the update count
    assert steps.staleness.min() >= 0 and row["max_staleness"] < 26
    losses = steps.sort_values("end_s").loss.tolist()
    assert sum(losses[-3:]) < sum(losses[:3])
    # a step is a worker's whole iteration: longer than its closure (the dispatch before
    # it), and the iterations of a worker tile its time, so the mean is about workers x
    # batch / throughput (to within the run's first and last iteration)
    measured = steps[~steps.warmup]
    assert row["step_time_mean_s"] > (measured.end_s - measured.start_s).mean()
    cycle = 2 * 16 / row["throughput_samples_per_s"]
    assert 0.7 * cycle < row["step_time_mean_s"] < 1.3 * cycle
    assert workers_alive() == []


def test_sync_parameter_server_backup_worker_drops_the_straggler(
    scenario: Path, tmp_path: Path
) -> None:
    """2 workers, 1 backup: each round applies the first gradient; worker 1, 16x slower
    (a sleep inside its closure), is the one dropped. Real data: the loss falls."""
    out = tmp_path / "sync-ps"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--steps",
        "all",
        "--set",
        "strategy={kind: parameter_server, servers: 1, sync: true, backup_workers: 1}",
        "--set",
        # 16x: every closure's measured compute also holds a round trip to the coordinator
        # (the straggler's sleep is a call there), about 5 ms beside 4 ms of compute, so
        # an 8x stretch measured as under 4x once
        "stragglers={slow: [{workers: [1], factor: 16}]}",
        "--set",
        # 48 rounds: the straggler's first closure fills the digits pipeline's shuffle
        # buffer (about 120 ms under load), stretched 16x to 2 s, which outlasted all 16
        # rounds of worker 0 once in CI and left worker 1 no measured closure
        "training={batch_per_worker: 32, steps: 48, warmup_steps: 2, data: digits, "
        "learning_rate: {base: 0.1}}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["strategy"] == "parameter_server" and row["sync"] and row["max_staleness"] == 0
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    measured = steps[~steps.warmup]
    # one gradient applied per round, the rest dropped: dropped = closures - rounds
    assert row["dropped_gradients"] >= 1
    # throughput counts what reached the model: (2 - 1) worker's batch per round
    applied = row["throughput_samples_per_s"] * row["training_time_s"]
    assert applied == pytest.approx(1 * 32 * 48, rel=1e-6)
    dropped = row["dropped_samples_per_s"] * row["training_time_s"]
    assert dropped == pytest.approx(row["dropped_gradients"] * 32, rel=1e-6)
    compute = (measured.compute_end_s - measured.start_s).groupby(measured.worker).median()
    assert compute[1] > 4 * compute[0]  # 16 b + r against b + r: about 7x here
    # the fast worker carries the rounds: it ran more closures than the straggler
    counts = measured.worker.value_counts()
    assert counts[0] > counts.get(1, 0)
    losses = steps.groupby("step").loss.mean().tolist()
    assert sum(losses[-3:]) < sum(losses[:3])
    assert workers_alive() == []


def test_parameter_server_worker_rejoins_and_server_failure_restarts(
    scenario: Path, tmp_path: Path
) -> None:
    """Async PS: a worker that rejoins, a server whose failure restarts the job
    (tests/jobs.py says which, when, and what the files show)."""
    out = tmp_path / "ps-fail"
    proc = run_real(str(scenario), "--out", str(out), *PS_FAILURES)
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_ps_failures(out)
    assert workers_alive() == []


@pytest.mark.slow
def test_calibrate_parameter_servers_with_a_failure(scenario: Path, tmp_path: Path) -> None:
    """`run-real --calibrate` on a synchronous parameter-server point whose server fails:
    every measurement the simulator takes for it is in the profile, and sane."""
    from measured.profile import load_profile

    out = tmp_path / "profile.yaml"
    proc = run_real(
        str(scenario),
        "--calibrate",
        "--out",
        str(out),
        "--set",
        "strategy={kind: parameter_server, servers: 1, sync: true}",
        "--set",
        "checkpoint.every_steps=3",
        "--set",
        "training.steps=4",  # fewer than the calibration times: it sizes its own runs
        "--set",
        "failures=[{role: ps, index: 0, at_step: 4, downtime: 1 s}]",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    profile = load_profile(out)
    (compute,) = profile.compute
    # two workers at once, beside the server and the coordinator
    assert (compute.processes, compute.servers, compute.steps) == (2, 2, 2 * 100)
    assert compute.p10 is not None and compute.p90 is not None
    assert compute.p10 <= compute.step_time <= compute.p90 * 1.5
    transfer = profile.transfer
    assert transfer is not None and transfer.r2 > 0.5 and len(transfer.points) == 7
    assert 1e6 < transfer.bandwidth < 1e11  # bytes/s: between 1 MB/s and 100 GB/s
    exchange = profile.exchange  # both ways at once: per direction, no faster than one way
    assert exchange is not None and len(exchange.points) == 7
    assert 1e6 < exchange.bandwidth < 1.5 * transfer.bandwidth
    messages = profile.messages  # a chain of 8 reads in one call: each costs under one call
    assert messages is not None and (messages.chain, messages.samples) == (8, 15)
    assert 0 <= messages.chained < messages.first < 1
    coordinator = profile.coordinator
    assert coordinator is not None and coordinator.queued is not None
    assert 0 < coordinator.call < 1 and 0 < coordinator.dispatch < 1
    (update,) = profile.updates
    assert (update.model, update.servers, update.samples) == ("tiny-mlp", 1, 40)
    assert 0 < update.time < 1
    # the CPU the machine spent while a closure ran: no more than its cores in that time
    # (and a clock tick, 10 ms, per reading); Linux has /proc/stat
    cpus = profile.machine.cpus
    for kind in CLOSURES:
        spent, took = getattr(update, f"{kind}_cpu"), getattr(update, kind)
        assert spent is not None and 0 <= spent <= cpus * took + 0.02, kind
    # the job was killed and relaunched: at least the downtime-free start of its processes
    (restart,) = profile.restarts
    assert (restart.strategy, restart.workers, restart.servers) == ("parameter_server/sync", 2, 1)
    assert restart.samples == 3  # the mean of three kills and relaunches
    assert compute.startup is not None and 0.5 * compute.startup < restart.time < 180
    assert workers_alive() == []


def test_straggler_slows_the_sync_step(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "slow"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--steps",
        "all",
        "--set",
        "training.steps=20",
        "--set",
        "sweep={stragglers.slow: [[], [{workers: [1], factor: 11}]]}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    fast, slow = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    stretched = steps[(steps.point == slow["point"]) & ~steps.warmup]
    own = (stretched.compute_end_s - stretched.start_s).groupby(stretched.worker).mean()
    # worker 1 sleeps 10 x its compute each step
    assert own[1] > 5 * own[0]
    # a synchronous all-reduce: no worker ends a step before every worker has computed it
    by_step = stretched.pivot(index="step", columns="worker")
    assert (by_step.end_s[0] >= by_step.compute_end_s[1]).all()
    # so the job's step (from one step's last end to the next's) takes about the straggler's
    # stretched compute or more: less only by how far the workers' ends of a step drift apart
    assert slow["step_time_mean_s"] > 0.9 * own[1] > fast["step_time_mean_s"]
    assert workers_alive() == []


def test_killed_worker_recovers_from_checkpoint(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "fail"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--steps",
        "all",
        "--set",
        "checkpoint.every_steps=5",
        "--set",
        "failures=[{role: worker, index: 1, at_step: 12, downtime: 1 s}]",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    # killed as it started step 12; the last checkpoint held 10 steps: 2 lost and redone
    assert (row["failures"], row["lost_steps"]) == (1, 2)
    assert row["recovery_time_s"] > 1.0  # the downtime, then a measured restart
    assert row["checkpoint_time_s"] > 0
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    kept = steps[~steps.lost]
    # every requested step completed exactly once in the end, by both workers
    assert sorted(kept.step.unique()) == list(range(14))
    assert kept.groupby(["worker", "step"]).size().max() == 1 and len(kept) == 2 * 14
    assert set(steps[steps.lost].step) == {10, 11} and set(steps.generation) == {0, 1}
    assert workers_alive() == []


def test_independent_trials_share_the_slots(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "trials"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--steps",
        "all",
        "--set",
        "training.steps=4",
        "--set",
        "strategy={kind: independent, trials: {learning_rate: [0.01, 0.1], dropout: [0.2, 0.5]}}",
    )  # 4 trials on the 2 slots of the cluster
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = pd.read_csv(out / vocab.RESULTS_FILE).to_dict(orient="records")
    assert row["trials"] == 4 and row["makespan_s"] > 0
    assert 0 < row["slot_utilization"] <= 1
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert sorted(steps.trial.unique()) == [0, 1, 2, 3] and len(steps) == 4 * (4 + 2)
    assert workers_alive() == []


def test_refused_before_anything_starts(scenario: Path, tmp_path: Path) -> None:
    out = tmp_path / "never"
    started = time.monotonic()
    proc = run_real(
        str(scenario), "--out", str(out), "--set", "strategy={kind: allreduce, algorithm: tree}"
    )
    assert proc.returncode == 2
    assert "strategy.algorithm: tree" in proc.stderr and "run-real" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    assert time.monotonic() - started < 30  # no TensorFlow cluster was started


def test_no_gpu_is_refused_cleanly(scenario: Path, tmp_path: Path) -> None:
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    proc = run_real(str(scenario), "--out", str(tmp_path / "gpu"), "--set", "real.device=gpu")
    assert proc.returncode == 2 and "sees no GPU" in proc.stderr


def _job(**over: Any) -> AllReduceWorker:
    return AllReduceWorker(
        index=0,
        collective_timeout_s=30,
        batch_per_worker=8,
        seed=1,
        steps=3,
        keras={"builder": "mlp", "inputs": 8, "hidden": [8], "classes": 2},
    ).replace(**over)


def test_failing_worker_is_reported_and_reaped() -> None:
    jobs = [_job(index=i, workers=2, keras={"builder": "no-such-model"}) for i in range(2)]
    with pytest.raises(RunError, match="failed|exited"):
        Launcher(jobs, timeout_s=120).run()
    assert workers_alive() == []


def test_timeout_kills_everything() -> None:
    jobs = [_job(index=i, workers=2, steps=100000) for i in range(2)]
    with pytest.raises(RunError, match="real.timeout"):
        Launcher(jobs, timeout_s=12).run()  # the processes are training by then
    assert workers_alive() == []


def test_ctrl_c_leaves_no_process(scenario: Path, tmp_path: Path) -> None:
    # a shell without job control starts background commands with SIGINT ignored, and
    # Python keeps an ignored SIGINT ignored: run-real gets Python's own Ctrl-C handler, as
    # a user's foreground command has it, whatever started this test
    argv = [str(scenario), "--out", str(tmp_path / "int"), "--set", "training.steps=100000"]
    launch = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"sys.argv = ['run-real', *{argv!r}]; runpy.run_module('real.cli', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", launch],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(workers_alive()) < 2:
        time.sleep(0.5)
    assert len(workers_alive()) == 2
    time.sleep(2)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert workers_alive() == []
    assert not (tmp_path / "int").exists()


@pytest.mark.parametrize("command", ["real.cli", "real.compare"])
def test_sigterm_leaves_no_process(command: str, scenario: Path, tmp_path: Path) -> None:
    """SIGTERM (what `timeout`, a scheduler or `kill` send) to run-real, or to compare
    while its calibration step runs, reaches no worker directly (their sessions are their
    own): it must still end every one, exit 143 and write nothing."""
    out = tmp_path / "term"
    proc = subprocess.Popen(
        [sys.executable, "-m", command, str(scenario), "--out", str(out)]
        + ["--set", "training.steps=100000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not workers_alive():
        time.sleep(0.5)
    assert workers_alive()
    time.sleep(2)
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "terminated (SIGTERM)" in err
    assert workers_alive() == []
    assert not (out / "real").exists() and not (out / "profile.yaml").exists()
    if command == "real.cli":
        assert not out.exists()


def test_another_run_beside_is_not_ours(scenario: Path, tmp_path: Path) -> None:
    """A run-real that someone else started on the machine (another checkout, another
    user's job) neither counts as this test's process nor gets stopped by it."""
    foreign = new_tag()
    beside = subprocess.Popen(
        [sys.executable, "-m", "real.cli", str(scenario), "--out", str(tmp_path / "beside")]
        + ["--set", "training.steps=100000"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, TAG: foreign},
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (
            time.monotonic() < deadline and len(tagged(foreign, command="real.process.worker")) < 2
        ):
            time.sleep(0.5)
        assert len(tagged(foreign, command="real.process.worker")) == 2
        assert workers_alive() == []
        proc = run_real(str(scenario), "--out", str(tmp_path / "own"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert workers_alive() == []
        assert beside.poll() is None and len(tagged(foreign, command="real.process.worker")) == 2
    finally:
        beside.terminate()
        try:
            beside.wait(timeout=60)
        finally:
            kill_tagged(foreign)
    assert tagged(foreign) == []


SEGFAULT = "os.kill(os.getpid(), signal.SIGSEGV)"  # needs os and signal imported


def _start_instead(launcher: Launcher, index: int, code: str) -> subprocess.Popen[str]:
    """Start process `index` as `python -c code`, this once, with its environment and log."""
    argv, env, log = launcher._commands[index]
    launcher._commands[index] = ([sys.executable, "-c", code], env, log)
    try:
        return Launcher._start(launcher, index)
    finally:
        launcher._commands[index] = (argv, env, log)


class _CrashingOnce(Launcher):
    """Process 0's first start dies of SIGSEGV before doing anything, as TensorFlow's did."""

    crashed = False

    def _start(self, index: int) -> subprocess.Popen[str]:
        if index == 0 and not _CrashingOnce.crashed:
            _CrashingOnce.crashed = True
            return _start_instead(self, 0, f"import os, signal; {SEGFAULT}")
        return super()._start(index)


def test_crash_before_the_first_step_is_launched_again(caplog: Any) -> None:
    _CrashingOnce.crashed = False
    result = _CrashingOnce([_job()], timeout_s=120).run()
    assert _CrashingOnce.crashed
    assert [r.step for r in result.of(Step)] == [0, 1, 2]
    assert "process 0 (worker 0) crashed with SIGSEGV before the first step" in caplog.text
    assert "launching the run again" in caplog.text
    assert workers_alive() == []


def test_crash_after_a_step_is_not_launched_again() -> None:
    # a job that steps, then dies of SIGSEGV: the run fails, nothing relaunched
    step = (
        '{"event": "step", "worker": 0, "step": 0, "start": 0.0, "compute_end": 0.05, '
        '"end": 0.1, "loss": 1.0}'
    )
    code = (
        f"import os, signal, time; print({'@trainscale ' + step!r}, flush=True); "
        f"time.sleep(1); {SEGFAULT}"
    )

    class Stepping(Launcher):
        starts = 0

        def _start(self, index: int) -> subprocess.Popen[str]:
            Stepping.starts += 1
            return _start_instead(self, index, code)

    with pytest.raises(RunError, match="exited with status -11"):
        Stepping([_job()], timeout_s=60).run()
    assert Stepping.starts == 1
    assert workers_alive() == []


def test_training_stops_at_the_target_measured_on_held_out_images(
    scenario: Path, tmp_path: Path
) -> None:
    """Ring, synchronous and asynchronous parameter servers evaluate every 5 updates on
    the held-out fifth of the digits and stop at the first evaluation that meets the
    target; a target out of reach runs to the bound and says so."""
    out = tmp_path / "target"
    proc = run_real(
        str(scenario),
        "--out",
        str(out),
        "--set",
        "training={batch_per_worker: 16, warmup_steps: 2, data: digits, max_steps: 80,"
        " learning_rate: {base: 0.1, scaling: none},"
        " target: {metric: accuracy, value: 0.75}, evaluation: {every_steps: 5}}",
        "--set",
        "sweep={strategy: [{kind: allreduce, algorithm: ring, overlap: false},"
        " {kind: parameter_server, servers: 1, sync: true},"
        " {kind: parameter_server, servers: 1, sync: false}]}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = pd.read_csv(out / vocab.RESULTS_FILE)
    assert len(results) == 3
    curves = pd.read_csv(out / vocab.CURVES_FILE)
    assert list(curves.columns) == list(vocab.CURVE_COLUMNS)
    for row in results.to_dict(orient="records"):
        curve = curves[curves.point == row["point"]].sort_values("step")
        assert (curve.step % 5 == 0).all() and (curve.metric == "accuracy").all()
        met = curve[curve.value >= 0.75]
        assert len(met) == 1 and met.index[-1] == curve.index[-1]  # stopped at the first
        last = curve.iloc[-1]
        assert row["steps_to_target"] == last.step < 80
        assert row["steps"] == last.step - 2  # what ran after the warm-up
        per_update = 16 * (2 if row["sync"] else 1)  # a synchronous update: both batches
        assert row["samples_to_target"] == last.step * per_update
        assert row["epochs_to_target"] == pytest.approx(last.step * per_update / 1438)
        assert row["time_to_target_s"] == pytest.approx(last.time_s)
        # the run stopped at the evaluation that met the target: its steps and its
        # evaluations add up to the time to it, but for the hand-over from a step to an
        # evaluation (milliseconds each)
        assert row["evaluation_time_s"] > 0 and row["training_time_s"] > 0
        assert row["time_to_target_s"] == pytest.approx(
            row["training_time_s"] + row["evaluation_time_s"], rel=0.01, abs=0.01 * len(curve)
        )
        assert row["final_metric"] == pytest.approx(last.value)
    unreachable = tmp_path / "unreachable"
    proc = run_real(
        str(scenario),
        "--out",
        str(unreachable),
        "--set",
        "training={batch_per_worker: 16, warmup_steps: 2, data: digits, max_steps: 12,"
        " target: {metric: loss, value: 0.001}, evaluation: {every_steps: 5}}",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = pd.read_csv(unreachable / vocab.RESULTS_FILE).to_dict(orient="records")
    assert math.isnan(row["time_to_target_s"]) and row["steps"] == 10
    assert pd.read_csv(unreachable / vocab.CURVES_FILE).step.tolist() == [5, 10, 12]
    meta = json.loads((unreachable / vocab.META_FILE).read_text())
    assert meta["targets"]["base"].startswith("not reached in 12 updates: loss ")
    assert workers_alive() == []


def test_the_shortest_scenario_the_docs_allow_runs(tmp_path: Path) -> None:
    # docs/scenarios.md: `version` and `model` are required, the rest has defaults that
    # run-real runs (a cpu device, all-reduce reduced after backward)
    path = tmp_path / "shortest.yaml"
    path.write_text("version: 1\nmodel: mlp\ntraining: {steps: 3, warmup_steps: 1}\n")
    out = tmp_path / "out"
    proc = run_real(str(path), "--out", str(out), "--quiet")
    assert proc.returncode == 0, proc.stderr
    (point,) = json.loads((out / vocab.META_FILE).read_text())["points"]
    resolved = point["resolved"]
    assert resolved["name"] == "shortest" and resolved["cluster"]["device"]["name"] == "cpu"
    assert resolved["strategy"]["overlap"] is False
    assert len(pd.read_csv(out / vocab.RESULTS_FILE)) == 1
    assert workers_alive() == []


def test_steps_summary_by_default_and_phases_on_a_terminal(scenario: Path, tmp_path: Path) -> None:
    """By default steps.csv holds a row per step (the workers summed up); on a terminal
    each part of a point's run is a line on stderr as it starts, with the 1-worker
    baseline named."""
    out = tmp_path / "out"
    sets = ["--set", "real.baseline=true", "--set", "training.steps=4"]
    command = [sys.executable, "-m", "real.cli", str(scenario), "--out", str(out), *sets]
    code, text = on_terminal(command, 600)
    assert code == 0, text[-2000:]
    assert "run-real: base: run 1 of 1" in text and "run-real: base: baseline (1 worker)" in text
    steps = pd.read_csv(out / vocab.STEPS_FILE)
    assert list(steps.columns) == [*vocab.STEP_SUMMARY_COLUMNS, "loss"]
    assert steps.step.tolist() == list(range(2 + 4)) and set(steps.workers) == {2}
    assert (steps.step_time_min_s <= steps.step_time_mean_s).all()
    assert (steps.step_time_mean_s <= steps.step_time_max_s).all()
    assert json.loads((out / vocab.META_FILE).read_text())["steps_form"] == "summary"
    assert workers_alive() == []
