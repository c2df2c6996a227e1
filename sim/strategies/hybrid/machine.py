"""What a transformer layout's parts run at (`costs.py`): the catalog's device and fabric,
or on the calibrated machine (`cluster.profile`, `run-real --calibrate`) what was
measured there.

From the catalog, a GEMM runs at the device's peak x `matmul_efficiency` x the derate of
its size (`costs.SIZE_CURVE`), a memory-bound kernel at memory_bandwidth x
`memory_efficiency`, and a collective over the slowest link its group crosses
(`sim/network/fabric.py`).

Calibrated, run-real's own transformer (real/process/tensor.py) was timed on one device
at the point's batch (the profile's compute entry with `layout: true`): its FLOPs a step
(forward and backward, Narayanan et al. 2021's count) over that time is the one rate
every GEMM runs at, with the kernels, the update and the GEMMs' shapes already in it (no
size derate, no memory-bound part). A group's collectives take the all-reduce measured
among as many processes (the profile's fit, t = a + S / B for S bytes), read as the ring
it is: 2 (n - 1)/n S / B' + 2 (n - 1) a' with B' = 2 (n - 1)/n B and a' = a / (2 (n - 1)),
so that a reduce-scatter or an all-gather costs half of it. DTensor all-reduces each
weight's gradient on its own (no buckets): a data-parallel reduction pays the ring's
latency once a weight tensor (16 a GPT layer, 4 more for the embeddings and the final
norm: real/process/tensor.py's weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from measured.entries import CollectiveFit
from scenarios.spec import ScenarioSpec
from scenarios.transformer import flops_per_layer_forward, logits_flops
from sim.costs.measured import Calibration
from sim.network import fabric

#: the weight tensors of run-real's GPT (real/process/tensor.py `shapes`): a layer's two
#: norms' gains and shifts, query, key, value and output and the MLP's two matrices with
#: their biases; the token and position embeddings and the final norm's two
WEIGHTS_PER_LAYER = 16
WEIGHTS_OUTSIDE = 4


@dataclass(frozen=True)
class Machine:
    """The rates a layout's parts run at, and the path of each group's collectives."""

    spec: ScenarioSpec
    flops: float  # FLOP/s of a large GEMM
    memory: float  # bytes/s of memory-bound kernels; 0: none counted apart
    derated: bool = True  # each GEMM by its size (False: the measured rate has it)
    # the measured all-reduce by processes (calibrated, on the calibrated machine)
    fits: dict[int, CollectiveFit] = field(default_factory=dict)
    # the gradients' reduction in this many all-reduces (1: Megatron's buckets, one
    # latency for all; calibrated: run-real's DTensor, one a weight tensor)
    reductions: int = 1

    @classmethod
    def of(cls, spec: ScenarioSpec, calibration: Calibration | None = None) -> Machine:
        """The catalog's machine, or the calibrated one where the profile timed the
        layout's model (a compute entry of `layout: true` for the point's batch)."""
        if calibration is None or calibration.step_s is None:
            flops, memory = catalog_rates(spec)
            return cls(spec, flops, memory)
        assert spec.model.transformer is not None
        shape = spec.model.transformer.shape()
        batch = spec.training.batch_per_worker
        forward = sum(flops_per_layer_forward(shape, batch).values()) * shape.layers
        step = 3 * forward + logits_flops(shape, batch)
        fits = {}
        if calibration.one_machine:
            fits = {f.workers: f for f in calibration.profile.allreduce}
        reductions = WEIGHTS_PER_LAYER * shape.layers + WEIGHTS_OUTSIDE
        rate = step / calibration.step_s
        return cls(spec, rate, 0.0, derated=False, fits=fits, reductions=reductions)

    def reduction_s(self, nbytes: float, ranks: int, path: fabric.Path) -> float:
        """The gradients' all-reduce of `nbytes` among `ranks`: one ring, and the ring's
        latency again for every further all-reduce it is made of (`reductions`)."""
        if ranks <= 1:
            return 0.0
        extra = (self.reductions - 1) * 2 * (ranks - 1) * path.step_latency
        return fabric.all_reduce_s(nbytes, ranks, path) + extra

    def path(self, devices: Sequence[int]) -> fabric.Path:
        """What a group's collectives move at: the measured all-reduce among as many
        processes where there is one, else the fabric's slowest link."""
        n = len(devices)
        fit = self.fits.get(n)
        if fit is None or n < 2:
            return fabric.path_of(self.spec.cluster, devices)
        steps = n - 1
        return fabric.Path(fit.bandwidth * 2 * steps / n, fit.latency / (2 * steps))


def catalog_rates(spec: ScenarioSpec) -> tuple[float, float]:
    """FLOP/s of the device's large matrix products and bytes/s of its memory-bound
    kernels for the model's dtype."""
    device = spec.cluster.device
    dtype = device.compute_dtype(spec.model.dtype)
    peak = device.peak_for(dtype) or 0.0
    measured = device.matmul_efficiency or {}
    efficiency = measured.get(dtype, measured.get("any"))
    if efficiency is None:
        efficiency = device.efficiency_for(dtype) or 0.5
    memory = (device.memory_bandwidth or 0.0) * (device.memory_efficiency or 1.0)
    return peak * efficiency, memory
