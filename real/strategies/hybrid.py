"""`strategy.kind: hybrid` for real: a GPT transformer laid out tensor x data over one
process a device, each a client of one DTensor mesh (real/process/tensor.py).

What TensorFlow cannot shard this way on this backend is refused in one line that says
why: a pipeline's stages, context and expert parallelism, ZeRO's stages, sequence
parallelism and recomputation (DTensor lays out tensors, it runs no schedule of
micro-batches over stages nor shards an optimizer's state by hand), flash attention (the
attention runs unfused), and what a layout of clients does not inject (stragglers,
failures, checkpoints, a target, the digits).
"""

from __future__ import annotations

import math

from scenarios.spec import ScenarioSpec

from ..job import Job, Place, TensorWorker, Training, make
from .base import Probe, one_client_problems

#: why a DTensor mesh of clients runs none of these (the field named first)
_WHY = "run-real lays a transformer out with DTensor meshes, tensor x data"


class Hybrid:
    def problems(self, spec: ScenarioSpec) -> list[str]:
        s = spec.strategy
        found = []
        if s.pipeline > 1:
            found.append(f"strategy.pipeline: {s.pipeline} ({_WHY}; no pipeline's stages)")
        if s.context > 1 or s.expert > 1:
            which = "context" if s.context > 1 else "expert"
            found.append(f"strategy.{which}: {getattr(s, which)} ({_WHY} only)")
        if s.stage > 0:
            found.append(f"strategy.stage: {s.stage} ({_WHY}; no ZeRO stages)")
        if s.sequence_parallel:
            found.append(f"strategy.sequence_parallel: true ({_WHY}; the norms run whole)")
        if s.recompute != "none":
            found.append(f"strategy.recompute: {s.recompute} ({_WHY}; nothing recomputed)")
        if s.attention == "flash":
            found.append(
                "strategy.attention: flash (run-real's transformer computes the attention "
                "unfused; set attention: unfused)"
            )
        if s.overlap:
            found.append(
                "strategy.overlap: true (DTensor reduces the gradients where its SPMD "
                "expansion puts them, not layer by layer during the backward)"
            )
        shape = spec.model.transformer
        if shape is None or shape.style != "gpt" or shape.experts > 1:
            found.append(
                "model.transformer: run-real lays out a GPT transformer (style gpt, no "
                "experts) by its shape"
            )
        return found + one_client_problems(spec, "a DTensor mesh of clients")

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        """One client a device. On another number of devices than the point's (one: the
        single-device baseline of its scaling) the tensor group is what of the point's
        divides them, the rest data parallel."""
        s = spec.strategy
        n = place.workers
        tensor = s.tensor if n == spec.workers else math.gcd(s.tensor, n)
        common = make(
            TensorWorker,
            place,
            training,
            tensor=tensor,
            data_parallel=n // tensor,
            micro_batches=spec.training.batch_per_worker // s.micro_batch,
        )
        return [common.replace(index=i) for i in range(place.workers)]

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        """The all-reduce among as many processes as the tensor group and as the data-
        parallel group (what their collectives move at)."""
        s = spec.strategy
        groups = {s.tensor, s.layout_data(spec.workers)} - {1}
        return [("allreduce", n) for n in sorted(groups)]
