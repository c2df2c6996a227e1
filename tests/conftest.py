"""Shared fixtures: small specs and a bare network to time collectives on."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import simpy

from scenarios.loader import set_path, validate
from scenarios.spec import ClusterSpec, ScenarioSpec
from sim.network import make_network
from sim.topology import Topology

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
    net = make_network(model, env, Topology(spec, servers))

    def proc() -> Any:
        yield from body(net)

    env.process(proc())
    env.run()
    return env.now


@pytest.fixture(params=["analytical", "flow"])
def network_model(request: pytest.FixtureRequest) -> str:
    return str(request.param)
