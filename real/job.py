"""What one TensorFlow process runs: the job description both launchers take.

Shared by both sides of run-real: `runner.jobs_for` (training), `trials` (independent
trials) and `calibrate` (probes) make `Job`s; the local launcher (`real/launcher.py`) and
each Spark task (`real/spark_task.py`) get them and nothing else, and write each as the
JSON file that `python -m real.process.worker JOB.json` reads back (`Job.from_json`).
Every field has the meaning below and a default, so a probe's job says only what it
needs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from results.streams import lognormal_factors, stream

#: `data: digits` (real/process/data.py): pixels per image and classes of the data set, to
#: which the model's input and output must fit
DIGITS_FEATURES = 64
DIGITS_CLASSES = 10


@dataclass(frozen=True)
class Job:
    """One process of a job: its place in the cluster and what it runs (SI units)."""

    index: int  # its task index within its role
    role: str = "worker"  # worker | chief (the parameter-server coordinator) | ps
    workers: int = 1  # the job's workers
    device: str = "cpu"  # cpu | gpu (one visible GPU per worker)
    seed: int = 0
    collective_timeout_s: float = 120.0  # before TensorFlow aborts a collective
    # -- training (a worker's; the coordinator's under parameter servers)
    keras: dict[str, Any] = field(default_factory=dict)  # the model's builder and sizes
    batch_per_worker: int = 32
    learning_rate: float = 0.05  # the rate, where no schedule is given
    # the rate at every update (workloads.schedule.Schedule's fields); None: learning_rate
    schedule: dict[str, Any] | None = None
    warmup_steps: int = 0
    steps: int = 0
    data: str = "synthetic"  # synthetic | digits
    # -- time to target: evaluate on the held-out images every `eval_every` updates (0:
    # never), stop once the target ({metric: accuracy | loss, value}) is met
    target: dict[str, Any] | None = None
    eval_every: int = 0
    holdout: int = 0  # digits images held out of training for evaluation
    bytes_per_pack: int = 0  # MultiWorkerMirroredStrategy's packs of gradients (0: one)
    # -- stragglers this process injects
    jitter: float = 0.0  # lognormal step-time jitter (coefficient of variation)
    slow: float = 1.0  # persistent slowdown factor
    hiccups: list[float] = field(default_factory=list)  # seconds added to each step
    # -- parameter servers
    serve: bool = False  # a server task: it joins the cluster and reports no steps
    servers: int = 0  # the coordinator's: parameter servers
    partition: str = "round_robin"
    sync: bool = True
    backup_workers: int = 0
    # the coordinator's: each worker's slowdown factor and hiccup (seconds) per step
    slowdowns: list[list[float]] = field(default_factory=list)
    worker_hiccups: list[list[float]] = field(default_factory=list)
    # -- in-graph replication: the devices this process drives with MirroredStrategy
    # (logical CPUs split from the host's, or the visible GPUs); 1: itself alone
    local_devices: int = 1
    # the dispatch probe: each replica's forward and backward alone (no all-reduce, no
    # update), so that one client driving D devices compares with D processes
    gradients_only: bool = False
    # -- pipelines (real/process/pipeline.py): the coordinator's stages, micro-batches, schedule
    # and layers per stage; a stage's server is pinned to one core (`pin`)
    stages: int = 1
    micro_batches: int = 1
    pipeline_schedule: str = "gpipe"
    split: list[int] = field(default_factory=list)
    pin: bool = False
    core: int | None = None  # the core a pinned stage takes; None: its index's
    # a stage's server samples its process's CPU time this often (0: never) and reports
    # the samples in `busy` records: when the stage computed (real/process/pipeline.py)
    busy_every_s: float = 0.0
    # -- checkpoints (tf.train.CheckpointManager)
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None  # steps; None: none
    # -- independent trials
    trial: int | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # -- calibration probes (real/process/probe.py) in place of training
    probe: str | None = None  # transfer | allreduce | coordinator | update
    sizes: list[int] = field(default_factory=list)  # bytes per message size probed
    repeats: int = 0
    warmup: int = 0
    chain: int = 0  # reads chained in one call
    standalone: bool = False  # joins no cluster (no TF_CONFIG) though started beside others
    intra_op_threads: int = 1
    inter_op_threads: int = 1

    def step_slowdowns(self, total: int) -> list[float]:
        """Per step, how much longer than its own compute this worker takes: jitter (from
        the simulator's own seeded stream for this worker) x persistent slowness, minus 1.
        A factor below 1 cannot be made real (a worker cannot compute faster): it counts
        as 1."""
        rng = stream(self.seed, 0, "jitter", self.index)
        factors = lognormal_factors(rng, self.jitter, total) * self.slow
        return [max(0.0, float(f) - 1.0) for f in np.asarray(factors)]

    def replace(self, **changes: Any) -> Job:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"job: unknown field {unknown[0]!r}")
        return cls(**data)
