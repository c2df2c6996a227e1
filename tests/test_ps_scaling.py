"""The bundled parameter-servers-vs-ring sweep (scenarios/library/parameter-servers-vs-ring.yaml)
against closed-form bounds: synchronous parameter servers cannot beat their NICs, and the
ring keeps scaling where they flatten."""

from __future__ import annotations

from conftest import ROOT

from scenarios import load
from sim.runner import simulate_point

SCENARIO = ROOT / "scenarios" / "library" / "parameter-servers-vs-ring.yaml"


def _rows(workers: int) -> dict[str, dict[str, float]]:
    sets = (f"sweep.cluster.hosts=[{workers}]", "training.steps=8", "training.warmup_steps=2")
    out = {}
    for point in load(SCENARIO, sets).points:
        strategy = point.spec.strategy
        key = strategy.kind if strategy.kind == "allreduce" else strategy.placement
        out[key] = simulate_point(point).row
    return out


def test_servers_saturate_at_their_nics_and_the_ring_keeps_scaling() -> None:
    spec = load(SCENARIO).points[0].spec
    batch = spec.training.batch_per_worker
    model_bytes = spec.model.gradient_bytes
    nic = spec.cluster.network.bandwidth
    servers = 8
    # a synchronous step pushes every worker's gradients into the servers, then (after
    # the update) pulls the weights out: 2 N M bytes through S NICs one way at a time
    bound = batch * servers * nic / (2 * model_bytes)
    small, large = _rows(64), _rows(1024)
    for placement in ("dedicated", "colocated"):
        for rows in (small, large):
            assert rows[placement]["throughput_samples_per_s"] <= bound
        # flattened: at 16x the workers, at least 60% of the bound and at most 1.5x faster
        tp = large[placement]["throughput_samples_per_s"]
        assert tp >= 0.6 * bound
        assert tp <= 1.5 * small[placement]["throughput_samples_per_s"]
    ring = large["allreduce"]
    assert ring["scaling_efficiency"] >= 0.5
    assert ring["throughput_samples_per_s"] >= 20 * large["dedicated"]["throughput_samples_per_s"]
