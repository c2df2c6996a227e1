"""Simulator dynamics against independent truth: stragglers, async, backup workers,
failures and checkpoints, independent trials, replications."""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from conftest import BASE, make_spec
from test_training import NCCL_LAUNCH

from scenarios.loader import Point, validate
from sim.engine.metrics import summarize
from sim.runner import simulate_point
from sim.simulation import Simulation

B = 10e9 / 8  # 10 Gbit/s
ALPHA = 10e-6
S = 25e6 * 4
COMPUTE = 10 * 3e9 / 10e12  # 3 ms per step on the BASE device


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def row(**sets: Any) -> dict[str, Any]:
    return simulate_point(Point("p", 0, {}, make_spec(**sets))).row


def outcome(**sets: Any) -> tuple[Any, Any]:
    spec = make_spec(**sets)
    return spec, Simulation(spec).run()


# ------------------------------------------------------------------ stragglers


@pytest.mark.parametrize("factor", [1.5, 2.0, 4.0])
def test_slow_worker_sync_step_is_factor_times_compute_plus_ring(factor: float) -> None:
    n = 4
    r = row(
        **{
            "cluster.hosts": n,
            "sim.network_model": "analytical",
            "stragglers.slow": [{"workers": [3], "factor": factor}],
        }
    )
    ring = NCCL_LAUNCH + 2 * (n - 1) * (ALPHA + S / (n * B))
    assert rel(r["step_time_mean_s"], factor * COMPUTE + ring) < 1e-6


def test_slow_worker_does_not_slow_the_others_in_async_ps() -> None:
    common = {
        "cluster.hosts": 4,
        "sim.network_model": "analytical",
        "strategy": {
            "kind": "parameter_server",
            "servers": 4,
            "sync": False,
            "partition": "sliced",
        },
        "training.steps": 40,
    }
    _, fast = outcome(**common)
    _, slow = outcome(**common, **{"stragglers.slow": [{"workers": [3], "factor": 3.0}]})

    def iteration(o: Any, worker: int) -> float:
        return float(np.mean([r.end - r.start for r in o.records if r.worker == worker]))

    for w in range(3):  # the others' iterations take exactly as long as without a straggler
        assert iteration(slow, w) == pytest.approx(iteration(fast, w), rel=1e-9)
    assert iteration(slow, 3) - iteration(fast, 3) == pytest.approx(2 * COMPUTE, rel=1e-6)


def test_slow_worker_does_not_slow_the_others_in_async_allreduce_compute() -> None:
    spec, o = outcome(
        **{
            "cluster.hosts": 4,
            "sim.network_model": "analytical",
            "strategy.sync": False,
            "stragglers.slow": [{"workers": [3], "factor": 2.0}],
        }
    )
    compute = {w: [r.compute_end - r.start for r in o.records if r.worker == w] for w in range(4)}
    # compute itself is never stretched for the fast workers (they may wait, not compute)
    assert all(c == pytest.approx(COMPUTE) for w in range(3) for c in compute[w])


def test_transient_hiccups_add_delay_with_their_probability() -> None:
    spec, o = outcome(
        **{
            "cluster.hosts": 2,
            "training.steps": 400,
            "stragglers.transient": {"probability": 0.1, "delay": "5 ms"},
        }
    )
    extra = np.array([r.compute_end - r.start - COMPUTE for r in o.records])
    hits = extra > 1e-9
    assert np.allclose(extra[hits], 5e-3)
    assert hits.mean() == pytest.approx(0.1, abs=0.03)


def test_adding_a_straggler_kind_keeps_the_other_draws() -> None:
    a = Simulation(make_spec(**{"stragglers.jitter": 0.1}))
    b = Simulation(
        make_spec(
            **{
                "stragglers.jitter": 0.1,
                "stragglers.transient": {"probability": 0.5, "delay": "1 ms"},
            }
        )
    )
    assert [a.compute_factor(1, t) for t in range(50)] == [
        b.compute_factor(1, t) for t in range(50)
    ]


# ------------------------------------------------------------------ async


@pytest.mark.parametrize(
    "strategy",
    [
        {"kind": "allreduce", "algorithm": "ring"},
        {"kind": "parameter_server", "servers": 2},
    ],
)
def test_async_throughput_at_least_sync(strategy: dict[str, Any]) -> None:
    common = {"cluster.hosts": 4, "stragglers.jitter": 0.3, "training.steps": 30}
    sync = row(**common, strategy={**strategy, "sync": True})
    asyn = row(**common, strategy={**strategy, "sync": False})
    assert asyn["throughput_samples_per_s"] >= sync["throughput_samples_per_s"]
    assert sync["max_staleness"] == 0
    assert asyn["max_staleness"] >= 1


@pytest.mark.parametrize("name", ["max_iterations_ahead", "staleness"])  # the contract's
@pytest.mark.parametrize("bound", [0, 1, 3])
def test_ssp_bounds_how_far_ahead_a_worker_runs(bound: int, name: str) -> None:
    n = 4
    spec, o = outcome(
        **{
            "cluster.hosts": n,
            "training.steps": 60,
            "training.warmup_steps": 0,
            "model.flops_per_sample": "100 GFLOP",  # compute-bound: the straggler matters
            "stragglers.slow": [{"workers": [0], "factor": 3.0}],
            "strategy": {
                "kind": "parameter_server",
                "servers": 1,
                "sync": False,
                name: bound,
            },
        }
    )
    ends = {w: sorted(r.end for r in o.records if r.worker == w) for w in range(n)}
    for r in o.records:  # iteration i starts only once every other worker finished i - k - 1
        for w in range(n):
            if w != r.worker:
                finished = sum(1 for e in ends[w] if e <= r.start + 1e-12)
                assert r.step - finished <= bound
    # updates applied between a pull and its push: at most (N - 1)(2k + 1) under SSP
    staleness = summarize(spec, o)["max_staleness"]
    assert staleness <= (n - 1) * (2 * bound + 1)


def test_unbounded_async_lets_the_fast_run_ahead() -> None:
    spec, o = outcome(
        **{
            "cluster.hosts": 4,
            "training.steps": 60,
            "model": {"name": "small", "params": 1e5, "flops_per_sample": "100 GFLOP"},
            "stragglers.slow": [{"workers": [0], "factor": 3.0}],
            "strategy": {"kind": "parameter_server", "servers": 1, "sync": False},
        }
    )
    fast = sum(1 for r in o.records if r.worker == 1)
    slow = sum(1 for r in o.records if r.worker == 0)
    assert fast >= 2 * slow


def test_async_allreduce_applies_at_most_staleness_late() -> None:
    for bound in (1, 2):
        r = row(
            **{
                "cluster.hosts": 4,
                "stragglers.jitter": 0.3,
                "strategy": {"kind": "allreduce", "sync": False, "staleness": bound},
            }
        )
        assert 1 <= r["max_staleness"] <= bound


# ------------------------------------------------------------------ backup workers


def test_backup_workers_cut_the_tail() -> None:
    p99 = []
    dropped = []
    for b in range(5):
        r = row(
            **{
                "cluster.hosts": 8,
                "stragglers.jitter": 0.4,
                "training.steps": 60,
                "strategy": {"kind": "parameter_server", "servers": 2, "backup_workers": b},
            }
        )
        p99.append(r["step_time_p99_s"])
        dropped.append(r["dropped_gradients"])
    assert all(a > b for a, b in zip(p99, p99[1:], strict=False)), p99
    assert dropped[0] == 0 and all(d > 0 for d in dropped[1:])


def test_throughput_counts_only_the_gradients_that_reach_the_model() -> None:
    """Each synchronous update applies N - b gradients of batch B: whatever the timing,
    samples/s x training time = (N - b) x B x steps; the dropped ones have their own
    column, b x B per step (each update drops exactly the last b)."""
    n, batch, steps = 8, 10, 40
    for b in range(4):
        r = row(
            **{
                "cluster.hosts": n,
                "stragglers.jitter": 0.3,
                "training.steps": steps,
                "strategy": {"kind": "parameter_server", "servers": 2, "backup_workers": b},
            }
        )
        applied = r["throughput_samples_per_s"] * r["training_time_s"]
        assert applied == pytest.approx((n - b) * batch * steps, rel=1e-9)
        dropped = r["dropped_samples_per_s"] * r["training_time_s"]
        assert dropped == pytest.approx(b * batch * steps, rel=1e-9)


@pytest.mark.parametrize(
    "strategy, per_step",
    [
        ({"kind": "allreduce"}, 8 * 10),  # a step of every worker
        ({"kind": "parameter_server", "servers": 2}, 8 * 10),
        ({"kind": "parameter_server", "servers": 2, "backup_workers": 3}, 5 * 10),
        ({"kind": "parameter_server", "servers": 2, "sync": False}, 10),  # one update
    ],
)
def test_training_samples_gives_every_strategy_the_same_work(
    strategy: dict[str, Any], per_step: int
) -> None:
    """training.samples: the fewest steps that train that many samples, whatever a step
    is; what the results say was trained is what throughput x training time gives."""
    doc = copy.deepcopy(BASE)
    del doc["training"]["steps"]
    doc["training"]["samples"] = 2000
    doc["cluster"]["hosts"] = 8
    doc["strategy"] = strategy
    r = simulate_point(Point("p", 0, {}, validate(doc))).row
    assert r["steps"] == -(-2000 // per_step)
    assert r["samples_trained"] == r["steps"] * per_step
    assert 2000 <= r["samples_trained"] < 2000 + per_step
    assert r["throughput_samples_per_s"] * r["training_time_s"] == pytest.approx(
        r["samples_trained"], rel=1e-9
    )


# ------------------------------------------------------------------ failures


def _identity(**sets: Any) -> None:
    spec, o = outcome(**sets)
    free_sets = {k: v for k, v in sets.items() if k not in ("failures", "checkpoint.every_steps")}
    _, free = outcome(**free_sets)
    got = summarize(spec, o)
    expected = (
        summarize(make_spec(**free_sets), free)["training_time_s"]
        + got["lost_work_time_s"]
        + got["recovery_time_s"]
        + got["checkpoint_time_s"]
    )
    assert got["training_time_s"] == pytest.approx(expected, rel=1e-9)
    # every requested step completed exactly once in the end
    final = {(r.worker, r.step) for r in o.records if r.generation == o.generation}
    kept: dict[tuple[int, int], int] = {}
    for r in o.records:
        kept[(r.worker, r.step)] = r.generation
    assert len(kept) == spec.workers * (spec.training.steps + spec.training.warmup_steps)
    assert final <= set(kept)


def test_accounting_identity_with_scheduled_failures() -> None:
    _identity(
        **{
            "cluster.hosts": 4,
            "training.steps": 40,
            "training.warmup_steps": 0,
            "stragglers.jitter": 0.2,
            "checkpoint.every_steps": 10,
            "checkpoint.write_bandwidth": "10 GB/s",
            "checkpoint.restart_overhead": "2 s",
            "failures": [
                {"role": "worker", "index": 2, "at_step": 17, "downtime": "1 s"},
                {"role": "chief", "at_time": "0.15 s", "downtime": "3 s"},
            ],
        }
    )


def test_accounting_identity_with_random_failures() -> None:
    _identity(
        **{
            "cluster.hosts": 2,
            "cluster.devices_per_host": 2,
            "training.steps": 200,
            "training.warmup_steps": 0,
            "stragglers.jitter": 0.1,
            "checkpoint.every_steps": 20,
            "checkpoint.write_bandwidth": "50 GB/s",
            "checkpoint.restart_overhead": "0.05 s",
            "failures": [{"random": {"mtbf_per_host": "1 s", "downtime": "0.1 s"}}],
        }
    )


def test_lost_steps_are_those_since_the_checkpoint() -> None:
    spec, o = outcome(
        **{
            "cluster.hosts": 2,
            "training.steps": 30,
            "training.warmup_steps": 0,
            "checkpoint.every_steps": 10,
            "failures": [{"role": "worker", "index": 1, "at_step": 17, "downtime": "1 s"}],
        }
    )
    r = summarize(spec, o)
    assert (r["failures"], r["lost_steps"]) == (1, 7)
    assert r["recovery_time_s"] == pytest.approx(1 + 30)  # downtime + restart overhead
    assert r["checkpoints"] == 3  # at 10, 20 and 30 (the redo does not write 10 again)


def test_ps_worker_failure_is_survived_without_restart() -> None:
    spec, o = outcome(
        **{
            "cluster.hosts": 4,
            "training.steps": 30,
            "strategy": {"kind": "parameter_server", "servers": 2, "sync": False},
            "failures": [{"role": "worker", "index": 2, "at_step": 10, "downtime": "0.05 s"}],
        }
    )
    r = summarize(spec, o)
    assert r["failures"] == 1 and r["lost_steps"] == 0 and o.generation == 0
    down = [rec for rec in o.records if rec.worker == 2]
    others = [rec for rec in o.records if rec.worker == 1]
    assert len(down) < len(others)  # it missed iterations while down


def test_sync_ps_waits_for_a_failed_worker_unless_backups_allow() -> None:
    failure = [{"role": "worker", "index": 3, "at_step": 5, "downtime": "2 s"}]
    common = {"cluster.hosts": 4, "training.steps": 20, "model.flops_per_sample": "100 GFLOP"}
    plain = row(**common, failures=failure, strategy={"kind": "parameter_server"})
    backed = row(
        **common, failures=failure, strategy={"kind": "parameter_server", "backup_workers": 1}
    )
    free = row(**common, strategy={"kind": "parameter_server"})
    # everyone waited for it (less the part of the step they could do meanwhile)
    assert plain["training_time_s"] > free["training_time_s"] + 1.0
    assert backed["training_time_s"] < plain["training_time_s"] - 1.0


def test_failures_are_deterministic() -> None:
    sets = {
        "cluster.hosts": 4,
        "training.steps": 100,
        "stragglers.jitter": 0.1,
        "checkpoint.every_steps": 10,
        "failures": [{"random": {"mtbf_per_host": "5 s", "downtime": "0.1 s"}}],
        "checkpoint.restart_overhead": "0.1 s",
    }
    first = outcome(**sets)[1]
    assert first.failures > 0 and first.records == outcome(**sets)[1].records


def test_a_job_that_cannot_finish_is_reported() -> None:
    from scenarios import ScenarioError

    with pytest.raises(ScenarioError, match="failures come faster"):
        outcome(
            **{
                "cluster.hosts": 4,
                "training.steps": 50,
                "checkpoint.every_steps": 10,
                "failures": [{"random": {"mtbf_per_host": "0.01 s", "downtime": "0.1 s"}}],
            }
        )


# ------------------------------------------------------------------ trials, replications


@pytest.mark.parametrize("trials,slots", [(6, 4), (8, 4), (5, 2), (3, 8)])
def test_independent_makespan(trials: int, slots: int) -> None:
    r = row(
        **{
            "cluster.hosts": slots,
            "training.steps": 10,
            "training.warmup_steps": 0,
            "strategy": {"kind": "independent", "trials": {"lr": list(range(trials))}},
        }
    )
    trial_time = 10 * COMPUTE
    assert r["makespan_s"] == pytest.approx(math.ceil(trials / slots) * trial_time)
    assert r["trials"] == trials
    assert r["trials_per_hour"] == pytest.approx(trials / r["makespan_s"] * 3600)
    assert r["slot_utilization"] == pytest.approx(trials / (math.ceil(trials / slots) * slots))


def test_replications_mean_and_confidence() -> None:
    one = row(**{"cluster.hosts": 4, "stragglers.jitter": 0.3})
    many = row(**{"cluster.hosts": 4, "stragglers.jitter": 0.3, "sim.replications": 8})
    assert many["replications"] == 8
    assert many["throughput_ci95_samples_per_s"] > 0
    # replication 0 is the single run; the mean of 8 lies within a few half-widths of it
    gap = abs(many["throughput_samples_per_s"] - one["throughput_samples_per_s"])
    assert gap < 4 * many["throughput_ci95_samples_per_s"] * math.sqrt(8)


# ------------------------------------------------------------------ Young / Daly


def test_checkpoint_interval_optimum_matches_daly() -> None:
    """One worker, exponential failures (MTBF M), checkpoint cost delta, restart R: over a
    sweep of intervals, the best mean training time lies within 15% of Daly's optimum
    interval, and there within 3% of Daly's complete model (Daly 2006, eq. 13)."""
    from sim.engine.failures import daly_interval, daly_wall_time

    mtbf, delta, restart, step = 600.0, 60.0, 30.0, 10.0
    steps = 300  # Ts = 3,000 s of work
    replications = 150  # common random numbers: every interval sees the same failures

    def mean_time(every: int) -> float:
        spec = make_spec(
            **{
                "model": {"name": "toy", "params": 25e6, "flops_per_sample": "1 GFLOP"},
                "cluster.hosts": 1,
                "cluster.device": {"samples_per_s": {"toy": 10 / step}},
                "training.steps": steps,
                "training.warmup_steps": 0,
                # 200 MB of parameters and momentum written at 200 MB / delta
                "checkpoint.every_steps": every,
                "checkpoint.write_bandwidth": f"{200 / delta} MB/s",
                "checkpoint.restart_overhead": f"{restart - 10} s",
                "failures": [{"random": {"mtbf_per_host": f"{mtbf} s", "downtime": "10 s"}}],
            }
        )
        times = []
        for r in range(replications):
            o = Simulation(spec, replication=r).run()
            times.append(summarize(spec, o)["training_time_s"])
        return float(np.mean(times))

    optimum = daly_interval(delta, mtbf)  # 229.8 s
    means = {every * step: mean_time(every) for every in (15, 20, 25, 30, 40)}
    best = min(means, key=lambda tau: means[tau])
    print({tau: round(t, 1) for tau, t in means.items()}, round(optimum, 1))
    assert abs(best - optimum) / optimum <= 0.15, means
    model = daly_wall_time(steps * step, best, delta, restart, mtbf)
    assert abs(means[best] - model) / model <= 0.03, (means[best], model)


def test_trace_shows_checkpoint_recover_and_wait() -> None:
    import json

    spec = make_spec(
        **{
            "cluster.hosts": 3,
            "training.steps": 20,
            "stragglers.jitter": 0.2,
            "checkpoint.every_steps": 5,
            "checkpoint.restart_overhead": "0.1 s",
            "failures": [{"role": "worker", "index": 1, "at_step": 8, "downtime": "0.1 s"}],
        }
    )
    o = Simulation(spec, trace=True).run()
    trace = json.loads(o.tracer.dumps({}))
    phases = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    assert {"compute", "allreduce", "wait", "checkpoint", "recover"} <= phases


def test_independent_trials_refuse_failures() -> None:
    from scenarios import ScenarioError

    with pytest.raises(ScenarioError, match="not defined for strategy kind independent"):
        make_spec(
            **{
                "strategy": {"kind": "independent", "trials": {"lr": [1, 2]}},
                "failures": [{"role": "worker", "index": 0, "at_step": 3}],
            }
        )
