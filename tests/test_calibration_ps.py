"""What `simulate` takes from a profile for parameter servers (sim/costs/,
sim/strategies/parameter_server/training.py): the coordinator's round trips, the update, the
closures' pulls and pushes, where the variables sit; checked against closed forms written
out here from the profile's numbers (the profile and helpers are conftest's)."""

from __future__ import annotations

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

from measured.profile import dump_profile, load_profile
from scenarios import load


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
    calibration = calibration_of(point.spec, profile_of(point))
    assert calibration is not None
    (line,) = [u for u in calibration.used if u.startswith("update:")]
    assert ("asynchronous closure" in line) is not sync  # the report says how it was used


def test_update_of_another_server_count_is_not_used(tmp_path: Path) -> None:
    # measured for one server only: with two, the round ends with the bare call, and the
    # simulation says so in the calibration's not_found
    strategy = "strategy={kind: parameter_server, servers: 2, sync: true}"
    point = load(write(tmp_path, PROFILE + COORDINATOR), [strategy]).points[0]
    calibration = calibration_of(point.spec, profile_of(point))
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
    calibration = calibration_of(point.spec, profile_of(point))
    assert calibration is not None and calibration.apply_s is None
    assert any(u.startswith(f"closures: a pull of toy from {servers}") for u in calibration.used)


def test_closures_in_flight_share_the_hosts_cores(tmp_path: Path) -> None:
    # two workers, one server, flow model: each closure's pull (then push) is one flow on
    # the host's cores alone (no port: a closure moves several variables at once), which
    # move cpus x beta_x (a parameter server's traffic is point-to-point: the exchange's
    # rate). The toy's 4 MB take longer at that rate than the probes' pull and push, so
    # both are all bytes: alone each has the whole cores, two at once half each, and
    # take twice their alone time. The server is no bottleneck: it serves both at once
    strategy = "strategy={kind: parameter_server, servers: 1, sync: true}"
    path = write(tmp_path, PROFILE + CLOSURES_PROFILE)
    row = simulate(path, strategy, "cluster.devices_per_host=2")
    pull, push = READ_1 - DISPATCH, ACC_1 - READ_1
    assert max(pull, push) < S / (CPUS * BETA_X)
    expected = STEP_2 + DISPATCH + 2 * (pull + push) + UPDATE
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9)
    # the 2-process all-reduce's rate (a collective's, 70 MB/s here) is not theirs
    fit = "  - {workers: 2, latency: 40 ms, bandwidth: 70 MB/s, r2: 0.99, max_rel_residual: 0.1}\n"
    path = write(tmp_path, PROFILE + fit + CLOSURES_PROFILE)
    assert simulate(path, strategy, "cluster.devices_per_host=2") == row
    point = load(path, [strategy]).points[0]
    calibration = calibration_of(point.spec, profile_of(point))
    assert calibration is not None and calibration.core_rate == pytest.approx(BETA_X)
    assert any("point-to-point" in line for line in calibration.used)
    allreduce = load(path, []).points[0]
    calibration = calibration_of(allreduce.spec, profile_of(allreduce))
    assert calibration is not None and calibration.core_rate == pytest.approx(70e6)


def test_only_a_closures_bytes_share_the_cores(tmp_path: Path) -> None:
    # a model of 0.1 M parameters: its 0.4 MB take 1.7 ms at the cores' cpus x beta_x
    # alone, less than the closures' 7 ms: the rest is round trips, which two workers'
    # closures wait out side by side; only the bytes share the cores (half each, above)
    scenario = SCENARIO.replace("params: 1e6", "params: 1e5")
    assert scenario != SCENARIO
    strategy = "strategy={kind: parameter_server, servers: 1, sync: true}"
    path = write(tmp_path, PROFILE + CLOSURES_PROFILE, scenario=scenario)
    row = simulate(path, strategy, "cluster.devices_per_host=2")
    pull, push = READ_1 - DISPATCH, ACC_1 - READ_1
    moving = 0.1e6 * 4 / (CPUS * BETA_X)
    assert moving < min(pull, push)
    expected = STEP_2 + DISPATCH + pull + push + 2 * moving + UPDATE
    assert row["step_time_mean_s"] == pytest.approx(expected, rel=1e-9)
    # alone (one worker) a closure takes its probe time, bytes and round trips together
    row = simulate(path, strategy)
    assert period(row) == pytest.approx(STEP_1 + ACC_1 + UPDATE, rel=1e-9)


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
    calibration = calibration_of(point.points[0].spec, profile_of(point.points[0]))
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
    calibration = calibration_of(point.spec, profile_of(point))
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
    # and the bare closure and the CPU each closure spent (recorded, not simulated)
    spent = closures(1, UPDATE, READ_1, ACC_1, APPLY_1).replace(
        "}\n", ", closure_bare: 4 ms, closure_read_cpu: 11 ms, closure_bare_cpu: 5 ms}\n"
    )
    recorded = load_profile(
        write(tmp_path, PROFILE + ROUND_TRIPS + "updates:\n" + spent).parent / "box.yaml"
    )
    (entry,) = recorded.updates
    assert (entry.closure_bare, entry.closure_bare_cpu) == pytest.approx((4e-3, 5e-3))
    assert entry.closure_read_cpu == pytest.approx(11e-3)
    (tmp_path / "spent.yaml").write_text(dump_profile(recorded))
    assert load_profile(tmp_path / "spent.yaml") == recorded
    # the number of kills timed survives a round trip
    three = profile.model_copy(update={"restarts": [restart.model_copy(update={"samples": 3})]})
    (tmp_path / "three.yaml").write_text(dump_profile(three))
    assert load_profile(tmp_path / "three.yaml").restarts[0].samples == 3


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
