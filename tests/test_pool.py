"""Pooling measurements taken beside the runs into a profile (`real/calibrate/pool.py`), and which
probes a point is measured again for (`calibrate.probes_of`). No TensorFlow needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from measured.profile import (
    ComputeEntry,
    Coordinator,
    Fit,
    Messages,
    Profile,
    UpdateEntry,
    dump_profile,
    load_profile,
)
from real.calibrate.measure import probes_of
from real.calibrate.pool import RUN_TO_RUN_NOISE, Measured, drift, fold, pool_fits
from scenarios import loads

PS = """
version: 1
name: ps
model: mlp
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback, network: 1GbE}
training: {batch_per_worker: 8, steps: 3, warmup_steps: 1}
strategy: {kind: parameter_server, servers: 2, sync: false}
"""


def fit(points: list[tuple[float, float]], **extra: Any) -> Fit:
    return Fit.model_validate(
        {
            "latency": "1 ms",
            "bandwidth": "100 MB/s",
            "r2": 1.0,
            "max_rel_residual": 0.0,
            "points": [{"bytes": f"{b} B", "time": f"{t} s"} for b, t in points],
            **extra,
        }
    )


def update(ms: float, read: float, samples: int, cpu: float | None = None) -> UpdateEntry:
    """An update entry; `cpu`: the reading closure's CPU (the others' at 2x and 3x)."""
    spent = {} if cpu is None else {f"{k}_cpu": f"{i * cpu} ms" for i, k in NAMES}
    return UpdateEntry.model_validate(
        {
            "model": "mlp",
            "servers": 1,
            "time": f"{ms} ms",
            "samples": samples,
            **{k: f"{i * read} ms" for i, k in NAMES},
            **spent,
        }
    )


NAMES = ((1, "closure_read"), (2, "closure_accumulate"), (3, "closure_apply"))


def test_fit_pools_the_mean_time_at_each_size_and_fits_again() -> None:
    # the means lie exactly on 2 ms + bytes / 100 MB/s, though neither measurement does
    slow = fit([(1e6, 0.013), (3e6, 0.033)], measurements=2)
    fast = fit([(1e6, 0.011), (3e6, 0.031)])
    pooled = pool_fits([slow, fast])
    assert pooled is not None
    assert pooled.latency == pytest.approx(2e-3)
    assert pooled.bandwidth == pytest.approx(100e6)
    assert pooled.r2 == pytest.approx(1.0) and pooled.max_rel_residual == pytest.approx(0, abs=1e-9)
    assert [(p.bytes, p.time) for p in pooled.points] == [
        (1e6, pytest.approx(0.012)),
        (3e6, pytest.approx(0.032)),
    ]
    assert pooled.measurements == 3  # the first already pooled two


def test_fits_without_points_cannot_be_pooled() -> None:
    old = fit([])
    assert pool_fits([old, fit([(1e6, 0.011), (3e6, 0.031)])]) is old
    assert pool_fits([]) is None


def test_fold_pools_round_trips_updates_and_messages(tmp_path: Path) -> None:
    profile = Profile.model_validate(
        {
            "machine": {"cpus": 2},
            "coordinator": {"dispatch": "4 ms", "call": "2 ms", "queued": "3 ms", "samples": 30},
            "messages": {"first": "2 ms", "chained": "0.4 ms", "chain": 8, "samples": 15},
            "updates": [update(6.0, 10.0, samples=40)],
        }
    )
    later = Measured(
        coordinator=[
            Coordinator.model_validate({"dispatch": "6 ms", "call": "1 ms", "samples": 30})
        ],
        messages=[Messages.model_validate({"first": "3 ms", "chained": "0.6 ms", "chain": 8})],
        updates=[update(9.0, 13.0, samples=20, cpu=18.0), update(3.0, 7.0, samples=20, cpu=9.0)],
    )
    folded = fold(profile, later)
    c = folded.coordinator
    assert c is not None
    assert (c.dispatch, c.call, c.samples) == (pytest.approx(5e-3), pytest.approx(1.5e-3), 60)
    assert c.queued == pytest.approx(3e-3)  # only the calibration measured it
    m = folded.messages
    assert m is not None and (m.first, m.chained) == (pytest.approx(2.5e-3), pytest.approx(5e-4))
    (u,) = folded.updates
    # weighted by the calls timed: (40 x 6 + 20 x 9 + 20 x 3) / 80
    assert u.time == pytest.approx(6e-3) and u.samples == 80
    assert u.closure_read == pytest.approx((40 * 10 + 20 * 13 + 20 * 7) / 80 * 1e-3)
    assert u.closure_apply == pytest.approx(3 * (40 * 10 + 20 * 13 + 20 * 7) / 80 * 1e-3)
    # the closures' CPU: the calibration had none (no /proc/stat): the two that have it
    assert u.closure_read_cpu == pytest.approx((18.0 + 9.0) / 2 * 1e-3)
    assert u.closure_apply_cpu == pytest.approx(3 * (18.0 + 9.0) / 2 * 1e-3)
    (tmp_path / "u.yaml").write_text(dump_profile(folded))  # and survives the file
    (again,) = load_profile(tmp_path / "u.yaml").updates
    assert again.closure_accumulate_cpu == pytest.approx(u.closure_accumulate_cpu)
    # nothing measured again: nothing changes
    assert fold(profile, Measured()) == profile
    # a pooled fit says how many calibrations it pools, in the file too
    pooled = fold(profile, Measured(transfer=[fit([(1e6, 0.01), (2e6, 0.02)])] * 2))
    assert pooled.transfer is not None and pooled.transfer.measurements == 2
    (tmp_path / "p.yaml").write_text(dump_profile(pooled))
    assert load_profile(tmp_path / "p.yaml").transfer.measurements == 2  # type: ignore[union-attr]


def test_probes_of_a_point() -> None:
    (ps,) = loads(PS).points
    assert probes_of(ps.spec) == [
        ("transfer",),
        ("allreduce", 2),  # what a busy core moves
        ("coordinator",),
        ("update", "mlp", "float32", 2),
    ]
    ring = PS.replace("{kind: parameter_server, servers: 2, sync: false}", "{kind: allreduce}")
    (three,) = loads(ring.replace("devices_per_host: 2", "devices_per_host: 3")).points
    assert probes_of(three.spec) == [("transfer",), ("allreduce", 2), ("allreduce", 3)]
    (one,) = loads(ring.replace("devices_per_host: 2", "devices_per_host: 1")).points
    assert probes_of(one.spec) == [("transfer",)]
    # a pipeline of several stages: the stage fed by one of its own, at its micro-batches
    pipe = PS.replace(
        "{kind: parameter_server, servers: 2, sync: false}",
        "{kind: pipeline, stages: 2, micro_batches: 4}",
    )
    (two,) = loads(pipe).points
    assert probes_of(two.spec) == [("transfer",), ("fed", "mlp", 8, 4)]
    # fed entries pool apart from the stage alone
    alone, fed = (
        ComputeEntry.model_validate(
            {"model": "m", "batch_per_worker": 8, "micro_batches": 4, "fed": f, "step_time": t}
        )
        for f, t in ((False, "100 ms"), (True, "200 ms"))
    )
    folded = fold(
        profile_with(alone, fed), Measured(compute=[fed.model_copy(update={"step_time": 0.3})])
    )
    assert folded.step_time("m", 8, micro_batches=4) == pytest.approx(0.1)
    assert folded.step_time("m", 8, micro_batches=4, fed=True) == pytest.approx(0.25)
    # in graph: the in-process all-reduce and the dispatch probe at the point's batch
    graph = ring.replace("{kind: allreduce}", "{kind: allreduce, replication: in_graph}")
    (mirrored,) = loads(graph).points
    assert probes_of(mirrored.spec) == [("transfer",), ("in_graph", 2), ("dispatch", "mlp", 8, 2)]
    # the dispatch probe's entries pool apart from each other and from the full step
    step, apart, together = (
        ComputeEntry.model_validate(
            {
                "model": "m",
                "batch_per_worker": 8,
                "processes": 2,
                "gradients_only": go,
                "in_graph": ig,
                "step_time": t,
            }
        )
        for go, ig, t in ((False, False, "10 ms"), (True, False, "3 ms"), (True, True, "5 ms"))
    )
    later = Measured(compute=[together.model_copy(update={"step_time": 7e-3})])
    folded = fold(profile_with(step, apart, together), later)
    assert folded.step_time("m", 8, processes=2) == pytest.approx(10e-3)
    assert folded.step_time("m", 8, processes=2, gradients_only=True) == pytest.approx(3e-3)
    together_s = folded.step_time("m", 8, processes=2, gradients_only=True, in_graph=True)
    assert together_s == pytest.approx(6e-3)


def profile_with(*entries: ComputeEntry) -> Profile:
    return Profile.model_validate({"machine": {"cpus": 2}}).model_copy(
        update={"compute": list(entries)}
    )


def compute(step_ms: float, processes: int = 1, spread_ms: float = 0.0) -> ComputeEntry:
    return ComputeEntry.model_validate(
        {
            "model": "mlp",
            "batch_per_worker": 32,
            "processes": processes,
            "step_time": f"{step_ms} ms",
            "p10": f"{step_ms - spread_ms} ms",
            "p90": f"{step_ms + spread_ms} ms",
            "steps": 50,
        }
    )


def test_drift_is_the_probe_moving_beyond_its_noise() -> None:
    """The issue's case: 30.6 ms per step at calibration, 21.4 ms beside the runs."""
    calibrated = profile_with(compute(30.6, spread_ms=1.0))
    moved = drift(calibrated, [compute(21.4, spread_ms=1.0)])
    assert moved is not None
    assert moved["drift"] == pytest.approx(21.4 / 30.6 - 1)
    # the noise: no less than the run-to-run floor (the calibration's own steps spread less)
    assert moved["noise"] == RUN_TO_RUN_NOISE > 1.0 / 1.2816 / 30.6
    assert moved["changed"]
    # within the floor: no change; a calibration whose steps spread widely: its sigma
    steady = drift(calibrated, [compute(33.0)])
    assert steady is not None and not steady["changed"]
    wide = drift(profile_with(compute(30.6, spread_ms=12.0)), [compute(21.4)])
    assert wide is not None and wide["noise"] == pytest.approx(24.0 / (2 * 1.2816) / 30.6)
    assert not wide["changed"]  # -30% within 31% of noise


def test_drift_weighs_keys_by_their_step_and_counts_repeats_as_noise() -> None:
    calibrated = profile_with(compute(10.0), compute(30.0, processes=2))
    moved = drift(calibrated, [compute(11.0), compute(12.0), compute(33.0, processes=2)])
    assert moved is not None
    # key 1: mean 11.5 over 10 (+15%); key 2: 33 over 30 (+10%); weights 10 and 30
    assert moved["drift"] == pytest.approx((0.15 * 10 + 0.10 * 30) / 40)
    # two runs of key 1 differ: their relative standard deviation, beside the floor
    assert moved["noise"] == max(RUN_TO_RUN_NOISE, np.std([11.0, 12.0], ddof=1) / 11.5)
    far = drift(calibrated, [compute(11.0), compute(16.0)])
    assert far is not None
    assert far["noise"] == pytest.approx(np.std([11.0, 16.0], ddof=1) / 13.5)
    assert drift(calibrated, [compute(10.0, processes=4)]) is None  # nothing to compare
