"""real/job.py: a job is a tagged union, one frozen dataclass per kind of work, written as
JSON with its tag and read back as the same job (`load_job`), refusing what it does not
know in one line. No TensorFlow needed."""

from __future__ import annotations

import json
import textwrap

import pytest

from real.job import (
    KINDS,
    AllReduceWorker,
    Coordinator,
    PipelineChief,
    Place,
    Probe,
    Server,
    TensorWorker,
    Training,
    Trial,
    load_job,
    make,
    reports,
)
from real.runner import jobs_for
from real.strategies.independent import Independent
from scenarios import loads
from scenarios.sections.training import Target
from workloads.schedule import Schedule

SCENARIO = """
version: 1
name: jobs
model: mlp
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training: {steps: 4, warmup_steps: 1}
"""


def spec_of(strategy: str):  # type: ignore[no-untyped-def]
    text = textwrap.dedent(SCENARIO) + f"strategy: {strategy}\n"
    (point,) = loads(text, backend="real").points
    return point.spec


JOBS = [
    AllReduceWorker(index=1, workers=2, hiccups=[0.0, 0.5], bytes_per_pack=1000),
    Trial(trial=3, hyperparameters={"seed": 7}, schedule=Schedule(base=0.1, peak=0.2)),
    Coordinator(
        servers=2,
        sync=False,
        slowdowns=[[0.0, 0.1]],
        target=Target(metric="accuracy", value=0.9),
        eval_every=5,
    ),
    PipelineChief(stages=2, micro_batches=4, split=[1, 2]),
    TensorWorker(index=1, workers=4, tensor=2, data_parallel=2, micro_batches=2),
    Server(role="ps", index=1, pin=True, core=3, busy_every_s=0.005),
    Probe(role="chief", probe="update", keras={"builder": "mlp"}, repeats=3),
]


@pytest.mark.parametrize("job", JOBS, ids=lambda job: type(job).__name__)
def test_a_job_comes_back_as_it_went(job: object) -> None:
    assert isinstance(job, Place)
    text = job.to_json()
    assert json.loads(text)["kind"] == type(job).kind
    assert load_job(text) == job and type(load_job(text)) is type(job)


def test_every_kind_has_a_tag_of_its_own() -> None:
    assert sorted(KINDS) == sorted(type(job).kind for job in JOBS)


def test_an_unknown_tag_or_field_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^job: unknown kind 'nope' \(one of ") as info:
        load_job('{"kind": "nope", "index": 0}')
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="^job: unknown kind None"):
        load_job('{"index": 0}')
    # a field of another kind: a server has no training
    with pytest.raises(ValueError, match="^job: unknown field 'steps' for kind server$"):
        load_job('{"kind": "server", "steps": 3}')


def test_a_job_is_made_of_its_parts() -> None:
    place, training = Place(workers=4, seed=9), Training(steps=12, batch_per_worker=8)
    job = make(AllReduceWorker, place, training, index=2)
    assert (job.workers, job.seed, job.steps, job.batch_per_worker, job.index) == (4, 9, 12, 8, 2)
    assert isinstance(job, Training) and not isinstance(make(Server, place), Training)


def test_each_strategy_launches_its_kinds_of_job() -> None:
    ring = jobs_for(spec_of("{kind: allreduce}"))
    assert [type(j) for j in ring] == [AllReduceWorker, AllReduceWorker]
    ps = jobs_for(spec_of("{kind: parameter_server, servers: 2}"))
    assert [type(j) for j in ps] == [Coordinator, Server, Server, Server, Server]
    assert [(j.role, j.index) for j in ps] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
        ("ps", 1),
    ]
    assert [reports(j) for j in ps] == [True, False, False, False, False]
    trials = jobs_for(spec_of("{kind: independent, trials: {learning_rate: [0.1, 0.2]}}"))
    assert [type(j) for j in trials] == [Trial, Trial]
    assert [j.schedule.peak for j in trials if isinstance(j, Trial) and j.schedule] == [0.1, 0.2]


def test_a_trial_trains_at_one_workers_rate_whatever_the_caller_asks() -> None:
    # four devices and a rate scaled linearly with the workers: a trial trains alone, so
    # its job is the same whether the caller asks for the point's workers or for one
    text = """
    version: 1
    name: trials
    model: mlp
    cluster: {hosts: 1, devices_per_host: 4, device: cpu, host_link: loopback}
    training: {steps: 4, warmup_steps: 1, learning_rate: {base: 0.1, scaling: linear}}
    strategy: {kind: independent, trials: {batch_per_worker: [8, 16]}}
    """
    (point,) = loads(textwrap.dedent(text), backend="real").points
    assert point.spec.workers == 4
    trials = jobs_for(point.spec)
    assert trials == jobs_for(point.spec, 1)
    # even given a place and training scaled for four workers, the plug-in makes them alone
    scaled = Training(learning_rate=0.4, schedule=Schedule(base=0.4, peak=0.4))
    given = Independent().jobs(point.spec, Place(workers=4), scaled)
    for job in (*trials, *given):
        assert isinstance(job, Trial) and job.schedule is not None
        assert (job.workers, job.index, job.learning_rate, job.schedule.peak) == (1, 0, 0.1, 0.1)
