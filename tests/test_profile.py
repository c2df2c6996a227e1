"""Calibration profiles: the format (scenarios/profile.py), loading them with a scenario
(scenarios/loader.py) and what `simulate` takes from them (sim/calibration.py), checked
against closed forms written out here from the profile's numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scenarios import ScenarioError, load, vocab
from scenarios.profile import ComputeEntry, Machine, Profile, dump_profile, load_profile
from sim.cli import main
from sim.metrics import summarize
from sim.simulation import Simulation

# Measured on a made-up 2-core box. The allreduce fit is absurd on purpose: the simulator
# must predict collectives from `transfer`, never from it.
PROFILE = """
version: 1
kind: trainscale-profile
created: 2026-11-29T12:00:00+00:00
machine: {hostname: box, cpus: 2, platform: test, tensorflow: 2.21.0, device: cpu}
compute:
  - {model: toy, batch_per_worker: 10, dtype: float32, processes: 1, step_time: 6.4 ms, steps: 50}
  - {model: toy, batch_per_worker: 10, dtype: float32, processes: 2, step_time: 7.0 ms, steps: 50}
transfer: {latency: 1.9 ms, bandwidth: 160 MB/s, r2: 0.998, max_rel_residual: 0.12}
exchange: {latency: 3 ms, bandwidth: 120 MB/s, r2: 0.99, max_rel_residual: 0.2}
messages: {first: 2.2 ms, chained: 0.5 ms, chain: 8}
allreduce:
  - {workers: 2, latency: 1 s, bandwidth: 1 kB/s, r2: 0.5, max_rel_residual: 3.0}
"""

STEP_1 = 6.4e-3  # s, one process
STEP_2 = 7.0e-3  # s, two at once
ALPHA = 1.9e-3  # s, a call moving one tensor pays it (a parameter server's pull or push)
CHAINED = 0.5e-3  # s, each message chained in one call (a ring's steps) pays this instead
BETA = 160e6  # bytes/s
BETA_X = 120e6  # bytes/s each way at once (the exchange), what each core moves when busy
DUPLEX = 2 * BETA_X / BETA  # both ways at once: 120 MB/s each, 1.5 x the one-way 160
CPUS = 2
PARAMS = 1e6
S = PARAMS * 4  # gradient bytes, float32
CATALOG_STEP = 10 * 3e9 / 10e12  # batch x (fwd + 2 fwd) FLOP / (peak x efficiency)

SCENARIO = """
version: 1
name: calibrated
seed: 1
model: {name: toy, params: 1e6, flops_per_sample: 1 GFLOP}
cluster:
  hosts: 1
  devices_per_host: 1
  device: {peak_flops: 10 TFLOP/s, efficiency: 1.0}
  host_link: {bandwidth: 100 GB/s, latency: 1 us}
  network: {bandwidth: 10 Gbit/s, latency: 10 us}
  profile: box.yaml
training: {batch_per_worker: 10, steps: 5, warmup_steps: 1}
strategy: {kind: allreduce, algorithm: ring, fusion_buffer: 1 GiB, overlap: false}
"""


def write(tmp_path: Path, profile: str = PROFILE, scenario: str = SCENARIO) -> Path:
    (tmp_path / "box.yaml").write_text(profile)
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    return path


def simulate(path: Path, *sets: str) -> dict[str, Any]:
    point = load(path, sets).points[0]
    return summarize(point.spec, Simulation(point.spec, profile=point.profile).run())


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
                }
                for p, t in ((1, 6.4), (2, 7.25))
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
    point = load(Path("scenarios") / "s.yaml").points[0]
    assert point.profile is not None and point.profile.machine.hostname == "box"
    resolved = Path(str(point.spec.cluster.profile))
    assert resolved.is_absolute()
    assert resolved.resolve() == (tmp_path / "profiles" / "box.yaml").resolve()


def test_absolute_path_as_is(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    absolute = tmp_path / "elsewhere" / "p.yaml"
    absolute.write_text(PROFILE)
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("profile: box.yaml", f"profile: {absolute}"))
    point = load(path).points[0]
    assert point.spec.cluster.profile == str(absolute)
    assert point.profile is not None


def test_no_profile_no_calibration(tmp_path: Path) -> None:
    path = write(tmp_path, scenario=SCENARIO.replace("  profile: box.yaml\n", ""))
    point = load(path).points[0]
    assert point.profile is None and point.spec.cluster.profile is None
    sim = Simulation(point.spec)
    assert sim.calibration is None
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
        load(path)
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


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_parameter_server_on_the_calibrated_machine(tmp_path: Path, network: str) -> None:
    # hosts: 1 with a profile: the dedicated server is a process on the same machine;
    # push S to it, pull S back, each alpha + S / rate; in the flow model its port carries
    # both workers' pushes (and then pulls), one way: beta / 2 each
    strategy = "strategy={kind: parameter_server, servers: 1, placement: dedicated}"
    row = simulate(
        write(tmp_path), "cluster.devices_per_host=2", strategy, f"sim.network_model={network}"
    )
    rate = BETA if network == "analytical" else BETA / 2
    expected = STEP_2 + 2 * (ALPHA + S / rate)
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)
    assert row["bytes_on_network"] == 0


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
    from real.calibrate import messages_of

    records = [{"kind": "chain", "messages": 1, "time_s": t} for t in (2e-3, 3e-3, 9e-3)]
    records += [{"kind": "chain", "messages": 8, "time_s": t} for t in (6e-3, 6.5e-3, 7e-3)]
    records += [{"kind": "pull", "bytes": 1024, "time_s": 1.0}]
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
    compute = Simulation(point.spec, profile=point.profile).compute
    assert compute.step_s == pytest.approx(STEP_1, rel=1e-12)
    assert compute.forward_s.tolist() == pytest.approx([STEP_1 * 0.75 / 3, STEP_1 * 0.25 / 3])
    buckets = compute.buckets(0.0, overlap=True)  # one per layer, output layer first
    assert buckets[0].ready_s == pytest.approx(STEP_1 / 3 + STEP_1 * 2 * 0.25 / 3)
    assert buckets[1].ready_s == pytest.approx(STEP_1)


def test_model_missing_from_profile_falls_back(tmp_path: Path) -> None:
    path = write(tmp_path, profile=PROFILE.replace("model: toy", "model: other"))
    point = load(path).points[0]
    sim = Simulation(point.spec, profile=point.profile)
    assert sim.compute.step_s == pytest.approx(CATALOG_STEP)
    assert sim.calibration is not None
    assert sim.calibration.not_found and "no entry for model toy" in sim.calibration.not_found[0]
    assert any(u.startswith("transfer:") for u in sim.calibration.used)


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


DISPATCH = 7e-3  # s, a closure dispatched to a worker and fetched
CALL = 2.5e-3  # s, the coordinator's call on a server


@pytest.mark.parametrize("sync", [True, False])
def test_coordinator_round_trips(tmp_path: Path, sync: bool) -> None:
    # one worker, one server, analytical network: a synchronous round is compute, push,
    # the coordinator's update call, the next closure's dispatch, pull; an asynchronous
    # update is dispatch, pull, compute, push
    profile = PROFILE + f"coordinator: {{dispatch: {DISPATCH * 1e3} ms, call: {CALL * 1e3} ms}}\n"
    strategy = f"strategy={{kind: parameter_server, servers: 1, sync: {str(sync).lower()}}}"
    row = simulate(write(tmp_path, profile), strategy, "sim.network_model=analytical")
    transfers = 2 * (ALPHA + S / BETA)
    expected = STEP_1 + transfers + DISPATCH + (CALL if sync else 0.0)
    # async: one worker's updates follow each other, so the interval is the update
    assert 1 / row["throughput_samples_per_s"] * 10 == pytest.approx(expected, rel=1e-9)


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


QUEUED = 5e-3  # s, per closure when closures are queued back to back
UPDATE = 12e-3  # s, the model's update on its server, one coordinator call
ROUND_TRIPS = (
    f"coordinator: {{dispatch: {DISPATCH * 1e3} ms, call: {CALL * 1e3} ms, "
    f"queued: {QUEUED * 1e3} ms}}\n"
)
COORDINATOR = (
    ROUND_TRIPS
    + f"updates: [{{model: toy, dtype: float32, servers: 1, time: {UPDATE * 1e3} ms}}]\n"
)


@pytest.mark.parametrize("sync", [True, False])
def test_measured_update_and_queued_dispatch(tmp_path: Path, sync: bool) -> None:
    # a synchronous round ends with the measured update call (not the bare call) and its
    # closures are dispatched and fetched; an asynchronous closure is queued (QUEUED) and
    # runs the same update ops itself, inside the closure: the update's work beyond the
    # coordinator's call (UPDATE - CALL), after its push
    strategy = f"strategy={{kind: parameter_server, servers: 1, sync: {str(sync).lower()}}}"
    row = simulate(write(tmp_path, PROFILE + COORDINATOR), strategy, "sim.network_model=analytical")
    transfers = 2 * (ALPHA + S / BETA)
    expected = STEP_1 + transfers + (DISPATCH + UPDATE if sync else QUEUED + UPDATE - CALL)
    assert 1 / row["throughput_samples_per_s"] * 10 == pytest.approx(expected, rel=1e-9)
    point = load(write(tmp_path, PROFILE + COORDINATOR), [strategy]).points[0]
    calibration = Simulation(point.spec, profile=point.profile).calibration
    assert calibration is not None
    (line,) = [u for u in calibration.used if u.startswith("update:")]
    assert ("asynchronous closure" in line) is not sync  # the report says how it was used


def test_update_of_another_server_count_is_not_used(tmp_path: Path) -> None:
    # measured for one server only: with two, the round ends with the bare call, and the
    # simulation says so in the calibration's not_found
    strategy = "strategy={kind: parameter_server, servers: 2, sync: true}"
    point = load(write(tmp_path, PROFILE + COORDINATOR), [strategy]).points[0]
    calibration = Simulation(point.spec, profile=point.profile).calibration
    assert calibration is not None and calibration.update_s is None
    assert any(line.startswith("update: no entry") for line in calibration.not_found)


UPDATE_2 = 30e-3  # s, the update call on two servers
READ_1, ACC_1, APPLY_1 = 14e-3, 21e-3, 23e-3  # s, closures on one server
READ_2, ACC_2, APPLY_2 = 15e-3, 24e-3, 26.5e-3  # s, on two


def closures(servers: int, update: float, read: float, acc: float, apply: float) -> str:
    return (
        f"  - {{model: toy, dtype: float32, servers: {servers}, time: {update * 1e3} ms, "
        f"closure_read: {read * 1e3} ms, closure_accumulate: {acc * 1e3} ms, "
        f"closure_apply: {apply * 1e3} ms}}\n"
    )


CLOSURES_PROFILE = (
    ROUND_TRIPS
    + "updates:\n"
    + closures(1, UPDATE, READ_1, ACC_1, APPLY_1)
    + closures(2, UPDATE_2, READ_2, ACC_2, APPLY_2)
)
OLD_PROFILE = (  # the same update calls, measured before closures were
    ROUND_TRIPS
    + f"updates: [{{model: toy, dtype: float32, servers: 1, time: {UPDATE * 1e3} ms}}, "
    + f"{{model: toy, dtype: float32, servers: 2, time: {UPDATE_2 * 1e3} ms}}]\n"
)


def period(row: dict[str, Any]) -> float:
    """Seconds per round (synchronous) or per update (asynchronous, one worker) of 10
    samples."""
    return 1 / row["throughput_samples_per_s"] * 10


@pytest.mark.parametrize("network", ["analytical", "flow"])
@pytest.mark.parametrize("servers", [1, 2])
@pytest.mark.parametrize("sync", [True, False])
def test_closures_are_a_closures_pull_and_push(
    tmp_path: Path, sync: bool, servers: int, network: str
) -> None:
    # one worker on the calibrated machine, closures measured on the point's servers: the
    # pull is the reading closure less the dispatch, the push the accumulating (sync) or
    # applying (async: push and update) closure less the reading one. A synchronous round
    # is then dispatch + pull + compute + push + update = compute + accumulating closure
    # + update; an asynchronous update is queued dispatch + pull + compute + push
    strategy = f"strategy={{kind: parameter_server, servers: {servers}, sync: {str(sync).lower()}}}"
    row = simulate(
        write(tmp_path, PROFILE + CLOSURES_PROFILE), strategy, f"sim.network_model={network}"
    )
    read, acc, apply = (READ_1, ACC_1, APPLY_1) if servers == 1 else (READ_2, ACC_2, APPLY_2)
    update = UPDATE if servers == 1 else UPDATE_2
    expected = STEP_1 + acc + update if sync else STEP_1 + QUEUED + apply - DISPATCH
    assert period(row) == pytest.approx(expected, rel=1e-9)
    point = load(write(tmp_path, PROFILE + CLOSURES_PROFILE), [strategy]).points[0]
    calibration = Simulation(point.spec, profile=point.profile).calibration
    assert calibration is not None and calibration.apply_s is None
    assert any(u.startswith(f"closures: a pull of toy from {servers}") for u in calibration.used)


def test_closures_in_flight_share_the_hosts_cores(tmp_path: Path) -> None:
    # two workers, one server, flow model: each closure's pull (then push) is one flow
    # bound by its own worker's port (beta alone) and the host's cores, which the two
    # share (cpus x beta_x): each moves at cpus x beta_x / 2 = beta_x, and takes its
    # alone time x beta / beta_x. The server is no bottleneck: it serves both at once
    strategy = "strategy={kind: parameter_server, servers: 1, sync: true}"
    row = simulate(
        write(tmp_path, PROFILE + CLOSURES_PROFILE), strategy, "cluster.devices_per_host=2"
    )
    pull, push = READ_1 - DISPATCH, ACC_1 - READ_1
    slower = BETA / min(BETA, CPUS * BETA_X / 2)
    assert slower == pytest.approx(4 / 3)
    expected = STEP_2 + DISPATCH + slower * (pull + push) + UPDATE
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9)


def test_closures_are_for_one_machine_and_below_zero_is_none(tmp_path: Path) -> None:
    # two hosts: tensors cross the network, not the machine the closures were timed on;
    # the same job as from the profile without closures, and the simulation says why
    strategy = "strategy={kind: parameter_server, servers: 1, sync: true}"
    periods = []
    for extra in (CLOSURES_PROFILE, OLD_PROFILE):
        row = simulate(write(tmp_path, PROFILE + extra), strategy, "cluster.hosts=2")
        periods.append(period(row))
    assert periods[0] == periods[1]
    point = load(write(tmp_path, PROFILE + CLOSURES_PROFILE), [strategy, "cluster.hosts=2"])
    calibration = Simulation(point.points[0].spec, profile=point.points[0].profile).calibration
    assert calibration is not None and calibration.closure_s is None
    assert any("this cluster has 2 hosts" in line for line in calibration.not_found)
    # the probes' noise: accumulating measured faster than reading counts as no push
    faster = ROUND_TRIPS + "updates:\n" + closures(1, UPDATE, READ_1, READ_1 - 1e-3, APPLY_1)
    row = simulate(write(tmp_path, PROFILE + faster), strategy, "sim.network_model=analytical")
    assert period(row) == pytest.approx(STEP_1 + READ_1 + UPDATE, rel=1e-9)


def test_without_closures_an_async_update_is_the_call_less_the_bare_call(
    tmp_path: Path,
) -> None:
    strategy = "strategy={kind: parameter_server, servers: 2, sync: false}"
    point = load(write(tmp_path, PROFILE + OLD_PROFILE), [strategy]).points[0]
    calibration = Simulation(point.spec, profile=point.profile).calibration
    assert calibration is not None and calibration.closure_s is None
    assert calibration.apply_s == pytest.approx(UPDATE_2 - CALL)
    assert any(u.startswith("closures: none of toy on 2") for u in calibration.not_found)


def test_profile_update_and_restart_round_trip(tmp_path: Path) -> None:
    restarts = (
        "restarts: [{model: toy, batch_per_worker: 10, dtype: float32, "
        "strategy: allreduce/ring, workers: 2, servers: 0, time: 11.5 s}]\n"
    )
    profile = load_profile(write(tmp_path, PROFILE + COORDINATOR + restarts).parent / "box.yaml")
    assert profile.update("toy", "float32", 1) == pytest.approx(UPDATE)
    assert profile.update("toy", "float32", 2) is None
    assert profile.coordinator is not None and profile.coordinator.queued == pytest.approx(QUEUED)
    assert profile.restart("toy", 10, "float32", "allreduce/ring", 2, 0) == pytest.approx(11.5)
    assert profile.restart("toy", 10, "float32", "allreduce/ring", 3, 0) is None
    (restart,) = profile.restarts
    assert restart.samples == 1  # a profile written before kills were repeated: one
    (tmp_path / "again.yaml").write_text(dump_profile(profile))
    assert load_profile(tmp_path / "again.yaml") == profile
    # the closures survive a round trip; older profiles have none
    assert profile.closures("toy", "float32", 1) is None
    timed = load_profile(write(tmp_path, PROFILE + CLOSURES_PROFILE).parent / "box.yaml")
    assert timed.closures("toy", "float32", 2) == pytest.approx((READ_2, ACC_2, APPLY_2))
    (tmp_path / "closures.yaml").write_text(dump_profile(timed))
    assert load_profile(tmp_path / "closures.yaml") == timed
    # the number of kills timed survives a round trip
    three = profile.model_copy(update={"restarts": [restart.model_copy(update={"samples": 3})]})
    (tmp_path / "three.yaml").write_text(dump_profile(three))
    assert load_profile(tmp_path / "three.yaml").restarts[0].samples == 3


def test_steady_step_leaves_out_each_workers_first_step() -> None:
    from real.calibrate import _steady_step

    # worker 0's first step traces (ends at 0.6 s), then one every 40 ms; worker 1 one
    # every 50 ms after its own first: the median of the gaps (40, 40, 50, 50, 50) is 50 ms
    steps = [{"worker": 0, "end": e} for e in (0.60, 0.64, 0.68, 0.72)]
    steps += [{"worker": 1, "end": e} for e in (0.55, 0.60, 0.65, 0.70, 0.75)]
    assert _steady_step(steps) == pytest.approx(0.05)
    # the first step alone tells nothing steady: no step left out of the restart
    assert _steady_step([{"worker": 0, "end": 0.6}, {"worker": 0, "end": 0.64}]) == 0.0


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


def test_servers_hold_variables_round_robin(tmp_path: Path) -> None:
    # TensorFlow deals an MLP's variables (kernel, bias per layer, in creation order) to two
    # servers in turn: every kernel on the first, every bias on the second. One worker,
    # analytical network: push and pull each take as long as the first server's share
    scenario = SCENARIO.replace(
        "model: {name: toy, params: 1e6, flops_per_sample: 1 GFLOP}",
        "model: {name: toy, keras: {builder: mlp, inputs: 64, hidden: [1024, 1024]}}",
    )
    strategy = "strategy={kind: parameter_server, servers: 2, sync: true}"
    row = simulate(write(tmp_path, scenario=scenario), strategy, "sim.network_model=analytical")
    kernels = 64 * 1024 + 1024 * 1024 + 1024 * 10
    expected = STEP_1 + 2 * (ALPHA + 4 * kernels / BETA)
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9, abs=0)
