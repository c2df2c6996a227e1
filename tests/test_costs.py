"""The cost model (sim/costs): what the catalog's links, networks and collective library
cost, against closed forms built from the catalog's cited figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import PROFILE, make_spec, write
from test_training import COMPUTE, NCCL_LAUNCH, S, rel, step_time

from scenarios import load
from sim.costs import cost_model, evaluation_seconds
from sim.simulation import Simulation

# NCCL's per-step latency of a ring, Simple protocol (src/graph/tuning.cc hwLat): NVLink,
# PCIe and the network; and the catalog's goodputs (links.yaml, networks.yaml)
NVLINK_STEP, NET_STEP = 3.4e-6, 9.6e-6
NVLINK2 = 150e9 * 0.8  # NCCL topo.h: 20 of 25 GB/s per NVLink 2 link
EDR = 100e9 / 8 * 0.976  # 12.2 of 12.5 GB/s on one EDR NIC
TEN_GBE = 10e9 / 8 * 1460 / 1538  # TCP/IPv4 payload per Ethernet frame at 1500 MTU


def gpu_spec(**sets: object):  # type: ignore[no-untyped-def]
    return make_spec(
        **{
            "cluster.host_link": "nvlink2",
            "cluster.network": "ib-edr",
            "sim.network_model": "analytical",
            **sets,
        }
    )


def test_catalog_links_carry_their_goodput() -> None:
    links = cost_model(gpu_spec()).links
    assert links.fabric_bandwidth == pytest.approx(NVLINK2)
    assert links.network_bandwidth == pytest.approx(EDR)
    ten = cost_model(gpu_spec(**{"cluster.network": "10GbE"})).links
    assert ten.network_bandwidth == pytest.approx(TEN_GBE, rel=1e-4)


def test_gpu_collectives_pay_nccls_launch_and_step_latencies() -> None:
    costs = cost_model(gpu_spec()).collective
    assert costs.launch_s == pytest.approx(NCCL_LAUNCH)
    # a step pays the larger of the link's latency and NCCL's: NVLink 2 us < 3.4 us, EDR
    # 1 us < 9.6 us
    assert costs.step_s == pytest.approx((NVLINK_STEP, NET_STEP))
    # 10GbE's kernel TCP latency (20 us) is above NCCL's 9.6 us
    ten = cost_model(gpu_spec(**{"cluster.network": "10GbE"})).collective
    assert ten.step_s == pytest.approx((NVLINK_STEP, 20e-6))


@pytest.mark.parametrize("hosts,devices", [(2, 4), (4, 2), (3, 1)])
def test_ring_across_hosts_is_bound_by_the_network_step(hosts: int, devices: int) -> None:
    # flat ring of N = hosts x devices: every phase moves (N-1)/N S over each link; the
    # links that cross hosts are the slowest and pay NCCL's network step N-1 times
    spec = gpu_spec(**{"cluster.hosts": hosts, "cluster.devices_per_host": devices})
    n = hosts * devices
    phase = (n - 1) * NET_STEP + (n - 1) * S / n / EDR
    assert rel(step_time(spec), COMPUTE + NCCL_LAUNCH + 2 * phase) < 1e-6


def test_reductions_cross_the_receivers_memory() -> None:
    # a device whose memory moves 3 GB/s reduces 1 GB/s of received data (it reads two
    # chunks and writes one per byte received): the reduce-scatter is bound by it, the
    # all-gather by the link
    spec = gpu_spec(
        **{
            "cluster.hosts": 1,
            "cluster.devices_per_host": 4,
            "cluster.device.memory_bandwidth": "3 GB/s",
        }
    )
    per_link = 3 * S / 4
    reduce_scatter = 3 * NVLINK_STEP + per_link / 1e9
    all_gather = 3 * NVLINK_STEP + per_link / NVLINK2
    assert rel(step_time(spec), COMPUTE + NCCL_LAUNCH + reduce_scatter + all_gather) < 1e-6
    flow = spec.model_copy(update={"sim": spec.sim.model_copy(update={"network_model": "flow"})})
    assert rel(step_time(flow), COMPUTE + NCCL_LAUNCH + reduce_scatter + all_gather) < 1e-6


def test_cpu_devices_run_no_nccl() -> None:
    spec = gpu_spec(**{"cluster.device": "cpu"})
    costs = cost_model(spec).collective
    assert costs.launch_s == 0 and costs.step_s is None


def test_a_profile_s_evaluation_replaces_the_forward_pass(tmp_path: Path) -> None:
    # the profile measured one evaluation of the model on its data: the cost model charges
    # that; without it, one worker's forward pass over the held-out samples
    fit = "{metric: loss, initial: 2.3, final: 0.1, scale_samples: 300, noise_scale: 100, "
    fit += "lr_max: 1}"
    entry = f"convergence:\n  - {{model: toy, data: synthetic, fit: {fit}, rms: 0, eval_s: 0.25}}\n"
    measured = Simulation(load(write(tmp_path, PROFILE + entry)).points[0].spec).costs
    assert measured.evaluation_s == 0.25
    spec = load(write(tmp_path)).points[0].spec
    costs = Simulation(spec).costs
    assert costs.evaluation_s == evaluation_seconds(spec, float(costs.compute.forward_s.sum()))
    assert costs.evaluation_s != 0.25


def test_a_checkpoint_holds_the_parameters_and_the_optimizer_s_state() -> None:
    # by default one optimizer slot the size of a parameter (momentum), written at the
    # scenario's bandwidth; the same with a calibration profile (none measures checkpoints)
    spec = make_spec(**{"checkpoint.write_bandwidth": "1 GB/s"})
    costs = cost_model(spec)
    written = 2 * float(costs.compute.params.sum()) * costs.compute.bytes_per_param
    assert costs.checkpoint_bytes == pytest.approx(written, rel=1e-12)
    assert costs.checkpoint_s == pytest.approx(written / 1e9, rel=1e-12)
