"""Compute: per-layer forward and backward times, and gradient buckets.

A layer's time is batch x FLOP / (peak(dtype) x efficiency), or, where a step time was
measured (a calibration profile's entry for the model, batch and dtype, or the device's
`samples_per_s` for the model), that step time split over the layers in proportion to
their FLOPs. Gradients become ready layer by layer in reverse order during
backward; `fusion_buffer` groups them into buckets (Horovod tensor fusion): a bucket closes
once it holds at least that many bytes, and is ready when its last (closest to the input)
layer's backward is done. `fusion_buffer: 0` means one bucket per tensor (layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios.errors import ScenarioError
from scenarios.spec import ScenarioSpec


@dataclass(frozen=True)
class Bucket:
    index: int
    first_layer: str  # closest to the output: its gradient is ready first
    last_layer: str
    nbytes: float
    ready_s: float  # seconds after the step starts, before jitter


class ComputeModel:
    """Per-layer compute times of one worker for one step (batch_per_worker samples)."""

    def __init__(self, spec: ScenarioSpec, calibrated_step_s: float | None = None):
        """`calibrated_step_s`: a measured step time (seconds) from a calibration profile;
        it wins over the device's figures."""
        model, device = spec.model, spec.cluster.device
        batch = spec.training.batch_per_worker
        table = model.layer_table()
        self.names = [row[0] for row in table]
        self.params = np.array([row[1] for row in table], dtype=float)
        fwd = np.array([row[2] for row in table], dtype=float)
        bwd = np.array([row[3] for row in table], dtype=float)
        measured = (device.samples_per_s or {}).get(model.name)
        if measured is None and model.base is not None:
            measured = (device.samples_per_s or {}).get(model.base)
        step: float | None = calibrated_step_s
        if step is None and measured is not None:
            step = batch / measured
        if step is not None:
            total = fwd.sum() + bwd.sum()
            if total > 0:
                fwd, bwd = fwd / total * step, bwd / total * step
            else:  # no FLOP table: backward = 2 x forward, spread by parameters
                n = len(self.params)
                weight = (
                    self.params / self.params.sum() if self.params.sum() > 0 else np.full(n, 1 / n)
                )
                fwd, bwd = weight * step / 3, weight * 2 * step / 3
            self.source = (
                f"calibrated step time {step * 1e3:.4g} ms"
                if calibrated_step_s is not None
                else f"measured {measured:g} samples/s"
            )
        else:
            dtype = device.compute_dtype(model.dtype)
            peak = device.peak_for(dtype)
            if peak is None:
                raise ScenarioError(
                    f"cluster.device.peak_flops: no figure for dtype {dtype} "
                    f"(device {device.name}); add one or give samples_per_s"
                )
            efficiency = device.efficiency_for(dtype)
            if efficiency is None:
                raise ScenarioError(
                    f"cluster.device.efficiency: no figure for dtype {dtype} "
                    f"(device {device.name}); add one"
                )
            if fwd.sum() <= 0:
                raise ScenarioError(
                    f"model.flops_per_sample: unknown for model {model.name}; give it, a layers "
                    "table, or cluster.device.samples_per_s"
                )
            rate = peak * efficiency
            fwd, bwd = fwd * batch / rate, bwd * batch / rate
            self.source = f"{dtype} peak {peak / 1e12:g} TFLOP/s x efficiency {efficiency:g}"
        self.forward_s = fwd
        self.backward_s = bwd
        self.bytes_per_param = model.bytes_per_param
        #: forward + backward time of one step, without jitter (read every worker-step)
        self.step_s = float(fwd.sum() + bwd.sum())

    def buckets(self, fusion_buffer: float, overlap: bool) -> list[Bucket]:
        """Gradient buckets in the order they become ready (output layer first)."""
        done = float(self.forward_s.sum())
        out: list[Bucket] = []
        size, first, last, ready = 0.0, "", "", 0.0
        for i in reversed(range(len(self.names))):
            done += float(self.backward_s[i])
            nbytes = float(self.params[i]) * self.bytes_per_param
            if nbytes <= 0:
                continue
            first = first or self.names[i]
            size, last, ready = size + nbytes, self.names[i], done
            if size >= fusion_buffer:
                out.append(Bucket(len(out), first, last, size, ready))
                size, first = 0.0, ""
        if size > 0:
            out.append(Bucket(len(out), first, last, size, ready))
        if not overlap:
            end = self.step_s
            out = [Bucket(b.index, b.first_layer, b.last_layer, b.nbytes, end) for b in out]
        return out
