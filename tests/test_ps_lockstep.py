"""Parameter servers on the compiled engine (sim/strategies/parameter_server/lockstep.py),
synchronous and asynchronous, against the event engine it stands in for: the same records
and summaries, to 1e-9 relative, on the bundled scenarios and on random jobs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import numpy as np
import pytest
from conftest import ROOT, make_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from scenarios import load
from scenarios.spec import ScenarioSpec
from sim import runner
from sim.costs import ServerCosts
from sim.engine.convergence import held_by_engine
from sim.engine.metrics import summarize
from sim.engine.outcome import StepRecord
from sim.simulation import Simulation
from sim.strategies.allreduce import lockstep
from sim.strategies.parameter_server import lockstep as ps_lockstep
from sim.strategies.parameter_server.dataflow import server_parts

RTOL = 1e-9


def queue_rule(budget: bool) -> Any:
    """The network's queues under the budget rule
    (sim/strategies/parameter_server/kernel/budget.py) or the share rule whatever the
    servers (asynchronous runs follow the share rule)."""
    return mock.patch.object(ps_lockstep, "BUDGET_FROM_SERVERS", 1 if budget else 10**9)


def assert_same(spec: ScenarioSpec) -> None:
    compiled, events = Simulation(spec), Simulation(spec, lockstep=False)
    assert compiled.engine() is ps_lockstep
    fast, exact = compiled.run(), events.run()
    # the last checkpoint (steps it holds, when), where a failure would restart from
    assert compiled.last_checkpoint == pytest.approx(events.last_checkpoint, rel=RTOL)
    np.testing.assert_allclose(fast.step_ends, exact.step_ends, rtol=RTOL, atol=1e-15)
    a, b = summarize(spec, fast), summarize(spec, exact)
    assert a.keys() == b.keys()
    for key, value in b.items():
        assert a[key] == pytest.approx(value, rel=RTOL, abs=1e-12), key
    for name in ("dropped_gradients", "dropped_measured", "checkpoints", "measure_start"):
        assert getattr(fast, name) == pytest.approx(getattr(exact, name), rel=RTOL), name
    # the records in the order the workers wrote them (steps.csv's order); with host
    # aggregation by step and worker: the event engine writes a step's records in the
    # order its devices finish computing, which ties at one instant leave to the
    # engines' last bits, the compiled one host by host
    assert len(fast.records) == len(exact.records)
    mine, theirs = _order(spec, fast.records), _order(spec, exact.records)
    for name in StepRecord._fields:
        np.testing.assert_allclose(
            np.asarray(fast.records.column(name))[mine],
            np.asarray(exact.records.column(name))[theirs],
            rtol=RTOL,
            atol=1e-15,
            err_msg=name,
        )


def _order(spec: ScenarioSpec, records: Any) -> np.ndarray:
    """The records' rows in the order `assert_same` compares them."""
    if spec.strategy.local_aggregation and spec.cluster.devices_per_host > 1:
        return np.lexsort((records.column("worker"), records.column("step")))
    return np.arange(len(records))


@pytest.mark.parametrize(
    ("path", "sets"),
    [
        ("scenarios/library/vgg16-parameter-servers.yaml", ()),
        ("tests/benchmarks/ps-inception3.yaml", ("cluster.hosts=12", "strategy.servers=5")),
        ("scenarios/library/stragglers-backup-workers.yaml", ()),
        ("scenarios/validation/parameter-servers.yaml", ()),
        ("scenarios/library/sync-vs-async.yaml", ("training.steps=40",)),
    ],
)
def test_bundled_scenarios(path: str, sets: tuple[str, ...]) -> None:
    ran = 0
    sets = ("training.steps=3", "training.warmup_steps=1", *sets)
    for point in load(ROOT / path, sets).points:
        if Simulation(point.spec).engine() is ps_lockstep:
            assert_same(point.spec)
            ran += 1
    assert ran


#: a random job's fields (`random_job`): 1 to 15 workers, dedicated or colocated
JOBS: dict[str, Any] = {
    "hosts": st.integers(1, 5),
    "devices": st.integers(1, 3),
    "servers": st.integers(1, 4),
    "placement": st.sampled_from(["dedicated", "colocated"]),
    "partition": st.sampled_from(["round_robin", "greedy", "sliced", "mxnet"]),
    "fusion": st.sampled_from([None, "4 MB", "1 GiB"]),
    "overlap": st.booleans(),
    "backup": st.integers(0, 2),
    "jitter": st.sampled_from([0.0, 0.1]),
    "hiccups": st.booleans(),
    "every": st.sampled_from([None, 2]),
    "warmup": st.integers(0, 2),
    "network": st.sampled_from(["10 Gbit/s", "100 Gbit/s"]),
    "stream": st.sampled_from([None, "2 Gbit/s"]),
    "sync": st.booleans(),
    "ssp": st.sampled_from([None, 0, 1]),
}


def random_job(
    hosts: int,
    devices: int,
    servers: int,
    placement: str,
    partition: str,
    fusion: str | None,
    overlap: bool,
    backup: int,
    jitter: float,
    hiccups: bool,
    every: int | None,
    warmup: int,
    network: str,
    stream: str | None,
    sync: bool,
    ssp: int | None,
    local_aggregation: bool = False,
) -> ScenarioSpec:
    """ResNet-50 on parameter servers with the fields of `JOBS`: 3 synchronous steps, or
    two updates a worker (and the backup count) asynchronously."""
    workers = hosts * devices
    stragglers: dict[str, Any] = {"jitter": jitter}
    if hiccups:
        # with jitter: without, a worker held up 5 ms is exactly as late as one that
        # started its step 5 ms later, a tie the two engines' last bits (their networks
        # round apart) may break either way, and with it which worker is dropped or
        # writes its record first
        stragglers = {"jitter": 0.1, "transient": {"probability": 0.3, "delay": "5 ms"}}
    strategy: dict[str, Any] = {
        "kind": "parameter_server",
        "servers": servers,
        "placement": placement,
        "partition": partition,
        "overlap": overlap,
        "sync": sync,
    }
    if local_aggregation:
        strategy["local_aggregation"] = True
    if sync:
        strategy["backup_workers"] = min(backup, workers - 1)
    elif ssp is not None:
        strategy["staleness"] = ssp
    if fusion is not None:
        strategy["fusion_buffer"] = fusion
    return make_spec(
        **{
            "model": "resnet50",
            "cluster.hosts": hosts,
            "cluster.devices_per_host": devices,
            "cluster.network.bandwidth": network,
            # over TCP a connection per worker and server, its ceiling an extra link each
            "cluster.network.stream_bandwidth": stream,
            "strategy": strategy,
            "stragglers": stragglers,
            "checkpoint": {"every_steps": every} if every else {},
            # asynchronous: updates, a few per worker
            "training.steps": 3 if sync else 2 * workers + backup,
            "training.warmup_steps": warmup if sync else warmup * workers,
        }
    )


@settings(max_examples=40, deadline=None)
@given(budget=st.booleans(), **JOBS)
def test_random_jobs(budget: bool, **job: Any) -> None:
    with queue_rule(budget):
        assert_same(random_job(**job))


def test_only_where_it_applies() -> None:
    ps = {"kind": "parameter_server", "servers": 2}
    assert Simulation(make_spec(strategy=ps)).engine() is ps_lockstep
    assert Simulation(make_spec(strategy=ps)).engine() is not lockstep
    assert Simulation(make_spec(strategy={**ps, "sync": False})).engine() is ps_lockstep
    others = [
        make_spec(),  # all-reduce
        make_spec(strategy={**ps, "sync_scope": "variable"}),
        make_spec(strategy=ps, **{"sim.network_model": "analytical"}),
        make_spec(
            strategy={**ps, "local_aggregation": True, "backup_workers": 1},
            **{"cluster.devices_per_host": 2},
        ),
        make_spec(strategy=ps, failures=[{"role": "worker", "at_step": 2, "downtime": "1 s"}]),
    ]
    for spec in others:
        assert Simulation(spec).engine() is not ps_lockstep
    assert Simulation(make_spec(strategy=ps), trace=True).engine() is not ps_lockstep


def test_pulls_replayed_only_where_each_step_pulls_alike() -> None:
    # every step's pulls on an idle network from one instant, on links no push crosses
    # (the records' equality with the event engine is `test_random_jobs`)
    def replays(**fields: Any) -> bool:
        sim = Simulation(make_spec(**fields))
        servers, _ = server_parts(sim, ps_lockstep._no_processes)
        routes = ps_lockstep._routes(sim, servers.nodes, 1)
        return ps_lockstep._replays_pulls(sim, routes[0], routes[3])

    ps = {"kind": "parameter_server", "servers": 2}
    assert replays(strategy=ps)
    assert replays(strategy={**ps, "placement": "colocated"}, **{"cluster.hosts": 3})
    assert not replays(strategy={**ps, "backup_workers": 1})
    assert not replays(strategy={**ps, "sync": False})


@pytest.mark.parametrize("overlap", [True, False])
def test_server_costs(overlap: bool) -> None:
    # a closure's dispatch, a call's fixed cost and the update's call, as a calibration
    # gives them (the engine itself leaves calibrated points to the event engine)
    spec = make_spec(
        **{
            "model": "resnet50",
            "cluster.hosts": 3,
            "cluster.devices_per_host": 2,
            "strategy": {"kind": "parameter_server", "servers": 2, "overlap": overlap},
            "stragglers": {"jitter": 0.1},
            "training.steps": 3,
        }
    )
    servers = ServerCosts(dispatch_s=2e-3, call_s=5e-4, update_s=3e-3)
    outcomes = []
    for fast in (True, False):
        sim = Simulation(spec, lockstep=fast)
        sim.costs = replace(sim.costs, servers=servers)
        assert sim.engine() is (ps_lockstep if fast else None)
        outcomes.append(sim.run())
    fast_run, exact = outcomes
    assert fast_run.engine == "ps-lockstep" and exact.engine == "events"
    np.testing.assert_allclose(fast_run.step_ends, exact.step_ends, rtol=RTOL)
    for name in StepRecord._fields:
        np.testing.assert_allclose(
            fast_run.records.column(name), exact.records.column(name), rtol=RTOL, atol=1e-15
        )


def test_meta_names_the_engine_of_every_point() -> None:
    scenario = load(ROOT / "tests/golden/ring-vs-ps-jitter/scenario.yaml")
    engines = runner.run(scenario).engines
    expected = {}
    for point in scenario.points:
        strategy = point.spec.strategy
        if strategy.all_reduces:
            expected[point.id] = "lockstep"
        elif point.spec.sim.network_model == "flow":  # host aggregation included
            expected[point.id] = "ps-lockstep"
        else:
            expected[point.id] = "events"
    assert engines == expected
    assert set(engines.values()) == {"lockstep", "ps-lockstep", "events"}


@pytest.mark.parametrize(
    "sets",
    [
        (),
        ("cluster.devices_per_host=4", "training.evaluation.every_steps=3"),
        ("cluster.devices_per_host=3", "training.evaluation.every_steps=1"),
        ("cluster.devices_per_host=4", "stragglers.jitter=0.2"),
    ],
)
@pytest.mark.parametrize("staleness", ["", ", staleness: 1"])
@pytest.mark.parametrize("hosts", ["", ", local_aggregation: true"])
def test_evaluation_barrier(sets: tuple[str, ...], staleness: str, hosts: str) -> None:
    # asynchronous parameter servers to a target: the coordinator evaluates behind a
    # barrier (closures up to the next evaluation, then none until it is done); with
    # host aggregation, a host's closures
    strategy = f"{{kind: parameter_server, servers: 1, sync: false{staleness}{hosts}}}"
    scenario = load(
        ROOT / "scenarios/library/digits-time-to-target.yaml",
        (f"sweep.strategy=[{strategy}]", *sets),
    )
    held = [p.spec for p in scenario.points if held_by_engine(p.spec)]
    assert held
    for spec in held:
        assert_same(spec)


def test_asynchronous_worker_past_its_draws() -> None:
    # seven of eight workers 4x slower, compute-bound: worker 0 takes about 148 of the
    # 400 updates, past the 116 steps drawn at first (twice the even share, plus 16),
    # so the engine draws again for it; the records still equal the event engine's
    spec = make_spec(
        **{
            "model": "mlp",
            "cluster.device": "cpu",
            "cluster.hosts": 8,
            "strategy": {"kind": "parameter_server", "servers": 2, "sync": False},
            "stragglers": {
                "jitter": 0.1,
                "slow": [{"workers": [1, 2, 3, 4, 5, 6, 7], "factor": 4}],
            },
            "training.steps": 400,
            "training.batch_per_worker": 4096,
        }
    )
    assert_same(spec)
    fast = Simulation(spec).run()
    workers = fast.records.column("worker")
    assert np.count_nonzero(workers == 0) > 2 * (400 // 8) + 16


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.integers(0, 5), min_size=0, max_size=300),
    floats=st.booleans(),
)
def test_the_kernels_sort_is_numpys_stable_sort(keys: list[int], floats: bool) -> None:
    # `stable_sort` orders the values of a row by keys[value], ties as they came:
    # numpy's stable argsort is the truth (ties many, so order among equals shows)
    from sim.network.unmanaged import stable_sort

    n = len(keys)
    key = np.array(keys, dtype=float if floats else np.int64)
    rows = np.zeros((3, max(n, 1)), dtype=np.int64)
    rows[1, :n] = np.arange(n)[::-1]  # the values, in an order of their own
    stable_sort(rows, 1, 2, n, key)
    start = np.arange(n)[::-1]
    assert rows[1, :n].tolist() == start[np.argsort(key[start], kind="stable")].tolist()
