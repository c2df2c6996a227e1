"""The report: Kendall tau and MAPE against hand-computed values, the page's sections and
images, refusals of bad or mismatched input, the import boundary, and a headless browser.

Fixtures (tests/data/reports/): `mlp-localhost/{sim,real}` is a trimmed copy of a real run
of scenarios/library/mlp-localhost.yaml and its simulation (steps.csv keeps steps 0-9);
`async-ps` is a tiny simulated sync vs async parameter-server sweep with traces.
"""

from __future__ import annotations

import ast
import base64
import json
import math
import re
import shutil
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from browser import CHROMIUM, REQUIRED, browse
from hypothesis import given, settings
from hypothesis import strategies as st

from reports import cli
from reports.compare import (
    agreement,
    kendall_tau_b,
    mape,
    ordered_pairs,
    relative_error,
    resolution,
    run_to_run_noise,
)
from reports.plots import breakdown_shares
from reports.render import SECTIONS
from reports.tables import verdict
from reports.timeline import MAX_STEPS, MAX_WORKERS, from_steps, window

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "reports"
SIM = DATA / "mlp-localhost" / "sim"
REAL = DATA / "mlp-localhost" / "real"
ASYNC = DATA / "async-ps"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- Kendall tau-b, MAPE


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([1, 2, 3, 4], [10, 20, 30, 40], 1.0),  # same order
        ([1, 2, 3, 4], [40, 30, 20, 10], -1.0),  # reversed
        # by hand: 6 concordant, 4 discordant pairs of 10 -> (6 - 4) / 10
        ([1, 2, 3, 4, 5], [3, 4, 1, 2, 5], 0.2),
        # with ties in both samples: the example in SciPy's kendalltau documentation
        ([12, 2, 1, 12, 2], [1, 4, 7, 1, 0], -0.47140452079103173),
        # ties in x only: C=2, D=0, ties_x=1, n0=3 -> 2 / sqrt(2 * 3)
        ([1, 1, 2], [1, 2, 3], 2 / math.sqrt(6)),
    ],
)
def test_kendall_tau_b_known_values(x: list[float], y: list[float], expected: float) -> None:
    assert kendall_tau_b(x, y) == pytest.approx(expected, abs=1e-12)


def test_pairs_the_measurement_cannot_order_are_ties() -> None:
    # real 100 and 101 are closer than the resolution 5: a tie; the simulator's order of
    # them counts neither way. Pairs (0,1) tie, (0,2) and (1,2) concordant: 2 / sqrt(3 x 2)
    sim, real = [102.0, 100.0, 200.0], [100.0, 101.0, 200.0]
    assert kendall_tau_b(sim, real) == pytest.approx(1 / 3)
    assert kendall_tau_b(sim, real, [5.0, 5.0, 5.0]) == pytest.approx(2 / math.sqrt(6))
    with pytest.raises(ValueError, match="one value per pair"):
        kendall_tau_b(sim, real, [5.0])


def test_ordered_pairs_counts_only_the_pairs_the_measurement_orders() -> None:
    # pairs row-major: (0,1) real 100 vs 101 within resolution 5: not apart; (0,2), (1,2)
    # apart, simulator agrees; (0,3), (1,3) apart, simulator has them the other way round
    # (sim 300 > 102/100 while real 50 < 100/101); (2,3) apart, sim 200 < 300 while real
    # 200 > 50: the other way too
    sim, real = [102.0, 100.0, 200.0, 300.0], [100.0, 101.0, 200.0, 50.0]
    assert ordered_pairs(sim, real, [5.0] * 6) == (2, 3, 5, 6)
    # with no resolution every pair with distinct real values is apart; equal sim values
    # count neither way
    assert ordered_pairs([1.0, 1.0, 2.0], [1.0, 2.0, 3.0], [0.0] * 3) == (2, 0, 3, 3)
    with pytest.raises(ValueError, match="one value per pair"):
        ordered_pairs(sim, real, [5.0])


def test_run_to_run_noise_pools_repeated_points() -> None:
    # two points of 2 runs each: sd = half-width x sqrt(2) / 12.706; relative sds 1% and
    # 3% pool to sqrt((0.01^2 + 0.03^2) / 2); a point run once adds nothing
    t = 12.706
    rows = pd.DataFrame(
        {
            "replications": [2, 2, math.nan],  # a run without the column: one run
            "throughput_samples_per_s": [100.0, 200.0, 50.0],
            "throughput_ci95_samples_per_s": [
                0.01 * 100 * t / math.sqrt(2),
                0.03 * 200 * t / math.sqrt(2),
                0.0,
            ],
        }
    )
    noise = run_to_run_noise(rows)
    assert noise is not None
    sigma, dof = noise
    assert dof == 2 and sigma == pytest.approx(math.sqrt((0.01**2 + 0.03**2) / 2))
    # 95% resolution of two means of 2 runs: t95(2) x sigma x sqrt(m1^2/2 + m2^2/2)
    (gap,) = resolution([100.0, 200.0], [2, 2], noise)
    assert gap == pytest.approx(4.303 * sigma * math.sqrt(100**2 / 2 + 200**2 / 2))
    assert run_to_run_noise(rows.assign(replications=1)) is None


def test_time_to_target_agreement_by_hand() -> None:
    """MAPE, the pooled noise and the ordered pairs of time to target, worked by hand:
    real means 10, 20 and 40 s over 3 runs, each run varying by 5%; simulated 25, 18 and
    50 s (errors +150%, -10%, +25%); a fourth point the simulator never brings to it."""
    t2 = 4.303  # t95 at 2 degrees of freedom
    real_times = [10.0, 20.0, 40.0, 30.0]
    sim_times = [25.0, 18.0, 50.0, math.nan]
    rows = []
    for i, (r, s) in enumerate(zip(real_times, sim_times, strict=True)):
        common = {"point": f"p{i}", "label": "ring", "workers": 2, "step_time_mean_s": 0.01}
        common |= {"throughput_samples_per_s": 100.0, "final_metric": 0.9}
        rows.append(
            common
            | {"backend": "real", "time_to_target_s": r, "replications": 3}
            | {"time_to_target_ci95_s": 0.05 * r * t2 / math.sqrt(3)}
        )
        rows.append(common | {"backend": "sim", "time_to_target_s": s, "replications": 1})
    target = agreement(pd.DataFrame(rows)).target
    assert target is not None
    assert (target.points, target.one_sided) == (3, 1)
    assert target.mape == pytest.approx((150 + 10 + 25) / 3)
    assert target.noise is not None
    sigma, dof = target.noise
    assert dof == 8 and sigma == pytest.approx(0.05, rel=1e-3)
    # every pair is apart (the widest gap: 2.306 x 0.05 x sqrt(20^2/3 + 40^2/3) = 3 s);
    # 25 > 18 reverses the first pair
    assert (target.concordant, target.discordant, target.apart, target.pairs) == (2, 1, 3, 3)


def test_throughput_pairs_the_runs_tell_apart_by_hand() -> None:
    """Real throughputs 100, 106 and 200 samples/s, 3 runs each varying by 2%: the 95%
    resolution of two means is t95(6) x 0.02 x sqrt((m_i^2 + m_j^2) / 3), 4.12 for the
    first pair (6 apart: told apart), 6.32 and 6.40 for the others. The simulator says
    107, 101 and 300: it reverses the first pair and orders the other two as the runs."""
    t2 = 4.303  # t95 at 2 degrees of freedom: each point's own 3 runs
    rows = []
    for i, (r, s) in enumerate([(100.0, 107.0), (106.0, 101.0), (200.0, 300.0)]):
        common = {"point": f"p{i}", "label": "ring", "workers": 2, "step_time_mean_s": 0.01}
        rows.append(
            common
            | {"backend": "real", "throughput_samples_per_s": r, "replications": 3}
            | {"throughput_ci95_samples_per_s": 0.02 * r * t2 / math.sqrt(3)}
        )
        rows.append(common | {"backend": "sim", "throughput_samples_per_s": s})
    order = agreement(pd.DataFrame(rows)).order
    assert order is not None
    sigma, dof = order.noise
    assert dof == 6 and sigma == pytest.approx(0.02, rel=1e-3)
    assert (order.concordant, order.discordant, order.apart, order.pairs) == (2, 1, 3, 3)
    # run once, the runs tell nothing apart: no ordering is claimed
    once = pd.DataFrame(rows).assign(replications=1)
    assert agreement(once).order is None


@pytest.mark.parametrize(("x", "y"), [([], []), ([1.0], [2.0]), ([1, 2, 3], [5, 5, 5])])
def test_kendall_tau_b_undefined(x: list[float], y: list[float]) -> None:
    assert kendall_tau_b(x, y) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.integers(-5, 5)), min_size=2, max_size=12))
def test_kendall_tau_b_properties(pairs: list[tuple[int, int]]) -> None:
    x = [float(a) for a, _ in pairs]
    y = [float(b) for _, b in pairs]
    tau = kendall_tau_b(x, y)
    if tau is None:
        assert len(set(x)) == 1 or len(set(y)) == 1
        return
    assert -1.0 - 1e-12 <= tau <= 1.0 + 1e-12
    assert kendall_tau_b(y, x) == pytest.approx(tau)  # symmetric
    assert kendall_tau_b(x, [-v for v in y]) == pytest.approx(-tau)  # reversing flips it
    assert kendall_tau_b([v**3 + 7 for v in x], y) == pytest.approx(tau)  # ranks only


def test_relative_error_and_mape() -> None:
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)  # sim above reality: +
    assert relative_error(90.0, 100.0) == pytest.approx(-0.10)
    assert mape([0.10, -0.30]) == pytest.approx(20.0)
    assert mape([]) is None


def test_breakdown_shares_by_hand() -> None:
    row = {
        "compute_time_frac": 0.5,
        "comm_time_frac": 0.2,
        "wait_time_frac": 0.1,
        "checkpoint_time_s": 5.0,
        "recovery_time_s": 15.0,
        "training_time_s": 100.0,
    }
    assert breakdown_shares(row) == pytest.approx([0.5, 0.2, 0.1, 0.05, 0.15])


# ---------------------------------------------------------------- timeline window


def test_timeline_keeps_a_window_of_steps_and_workers() -> None:
    workers, steps = MAX_WORKERS + 8, 5000
    w, s = np.meshgrid(np.arange(workers), np.arange(steps), indexing="ij")
    start = s.ravel() * 1.0
    frame = pd.DataFrame(
        {
            "point": "p",
            "worker": w.ravel().astype(float),
            "step": s.ravel().astype(float),
            "warmup": s.ravel() < 3,
            "lost": False,
            "start_s": start,
            "compute_end_s": start + 0.6,
            "comm_end_s": start + 0.9,
            "end_s": start + 1.0,
            "staleness": 0.0,
        }
    )
    bounds = window(frame)
    assert bounds == pytest.approx((3.0, 3.0 + MAX_STEPS))  # first measured step on
    line = from_steps(frame, bounds)
    assert line.workers == workers
    assert set(line.worker) == set(range(MAX_WORKERS))
    # compute, communication and wait of MAX_STEPS steps per shown worker
    assert len(line) == 3 * MAX_STEPS * MAX_WORKERS
    assert line.begin.min() >= bounds[0] and line.finish.max() <= bounds[1]


# ---------------------------------------------------------------- the report


def _run_report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def paired(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the mlp-localhost fixture, sim and real (built once)."""
    out = tmp_path_factory.mktemp("paired")
    assert cli.main([str(SIM), str(REAL), "--out", str(out)]) == 0
    return out / "report.html"


def _images(page: str) -> list[bytes]:
    sources = re.findall(r'<img src="([^"]*)"', page)
    prefix = "data:image/png;base64,"
    assert all(s.startswith(prefix) for s in sources)
    return [base64.b64decode(s[len(prefix) :]) for s in sources]


def test_report_has_every_section_and_one_image_per_plot(paired: Path) -> None:
    page = paired.read_text(encoding="utf-8")
    for key, _ in SECTIONS:
        assert f'<section id="{key}">' in page
    for plot in ("scaling", "breakdown", "step-times"):
        assert page.count(f'<figure id="plot-{plot}">') == 1
    assert "plot-staleness" not in page  # both runs are synchronous
    assert page.count('<figure id="plot-timeline-') == 4  # 2 points x 2 backends
    images = _images(page)
    assert len(images) == 3 + 4
    assert all(i.startswith(PNG_MAGIC) for i in images)
    # self-contained: nothing to fetch
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<script" not in page


def test_report_error_table_and_summary_by_hand(paired: Path) -> None:
    page = paired.read_text(encoding="utf-8")
    table = re.search(r'<table id="error-table">(.*?)</table>', page, re.S)
    assert table is not None
    assert table.group(1).count("<tr>") == 1 + 2  # header and the two paired points
    # step times (s) and throughputs from the fixtures' results.csv, sim then real
    step = [
        (0.008994815999999997, 0.020471421877543132),
        (0.010536696000000005, 0.04098818302154541),
    ]
    tput = [(3557.6047358834253, 1563.1547330429237), (6074.010296965953, 1561.4256422725166)]
    mape_step = 100 * (abs(step[0][0] / step[0][1] - 1) + abs(step[1][0] / step[1][1] - 1)) / 2
    mape_tput = 100 * (abs(tput[0][0] / tput[0][1] - 1) + abs(tput[1][0] / tput[1][1] - 1)) / 2
    assert mape_step == pytest.approx(65.18, abs=0.01)
    assert mape_tput == pytest.approx(208.30, abs=0.01)
    summary = paired.with_suffix(".md").read_text(encoding="utf-8")
    for text in (page, summary):
        assert f"step time {mape_step:.1f}%, throughput {mape_tput:.1f}%" in text
        # sim: more workers, more throughput; real: slightly less -> reversed ranking
        assert "sim vs real: -1.000" in text
        assert "-56.1%" in text and "+289.0%" in text  # per-point relative errors
    assert "## Provenance" in summary and str(REAL) in summary
    assert "f0dbb5c8e097f44deaec6e5a29d2e2f81b2a0eb8" in page  # git commit from meta.json
    assert "Note: the inputs" not in page  # same scenario file, no overrides
    # both points miss the 10% target by far, with no interval of repeated runs: marked
    assert table.group(1).count('<td class="out">') == 2
    assert summary.count("\u2717 outside 10%") == 2


def _pair(
    error: float, sim: float, real: float, ci95: float, inside: bool | None = None
) -> dict[str, object]:
    return {
        "throughput_error": error,
        "sim_throughput": sim,
        "real_throughput": real,
        "real_throughput_ci95": ci95,
        "inside": inside,
    }


def test_verdict_of_a_point() -> None:
    assert verdict(_pair(0.08, 108.0, 100.0, math.nan)) == "within 10%"
    assert verdict(_pair(-0.10, 90.0, 100.0, math.nan)) == "within 10%"
    # 15% off, but the runs' 95% interval is +-20: they cannot tell the two apart
    assert verdict(_pair(0.15, 115.0, 100.0, 20.0)) == "within the runs' 95% interval"
    assert verdict(_pair(0.15, 115.0, 100.0, 10.0)) == "\u2717 outside 10%"
    assert verdict(_pair(math.nan, 1.0, 0.0, math.nan)) == "n/a"
    # with an interval, it decides: 3% off and outside, 15% off and inside
    assert verdict(_pair(0.03, 103.0, 100.0, 1.0, False)) == "\u2717 outside"
    assert verdict(_pair(0.15, 115.0, 100.0, 1.0, True)) == "inside"


def test_measured_interval_combines_the_calibrations_and_the_runs_spread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from reports import intervals
    from reports.intervals import measured_interval
    from results.stats import t95

    monkeypatch.setattr(intervals, "machine_error", lambda kind: None)  # no validation table

    # 4 rounds predicting with a relative sd of 8%; 3 runs with one run's sd 10%
    sim = {
        "throughput_samples_per_s": 100.0,
        "interval_class": "calibration",
        "interval_figures": 4,
        "throughput_calibration_sd_samples_per_s": 8.0,
    }
    half = 11.0 * t95(2) / math.sqrt(3)  # the 95% half-width of 3 runs of sd 11 at 110
    real = {
        "throughput_samples_per_s": 110.0,
        "replications": 3,
        "throughput_ci95_samples_per_s": half,
    }
    a, b = 0.08**2 / 4, 0.10**2 / 3
    dof = (a + b) ** 2 / (a**2 / 3 + b**2 / 2)  # Welch-Satterthwaite: 3.80
    assert 3 < dof < 4
    width = 2.353 * math.sqrt(a + b)  # t(0.95, 3), any table
    # the runs' mean m = p / (1 + e), e within +- width
    assert measured_interval(sim, real) == pytest.approx((100 / (1 + width), 100 / (1 - width)))
    # one run's noise pooled over a report's points, 15% on 18 degrees of freedom
    a, b = 0.08**2 / 4, 0.15**2 / 3
    dof = (a + b) ** 2 / (a**2 / 3 + b**2 / 18)
    assert 20 < dof < 21
    width = 1.725 * math.sqrt(a + b)  # t(0.95, 20)
    pooled = measured_interval(sim, real, (0.15, 18))
    assert pooled == pytest.approx((100 / (1 + width), 100 / (1 - width)))
    # the runs alone (a calibration measured once): t(0.95, 2) x their sd / sqrt(3)
    once = {**sim, "interval_class": "calibration: measured once", "interval_figures": 1}
    alone = 2.920 * 0.10 / math.sqrt(3)
    assert measured_interval(once, real) == pytest.approx((100 / (1 + alone), 100 / (1 - alone)))
    # neither spread known: no interval
    single = {"throughput_samples_per_s": 110.0, "replications": 1}
    assert all(math.isnan(x) for x in measured_interval(once, single))
    # a prediction not calibrated has simulate's own interval, not this one
    catalog = {**sim, "interval_class": "allreduce/tcp"}
    assert all(math.isnan(x) for x in measured_interval(catalog, real))


def test_measured_interval_adds_the_models_error_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from measured import errors
    from reports.intervals import measured_interval

    # 10 ring points of a validation: errors -0.1 and +0.1 five times each (mean 0, sd
    # 0.1054), each the mean of 2 runs of noise 0.1: v = 0.1054^2 - 0.1^2 / 2 = 0.00611
    table = tmp_path / "errors-localhost.yaml"
    rows = [{"kind": "allreduce", "runs": 2, "error": e} for e in [-0.1, 0.1] * 5]
    rows += [{"kind": "parameter_server", "runs": 2, "error": 0.4}]
    table.write_text(yaml.safe_dump({"noise": 0.1, "dof": 11, "figures": rows}))
    monkeypatch.setattr(errors, "LOCALHOST_ERRORS", table)
    model = errors.machine_error("allreduce")
    assert model is not None and (model.name, model.figures) == ("this machine's allreduce", 10)
    spread = statistics.variance([-0.1, 0.1] * 5)
    assert model.mean == pytest.approx(0) and model.variance == pytest.approx(spread - 0.005)
    # parameter servers: 1 point of their own, so all 11 pooled
    pooled = errors.machine_error("parameter_server")
    assert pooled is not None and pooled.figures == 11
    assert pooled.mean == pytest.approx(0.4 / 11)
    # the model's error alone (a calibration measured once, one run, no pooled noise):
    # e within +- t(0.95, 9) sqrt(v (1 + 1/10)); the runs' mean within p / (1 + e)
    sim = {
        "throughput_samples_per_s": 100.0,
        "interval_class": "calibration: measured once",
        "interval_figures": 1,
        "strategy": "allreduce",
    }
    width = 1.833 * math.sqrt(model.variance * 1.1)
    got = measured_interval(sim, {"throughput_samples_per_s": 90.0, "replications": 1})
    assert got == pytest.approx((100 / (1 + width), 100 / (1 - width)))


def test_report_async_staleness_and_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.html"
    code, stdout, _ = _run_report(capsys, ASYNC, "--out", tmp_path)
    assert code == 0 and str(out) in stdout
    page = out.read_text(encoding="utf-8")
    assert page.count('<figure id="plot-staleness">') == 1
    assert page.count("<figcaption>from trace-sync=") == 2  # both timelines from traces
    assert "No point has both a simulated and a real result" in page
    assert len(_images(page)) == 3 + 1 + 2


def test_default_out_is_beside_the_first_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "runs" / "async-ps-tiny" / "sim"
    shutil.copytree(ASYNC, run)
    code, _, _ = _run_report(capsys, run, "--no-timelines")
    assert code == 0
    assert (run.parent / "report.html").is_file() and (run.parent / "report.md").is_file()
    assert sorted(p.name for p in run.parent.iterdir()) == ["report.html", "report.md", "sim"]


def test_calibration_is_shown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = tmp_path / "sim"
    shutil.copytree(SIM, sim)
    meta = json.loads((sim / "meta.json").read_text())
    meta["calibration"] = {"profile": "profiles/box.yaml", "used": ["compute.mlp", "transfer"]}
    meta["scenario"]["sets"] = ["training.steps=30"]  # made with an override real did not have
    (sim / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "report.html"
    assert _run_report(capsys, sim, REAL, "--out", tmp_path, "--no-timelines")[0] == 0
    page = out.read_text(encoding="utf-8")
    assert 'id="calibration-0"' in page and 'id="calibration-1"' not in page
    assert "profiles/box.yaml" in page and "compute.mlp" in page
    assert "profiles/box.yaml" in out.with_suffix(".md").read_text(encoding="utf-8")
    assert "Note: the inputs were made from scenario files that differ" in page


def test_compare_inputs_and_machine_drift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What `compare` makes: the simulation given the calibration (`--set cluster.profile`,
    no difference between the inputs) and run-real's measure of the machine's drift."""
    sim, real = tmp_path / "sim", tmp_path / "real"
    shutil.copytree(SIM, sim)
    shutil.copytree(REAL, real)
    meta = json.loads((sim / "meta.json").read_text())
    meta["scenario"]["sets"] = [f"cluster.profile={tmp_path}/profile.yaml"]
    (sim / "meta.json").write_text(json.dumps(meta))
    meta = json.loads((real / "meta.json").read_text())
    meta["machine_drift"] = {"drift": -0.30, "noise": 0.06, "changed": True, "entries": []}
    (real / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "report.html"
    assert _run_report(capsys, sim, real, "--out", tmp_path, "--no-timelines")[0] == 0
    page = out.read_text(encoding="utf-8")
    assert "scenario files that differ" not in page
    assert "Warning: the machine changed under the real runs" in page
    assert "-30.0%" in page and "6.0%" in page
    assert "machine changed" in out.with_suffix(".md").read_text(encoding="utf-8")
    meta["machine_drift"] = {"drift": 0.02, "noise": 0.06, "changed": False, "entries": []}
    (real / "meta.json").write_text(json.dumps(meta))
    assert _run_report(capsys, sim, real, "--out", tmp_path, "--no-timelines")[0] == 0
    page = out.read_text(encoding="utf-8")
    assert "Machine drift between the calibration and the real runs: +2.0%" in page


def test_an_uncalibrated_prediction_of_a_cpu_run_points_to_compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real run on CPU against a prediction made from the catalog alone: one line in
    the page, the summary and on the terminal, saying to use `compare`; none where the
    prediction was calibrated or the real run was on a GPU."""
    note = (
        "the prediction is uncalibrated: CPU runs need `compare` (or `run-real --calibrate` "
        "and cluster.profile) for a fair comparison."
    )
    code, _, err = _run_report(capsys, SIM, REAL, "--out", tmp_path / "plain", "--no-timelines")
    assert code == 0 and err == f"report: note: {note}\n"
    page = (tmp_path / "plain" / "report.html").read_text(encoding="utf-8")
    assert page.count("Note: the prediction is uncalibrated: CPU runs need") == 1
    summary = (tmp_path / "plain" / "report.md").read_text(encoding="utf-8")
    assert f"Note: {note}" in summary
    calibrated = _copy(tmp_path, "sim", SIM)
    meta = json.loads((calibrated / "meta.json").read_text())
    meta["calibration"] = {"profile": "runs/mlp-localhost/profile.yaml"}
    (calibrated / "meta.json").write_text(json.dumps(meta))
    out = tmp_path / "calibrated"
    code, _, err = _run_report(capsys, calibrated, REAL, "--out", out, "--no-timelines")
    assert code == 0 and err == ""
    assert "prediction is uncalibrated" not in (out / "report.html").read_text(encoding="utf-8")
    gpu = _copy(tmp_path, "gpu", REAL)
    meta = json.loads((gpu / "meta.json").read_text())
    for point in meta["points"]:
        point["resolved"] = {"real": {"device": "gpu"}}
    (gpu / "meta.json").write_text(json.dumps(meta))
    code, _, err = _run_report(capsys, SIM, gpu, "--out", tmp_path / "g", "--no-timelines")
    assert code == 0 and err == ""


# ---------------------------------------------------------------- refusals


def _copy(tmp_path: Path, name: str, source: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


def _edit_csv(path: Path, column: str, row: int, value: object) -> None:
    frame = pd.read_csv(path, keep_default_na=False)
    frame[column] = frame[column].astype(object)
    frame.loc[row, column] = value
    frame.to_csv(path, index=False)


def _drop_column(path: Path, column: str) -> None:
    pd.read_csv(path, keep_default_na=False).drop(columns=[column]).to_csv(path, index=False)


BAD_INPUTS = {
    # name: (how to break the copies of sim and real, words the one line must hold)
    "results column missing": (
        lambda sim, real: _drop_column(real / "results.csv", "throughput_samples_per_s"),
        ["real/results.csv", "'throughput_samples_per_s'", "missing"],
    ),
    "steps column missing": (
        lambda sim, real: _drop_column(sim / "steps.csv", "comm_end_s"),
        ["sim/steps.csv", "'comm_end_s'"],
    ),
    "not a number": (
        lambda sim, real: _edit_csv(sim / "results.csv", "workers", 1, "two"),
        ["sim/results.csv", "'workers'", "row 2", "'two'", "not a number"],
    ),
    "bad backend": (
        lambda sim, real: _edit_csv(real / "results.csv", "backend", 0, "measured"),
        ["real/results.csv", "'backend'", "'measured'"],
    ),
    "different scenarios": (
        lambda sim, real: _edit_csv(real / "results.csv", "scenario", [0, 1], "other"),
        ["real/results.csv", "'scenario'", "'other'", "'mlp-localhost'", "one scenario"],
    ),
    "mismatched configuration": (
        lambda sim, real: _edit_csv(real / "results.csv", "workers", 1, 4),
        ["real/results.csv", "'workers'", "devices_per_host=2", "4", "sim/results.csv"],
    ),
    "bad meta.json": (
        lambda sim, real: (real / "meta.json").write_text("{not json"),
        ["real/meta.json", "not JSON"],
    ),
    "missing steps.csv": (
        lambda sim, real: (sim / "steps.csv").unlink(),
        ["sim/steps.csv", "missing"],
    ),
    "empty results.csv": (
        lambda sim, real: (sim / "results.csv").write_text(""),
        ["sim/results.csv", "empty"],
    ),
    "broken trace": (
        lambda sim, real: (sim / "trace-devices_per_host=1.json").write_text("[1, 2"),
        ["sim/trace-devices_per_host=1.json", "not JSON"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_nothing_written(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, real = _copy(tmp_path, "sim", SIM), _copy(tmp_path, "real", REAL)
    breaker, words = BAD_INPUTS[case]
    breaker(sim, real)
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, stderr = _run_report(capsys, sim, real, "--out", out)
    assert code == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("report: error: ")
    for word in words:
        assert word in stderr, stderr
    assert list(out.iterdir()) == []  # nothing written, not even a temporary file


def test_same_point_twice_and_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run_report(capsys, SIM, SIM, "--out", tmp_path / "r")
    assert code == 2 and "also in" in err and err.count("\n") == 1
    code, _, err = _run_report(capsys, SIM, "--out", tmp_path / "r.md")
    assert code == 2 and "--out: " in err and "names a file" in err and "--out " in err
    code, _, err = _run_report(capsys, tmp_path / "nowhere", "--out", tmp_path / "r")
    assert code == 2 and "nowhere" in err and "not a directory" in err
    with pytest.raises(SystemExit) as exc:
        cli.main([])
    assert exc.value.code == 2
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- boundary


def test_reports_never_imports_sim_or_real() -> None:
    """reports reads result files only (docs/scenarios.md); it may use scenarios' vocabulary."""
    offenders = []
    for path in sorted((ROOT / "reports").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [
                f"{path.name}:{node.lineno} {n}"
                for n in names
                if n.split(".")[0] in {"sim", "real"}
            ]
    assert offenders == []


# ---------------------------------------------------------------- headless browser


@pytest.mark.skipif(
    CHROMIUM is None and not REQUIRED,
    reason="Chromium not installed (Debian: apt-get install chromium; .ci/run installs it)",
)
def test_report_renders_in_headless_chromium(paired: Path, tmp_path: Path) -> None:
    """The paired report at 1280 x 800: within the window, every image loaded, the error
    table there; and the probe does notice a broken image."""
    seen = browse(paired, tmp_path, ("#error-table",))
    assert seen["images"] == 7 and seen["loaded"] == 7
    assert seen["scroll-width"] <= seen["client-width"]
    assert seen["scrolled-tables"] == 0 and seen["empty-tables"] == 0
    read = seen["read"]
    assert isinstance(read, dict) and len(read["#error-table"]) == 1
    broken = tmp_path / "broken" / "report.html"
    broken.parent.mkdir()
    page = paired.read_text(encoding="utf-8")
    broken.write_text(
        page.replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1), encoding="utf-8"
    )
    seen = browse(broken, tmp_path)
    assert seen["images"] == 7 and seen["loaded"] == 6


def test_time_to_target_section_marks_the_fastest_points(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A simulated time-to-target sweep: the report draws the curves and the time to
    target, and its table marks the point fastest to the target and the one of highest
    throughput, as results.csv orders them; a curves.csv that is not one is refused."""
    from sim.cli import main as simulate

    library = ROOT / "scenarios/library/digits-time-to-target.yaml"
    out = tmp_path / "sim"
    sets = [
        "--set",
        "sweep={training.batch_per_worker: [16, 64]}",
        "--set",
        "training.max_epochs=4",
    ]
    assert simulate([str(library), "--out", str(out), "--quiet", *sets]) == 0
    code, _, err = _run_report(capsys, str(out), "--out", str(tmp_path / "r"))
    assert code == 0, err
    markdown = (tmp_path / "r" / "report.md").read_text()
    section = markdown.split("## Time to target")[1].split("\n## ")[0]
    results = pd.read_csv(out / "results.csv")
    fastest = results.loc[results.time_to_target_s.idxmin(), "point"]
    busiest = results.loc[results.throughput_samples_per_s.idxmax(), "point"]
    # a point's cell: its words, then its id in code
    rows = section.splitlines()[4:]
    lines = {line.split(" | ")[0].rpartition("(`")[2].rstrip("`)"): line for line in rows}
    assert "fastest to target" in lines[fastest] and "highest throughput" in lines[busiest]
    page = (tmp_path / "r" / "report.html").read_text()
    assert 'id="time-to-target"' in page and page.count("data:image/png;base64") >= 5
    (out / "curves.csv").write_text("point,step\nx,1\n")
    code, _, err = _run_report(capsys, str(out), "--out", str(tmp_path / "bad"))
    assert code == 2 and "curves.csv: column 'replication' missing" in err
    assert not (tmp_path / "bad").exists()


def test_a_report_reads_steps_csv_in_either_form(tmp_path: Path) -> None:
    """simulate's default steps.csv (a row per step) reports as one worker, the mean one:
    its step-time distribution is each step's mean over the per-worker rows that
    `--steps all` writes for the same seed, and its timeline says so."""
    from reports.load import load_run
    from reports.report import step_durations, timeline_of
    from sim.cli import main as simulate

    scenario = ROOT / "scenarios" / "library" / "mlp-localhost.yaml"
    for form in ("summary", "all"):
        args = [str(scenario), "--out", str(tmp_path / form), "--steps", form, "--quiet"]
        assert simulate(args) == 0
    summary, every = load_run(tmp_path / "summary"), load_run(tmp_path / "all")
    assert (summary.steps_form, every.steps_form) == ("summary", "all")
    for point in summary.results["point"]:
        rows = every.steps_of(point)
        rows = rows[~rows.warmup & ~rows.lost]
        means = (rows.end_s - rows.start_s).groupby(rows.step).mean().to_numpy()
        np.testing.assert_allclose(step_durations(summary, point), means, rtol=1e-12)
        assert timeline_of(summary, point)[1] == "steps.csv (a row per step: the mean worker)"
    assert cli.main([str(tmp_path / "summary"), "--no-timelines"]) == 0
    assert (tmp_path / "report.html").is_file()  # beside the result directory
