"""Calibration profiles: the format (measured/profile.py), loading them with a scenario
(the path: scenarios/loader.py; the file: `profiles_of`) and what `simulate` takes from
them (sim/costs/; for parameter servers, test_calibration_ps.py), checked against closed
forms written out here from the profile's numbers (the profile and helpers are
conftest's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ALPHA,
    BETA,
    BETA_X,
    CPUS,
    PROFILE,
    SCENARIO,
    STEP_1,
    STEP_2,
    S,
    calibration_of,
    profile_of,
    simulate,
    write,
)

from measured.profile import (
    ComputeEntry,
    Machine,
    Profile,
    dump_profile,
    load_profile,
    profiles_of,
)
from scenarios import ScenarioError, load, vocab
from sim.cli import main
from sim.engine.metrics import summarize
from sim.simulation import Simulation

CHAINED = 0.5e-3  # s, each message chained in one call (a ring's steps) pays this instead
DUPLEX = 2 * BETA_X / BETA  # both ways at once: 120 MB/s each, 1.5 x the one-way 160
CATALOG_STEP = 10 * 3e9 / 10e12  # batch x (fwd + 2 fwd) FLOP / (peak x efficiency)


def ring(n: int, rate: float, latency: float = CHAINED) -> float:
    """Ring all-reduce of S bytes over n ranks, every link at `rate` (Patarasuk & Yuan);
    its 2(n - 1) steps are messages of one op, chained: each pays `latency`."""
    return 2 * (n - 1) * (latency + S / (n * rate))


# ------------------------------------------------------------------ the format


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    # models hold SI floats, but take unit strings only (as scenarios do)
    profile = Profile.model_validate(
        {
            "created": "2026-11-29T12:00:00+00:00",
            "machine": {"hostname": "box", "cpus": 2, "platform": "p", "tensorflow": "2.21.0"},
            "compute": [
                {
                    "model": "mlp",
                    "batch_per_worker": 32,
                    "processes": p,
                    "step_time": f"{t} ms",
                    "p10": f"{t * 0.9} ms",
                    "p90": f"{t * 1.2} ms",
                    "steps": 50,
                    "micro_batches": m,
                    "fed": fed,
                    "gradients_only": go,
                    "in_graph": ig,
                }
                for p, t, m, fed, go, ig in (
                    (1, 6.4, 1, False, False, False),
                    (2, 7.25, 1, False, False, False),
                    (1, 9.0, 4, True, False, False),
                    (2, 3.0, 1, False, True, False),
                    (2, 5.0, 1, False, True, True),
                )
            ],
            "transfer": {
                "latency": "1.9 ms",
                "bandwidth": "160 MB/s",
                "r2": 0.998,
                "max_rel_residual": 0.12,
                "points": [{"bytes": "1 KiB", "time": "2 ms"}, {"bytes": "4 MiB", "time": "28 ms"}],
            },
            "exchange": {
                "latency": "3 ms",
                "bandwidth": "120 MB/s",
                "r2": 0.99,
                "max_rel_residual": 0.2,
            },
            "allreduce": [
                {
                    "workers": 2,
                    "latency": "5 ms",
                    "bandwidth": "120 MB/s",
                    "r2": 0.99,
                    "max_rel_residual": 0.2,
                }
            ],
        }
    )
    path = tmp_path / "p.yaml"
    path.write_text(dump_profile(profile))
    again = load_profile(path)
    assert again.machine == profile.machine
    assert again.compute[1].step_time == pytest.approx(7.25e-3, rel=1e-9)
    assert again.compute[0].p90 == pytest.approx(6.4e-3 * 1.2, rel=1e-5)
    assert [e.micro_batches for e in again.compute] == [1, 1, 4, 1, 1]
    assert [e.fed for e in again.compute] == [False, False, True, False, False]
    assert [e.gradients_only for e in again.compute] == [False, False, False, True, True]
    assert [e.in_graph for e in again.compute] == [False, False, False, False, True]
    assert again.transfer is not None
    assert again.transfer.latency == pytest.approx(1.9e-3, rel=1e-9)
    assert again.transfer.bandwidth == pytest.approx(1.6e8, rel=1e-9)
    assert again.transfer.points[1].bytes == pytest.approx(4 * 2**20)
    assert again.exchange is not None and again.exchange.bandwidth == pytest.approx(1.2e8)
    assert again.allreduce[0].workers == 2
    assert dump_profile(again) == dump_profile(profile)  # a fixed point


def test_step_time_extrapolates_by_sharing_cores() -> None:
    profile = Profile(
        machine=Machine(cpus=2),
        compute=[
            ComputeEntry.model_validate(
                {"model": m, "batch_per_worker": 8, "processes": p, "step_time": t}
            )
            for m, p, t in (("m", 1, "10 ms"), ("m", 2, "12 ms"), ("n", 2, "20 ms"))
        ],
    )
    assert profile.step_time("m", 8, processes=1) == 0.010
    assert profile.step_time("m", 8, processes=2) == 0.012
    # beyond the largest count measured: t(P_max) x P / P_max
    assert profile.step_time("m", 8, processes=3) == pytest.approx(0.012 * 3 / 2)
    assert profile.step_time("m", 8, processes=8) == pytest.approx(0.012 * 4)
    # below the fewest measured: that count's time (never extrapolated downwards)
    assert profile.step_time("n", 8, processes=1) == 0.020
    assert profile.step_time("m", 16) is None
    assert profile.step_time("m", 8, dtype="float16") is None
    assert profile.step_time("x", 8) is None


def test_step_time_of_a_pipeline_stage_by_micro_batches() -> None:
    # a pipeline stage's entries serve only points with as many micro-batches
    profile = Profile(
        machine=Machine(cpus=2),
        compute=[
            ComputeEntry.model_validate(
                {"model": "m", "batch_per_worker": 8, "micro_batches": k, "step_time": t}
            )
            for k, t in ((1, "10 ms"), (4, "14 ms"))
        ],
    )
    assert profile.step_time("m", 8) == 0.010
    assert profile.step_time("m", 8, micro_batches=4) == 0.014
    assert profile.step_time("m", 8, micro_batches=2) is None
    assert profile.step_time("m", 8, micro_batches=4, fed=True) is None  # never measured fed


def test_step_time_beside_servers() -> None:
    # entries measured beside listening server processes serve points with as many;
    # points with a count never measured beside servers take the plain entries
    profile = Profile(
        machine=Machine(cpus=2),
        compute=[
            ComputeEntry.model_validate(
                {"model": "m", "batch_per_worker": 8, "processes": p, "servers": s, "step_time": t}
            )
            for p, s, t in ((1, 0, "10 ms"), (2, 0, "12 ms"), (2, 2, "15 ms"))
        ],
    )
    assert profile.step_time("m", 8, processes=2, servers=2) == 0.015
    assert profile.step_time("m", 8, processes=2, servers=0) == 0.012
    assert profile.step_time("m", 8, processes=2, servers=3) == 0.012
    assert profile.step_time("m", 8, processes=4, servers=2) == pytest.approx(0.015 * 2)


# ------------------------------------------------------------------ loading


def test_relative_path_is_the_scenario_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "box.yaml").write_text(PROFILE)
    (tmp_path / "scenarios").mkdir()
    path = tmp_path / "scenarios" / "s.yaml"
    path.write_text(SCENARIO.replace("profile: box.yaml", "profile: ../profiles/box.yaml"))
    monkeypatch.chdir(tmp_path)
    scenario = load(Path("scenarios") / "s.yaml")
    point = scenario.points[0]
    assert profiles_of(scenario)[point.id].machine.hostname == "box"
    resolved = Path(str(point.spec.cluster.profile))
    assert resolved.is_absolute()
    assert resolved.resolve() == (tmp_path / "profiles" / "box.yaml").resolve()


def test_absolute_path_as_is(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    absolute = tmp_path / "elsewhere" / "p.yaml"
    absolute.write_text(PROFILE)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("profile: box.yaml", f"profile: {absolute}"))
    scenario = load(path)
    point = scenario.points[0]
    assert point.spec.cluster.profile == str(absolute)
    assert point.id in profiles_of(scenario)


def test_no_profile_no_calibration(tmp_path: Path) -> None:
    path = write(tmp_path, scenario=SCENARIO.replace("  profile: box.yaml\n", ""))
    scenario = load(path)
    point = scenario.points[0]
    assert profiles_of(scenario) == {} and point.spec.cluster.profile is None
    sim = Simulation(point.spec)
    assert sim.costs.calibration is None
    assert sim.compute.step_s == pytest.approx(CATALOG_STEP)


@pytest.mark.parametrize(
    "profile,fragment",
    [
        (None, "cluster.profile: cannot read"),
        (PROFILE.replace("latency: 1.9 ms", "latency: 1.9"), "transfer.latency"),
        (PROFILE.replace("cpus: 2", "cpus: 0"), "machine.cpus"),
        (PROFILE.replace("kind: trainscale-profile", "kind: other"), "kind"),
        ("- just\n- a list\n", "is not a trainscale profile"),
    ],
)
def test_bad_profile_is_one_line_exit_2(
    tmp_path: Path, capsys: Any, profile: str | None, fragment: str
) -> None:
    path = write(tmp_path)
    if profile is None:
        (tmp_path / "box.yaml").unlink()
    else:
        (tmp_path / "box.yaml").write_text(profile)
    with pytest.raises(ScenarioError) as info:
        profiles_of(load(path))
    message = str(info.value)
    assert message.startswith("cluster.profile: ") and fragment in message
    assert str(tmp_path / "box.yaml") in message
    out = tmp_path / "never"
    assert main([str(path), "--out", str(out), "--quiet"]) == 2  # (test_cli: as a process)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"simulate: error: {message}"
    assert not out.exists()


# ------------------------------------------------------------------ closed forms


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_one_worker_step_is_the_measured_step(tmp_path: Path, network: str) -> None:
    row = simulate(write(tmp_path), f"sim.network_model={network}")
    assert row["step_time_mean_s"] == pytest.approx(STEP_1, rel=1e-9, abs=0)


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_two_workers_ring_on_one_host(tmp_path: Path, network: str) -> None:
    # compute with 2 processes at once, then the ring from the transfer fit. Analytical:
    # every message at beta. Flow: each process sends and receives at once in a ring step,
    # and its port carries both directions together at DUPLEX x beta (the exchange fit):
    # DUPLEX x beta / 2 each (each under the one-way beta)
    row = simulate(write(tmp_path), "cluster.devices_per_host=2", f"sim.network_model={network}")
    rate = BETA if network == "analytical" else DUPLEX * BETA / 2
    expected = STEP_2 + 2 * (2 - 1) * (CHAINED + S / (2 * rate))
    assert expected == pytest.approx(STEP_2 + ring(2, rate))
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)
    assert row["bytes_on_network"] == 0  # all on the one calibrated machine


def test_four_workers_share_two_cores(tmp_path: Path) -> None:
    path = write(tmp_path)
    # compute: beyond the largest count measured (2), the cores are shared: 7 ms x 4 / 2
    step_4 = STEP_2 * 4 / 2
    # analytical (no contention): every ring link at the calibrated bandwidth
    row = simulate(path, "cluster.devices_per_host=4", "sim.network_model=analytical")
    assert row["step_time_mean_s"] == pytest.approx(step_4 + ring(4, BETA), rel=1e-9, abs=0)
    # flow: four transfers in flight on two cores share what two busy cores move, 2 x the
    # exchange's beta_x: beta_x / 2 each, tighter than each process's port, which carries
    # its send and its receive at DUPLEX x beta / 2 = beta_x
    row = simulate(path, "cluster.devices_per_host=4", "sim.network_model=flow")
    shared = min(DUPLEX * BETA / 2, CPUS * BETA_X / 4)
    assert shared == BETA_X / 2
    assert row["step_time_mean_s"] == pytest.approx(step_4 + ring(4, shared), rel=1e-9, abs=0)


def test_how_much_sending_and_receiving_overlap(tmp_path: Path) -> None:
    """The exchange fit sets what a port carries both ways: without it both directions
    share the one-way beta; at or above beta each way it is full duplex (each direction
    at beta); three processes on two cores are bound by the cores instead."""
    without = PROFILE.replace(
        "exchange: {latency: 3 ms, bandwidth: 120 MB/s, r2: 0.99, max_rel_residual: 0.2}\n", ""
    )
    flow = "sim.network_model=flow"
    row = simulate(write(tmp_path, profile=without), "cluster.devices_per_host=2", flow)
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 + ring(2, BETA / 2), rel=1e-9)
    # and without it the cores move the one-way beta each: five processes, 2/5 beta each,
    # tighter than their ports' beta / 2
    row = simulate(write(tmp_path, profile=without), "cluster.devices_per_host=5", flow)
    step_5 = STEP_2 * 5 / 2
    assert row["step_time_mean_s"] == pytest.approx(step_5 + ring(5, CPUS * BETA / 5), rel=1e-9)
    full = PROFILE.replace("bandwidth: 120 MB/s", "bandwidth: 200 MB/s")
    row = simulate(write(tmp_path, profile=full), "cluster.devices_per_host=2", flow)
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 + ring(2, BETA), rel=1e-9)
    row = simulate(write(tmp_path), "cluster.devices_per_host=3", flow)
    shared = min(DUPLEX * BETA / 2, CPUS * BETA_X / 3)  # the cores: 80 MB/s < 120 MB/s
    step_3 = STEP_2 * 3 / 2
    assert row["step_time_mean_s"] == pytest.approx(step_3 + ring(3, shared), rel=1e-9)


def test_the_two_process_all_reduce_sets_what_a_port_carries_both_ways(
    tmp_path: Path,
) -> None:
    """Where the profile has a 2-process all-reduce fit, its bandwidth is the rate each
    way of a process sending as it receives, in place of the exchange probe's: 70 MB/s
    each way, both together 140 MB/s, less than the one-way 160 (duplex 0.875); and what
    each busy core moves. Its latency is not used (chained messages are), nor fits of
    more processes."""
    fit = "  - {workers: 2, latency: 40 ms, bandwidth: 70 MB/s, r2: 0.99, max_rel_residual: 0.1}\n"
    path = write(tmp_path, profile=PROFILE + fit)
    for network in ("flow", "analytical"):
        row = simulate(path, "cluster.devices_per_host=2", f"sim.network_model={network}")
        # flow: the ring's two flows on each port, 140 MB/s both ways: 70 each; analytical:
        # every message at the route's narrowest link, the port both ways
        rate = 70e6 if network == "flow" else 140e6
        assert row["step_time_mean_s"] == pytest.approx(STEP_2 + ring(2, rate), rel=1e-9)
    # three processes on two cores: each core moves what each of the 2-process
    # all-reduce's processes moved each way, 70 MB/s (not the exchange's 120), and the
    # cores bind before the ports (70 each way): 2 x 70 / 3 each
    row = simulate(path, "cluster.devices_per_host=3", "sim.network_model=flow")
    rate = min(140e6 / 2, CPUS * 70e6 / 3)
    assert rate == pytest.approx(140e6 / 3)
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 * 3 / 2 + ring(3, rate), rel=1e-9)
    point = load(path, ["cluster.devices_per_host=2"]).points[0]
    calibration = calibration_of(point.spec, profile_of(point))
    assert calibration is not None and calibration.duplex == pytest.approx(0.875)
    assert any(
        line.startswith("exchange: the 2-process all-reduce moved 70") for line in calibration.used
    )
    assert calibration.core_rate == pytest.approx(70e6)
    assert calibration.loopback_capacity == pytest.approx(CPUS * 70e6)


def test_without_the_chain_probe_every_message_pays_the_fit_latency(
    tmp_path: Path, capsys: Any
) -> None:
    without = PROFILE.replace("messages: {first: 2.2 ms, chained: 0.5 ms, chain: 8}\n", "")
    path = write(tmp_path, profile=without)
    row = simulate(path, "cluster.devices_per_host=2", "sim.network_model=analytical")
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 + ring(2, BETA, latency=ALPHA), rel=1e-9)
    assert main([str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    assert "messages: no chain probe" in capsys.readouterr().err


def test_chain_probe_medians_and_slope() -> None:
    from real.calibrate.probes import messages_of
    from real.protocol import ProbeSample

    def chain(messages: int, t: float) -> ProbeSample:
        return ProbeSample(worker=0, kind="chain", messages=messages, bytes=1024, time_s=t)

    records = [chain(1, t) for t in (2e-3, 3e-3, 9e-3)]
    records += [chain(8, t) for t in (6e-3, 6.5e-3, 7e-3)]
    records += [ProbeSample(worker=0, kind="pull", bytes=1024, time_s=1.0)]
    messages = messages_of(records)
    assert messages.first == pytest.approx(3e-3)  # the median, not the mean
    assert messages.chained == pytest.approx((6.5e-3 - 3e-3) / 7)
    assert (messages.chain, messages.samples) == (8, 3)
    with pytest.raises(RuntimeError, match="chain probe"):
        messages_of(records[:3])


def test_layers_keep_their_shares(tmp_path: Path) -> None:
    # per-layer times are scaled so that their total is the measured step time
    scenario = SCENARIO.replace(
        "model: {name: toy, params: 1e6, flops_per_sample: 1 GFLOP}",
        "model: {name: toy, layers: [{name: a, params: 0.25e6, flops: 0.75 GFLOP}, "
        "{name: b, params: 0.75e6, flops: 0.25 GFLOP}]}",
    )
    point = load(write(tmp_path, scenario=scenario)).points[0]
    compute = Simulation(point.spec, profile=profile_of(point)).compute
    assert compute.step_s == pytest.approx(STEP_1, rel=1e-12)
    assert compute.forward_s.tolist() == pytest.approx([STEP_1 * 0.75 / 3, STEP_1 * 0.25 / 3])
    buckets = compute.buckets(0.0, overlap=True)  # one per layer, output layer first
    assert buckets[0].ready_s == pytest.approx(STEP_1 / 3 + STEP_1 * 2 * 0.25 / 3)
    assert buckets[1].ready_s == pytest.approx(STEP_1)


def test_model_missing_from_profile_falls_back(tmp_path: Path) -> None:
    path = write(tmp_path, profile=PROFILE.replace("model: toy", "model: other"))
    point = load(path).points[0]
    sim = Simulation(point.spec, profile=profile_of(point))
    assert sim.compute.step_s == pytest.approx(CATALOG_STEP)
    calibration = calibration_of(point.spec, profile_of(point))
    assert calibration is not None
    assert calibration.not_found and "no entry for model toy" in calibration.not_found[0]
    assert any(u.startswith("transfer:") for u in calibration.used)


def test_profile_without_transfer_keeps_the_catalog_link(tmp_path: Path) -> None:
    profile = PROFILE.replace(
        "transfer: {latency: 1.9 ms, bandwidth: 160 MB/s, r2: 0.998, max_rel_residual: 0.12}\n",
        "",
    )
    row = simulate(write(tmp_path, profile=profile), "cluster.devices_per_host=2")
    link_alpha, link_beta = 1e-6, 100e9
    expected = STEP_2 + 2 * (link_alpha + S / (2 * link_beta))
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)


def test_simulation_reads_the_path_without_a_point(tmp_path: Path) -> None:
    point = load(write(tmp_path)).points[0]
    row = summarize(point.spec, Simulation(point.spec).run())  # reads spec.cluster.profile
    assert row["step_time_mean_s"] == pytest.approx(STEP_1, rel=1e-9, abs=0)


# ------------------------------------------------------------------ meta.json


def test_meta_says_what_came_from_calibration(tmp_path: Path, capsys: Any) -> None:
    scenario = SCENARIO + "sweep:\n  cluster.devices_per_host: [1, 2, 4]\n"
    path = write(tmp_path, scenario=scenario)
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 0
    assert "warning" not in capsys.readouterr().err
    meta = json.loads((out / vocab.META_FILE).read_text())
    cal = meta["calibration"]
    assert cal["profile"] == str(tmp_path / "box.yaml")
    assert cal["machine"]["cpus"] == 2 and cal["machine"]["hostname"] == "box"
    assert "compute: toy batch 10 (P=1): 6.4 ms" in cal["used"]
    assert "compute: toy batch 10 (P=2): 7 ms" in cal["used"]
    assert any(
        u.startswith("compute: toy batch 10 (P=4): 14 ms, extrapolated from P=2")
        for u in cal["used"]
    )
    assert any(u.startswith("transfer: latency 1.9 ms, bandwidth 160 MB/s") for u in cal["used"])
    assert any(u.startswith("exchange: 120 MB/s each way at once") for u in cal["used"])
    assert not any("allreduce" in u for u in cal["used"])
    assert cal["not_found"] == []
    assert set(cal["points"]) == {"devices_per_host=1", "devices_per_host=2", "devices_per_host=4"}
    # the resolved spec names the file it read
    assert meta["points"][0]["resolved"]["cluster"]["profile"] == str(tmp_path / "box.yaml")


def test_missing_model_is_a_warning_and_in_meta(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, profile=PROFILE.replace("model: toy", "model: other"))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simulate: warning: compute: no entry for model")
    meta = json.loads((out / vocab.META_FILE).read_text())
    assert meta["calibration"]["not_found"][0].startswith("compute: no entry for model toy")


def test_meta_without_profile_has_no_calibration(tmp_path: Path) -> None:
    path = write(tmp_path, scenario=SCENARIO.replace("  profile: box.yaml\n", ""))
    out = tmp_path / "out"
    assert main([str(path), "--out", str(out), "--quiet"]) == 0
    assert "calibration" not in json.loads((out / vocab.META_FILE).read_text())


def test_measured_startup_is_the_restart(tmp_path: Path) -> None:
    # a failure stops the job; it is back after its downtime plus the start-up the
    # profile measured with the compute (not checkpoint.restart_overhead's 30 s)
    profile = PROFILE.replace(
        "step_time: 6.4 ms, steps: 50}", "step_time: 6.4 ms, steps: 50, startup: 9 s}"
    )
    row = simulate(
        write(tmp_path, profile),
        "failures=[{role: chief, at_step: 3, downtime: 2 s}]",
        "checkpoint={every_steps: 2, restart_overhead: 30 s}",
        "training.steps=6",
    )
    assert row["failures"] == 1
    assert row["recovery_time_s"] == pytest.approx(2.0 + 9.0, rel=1e-9)


def test_steady_step_leaves_out_each_workers_first_step() -> None:
    from real.calibrate.measure import _steady_step
    from real.protocol import Step

    def step(worker: int, end: float) -> Step:
        return Step(worker=worker, step=0, start=0.0, compute_end=0.0, end=end, loss=1.0)

    # worker 0's first step traces (ends at 0.6 s), then one every 40 ms; worker 1 one
    # every 50 ms after its own first: the median of the gaps (40, 40, 50, 50, 50) is 50 ms
    steps = [step(0, e) for e in (0.60, 0.64, 0.68, 0.72)]
    steps += [step(1, e) for e in (0.55, 0.60, 0.65, 0.70, 0.75)]
    assert _steady_step(steps) == pytest.approx(0.05)
    # the first step alone tells nothing steady: no step left out of the restart
    assert _steady_step([step(0, 0.6), step(0, 0.64)]) == 0.0


def test_measured_relaunch_wins_over_startup(tmp_path: Path) -> None:
    # the job relaunched from its checkpoint, measured for this strategy and worker count,
    # is the restart; the single-worker start-up is only the fallback
    profile = PROFILE.replace(
        "step_time: 7.0 ms, steps: 50}", "step_time: 7.0 ms, steps: 50, startup: 9 s}"
    ) + (
        "restarts: [{model: toy, batch_per_worker: 10, dtype: float32, "
        "strategy: allreduce/ring, workers: 2, servers: 0, time: 11.5 s}]\n"
    )
    row = simulate(
        write(tmp_path, profile),
        "cluster.devices_per_host=2",
        "failures=[{role: worker, index: 1, at_step: 3, downtime: 2 s}]",
        "checkpoint={every_steps: 2, restart_overhead: 30 s}",
        "training.steps=6",
    )
    assert row["failures"] == 1
    assert row["recovery_time_s"] == pytest.approx(2.0 + 11.5, rel=1e-9)


PIPELINE = """
version: 1
name: calibrated-pipeline
seed: 1
model: {name: toy, layers: 4, params: 1e6, flops_per_sample: 1 GFLOP}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback, profile: box.yaml}
training: {batch_per_worker: 8, steps: 5, warmup_steps: 1}
strategy: {kind: pipeline, stages: 2, micro_batches: 4, schedule: gpipe}
"""


@pytest.mark.parametrize(("cpus", "step_s"), [(2, 8e-3 / 2 * (4 + 2 - 1) / 4), (1, 8e-3)])
def test_pinned_stages_share_their_core(tmp_path: Path, cpus: int, step_s: float) -> None:
    # one stage of every layer took 8 ms a step in 4 micro-batches (its measured entry,
    # as many such stages side by side as the pipeline has, at most the cores); two uniform
    # stages (no activations: nothing to send) on a core each run GPipe's
    # (M + P - 1) slots of T / (M P): 5 ms; pinned to one core, the two stages' work is
    # the core's, which never idles while either has a micro-batch ready: 8 ms
    profile = PROFILE.replace("cpus: 2", f"cpus: {cpus}").replace(
        "compute:\n",
        "compute:\n  - {model: toy, batch_per_worker: 8, micro_batches: 4, "
        f"processes: {min(2, cpus)}, step_time: 8 ms}}\n",
    )
    path = write(tmp_path, profile, PIPELINE)
    row = simulate(path)
    assert row["step_time_mean_s"] == pytest.approx(step_s, rel=1e-9, abs=0)


def test_each_message_holds_its_stages_core(tmp_path: Path) -> None:
    # the toy's 4 layers of 0.25 GFLOP forward, 0.5 backward: the stage of every layer
    # alone took 8 ms (no gradient of its input, 2.75 of 3 GFLOP); fed by a stage of its
    # own it computes that gradient too (8 x 3 / 2.75 ms) and receives and sends one
    # message per micro-batch each, c = 0.25 ms a message (both measured one at a time).
    # Two stages side by side took 6 ms each: on a core each, each op receives or sends
    # one message, (M + 1) (t_f + t_b + 2 c) = 5 x (6 / 8 + 0.5) ms
    fed_ms = 8 * 3 / 2.75 + 2 * 4 * 0.25
    entry = "  - {model: toy, batch_per_worker: 8, micro_batches: 4"
    profile = PROFILE.replace(
        "compute:\n",
        f"compute:\n{entry}, step_time: 8 ms}}\n{entry}, processes: 2, step_time: 6 ms}}\n"
        f"{entry}, fed: true, step_time: {fed_ms!r} ms}}\n",
    )
    row = simulate(write(tmp_path, profile, PIPELINE))
    assert row["step_time_mean_s"] == pytest.approx(5 * (0.75 + 0.5) * 1e-3, rel=1e-9, abs=0)


@pytest.mark.parametrize("micro", [1, 4])
def test_a_stage_alone_computes_as_fast_as_alone(tmp_path: Path, micro: int) -> None:
    # the stage of every layer took 6 ms alone and 8 ms with a second beside it. Two
    # uniform stages, nothing to send: GPipe's first forward and, on the last stage, the
    # last forward and first backward, and on the first stage the last backward, run
    # alone; the M - 1 other forwards and backwards of each stage run beside the other
    # stage's. A step is (2 T_alone + (M - 1) T_beside) / (2 M): 6 ms at one micro-batch
    # (the stages take turns), 4.5 ms at four (5 ms were every op as slow as side by side)
    entry = f"  - {{model: toy, batch_per_worker: 8, micro_batches: {micro}"
    profile = PROFILE.replace(
        "compute:\n",
        f"compute:\n{entry}, step_time: 6 ms}}\n{entry}, processes: 2, step_time: 8 ms}}\n",
    )
    row = simulate(write(tmp_path, profile, PIPELINE), f"strategy.micro_batches={micro}")
    expected = (2 * 6 + (micro - 1) * 8) / (2 * micro) * 1e-3
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)


def test_a_message_between_stages_crosses_both_stages_cores(tmp_path: Path) -> None:
    # each stage is a process pinned to a core, which moves its tensors: a message crosses
    # the sender's and the receiver's core, each moving what a busy core moves (the
    # exchange's 120 MB/s each way, below the one-way fit's 160). One micro-batch of 8
    # samples, 15,000 floats a sample out of the first stage: 480 kB each way, while the
    # other stage waits: a step is the stage alone + 2 (0.5 ms, a chained message's
    # latency, + 480 kB / 120 MB/s) = 6 + 2 x 4.5 ms
    entry = "  - {model: toy, batch_per_worker: 8, micro_batches: 1"
    profile = PROFILE.replace(
        "compute:\n",
        f"compute:\n{entry}, step_time: 6 ms}}\n{entry}, processes: 2, step_time: 8 ms}}\n",
    )
    scenario = PIPELINE.replace(
        "flops_per_sample: 1 GFLOP}", "flops_per_sample: 1 GFLOP, activations: 15000}"
    )
    row = simulate(write(tmp_path, profile, scenario), "strategy.micro_batches=1")
    assert row["step_time_mean_s"] == pytest.approx((6 + 2 * (0.5 + 4.0)) * 1e-3, rel=1e-9, abs=0)


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_in_graph_reduces_in_the_measured_in_process_all_reduce(
    tmp_path: Path, network: str
) -> None:
    # one client driving 2 devices: compute as 2 processes at once, then the gradients'
    # all-reduce among one process's devices, alpha + S / beta of its fit (no ring over
    # the loopback between processes); without that fit, the between-graph ring
    profile = PROFILE + (
        "in_graph:\n"
        "  - {workers: 2, latency: 0.3 ms, bandwidth: 2 GB/s, r2: 0.99, max_rel_residual: 0.1}\n"
    )
    path = write(tmp_path, profile)
    sets = ("cluster.devices_per_host=2", f"sim.network_model={network}")
    row = simulate(path, *sets, "strategy.replication=in_graph")
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 + 0.3e-3 + S / 2e9, rel=1e-9, abs=0)
    between = simulate(path, *sets)
    assert between["step_time_mean_s"] > row["step_time_mean_s"]
    plain = write(tmp_path, PROFILE)
    alone = simulate(plain, *sets, "strategy.replication=in_graph")
    assert alone["step_time_mean_s"] == between["step_time_mean_s"]


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_in_graph_charges_each_device_its_one_clients_dispatch(
    tmp_path: Path, network: str
) -> None:
    # the dispatch probe: forward and backward of 2 processes at once 3 ms a step, of one
    # process driving 2 devices 5 ms: the client costs each device (5 - 3) / 2 = 1 ms, so
    # the in-graph step is the 2 processes' step + 2 x 1 ms, then the all-reduce
    go = "  - {model: toy, batch_per_worker: 10, processes: 2, gradients_only: true"
    profile = PROFILE.replace(
        "compute:\n",
        f"compute:\n{go}, step_time: 3 ms}}\n{go}, in_graph: true, step_time: 5 ms}}\n",
    ) + (
        "in_graph:\n"
        "  - {workers: 2, latency: 0.3 ms, bandwidth: 2 GB/s, r2: 0.99, max_rel_residual: 0.1}\n"
    )
    path = write(tmp_path, profile)
    sets = ("cluster.devices_per_host=2", f"sim.network_model={network}")
    row = simulate(path, *sets, "strategy.replication=in_graph")
    expected = STEP_2 + 2 * 1e-3 + 0.3e-3 + S / 2e9
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)
    point = load(path, (*sets, "strategy.replication=in_graph")).points[0]
    cal = calibration_of(point.spec, profile_of(point))
    assert cal is not None and cal.dispatch_s == pytest.approx(1e-3)
    assert any("costs each of its 2 devices 1 ms" in line for line in cal.used)
    # between graph pays no client's dispatch; a probe that found the one process faster
    # (noise) charges nothing
    between = simulate(path, *sets)
    assert (
        between["step_time_mean_s"] == simulate(write(tmp_path, PROFILE), *sets)["step_time_mean_s"]
    )
    faster = profile.replace("in_graph: true, step_time: 5 ms", "in_graph: true, step_time: 2 ms")
    row = simulate(write(tmp_path, faster), *sets, "strategy.replication=in_graph")
    assert row["step_time_mean_s"] == pytest.approx(STEP_2 + 0.3e-3 + S / 2e9, rel=1e-9, abs=0)
