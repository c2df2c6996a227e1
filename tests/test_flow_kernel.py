"""The flow network's compiled kernel (sim/network/flowkernel.py) against numpy's `max_min_rates`,
and whole parameter-server runs on one back end against the other."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.network.backends
from scenarios import load
from sim.engine.outcome import StepRecord
from sim.network import flowkernel
from sim.network.backends import max_min_rates
from sim.simulation import Simulation


@st.composite
def networks(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random flows over random links: (paths padded with -1, capacities, bytes left)."""
    links = draw(st.integers(1, 24))
    width = draw(st.integers(1, 5))
    flows = draw(
        st.lists(
            st.lists(st.integers(0, links - 1), min_size=1, max_size=width, unique=True),
            min_size=1,
            max_size=60,
        )
    )
    paths = np.full((len(flows), width), -1, dtype=np.int64)
    for i, route in enumerate(flows):
        paths[i, : len(route)] = route
    # a few distinct capacities (ties between links, as real NICs make) or any
    caps = st.sampled_from([1.25e9, 2.5e9, 1.2e10]) | st.floats(1e6, 1e11)
    capacity = np.array(draw(st.lists(caps, min_size=links, max_size=links)))
    left = np.array(draw(st.lists(st.floats(1.0, 1e9), min_size=len(flows), max_size=len(flows))))
    return paths, capacity, left


@settings(max_examples=300, deadline=None)
@given(networks())
def test_kernel_rates_equal_numpys(network: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
    paths, capacity, left = network
    expected = max_min_rates(paths, capacity)
    rates, first = flowkernel.solve(paths, capacity, left)
    # the same arithmetic on every link, round by round: equal to the last bit
    np.testing.assert_array_equal(rates, expected)
    assert first == pytest.approx(float(np.min(left / expected)), rel=1e-9)


def test_kernel_on_a_symmetric_incast() -> None:
    # 300 workers push to 20 servers over their own NICs (links 0..299 up, 300..319 down):
    # each server's downlink is the bottleneck, shared by its 15 senders
    workers, servers = 300, 20
    paths = np.array([[w, workers + w % servers] for w in range(workers)], dtype=np.int64)
    capacity = np.full(workers + servers, 1.25e9)
    rates, first = flowkernel.solve(paths, capacity, np.full(workers, 1e6))
    np.testing.assert_allclose(rates, 1.25e9 / 15, rtol=1e-12)
    assert first == pytest.approx(1e6 / (1.25e9 / 15), rel=1e-12)


def test_kernel_on_links_tight_together() -> None:
    # links 0 and 1 are tight in the same round, and flow 0 crosses both: it is fixed
    # once and counted once on each; flow 3 is held to link 3's 1e8 first, flow 4 gets
    # what flows 2, 3 and 5 leave of link 2
    paths = np.array(
        [[0, 1, -1], [0, -1, -1], [1, 2, -1], [3, 2, -1], [2, -1, -1], [4, 2, 0]],
        dtype=np.int64,
    )
    capacity = np.array([3e9, 2e9, 1e10, 1e8, 5e9])
    left = np.full(len(paths), 1e6)
    rates, first = flowkernel.solve(paths, capacity, left)
    np.testing.assert_array_equal(rates, max_min_rates(paths, capacity))
    np.testing.assert_allclose(rates, [1e9, 1e9, 1e9, 1e8, 7.9e9, 1e9], rtol=1e-12)
    assert first == pytest.approx(1e6 / 7.9e9, rel=1e-12)  # the fastest flow first


POINTS = [
    # (scenario, its point, sets): parameter servers with many flows in flight at once
    ("scenarios/library/vgg16-parameter-servers.yaml", 4, ("training.steps=4",)),
    ("scenarios/library/vgg16-parameter-servers.yaml", 10, ("training.steps=4",)),
    ("scenarios/published/cscs-inception3-k80x8-ps.yaml", 3, ("training.steps=4",)),
    ("tests/benchmarks/ps-inception3.yaml", 0, ("training.steps=3", "training.warmup_steps=1")),
    (
        "tests/benchmarks/ps-inception3.yaml",
        0,
        ("training.steps=100", "training.warmup_steps=50", "strategy.sync=false"),
    ),
]


@pytest.mark.parametrize(("path", "point", "sets"), POINTS)
def test_whole_runs_equal_on_either_solve(
    path: str, point: int, sets: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load(ROOT / path, sets).points[point].spec
    outcomes = []
    monkeypatch.setattr(sim.network.backends, "COMPILED_AFTER_S", 0.0)
    for compiled_from in (sys.maxsize, 1):  # numpy only, then the kernel for every solve
        monkeypatch.setattr(sim.network.backends, "COMPILED_FROM", compiled_from)
        outcomes.append(Simulation(spec, lockstep=False).run())
    numpy_run, kernel_run = outcomes
    assert len(kernel_run.records) == len(numpy_run.records) > 0
    for name in StepRecord._fields:
        np.testing.assert_allclose(
            kernel_run.records.column(name), numpy_run.records.column(name), rtol=1e-9, atol=0
        )
    np.testing.assert_allclose(kernel_run.step_ends, numpy_run.step_ends, rtol=1e-9, atol=0)
    assert kernel_run.bytes_on_network == pytest.approx(numpy_run.bytes_on_network, rel=1e-9)


def test_numba_loads_only_where_it_pays() -> None:
    # a 64-worker ring in lockstep: 64 flows in flight, but each bucket's collective is
    # simulated once, a few solves: numba never imported
    code = (
        "import sys\n"
        "from scenarios import load\n"
        "from sim.simulation import Simulation\n"
        "sets = ['cluster.hosts=8', 'training.steps=2']\n"
        "spec = load('scenarios/library/resnet50-1024-ring.yaml', sets).points[0].spec\n"
        "assert spec.workers == 64\n"
        "Simulation(spec).run()\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_the_kernels_load_without_scipys_blas_and_np_dot_still_compiles() -> None:
    # numba's BLAS probe is told BLAS is absent (sim/network/unmanaged.py): solving never
    # imports scipy.linalg, and a function taking np.dot compiled after it still works
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from sim.network import flowkernel\n"
        "rates, first = flowkernel.solve(np.array([[0, 1], [0, -1]]), np.array([2.0, 1.0]),"
        " np.array([1.0, 1.0]))\n"
        "assert list(rates) == [1.0, 1.0] and first == 1.0, (rates, first)\n"
        "assert 'scipy.linalg' not in sys.modules, 'scipy.linalg imported'\n"
        "try:\n"
        "    import scipy.linalg.cython_blas  # noqa: F401\n"
        "except ImportError:\n"
        "    sys.exit(0)  # no scipy here: nothing more to check\n"
        "from numba import njit\n"
        "dot = njit(lambda a, b: np.dot(a, b))\n"
        "assert dot(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 11.0\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
