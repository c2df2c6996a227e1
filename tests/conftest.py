"""Shared fixtures: small specs, a bare network to time collectives on, and a calibration
profile of a made-up machine with the helpers that simulate from it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import simpy
from processes import own_processes

from measured.profile import Profile, load_profile, profiles_of
from scenarios import load
from scenarios.loader import Point, set_path, validate
from scenarios.spec import ClusterSpec, ScenarioSpec
from sim.costs.explain import explain
from sim.engine.metrics import summarize
from sim.network.backends import make_network
from sim.network.topology import Topology
from sim.simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent

BASE: dict[str, Any] = {
    "version": 1,
    "name": "t",
    "seed": 1,
    "model": {"name": "toy", "params": 25e6, "flops_per_sample": "1 GFLOP"},
    "cluster": {
        "hosts": 4,
        "devices_per_host": 1,
        "device": {"peak_flops": "10 TFLOP/s", "efficiency": 1.0},
        "host_link": {"bandwidth": "100 GB/s", "latency": "1 us"},
        "network": {"bandwidth": "10 Gbit/s", "latency": "10 us"},
    },
    "training": {"batch_per_worker": 10, "steps": 5, "warmup_steps": 1},
    "strategy": {
        "kind": "allreduce",
        "algorithm": "ring",
        "fusion_buffer": "1 GiB",
        "overlap": False,
    },
}


def make_spec(**sets: Any) -> ScenarioSpec:
    """BASE with dotted-path overrides: make_spec(**{"cluster.hosts": 8})."""
    doc = copy.deepcopy(BASE)
    for path, value in sets.items():
        set_path(doc, path, value)
    return validate(doc)


def cluster(
    hosts: int,
    devices: int = 1,
    bw: str = "10 Gbit/s",
    lat: str = "10 us",
    link_bw: str = "100 GB/s",
    link_lat: str = "1 us",
    oversubscription: float = 1.0,
) -> ClusterSpec:
    return ClusterSpec.model_validate(
        {
            "hosts": hosts,
            "devices_per_host": devices,
            "device": "v100",
            "host_link": {"bandwidth": link_bw, "latency": link_lat},
            "network": {"bandwidth": bw, "latency": lat, "oversubscription": oversubscription},
        }
    )


def timed(model: str, spec: ClusterSpec, body: Callable[[Any], Any], servers: int = 0) -> float:
    """Run `body(net)` (a generator) on a fresh network; return the simulated time taken."""
    env = simpy.Environment()
    net = make_network(model, env, Topology(spec, dedicated_servers=servers))

    def proc() -> Any:
        yield from body(net)

    env.process(proc())
    env.run()
    return env.now


@pytest.fixture
def own(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every process the test starts carries its tag (tests/processes.py); whatever it
    leaves is killed when it ends."""
    yield from own_processes(monkeypatch)


@pytest.fixture(params=["analytical", "flow"])
def network_model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# Measured on a made-up 2-core box. The 4-process all-reduce fit is absurd on purpose: the
# simulator must predict collectives from `transfer` (and a 2-process fit's rate, where
# there is one: tests/test_profile.py), never from a fit of more processes.
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
  - {workers: 4, latency: 1 s, bandwidth: 1 kB/s, r2: 0.5, max_rel_residual: 3.0}
"""

STEP_1 = 6.4e-3  # s, one process
STEP_2 = 7.0e-3  # s, two at once
ALPHA = 1.9e-3  # s, a call moving one tensor pays it (a parameter server's pull or push)
BETA = 160e6  # bytes/s
BETA_X = 120e6  # bytes/s each way at once (the exchange), what each core moves when busy
CPUS = 2
PARAMS = 1e6
S = PARAMS * 4  # gradient bytes, float32

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
    scenario = load(path, sets)
    point = scenario.points[0]
    profile = profiles_of(scenario).get(point.id)
    return summarize(point.spec, Simulation(point.spec, profile=profile).run())


def profile_of(point: Point) -> Profile | None:
    """The calibration profile the point's `cluster.profile` names, read (None without)."""
    path = point.spec.cluster.profile
    return None if path is None else load_profile(path, "cluster.profile")


class Calibrated:
    """A point's calibration (`sim/costs/measured.py`) with its lines in words
    (`sim/costs/explain.py`): `used`, `not_found`, and every field of the calibration."""

    def __init__(self, spec: Any, cal: Any):
        self.cal = cal
        self.used, self.not_found = explain(spec, cal)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cal, name)


def calibration_of(spec: Any, profile: Any = None) -> Calibrated | None:
    """What the simulation of `spec` took from its profile, or None without one."""
    cal = Simulation(spec, profile=profile).costs.calibration
    return None if cal is None else Calibrated(spec, cal)
