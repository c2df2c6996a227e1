"""`run-real --calibrate` for a pipeline: one stage's compute, measured on real processes.

A stage is the pipeline's server process (real/process/server.py) driven by its chief
(real/process/pipeline.py), pinned to one core: what the simulator cuts into stages.
"""

from __future__ import annotations

import threading

import numpy as np

from measured.profile import ComputeEntry
from scenarios.spec import ScenarioSpec

from ..launcher import Launcher, LaunchResult
from ..protocol import Step
from ..runner import common_of
from ..strategies.pipeline import pipeline_jobs


def measure_stage(
    spec: ScenarioSpec, steps: int, timeout_s: float, fed: bool = False, together: int = 1
) -> ComputeEntry:
    """One pipeline stage holding every layer, its process on one core, the batch in the
    point's micro-batches (their gradients summed), `steps` measured steps: what the
    simulator cuts into stages (`run-real --calibrate`, measure.py). `together`
    such stages at once, on a core each (`processes`): a pipeline's stages share the
    memory and caches of the host as they work side by side. `fed`: a stage of no layers
    before it, on a core of its own, sends it each micro-batch's input and takes back the
    input's gradient (the stage then computes that gradient too): the measured stage
    receives and sends one message a micro-batch each way."""
    micro = spec.strategy.micro_batches
    place, training = common_of(spec, 1)
    split = [len(spec.model.layer_table())]
    layers = [0, *split] if fed else split
    jobs = pipeline_jobs(place, training.replace(steps=steps), spec, layers, micro_batches=micro)
    results: list[LaunchResult] = []
    failed: list[BaseException] = []

    def launch(copy: int) -> None:
        try:  # copy c's stage on core c (a copy of its own cluster, on ports of its own)
            placed = [jobs[0], *(j.replace(core=copy) for j in jobs[1:])] if copy else jobs
            results.append(Launcher(placed, timeout_s, spec.real.device).run())
        except BaseException as error:  # noqa: BLE001 - raised again below
            failed.append(error)

    threads = [threading.Thread(target=launch, args=(c,)) for c in range(1, together)]
    for thread in threads:
        thread.start()
    launch(0)
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    warmup = spec.training.warmup_steps
    measured = 1 if fed else 0
    t = np.concatenate(
        [
            np.diff(sorted(r.end for r in result.of(Step) if r.worker == measured))[
                max(warmup, 1) - 1 :
            ]
            for result in results
        ]
    )
    startup = float(
        np.median([min(r.start for r in res.of(Step)) - res.launched for res in results])
    )
    return ComputeEntry.model_validate(
        {
            "model": spec.model.name,
            "batch_per_worker": spec.training.batch_per_worker,
            "dtype": spec.model.dtype,
            "processes": together,
            "micro_batches": micro,
            "fed": fed,
            "step_time": f"{float(np.mean(t))} s",
            "p10": f"{float(np.percentile(t, 10))} s",
            "p90": f"{float(np.percentile(t, 90))} s",
            "steps": len(t),
            "startup": f"{startup} s",
        }
    )
