"""The statistical-efficiency model against the closed forms it is built on."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from scenarios import load
from scenarios.sections.convergence import ConvergenceSpec
from workloads import convergence
from workloads.convergence import Updates, gain, progress, stale_factor


def quadratic(**changes: float | str) -> ConvergenceSpec:
    """McCandlish et al.'s model itself: one noise scale, no early phase."""
    fields = dict(
        metric="accuracy",
        initial=0.1,
        final=0.9,
        scale_samples=1e4,
        exponent=1.0,
        noise_scale=500.0,
        noise_growth=0.0,
        lr_max=2.0,
    )
    return ConvergenceSpec(**{**fields, **changes})  # type: ignore[arg-type]


def constant(rate: float, batch: float, n: int, staleness: float = 0.0) -> Updates:
    return Updates(np.full(n, rate), np.full(n, batch), np.full(n, staleness))


@pytest.mark.parametrize("batch", [16.0, 500.0, 4000.0])
def test_the_best_rate_is_mccandlish_eps_opt_and_makes_b_over_b_plus_b_noise(batch):
    spec = quadratic()
    best = spec.optimal_rate(batch)
    assert best == pytest.approx(2.0 / (1.0 + 500.0 / batch))  # eq. 2.6
    r = best / spec.lr_max
    assert gain(r, batch, 500.0) == pytest.approx(batch / (batch + 500.0))  # eq. 2.7
    for other in (0.9 * r, 1.1 * r):
        assert gain(other, batch, 500.0) < gain(r, batch, 500.0)
    assert gain(2 * r, batch, 500.0) == pytest.approx(0.0, abs=1e-12)  # overshoot by 2: none


def test_steps_and_samples_to_a_target_trade_off_as_mccandlish_eq_2_11():
    """At the best rate for each batch, S = S_min (1 + B_noise/B) and E = E_min (1 +
    B/B_noise), so (S/S_min - 1)(E/E_min - 1) = 1, with S_min = E_min / B_noise."""
    spec = quadratic()
    goal = spec.progress_for(0.8)
    e_min, s_min = goal, goal / 500.0
    for batch in (8.0, 64.0, 500.0, 3000.0, 50_000.0):
        n = 5000
        e = progress(spec, constant(spec.optimal_rate(batch), batch, n))
        per_update = e[0]
        assert e[-1] == pytest.approx(n * per_update)  # one noise scale: constant progress
        assert per_update == pytest.approx(batch / (1 + batch / 500.0))
        s = goal / per_update  # updates to the target (fractional: the closed form's S)
        samples = s * batch
        assert (s / s_min - 1) * (samples / e_min - 1) == pytest.approx(1.0)


def test_linear_scaling_keeps_progress_per_sample_while_the_batch_is_small_and_breaks_at_b_noise():
    spec = quadratic(noise_scale=10_000.0)
    small = 10.0
    rate = spec.optimal_rate(small)
    per_sample = progress(spec, constant(rate, small, 1))[0] / small
    for k in (2, 8, 32):
        scaled = progress(spec, constant(rate * k, small * k, 1))[0] / (small * k)
        assert scaled == pytest.approx(per_sample, rel=0.05)
    # x = B / B_noise: g = x(1 - x) with the linearly scaled small-batch optimum; at x = 1
    # the update makes no progress, and beyond it loses ground (never below the start)
    x_one = 10_000.0 / small
    best = progress(spec, constant(spec.optimal_rate(10_000.0), 10_000.0, 1))[0]
    assert progress(spec, constant(rate * x_one, 10_000.0, 1))[0] < 0.01 * best
    assert gain(rate * 2 * x_one / spec.lr_max, 20_000.0, 10_000.0) < 0


@pytest.mark.parametrize("tau", [0, 1, 2, 3, 8])
def test_the_staleness_factor_is_the_delayed_recurrence_stability_bound(tau):
    """x_{t+1} = x_t - a x_{t-tau} (gradient descent on a quadratic with a gradient tau
    updates old) is stable iff a < 2 sin(pi / (2 (2 tau + 1))) (Levin & May 1976): the
    largest usable rate, 2 for fresh gradients, falls by stale_factor(tau)."""
    bound = 2.0 / float(stale_factor(tau))
    assert bound == pytest.approx(2 * math.sin(math.pi / (2 * (2 * tau + 1))))

    def grows(a: float) -> bool:
        x = [1.0] * (tau + 1)
        for _ in range(4000):
            x.append(x[-1] - a * x[-1 - tau])
        return abs(x[-1]) > 1.0

    assert not grows(0.97 * bound)
    assert grows(1.03 * bound)
    assert float(stale_factor(0)) == 1.0 and float(stale_factor(1)) == pytest.approx(2.0)


def test_staleness_costs_a_large_rate_more_than_a_small_one():
    spec = quadratic()
    small, large = 0.02 * spec.optimal_rate(64), spec.optimal_rate(64)
    ratio = [
        progress(spec, constant(r, 64, 1, staleness=4))[0] / progress(spec, constant(r, 64, 1))[0]
        for r in (small, large)
    ]
    assert 0.9 < ratio[0] < 1.0
    assert ratio[1] < ratio[0]


def test_without_warm_up_a_large_rate_early_loses_ground_that_warm_up_keeps():
    spec = quadratic(early_sharpness=0.05, early_epochs=1.0, noise_scale=50.0)
    n, batch = 400, 256.0
    peak = 0.9 * spec.optimal_rate(batch)
    epoch = n * batch / 10
    cold = Updates(np.full(n, peak), np.full(n, batch), np.zeros(n), epoch_samples=epoch)
    warm_rates = np.minimum(peak, peak * (np.arange(n) + 1) / (0.2 * n))  # 2 epochs
    warm = Updates(warm_rates, np.full(n, batch), np.zeros(n), epoch_samples=epoch)
    assert progress(spec, cold)[n // 10] < progress(spec, warm)[n // 10]
    assert progress(spec, cold)[-1] < progress(spec, warm)[-1]


def test_early_unstable_updates_leave_lasting_damage_in_closed_form():
    """Updates at r = 3 (eps lambda > 2: the curvature alone overshoots by r^2 - 2r = 3
    best updates) in the early phase: L = sum B_noise x 3 x exp(-epochs / early_epochs),
    and the asymptote moves 1 - exp(-early_damage L / scale_samples) of the way back."""
    spec = quadratic(lr_max=1.0, early_epochs=2.0, early_damage=0.5, noise_scale=500.0)
    n, batch, epoch = 4, 100.0, 200.0  # an update is half an epoch
    updates = Updates(np.full(n, 3.0), np.full(n, batch), np.zeros(n), epoch_samples=epoch)
    e, damage = convergence.integrate(spec, updates)
    weights = np.exp(-0.5 * np.arange(n) / 2.0)  # epochs 0, 0.5, 1, 1.5
    lost = np.cumsum(500.0 * 3.0 * weights)
    assert np.allclose(damage, -np.expm1(-0.5 * lost / 1e4))
    assert np.all(e == 0.0)  # every update lost ground from the start
    late = convergence.values(spec, updates)
    floor = spec.final + damage[-1] * (spec.initial - spec.final)
    assert float(spec.metric_at(1e12, damage[-1])) == pytest.approx(floor, abs=1e-6)
    assert late[-1] == pytest.approx(spec.initial)  # no progress yet: the start's metric


def test_stable_updates_noisy_or_late_leave_no_damage_and_staleness_can():
    """Noise makes an update wander, not diverge: r = 1.5 at a small batch (g < 0) and
    unstable updates after the early phase's window leave none; the same r = 1.5 with a
    gradient 1 update old (c = 2: r^2 c > 2 r) does."""
    spec = quadratic(lr_max=1.0, early_epochs=1.0, early_damage=1.0)
    n = 50
    noisy = Updates(np.full(n, 1.5), np.full(n, 10.0), np.zeros(n), epoch_samples=1e3)
    assert convergence.integrate(spec, noisy)[1][-1] == 0.0
    unknown = Updates(np.full(n, 3.0), np.full(n, 1e6), np.zeros(n))  # no epochs: not early
    assert convergence.integrate(spec, unknown)[1][-1] == 0.0
    stale = Updates(np.full(n, 1.5), np.full(n, 1e6), np.ones(n), epoch_samples=1e8)
    assert convergence.integrate(spec, stale)[1][-1] > 0.0
    assert np.all(np.diff(convergence.integrate(spec, stale)[1]) >= 0.0)


def test_damage_integrated_in_chunks_close_to_one_by_one(monkeypatch):
    spec = quadratic(lr_max=1.0, early_epochs=0.5, early_damage=0.01, noise_growth=1.0)
    n = 3000
    rates = np.linspace(3.0, 0.1, n)
    updates = Updates(rates, np.full(n, 64.0), np.zeros(n), epoch_samples=64.0 * 500)
    exact = convergence.integrate(spec, updates)[1]
    monkeypatch.setattr(convergence, "EXACT_UPDATES", 300)
    chunked = convergence.integrate(spec, updates)[1]
    assert exact[-1] > 0.0
    ends = np.arange(9, n, 10)  # each chunk's last update (within it, damage is spread)
    assert np.allclose(chunked[ends], exact[ends], rtol=0.01)


def test_a_growing_noise_scale_makes_a_constant_rate_stall_and_decay_go_on():
    spec = quadratic(noise_growth=1.0)
    n, batch, rate = 20_000, 32.0, 0.05
    steady = progress(spec, constant(rate, batch, n))
    assert steady[-1] - steady[n // 2] < 0.05 * steady[n // 2]  # near its floor
    decayed = np.where(np.arange(n) < n // 2, rate, rate / 10)
    lower = progress(spec, Updates(decayed, np.full(n, batch), np.zeros(n)))
    assert lower[-1] > steady[-1]


def test_long_runs_are_integrated_in_chunks_close_to_one_by_one(monkeypatch):
    spec = quadratic(noise_growth=1.0)
    n = 3000
    rates = np.linspace(0.2, 0.01, n)
    updates = Updates(rates, np.full(n, 64.0), np.zeros(n))
    exact = progress(spec, updates)
    monkeypatch.setattr(convergence, "EXACT_UPDATES", 300)
    chunked = progress(spec, updates)
    assert chunked.shape == exact.shape
    assert np.allclose(chunked, exact, rtol=0.01)
    assert np.all(np.diff(chunked) >= 0)


@pytest.mark.parametrize("shape", [1.0, 2.5])
def test_the_learning_curve_and_its_inverse(shape: float) -> None:
    spec = quadratic(exponent=0.5, shape=shape)
    e = spec.progress_for(0.7)
    assert float(spec.metric_at(e)) == pytest.approx(0.7)
    assert spec.progress_for(0.95) == math.inf
    assert spec.progress_for(0.05) == 0.0
    # at scale_samples the gap is 2^(-exponent / shape) of the start's; far past it the
    # curve is the same power law whatever the onset
    gap = (float(spec.metric_at(spec.scale_samples)) - spec.final) / (spec.initial - spec.final)
    assert gap == pytest.approx(2 ** (-0.5 / shape))
    far = 1e6 * spec.scale_samples
    power = (spec.initial - spec.final) * (far / spec.scale_samples) ** -0.5
    assert float(spec.metric_at(far)) - spec.final == pytest.approx(power, rel=1e-5)


def test_the_curve_is_read_at_every_evaluation_and_each_evaluation_delays_what_follows():
    spec = quadratic()
    n = 25
    updates = constant(spec.optimal_rate(32), 32, n)
    ends = np.arange(1, n + 1, dtype=float)  # update k applied at k + 1 s
    curve = convergence.curve(spec, updates, ends, every=10, eval_s=0.5)
    assert curve["step"].tolist() == [10, 20, 25]
    assert curve["time_s"].tolist() == [10.5, 21.0, 26.5]
    assert curve["samples"].tolist() == [320.0, 640.0, 800.0]
    e = progress(spec, updates)
    assert np.allclose(curve["value"], spec.metric_at(e[[9, 19, 24]]))


def test_to_target_takes_the_first_evaluation_that_meets_it():
    steps = np.array([10, 20, 30])
    curve = {
        "step": steps,
        "samples": steps * 32.0,
        "epoch": steps / 10,
        "time_s": steps * 0.1,
        "value": np.array([0.5, 0.91, 0.95]),
    }
    row, why = convergence.to_target(curve, "accuracy", 0.9)
    assert why is None
    assert row["steps_to_target"] == 20 and row["time_to_target_s"] == pytest.approx(2.0)
    assert row["final_metric"] == 0.95
    row, why = convergence.to_target(curve, "loss", 0.4)
    assert math.isnan(row["steps_to_target"]) and "not reached in 30 updates" in str(why)


LARGE_BATCH = Path(__file__).resolve().parent.parent / "scenarios/library/resnet50-large-batch.yaml"


@pytest.fixture(scope="module")
def large_batch() -> dict[tuple[int, float], float]:
    """simulate on the bundled Goyal et al. sweep, from the catalog's parameters alone:
    top-1 error (%) after 90 epochs per (global batch, warm-up epochs)."""
    from sim.runner import run

    result = run(load(LARGE_BATCH))
    frame = result.results
    warm = [p.spec.training.learning_rate.warmup_epochs for p in result.scenario.points]
    return {
        (int(w * 32), wu): 100 * (1 - m)
        for w, wu, m in zip(frame.workers, warm, frame.final_metric, strict=True)
    }


def test_goyal_shape_flat_to_8k_with_scaling_and_warm_up_then_worse(large_batch):
    """Goyal et al. 2017 Fig. 1: error flat from 256 to 8k (23.60% to 23.74%), then 24.79%,
    27.55% and 33.96% at 16k, 32k, 64k."""
    flat = [large_batch[(kn, 5.0)] for kn in (256, 1024, 4096, 8192)]
    assert max(flat) - min(flat) < 0.6
    beyond = [large_batch[(kn, 5.0)] for kn in (8192, 16384, 32768, 65536)]
    assert all(b > a + 0.5 for a, b in zip(beyond, beyond[1:], strict=False))


def test_goyal_shape_worse_without_warm_up(large_batch):
    """Goyal et al. 2017 Table 1: 8k without warm-up 24.84%, with gradual warm-up 23.74%."""
    assert large_batch[(8192, 0.0)] > large_batch[(8192, 5.0)] + 0.5


@pytest.mark.parametrize(("metric", "shape"), [("accuracy", 1.0), ("loss", 2.0)])
def test_the_calibration_fit_recovers_the_curves_of_known_parameters(
    metric: str, shape: float
) -> None:
    """Curves drawn from known parameters (three batches at the linearly scaled rate, and
    an asynchronous run with staleness 1): the least-squares fit predicts every
    evaluation of them, and a batch it never saw, to within 0.01 (0.02 in loss, nats);
    a power-law accuracy curve, and a loss curve with a flat start."""
    pytest.importorskip("scipy")
    from measured.profile import CurveFit
    from real.calibrate.convergence import fit, predicted

    initial, final = (0.1, 0.95) if metric == "accuracy" else (math.log(10), 0.1)
    truth = quadratic(
        metric=metric,
        initial=initial,
        final=final,
        scale_samples=2000.0,
        exponent=0.8,
        shape=shape,
        noise_scale=100.0,
        noise_growth=0.5,
        lr_max=3.0,
    )
    tolerance = 0.01 if metric == "accuracy" else 0.02

    def curve(batch: int, rate: float, staleness: float = 0.0, kind: str = "single") -> CurveFit:
        steps = list(range(5, 101, 5))
        blank = CurveFit(
            kind=kind,
            batch=batch,
            rate=rate,
            steps=steps,
            values=[0.0] * 20,
            staleness=[staleness] * 100,
        )
        return blank.model_copy(update={"values": predicted(truth, blank).tolist()})

    seen = [curve(16, 0.05), curve(64, 0.2), curve(256, 0.8), curve(16, 0.05, 1.0, "async")]
    fitted, rms = fit(seen, metric, initial)
    assert rms < tolerance / 2
    unseen = curve(128, 0.4)
    assert np.max(np.abs(predicted(fitted, unseen) - np.asarray(unseen.values))) < tolerance


def test_the_calibration_curves_are_at_the_synchronous_points_batches_and_rates():
    from real.calibrate.convergence import curve_points

    library = Path(__file__).resolve().parent.parent / "scenarios/library"
    scenario = load(library / "digits-time-to-target.yaml")
    first, pairs = curve_points([p.spec for p in scenario.points])
    assert first.training.batch_per_worker == 16
    # 2 workers x 16, 32 and 64, each at 0.02 x 2 workers (linear scaling)
    assert pairs == [(32, 0.04), (64, 0.04), (128, 0.04)]
    alone = load(library / "digits-time-to-target.yaml", ("sweep={}",))
    assert curve_points([p.spec for p in alone.points])[1] == [
        (16, 0.02),
        (64, 0.08),
        (256, 0.32),
    ]


def test_calibration_curves_stop_past_the_target_over_several_shuffles() -> None:
    """A calibration curve runs to half-way between the target and a perfect score, and
    each repeat shuffles by its own seed (the scenario's + the repeat)."""
    from real.calibrate.convergence import _curve_job, past
    from scenarios.sections.training import Target

    assert past(Target(metric="accuracy", value=0.92)) == Target(metric="accuracy", value=0.96)
    assert past(Target(metric="loss", value=0.3)) == Target(metric="loss", value=0.15)
    assert past(None) is None
    library = Path(__file__).resolve().parent.parent / "scenarios/library"
    spec = load(library / "digits-time-to-target.yaml").points[0].spec
    seeds = [_curve_job(spec, kind, 32, k).seed for kind in ("single", "async") for k in (0, 2)]
    assert seeds == [spec.seed, spec.seed + 2] * 2


def test_a_calibration_curve_runs_at_one_rate_to_past_the_target() -> None:
    """The processes of a curve: the rate flat from the first update, evaluated every
    `every` updates, stopping at the given target, shuffled by the seed + the repeat;
    a server never evaluates."""
    from real.calibrate.convergence import curve_jobs, past
    from real.job import Server
    from scenarios.sections.training import Target
    from workloads.schedule import Schedule

    library = Path(__file__).resolve().parent.parent / "scenarios/library"
    spec = load(library / "digits-time-to-target.yaml").points[0].spec
    stop = past(Target(metric="loss", value=0.4))
    variant, (job,) = curve_jobs(spec, "single", 32, 0.04, 1, 5, stop)
    assert variant.workers == 1 and variant.seed == spec.seed + 1
    assert (job.schedule, job.learning_rate) == (Schedule(base=0.04, peak=0.04), 0.04)
    assert (job.eval_every, job.target) == (5, Target(metric="loss", value=0.2))
    assert job.holdout == spec.training.holdout_samples and job.checkpoint_dir is None
    _, jobs = curve_jobs(spec, "async", 16, 0.02, 0, 5, None)
    assert jobs[0].target is None  # the coordinator's: none
    assert all(isinstance(j, Server) for j in jobs[1:])  # the coordinator's servers
    assert not any(hasattr(j, "eval_every") for j in jobs[1:])  # evaluate nothing
