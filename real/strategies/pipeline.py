"""`strategy.kind: pipeline` for real: one copy of the model, its stages driven by the
chief (real/process/pipeline.py), each stage's server pinned to a core of its own."""

from __future__ import annotations

from scenarios.spec import ScenarioSpec
from workloads.pipeline import replicas, stage_layers

from ..job import Job, PipelineChief, Place, Server, Training, make
from .base import Probe, one_client_problems

#: how often a pipeline stage samples its CPU time (the trace's compute spans)
BUSY_EVERY_S = 0.005


class Pipeline:
    def problems(self, spec: ScenarioSpec) -> list[str]:
        """What of a pipeline run-real cannot run (real/process/pipeline.py runs one copy
        of an mlp model, on synthetic data or the digits, no stragglers, failures or
        checkpoints)."""
        st, problems = spec.strategy, []
        keras = spec.model.keras
        if keras is None or keras.builder != "mlp":
            builder = keras.builder if keras is not None else "none"
            problems.append(f"model.keras.builder: {builder} (run-real pipelines build mlp only)")
        if replicas(spec) > 1:
            problems.append(
                f"cluster: {spec.workers} devices for {st.stages} stages (run-real runs one "
                "copy of a pipeline)"
            )
        if st.tensor > 1:
            problems.append("strategy.tensor (run-real runs no tensor parallelism)")
        if st.parameter_servers:
            problems.append(
                f"strategy.servers: {st.servers} (run-real's pipeline keeps each stage's "
                "variables on the stage's own task)"
            )
        return problems + one_client_problems(spec, "a pipeline", data=True)

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        """The point's stages; alone (one worker), the whole model on one device in one
        micro-batch."""
        if place.workers == spec.workers:
            split = [len(r) for r in stage_layers(spec)]
            return pipeline_jobs(place, training, spec, split)
        split = [len(spec.model.layer_table())]
        return pipeline_jobs(place, training, spec, split, micro_batches=1)

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        """A stage alone and fed by a stage of its own (its messages' cost)."""
        st = spec.strategy
        if st.stages <= 1:
            return []
        return [("fed", spec.model.name, spec.training.batch_per_worker, st.micro_batches)]


def pipeline_jobs(
    place: Place,
    training: Training,
    spec: ScenarioSpec,
    split: list[int],
    micro_batches: int | None = None,
) -> list[Job]:
    """A pipeline's chief and its stages' servers, `split` layers a stage, the strategy's
    micro-batches unless `micro_batches` says."""
    st = spec.strategy
    chief = make(
        PipelineChief,
        place,
        training,
        role="chief",
        workers=1,
        stages=len(split),
        micro_batches=st.micro_batches if micro_batches is None else micro_batches,
        pipeline_schedule=st.schedule,
        split=split,
    )
    stages = [
        make(Server, place, index=k, pin=True, busy_every_s=BUSY_EVERY_S) for k in range(len(split))
    ]
    return [chief, *stages]
