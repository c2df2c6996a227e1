"""Compute and transfers share the calibrated machine's cores: closed forms of max-min
sharing on the made-up 2-core box (conftest's profile: each core moves beta_x = 120 MB/s,
a port beta = 160 MB/s one way)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import BETA_X, CPUS, calibration_of, profile_of, write

from scenarios import load
from sim.simulation import Simulation

T = 9e-3  # s, a stretch of measured compute


def simulation(tmp_path: Path, workers: int, network: str = "flow") -> Simulation:
    path = write(tmp_path)
    sets = [f"cluster.devices_per_host={workers}", f"sim.network_model={network}"]
    point = load(path, sets).points[0]
    return Simulation(point.spec, profile=profile_of(point))


def worker(index: int) -> Any:
    return SimpleNamespace(index=index, inflight=[])


def finish_times(sim: Simulation, jobs: dict[str, Any]) -> dict[str, float]:
    """Run the processes (or events) at once from time 0; when each ended."""
    env, ends = sim.env, {}

    def run(name: str, job: Any) -> Any:
        yield from job() if callable(job) else job
        ends[name] = env.now

    for name, job in jobs.items():
        env.process(run(name, job))
    env.run()
    return ends


def test_a_measured_step_is_a_core_share_of_cpu_work(tmp_path: Path) -> None:
    # three workers were measured computing at once on two cores: 2/3 of a core each
    sim = simulation(tmp_path, 3)
    assert sim.compute_rate == pytest.approx(CPUS / 3 * BETA_X)
    # as many at once as measured, nothing else: each takes the measured time
    ends = finish_times(sim, {f"w{i}": lambda i=i: sim.busy(worker(i), T) for i in range(3)})
    assert ends == pytest.approx({"w0": T, "w1": T, "w2": T}, rel=1e-9)
    # alone it computes on one core, no more: 2/3 of the time
    sim = simulation(tmp_path, 3)
    ends = finish_times(sim, {"w0": lambda: sim.busy(worker(0), T)})
    assert ends["w0"] == pytest.approx(T * 2 / 3, rel=1e-9)


def test_a_transfer_takes_its_share_from_compute(tmp_path: Path) -> None:
    # two workers compute while the third pulls (a closure's, on the cores alone): three
    # on the loopback's 2 x 120 MB/s, 80 MB/s each (under a core, 120): the computes take
    # their measured time (three busy, as measured); the pull, 80 MB/s x T plus what it
    # moves alone after on both cores, 240 MB/s, ends U later
    sim = simulation(tmp_path, 3)
    u = 4e-3
    nbytes = CPUS * BETA_X / 3 * T + CPUS * BETA_X * u
    pull = sim.network.closure(2, nbytes / (CPUS * BETA_X), nbytes)  # all of it a flow
    ends = finish_times(
        sim,
        {
            "w0": lambda: sim.busy(worker(0), T),
            "w1": lambda: sim.busy(worker(1), T),
            "pull": [pull],
        },
    )
    assert ends == pytest.approx({"w0": T, "w1": T, "pull": T + u}, rel=1e-9)
    # two workers on two cores: one computes on its core, the other's push gets the other
    # core's 120 MB/s, not both cores' 240 it has alone
    sim = simulation(tmp_path, 2)
    push = sim.network.closure(1, T / CPUS, BETA_X * T)
    ends = finish_times(sim, {"w0": lambda: sim.busy(worker(0), T), "push": [push]})
    assert ends == pytest.approx({"w0": T, "push": T}, rel=1e-9)


def test_a_straggler_sleeps_after_its_compute(tmp_path: Path) -> None:
    # factor 3 and a 2 ms hiccup, alone among three: (2/3) T on its core, then it sleeps
    # 2 x that and the hiccup; the sleep holds no core: a worker starting meanwhile
    # computes on a core of its own
    sim = simulation(tmp_path, 3)
    took = T * 2 / 3

    def late() -> Any:
        yield sim.env.timeout(took)
        yield from sim.busy(worker(1), T)

    ends = finish_times(
        sim, {"slow": lambda: sim.busy(worker(0), T, factor=3.0, delay=2e-3), "late": late}
    )
    assert ends == pytest.approx({"slow": 3 * took + 2e-3, "late": 2 * took}, rel=1e-9)
    # jitter below 1 speeds no core up
    sim = simulation(tmp_path, 3)
    ends = finish_times(sim, {"w0": lambda: sim.busy(worker(0), T, factor=0.5)})
    assert ends["w0"] == pytest.approx(took, rel=1e-9)


def test_a_failed_workers_compute_frees_its_share(tmp_path: Path) -> None:
    # three compute at 2/3 of a core; at T/2 worker 0 fails (its flow is cancelled, as
    # train_loop cancels a failed worker's inflight): the other two go on at a core each
    sim = simulation(tmp_path, 3)
    w0 = worker(0)

    def fail() -> Any:
        yield sim.env.timeout(T / 2)
        for event in w0.inflight:
            sim.network.cancel(event)

    ends = finish_times(
        sim,
        {
            "w0": lambda: sim.busy(w0, T),
            "w1": lambda: sim.busy(worker(1), T),
            "w2": lambda: sim.busy(worker(2), T),
            "fail": fail,
        },
    )
    # half the work done at T/2; the other half at 3/2 the rate: T/3 more
    assert ends["w1"] == ends["w2"] == pytest.approx(T / 2 + T / 3, rel=1e-9)
    assert "w0" not in ends


def test_off_the_flow_network_compute_keeps_its_time(tmp_path: Path) -> None:
    # the analytical network has no contention: compute is time, stretched by the factor
    sim = simulation(tmp_path, 3, network="analytical")
    assert sim.compute_rate is None
    ends = finish_times(
        sim, {f"w{i}": lambda i=i: sim.busy(worker(i), T, 2.0, 1e-3) for i in range(3)}
    )
    assert ends == pytest.approx({f"w{i}": 2 * T + 1e-3 for i in range(3)}, rel=1e-9)
    calibration = calibration_of(sim.spec, sim.costs.calibration.profile)
    assert calibration is not None
    assert not any("compute is CPU work" in line for line in calibration.used)
    flow_sim = simulation(tmp_path, 3)
    flow = calibration_of(flow_sim.spec, flow_sim.costs.calibration.profile)
    assert flow is not None
    assert any("0.667 of a core with P=3" in line for line in flow.used)
