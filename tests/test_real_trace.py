"""run-real's Chrome trace of measured steps (no TensorFlow needed here)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import make_spec

from real.summary import trace_of


def test_trace_spans_are_the_measured_phases() -> None:
    spec = make_spec(**{"cluster.hosts": 1, "cluster.devices_per_host": 2})
    steps = pd.DataFrame(
        {
            "worker": [0, 1],
            "step": [0, 0],
            "start_s": [0.0, 0.001],
            "compute_end_s": [0.010, 0.012],
            "comm_end_s": [0.030, 0.030],
            "end_s": [0.030, 0.031],
        }
    )
    doc = json.loads(trace_of(spec, "p", steps))
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    by = {(e["tid"], e["name"]): e for e in spans}
    # worker w: compute on thread 2w, the exchange and waiting on thread 2w + 1 (µs)
    assert by[(0, "compute")]["dur"] == pytest.approx(10_000)
    assert by[(1, "allreduce")]["ts"] == pytest.approx(10_000)
    assert by[(1, "allreduce")]["dur"] == pytest.approx(20_000)
    assert by[(2, "compute")]["dur"] == pytest.approx(11_000)
    assert by[(3, "wait")]["dur"] == pytest.approx(1_000)
    assert (1, "wait") not in by  # no wait: no span
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"worker 0 compute", "worker 0 comm", "worker 1 compute", "worker 1 comm"}
    assert doc["otherData"]["backend"] == "real"


def test_busy_spans_are_where_the_cpu_time_kept_pace_with_the_clock() -> None:
    from real.summary import busy_spans

    # 5 ms samples: computing (CPU = clock) from 0 to 15 ms, idle to 25, then at 60%
    # of the clock (computing, shared with another thread's waits) to 35, at 20% to 40
    times = [0.0, 0.005, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040]
    grew = [0.005, 0.005, 0.005, 0.0, 0.0, 0.003, 0.003, 0.001]
    cpu = [0.0]
    for g in grew:
        cpu.append(cpu[-1] + g)
    spans = busy_spans(list(zip(times, cpu, strict=True)))
    assert spans == [(0.0, 0.015), (0.025, 0.035)]


def test_a_pipeline_stages_compute_is_its_busy_spans_within_its_steps() -> None:
    spec = make_spec(
        **{
            "cluster.hosts": 1,
            "cluster.devices_per_host": 2,
            "strategy": {"kind": "pipeline", "stages": 2, "micro_batches": 2},
            "model": {"name": "two", "layers": 2, "params": 2e6, "flops_per_sample": "4 MFLOP"},
        }
    )
    steps = pd.DataFrame(
        {
            "worker": [0, 1],
            "step": [0, 0],
            "start_s": [0.0, 0.010],
            "compute_end_s": [0.050, 0.040],
            "comm_end_s": [0.050, 0.040],
            "end_s": [0.050, 0.040],
        }
    )
    # stage 0 busy 0-20 ms and 30-60 ms (past its step's end at 50), stage 1 10-40 ms
    busy = [(0, t / 1000, c / 1000) for t, c in [(0, 0), (20, 20), (30, 20), (60, 50)]]
    busy += [(1, t / 1000, c / 1000) for t, c in [(10, 0), (40, 30)]]
    doc = json.loads(trace_of(spec, "p", steps, busy))
    spans = sorted((e["tid"], e["ts"], e["dur"]) for e in doc["traceEvents"] if e["ph"] == "X")
    assert spans == [(0, 0, 20_000), (0, 30_000, 20_000), (2, 10_000, 30_000)]
