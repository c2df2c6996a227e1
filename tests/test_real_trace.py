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
