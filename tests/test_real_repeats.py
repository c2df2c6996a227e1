"""`real.repeats`: every point run again, interleaved, and combined into means with 95%
half-widths (no TensorFlow needed: the runs are stand-ins)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest

from real import runner
from real.protocol import Serving, Step
from real.runner import RealPoint, merge_repeats
from real.summary import free_since
from scenarios import loads, vocab

SCENARIO = """
version: 1
name: repeated
model: mlp
cluster: {hosts: 1, devices_per_host: 1, device: cpu, host_link: loopback, network: 1GbE}
training: {batch_per_worker: 8, steps: 3, warmup_steps: 1}
strategy: {kind: allreduce, algorithm: ring, overlap: false}
real: {repeats: 3}
sweep:
  cluster.devices_per_host: [1, 2]
"""


def fake(point_id: str, throughput: float, step_s: float) -> RealPoint:
    row = {
        "point": point_id,
        "backend": "real",
        "workers": 1,
        "sync": True,
        "throughput_samples_per_s": throughput,
        "step_time_mean_s": step_s,
        "training_time_s": 3 * step_s,
        "wall_time_s": 10.0,
    }
    steps = pd.DataFrame(
        {
            "point": point_id,
            "worker": 0,
            "step": [0, 1],
            "warmup": [True, False],
            "start_s": [0.0, step_s],
            "compute_end_s": [step_s / 2, 1.5 * step_s],
            "comm_end_s": [step_s, 2 * step_s],
            "end_s": [step_s, 2 * step_s],
            "replication": 0,
            "generation": 0,
            "lost": False,
            "trial": -1,
            "staleness": 0,
        }
    ).reindex(columns=list(vocab.STEP_COLUMNS))
    return RealPoint(point_id, row, steps)


def test_runs_are_interleaved_and_combined(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = loads(SCENARIO)
    order: list[str] = []
    first, second = (p.id for p in scenario.points)
    values = {first: iter([100.0, 110.0, 120.0]), second: iter([200.0, 210.0, 230.0])}

    rounds: dict[str, list[int]] = {first: [], second: []}

    def run_point(point: Any, repetition: int = 0, phase: Any = None) -> RealPoint:
        order.append(point.id)
        rounds[point.id].append(repetition)  # a target's run i shuffles by seed + i
        throughput = next(values[point.id])
        return fake(point.id, throughput, 8 / throughput)

    monkeypatch.setattr(runner, "run_point", run_point)
    monkeypatch.setattr(runner, "check_supported", lambda spec: None)
    done = runner.run(scenario)
    # every point once, then every point again (a slow spell of the machine hits both),
    # forward and backward in turn, one place later every two rounds
    assert order == [first, second, second, first, second, first]
    assert rounds == {first: [0, 1, 2], second: [0, 1, 2]}
    assert [p.point_id for p in done] == [first, second]
    one = done[0].row
    assert one["replications"] == 3
    assert one["workers"] == 1 and isinstance(one["workers"], int)  # identity, not averaged
    assert one["throughput_samples_per_s"] == pytest.approx(110.0)
    # Student's t with 2 degrees of freedom (4.303) x sample sd 10 / sqrt(3)
    assert one["throughput_ci95_samples_per_s"] == pytest.approx(4.303 * 10 / math.sqrt(3))
    assert one["wall_time_s"] == pytest.approx(30.0)
    assert list(done[0].steps["replication"]) == [0, 0, 1, 1, 2, 2]
    # each run's own figures, for meta.json
    assert done[0].runs is not None
    assert [r["throughput_samples_per_s"] for r in done[0].runs] == [100.0, 110.0, 120.0]


def test_one_run_is_the_run() -> None:
    merged = merge_repeats([fake("p", 100.0, 0.08)])
    assert merged.row["replications"] == 1
    assert merged.row["throughput_samples_per_s"] == 100.0
    assert "throughput_ci95_samples_per_s" not in merged.row
    assert merged.runs is None


def test_repeats_must_be_positive() -> None:
    from scenarios import ScenarioError

    with pytest.raises(ScenarioError, match="real.repeats"):
        loads(SCENARIO.replace("repeats: 3", "repeats: 0"))


# ------------------------------------------------------------------ run-real --recalibrate

PROFILE = """
version: 1
kind: trainscale-profile
machine: {hostname: box, cpus: 2}
compute:
  - {model: mlp, batch_per_worker: 8, dtype: float32, processes: 1, step_time: 20 ms,
     p10: 18 ms, p90: 24 ms, steps: 100, startup: 9 s}
transfer: {latency: 2 ms, bandwidth: 300 MB/s, r2: 0.99, max_rel_residual: 0.1}
"""


def entry(processes: int, ms: float, steps: int = 100) -> Any:
    from measured.profile import ComputeEntry

    return ComputeEntry.model_validate(
        {
            "model": "mlp",
            "batch_per_worker": 8,
            "processes": processes,
            "step_time": f"{ms} ms",
            "p10": f"{ms - 2} ms",
            "p90": f"{ms + 4} ms",
            "steps": steps,
            "startup": "11 s",
        }
    )


def test_fold_pools_every_measurement_of_an_entry(tmp_path: Any) -> None:
    from measured.profile import load_profile
    from real.calibrate.pool import fold_compute

    (tmp_path / "p.yaml").write_text(PROFILE)
    profile = load_profile(tmp_path / "p.yaml")
    # two more measurements of P=1 (100 and 200 steps), one of P=2 the profile lacks
    folded = fold_compute(profile, [entry(1, 26.0), entry(2, 30.0), entry(1, 17.0, steps=200)])
    one, two = folded.compute
    # the mean over all 400 steps: (100 x 20 + 100 x 26 + 200 x 17) / 400
    assert one.step_time == pytest.approx((2.0 + 2.6 + 3.4) / 400, rel=1e-12)
    assert one.steps == 400
    assert one.p10 == pytest.approx((18e-3 + 24e-3 + 15e-3) / 3)
    assert one.startup == pytest.approx((9 + 11 + 11) / 3)
    assert (two.processes, two.step_time, two.steps) == (2, pytest.approx(0.030), 100)
    assert folded.transfer == profile.transfer  # only compute is touched


def exact_fit(bandwidth_mb_s: float, latency_ms: float = 2.0, workers: int = 0) -> Any:
    """A fit whose points lie on time = latency + bytes / bandwidth at 1 and 2 MB."""
    from measured.profile import CollectiveFit, Fit

    points = [
        {"bytes": f"{b} B", "time": f"{latency_ms * 1e-3 + b / (bandwidth_mb_s * 1e6)} s"}
        for b in (1e6, 2e6)
    ]
    fit = {
        "latency": f"{latency_ms} ms",
        "bandwidth": f"{bandwidth_mb_s} MB/s",
        "r2": 1.0,
        "max_rel_residual": 0.0,
        "points": points,
    }
    if workers:
        return CollectiveFit.model_validate({"workers": workers, **fit})
    return Fit.model_validate(fit)


def test_recalibrate_measures_before_each_run_and_pools(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from measured.profile import Messages, dump_profile, load_profile
    from real import cli
    from real.calibrate import measure as calibrate

    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("repeats: 3", "repeats: 2"))
    profile = tmp_path / "p.yaml"
    calibrated = load_profile_text(tmp_path, PROFILE).model_copy(
        update={"transfer": exact_fit(300.0), "allreduce": [exact_fit(300.0, workers=2)]}
    )
    profile.write_text(dump_profile(calibrated))
    events: list[str] = []
    # P=1, P=2, then P=2, P=1 in the order measured: the second round runs backward
    speeds = iter([22.0, 30.0, 34.0, 18.0])
    transfers = iter([200.0, 100.0])  # MB/s, in the order measured
    collectives = iter([150.0, 100.0])

    def measure(spec: Any, processes: int, servers: int = 0) -> Any:
        events.append(f"measure P={processes}")
        return entry(processes, next(speeds))

    def transfer(device: str = "cpu") -> Any:
        events.append("transfer")
        bandwidth = next(transfers)
        chain = Messages.model_validate({"first": "2 ms", "chained": "0.5 ms", "chain": 8})
        return exact_fit(bandwidth), exact_fit(bandwidth), chain

    def allreduce(workers: int, device: str = "cpu") -> Any:
        events.append(f"all-reduce {workers}")
        return exact_fit(next(collectives), workers=workers)

    def run_point(point: Any, repetition: int = 0, phase: Any = None) -> RealPoint:
        events.append(f"run {point.id}")
        return fake(point.id, 100.0, 0.08)

    monkeypatch.setattr(calibrate, "measure_compute", measure)
    monkeypatch.setattr(calibrate, "measure_transfer", transfer)
    monkeypatch.setattr(calibrate, "measure_allreduce", allreduce)
    monkeypatch.setattr(runner, "run_point", run_point)
    monkeypatch.setattr(runner, "check_supported", lambda spec: None)
    out = tmp_path / "out"
    argv = [str(scenario), "--out", str(out), "--quiet", "--recalibrate", str(profile)]
    assert cli.main(argv) == 0
    first, second = "devices_per_host=1", "devices_per_host=2"
    # each round of repeats: the transfer once, the 2-process all-reduce before the point
    # that runs one, each just before the run it is for; the second round runs backward
    assert events == [
        "measure P=1",
        "transfer",
        f"run {first}",
        "measure P=2",
        "all-reduce 2",
        f"run {second}",
        "measure P=2",
        "transfer",
        "all-reduce 2",
        f"run {second}",
        "measure P=1",
        f"run {first}",
    ]
    pooled = load_profile(profile)
    one, two = pooled.compute
    assert one.step_time == pytest.approx((20 + 22 + 18) / 3 * 1e-3, rel=1e-9)
    assert two.step_time == pytest.approx((30 + 34) / 2 * 1e-3, rel=1e-9)
    # at each size the mean time of three measurements, fitted again: the seconds per byte
    # average, so the bandwidth is their harmonic mean; the latency they share stays
    assert pooled.transfer is not None and pooled.transfer.measurements == 3
    # (the profile file keeps 6 significant digits)
    harmonic = 3 / (1 / 300 + 1 / 200 + 1 / 100) * 1e6
    assert pooled.transfer.bandwidth == pytest.approx(harmonic, rel=1e-5)
    assert pooled.transfer.latency == pytest.approx(2e-3, rel=1e-5)
    (pair,) = pooled.allreduce
    assert pair.bandwidth == pytest.approx(3 / (1 / 300 + 1 / 150 + 1 / 100) * 1e6, rel=1e-5)
    assert pooled.restarts == calibrated.restarts  # not measured again: as it was
    # each round kept as measured, round 0 the calibration's own figures of those probes
    rounds = [pooled.as_measured_in(i) for i in range(len(pooled.rounds))]
    # (P=2 was not calibrated: round 0 keeps its pooled figure)
    ordered = [sorted(r.compute, key=lambda e: e.processes) for r in rounds]
    times = [[e.step_time * 1e3 for e in entries] for entries in ordered]
    assert times == [pytest.approx(t) for t in ([20, 32], [22, 30], [18, 34])]
    assert [r.transfer.bandwidth / 1e6 for r in rounds] == pytest.approx([300, 200, 100])
    assert [r.allreduce[0].bandwidth / 1e6 for r in rounds] == pytest.approx([300, 150, 100])
    assert all(r.restarts == calibrated.restarts and not r.rounds for r in rounds)


def load_profile_text(tmp_path: Any, text: str) -> Any:
    from measured.profile import load_profile

    path = tmp_path / "text.yaml"
    path.write_text(text)
    return load_profile(path)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--recalibrate", "missing.yaml"], "--recalibrate: cannot read"),
        (["--recalibrate", "p.yaml", "--calibrate"], "--recalibrate: not with --calibrate"),
    ],
)
def test_recalibrate_bad_input_is_one_line(
    tmp_path: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch, extra: list[str], message: str
) -> None:
    from real import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SCENARIO)
    (tmp_path / "p.yaml").write_text(PROFILE)
    assert cli.main(["s.yaml", "--out", "out", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"run-real: error: {message}")
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "p.yaml").read_text() == PROFILE


def closure(worker: int, start: float, end: float, chunk: int = 0, generation: int = 0) -> Step:
    return Step(
        worker=worker,
        step=0,
        start=start,
        compute_end=start,
        end=end,
        loss=1.0,
        chunk=chunk,
        generation=generation,
    )


def test_an_async_step_is_the_workers_whole_iteration() -> None:
    # a worker's step runs from the end of its previous closure (the coordinator's
    # dispatch between them included, as the simulator's step does) to its own end;
    # from the closure's own start where nothing came just before it on that worker
    first, second = closure(0, 1.0, 1.5), closure(0, 1.7, 2.1)
    other = closure(1, 1.2, 1.9)  # another worker's closures in between change nothing
    after_barrier = closure(0, 2.5, 2.9, chunk=1)  # a checkpoint's barrier came between
    rejoined = closure(1, 6.0, 6.4)  # worker 1 was started again at 5.0
    restarted = closure(0, 9.0, 9.3, generation=1)  # the job was restarted
    records = [rejoined, first, after_barrier, other, restarted, second]
    serving = [
        Serving(role="worker", index=1, time=5.0),
        Serving(role="ps", index=0, time=5.5),  # a server: not a worker
    ]
    free = free_since(records, serving)
    assert [free[id(r)] for r in (first, second, other, after_barrier)] == [1.0, 1.5, 1.2, 2.5]
    assert free[id(rejoined)] == 6.0 and free[id(restarted)] == 9.0
    # without the restart of worker 1 its next closure follows on from its last
    assert free_since(records, serving[1:])[id(rejoined)] == 1.9


def test_calibrate_measures_the_two_process_all_reduce_wherever_one_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a sweep of 3 and 4 processes only: the 2-process fit is measured too (it sets what
    # a process moves sending as it receives), beside one per count of the sweep
    from measured.profile import CollectiveFit, Fit, Messages
    from real.calibrate import measure as calibrate

    fit = {"latency": "1 ms", "bandwidth": "100 MB/s", "r2": 1.0, "max_rel_residual": 0.0}
    counts: list[int] = []

    def allreduce(workers: int, device: str = "cpu") -> Any:
        counts.append(workers)
        return CollectiveFit.model_validate({"workers": workers, **fit})

    monkeypatch.setattr(calibrate, "check_supported", lambda spec: None)
    monkeypatch.setattr(calibrate, "measure_compute", lambda spec, p, s=0: entry(p, 10.0))
    monkeypatch.setattr(
        calibrate,
        "measure_transfer",
        lambda device="cpu": (
            Fit.model_validate(fit),
            Fit.model_validate(fit),
            Messages.model_validate({"first": "2 ms", "chained": "0.5 ms", "chain": 8}),
        ),
    )
    monkeypatch.setattr(calibrate, "measure_allreduce", allreduce)
    scenario = loads(SCENARIO.replace("[1, 2]", "[3, 4]"))
    profile = calibrate.calibrate(scenario, say=lambda line: None)
    assert counts == [2, 3, 4]
    assert [f.workers for f in profile.allreduce] == [2, 3, 4]
    # one process only: nothing to all-reduce, no fit
    counts.clear()
    calibrate.calibrate(loads(SCENARIO.replace("[1, 2]", "[1]")), say=lambda line: None)
    assert counts == []


def test_round_order_turns_every_point_through_every_place() -> None:
    points = list("abcdefgh")
    rounds = [runner.round_order(points, r) for r in range(8)]
    assert rounds[0] == points
    assert rounds[1] == points[::-1]
    assert rounds[2] == points[1:] + points[:1]
    assert all(sorted(r) == points for r in rounds)  # every point once a round
    # over 2 x 8 rounds every point runs first twice and last twice
    rounds = [runner.round_order(points, r) for r in range(16)]
    assert all(sum(r[0] == p for r in rounds) == 2 for p in points)
    assert all(sum(r[-1] == p for r in rounds) == 2 for p in points)
    # and no point always follows the same one
    for p in points[1:]:
        before = {r[r.index(p) - 1] for r in rounds if r.index(p) > 0}
        assert len(before) > 1
    assert runner.round_order([], 3) == []


@pytest.mark.parametrize(("target", "seeds"), [(False, [1, 1, 1]), (True, [1, 2, 3])])
def test_a_target_reshuffles_each_repeat(
    monkeypatch: pytest.MonkeyPatch, target: bool, seeds: list[int]
) -> None:
    """With a target, run i of a point shuffles and splits by the seed + i; without one
    every run is the scenario's seed (its throughput does not depend on the order)."""
    text = SCENARIO.replace("sweep:\n  cluster.devices_per_host: [1, 2]\n", "seed: 1\n")
    if target:
        text = text.replace(
            "training: {batch_per_worker: 8, steps: 3, warmup_steps: 1}",
            "training: {batch_per_worker: 8, steps: 3, warmup_steps: 1, data: digits,"
            " target: {metric: loss, value: 0.5}}",
        )
    (point,) = loads(text).points
    used: list[int] = []

    class Stop(Exception):
        pass

    def launch(spec: Any, jobs: Any) -> Any:
        used.append(spec.seed)
        raise Stop

    monkeypatch.setattr(runner, "launch_with_failures", launch)
    for repetition in range(3):
        with pytest.raises(Stop):
            runner.run_point(point, repetition)
    assert used == seeds
