"""`run-real --calibrate` for a scenario with a target: the model's statistical efficiency.

Single-worker runs on the digits train at each synchronous point's global batch and peak
rate (as many as `MAX_CURVES`; where the points name fewer than two, `CURVE_BATCHES` times
the batch per worker, the rate scaled by the scenario's rule as if that many workers'
batches were averaged), at that rate throughout, and one asynchronous parameter-server
run of the first point's workers; each `CURVE_REPEATS` times over different shuffles
(seeds), evaluated on the held-out images every `evaluation.every_steps` updates, until
past the target (`past`: half-way from it to a perfect score) or the scenario's bound.
The curves then describe where the target is crossed, which is what the prediction is
for, and not the long tail after it; one run's crossing moves by a third from one
shuffle to the next (docs/validation.md), so each curve is repeated. Least squares then fits
`model.convergence` (scenarios/sections/convergence.py) to every evaluation of every run, each
predicted from that run's own rates, batches and (asynchronous) staleness. The early
phase is not fitted (early_sharpness 1): a few curves of a small model do not tell it.
The profile keeps the fit and how far it is from the runs (`rms`, in the metric's units).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from measured.profile import ConvergenceEntry, CurveFit
from scenarios.sections.convergence import ConvergenceSpec
from scenarios.sections.training import Target
from scenarios.spec import ScenarioSpec, StrategySpec
from workloads.convergence import Updates, values
from workloads.schedule import Schedule, schedule_of

from ..job import Job, Training
from ..launcher import Launcher
from ..protocol import Eval, Step
from ..runner import jobs_for

#: the batches of the single-worker curves where the scenario's points name fewer than
#: two, in its batches per worker; at most MAX_CURVES of the points' own otherwise
CURVE_BATCHES = (1, 4, 16)
MAX_CURVES = 4
#: runs of each curve, over as many shuffles of the training images
CURVE_REPEATS = 3
TIMEOUT_S = 600.0


def past(target: Target | None) -> Target | None:
    """Where a calibration curve stops: half-way from the scenario's target to a perfect
    score (accuracy 1, loss 0), so that the curve covers the crossing and a little after."""
    if target is None:
        return None
    if target.metric == "accuracy":
        return Target(metric="accuracy", value=target.value + (1 - target.value) / 2)
    return Target(metric="loss", value=target.value / 2)


def _curve_job(
    spec: ScenarioSpec, kind: Literal["single", "async"], batch: int, repeat: int = 0
) -> ScenarioSpec:
    """The variant of the point a calibration curve runs: one worker at `batch`
    (`single`), or the point's workers under asynchronous parameter servers (`async`);
    its `repeat`-th run shuffles the images by the scenario's seed + `repeat`."""
    training = spec.training.model_copy(update={"target": None})
    if kind == "single":
        variant = spec.model_copy(
            update={
                "cluster": spec.cluster.model_copy(update={"hosts": 1, "devices_per_host": 1}),
                "strategy": StrategySpec(),
                "training": training.model_copy(update={"batch_per_worker": batch}),
                "failures": (),
            }
        )
    else:
        variant = spec.model_copy(
            update={
                "strategy": StrategySpec(kind="parameter_server", servers=1, sync=False),
                "training": training,
                "failures": (),
            }
        )
    return variant.model_copy(update={"seed": spec.seed + repeat})


def curve_jobs(
    spec: ScenarioSpec,
    kind: Literal["single", "async"],
    batch: int,
    rate: float,
    repeat: int,
    every: int,
    stop: Target | None,
) -> tuple[ScenarioSpec, list[Job]]:
    """The variant a curve runs (`_curve_job`) and its processes: at `rate` throughout
    (no warm-up, no decay), evaluated every `every` updates on the held-out images, until
    `stop` (None: the bound)."""
    variant = _curve_job(spec, kind, batch, repeat)
    jobs = [  # the training processes; servers train nothing
        job.replace(
            schedule=Schedule(base=rate, peak=rate),
            learning_rate=rate,
            eval_every=every,
            holdout=spec.training.holdout_samples,
            target=stop,
            checkpoint_dir=None,
        )
        if isinstance(job, Training)
        else job
        for job in jobs_for(variant)
    ]
    return variant, jobs


def measure_curve(
    spec: ScenarioSpec,
    kind: Literal["single", "async"],
    batch: int,
    rate: float,
    repeat: int = 0,
) -> CurveFit:
    """One calibration run at a constant `rate`, and its evaluations."""
    stop = past(spec.training.target)
    every = spec.training.evaluation.every_steps
    variant, jobs = curve_jobs(spec, kind, batch, rate, repeat, every, stop)
    n = variant.training.warmup_steps + variant.training.steps
    lr = spec.training.learning_rate
    result = Launcher(jobs, TIMEOUT_S, spec.real.device).run()
    evals = sorted(result.of(Eval), key=lambda r: r.step)
    metric = spec.training.target.metric if spec.training.target else "accuracy"
    staleness = [0.0] * n
    if kind == "async":
        for r in result.of(Step):
            if r.update is not None and 0 <= r.update < n:
                staleness[r.update] = float(r.staleness)
    return CurveFit(
        kind=kind,
        batch=variant.training.batch_per_worker,
        rate=rate,
        scaling=lr.scaling,
        steps=[int(r.step) for r in evals],
        values=[float(getattr(r, metric)) for r in evals],
        staleness=staleness,
        eval_s=float(np.median([r.end - r.start for r in evals])) if evals else None,
    )


def predicted(spec: ConvergenceSpec, curve: CurveFit) -> np.ndarray:
    """The model's metric at a calibration curve's evaluations."""
    n = max(curve.steps)
    updates = Updates(
        np.full(n, curve.rate),
        np.full(n, float(curve.batch)),
        np.asarray(curve.staleness[:n] + [0.0] * (n - len(curve.staleness)), dtype=float),
    )
    return values(spec, updates)[np.asarray(curve.steps) - 1]  # type: ignore[no-any-return]


def fit(curves: list[CurveFit], metric: str, initial: float) -> tuple[ConvergenceSpec, float]:
    """Least squares over every evaluation of every curve (Nelder-Mead on log scales)."""
    from scipy.optimize import minimize

    observed = np.concatenate([np.asarray(c.values) for c in curves])
    best_batch = float(np.median([c.batch for c in curves]))

    def spec_of(x: np.ndarray) -> ConvergenceSpec:
        scale, exponent, final, noise, growth, lr_max, shape = (float(v) for v in x)
        if metric == "accuracy":
            final_value = initial + (1 - initial) / (1 + math.exp(-final))
        else:
            final_value = initial / (1 + math.exp(-final))
        return ConvergenceSpec(
            metric=metric,  # type: ignore[arg-type]
            initial=initial,
            final=final_value,
            scale_samples=math.exp(scale),
            exponent=math.exp(exponent),
            noise_scale=math.exp(noise),
            noise_growth=math.exp(growth),
            lr_max=math.exp(lr_max),
            shape=math.exp(shape),
        )

    def loss(x: np.ndarray) -> float:
        try:
            spec = spec_of(x)
            got = np.concatenate([predicted(spec, c) for c in curves])
        except (ValueError, ZeroDivisionError, OverflowError):
            return 1e9
        return float(np.sum((got - observed) ** 2))

    # starts: the asymptote half-way past the best evaluation, the onset a power law or
    # flat, and a grid of noise scales and best rates around the curves' own; the four
    # best starts are fitted and the best fit polished
    samples = float(np.mean([c.batch * max(c.steps) for c in curves]))
    if metric == "accuracy":
        top = float(np.max(observed))
        share = (top + (1 - top) / 2 - initial) / (1 - initial)
    else:
        share = float(np.min(observed)) / 2 / initial
    share = min(max(share, 1e-3), 1 - 1e-3)
    final0 = math.log(share / (1 - share))
    rate = float(np.median([c.rate for c in curves]))
    starts = [
        np.array(
            [
                math.log(samples / 10),
                0.0,
                final0,
                math.log(best_batch * noise),
                -1.0,
                math.log(rate * best),
                math.log(onset),
            ]
        )
        for noise in (0.25, 1.0, 4.0, 32.0)
        for best in (1.5, 4.0, 16.0)
        for onset in (1.0, 3.0)
    ]
    ranked = sorted(starts, key=loss)[:4]
    fits = [minimize(loss, x, method="Nelder-Mead", options={"maxiter": 2000}) for x in ranked]
    best = min(fits, key=lambda r: r.fun)
    best = minimize(loss, best.x, method="Nelder-Mead", options={"maxiter": 2000})
    spec = spec_of(best.x)
    return spec, math.sqrt(best.fun / len(observed))


def curve_points(specs: list[ScenarioSpec]) -> tuple[ScenarioSpec, list[tuple[int, float]]]:
    """The (batch, rate) of each single-worker curve: each synchronous point's global
    batch at its peak rate (one worker then applies the updates the point's workers
    average), at most MAX_CURVES spread over them; where the points name fewer than two,
    CURVE_BATCHES times the batch per worker, as if that many workers' batches were
    averaged (the rate scaled by the scenario's rule). The spec the curves start from is
    the first point's."""
    first = specs[0]
    pairs = sorted(
        {
            (s.samples_per_step, round(schedule_of(s).peak, 12))
            for s in specs
            if not s.strategy.counts_updates
        }
    )
    if len(pairs) < 2:
        lr, per_worker = first.training.learning_rate, first.training.batch_per_worker
        pairs = [(k * per_worker, lr.peak(k, k * per_worker)) for k in CURVE_BATCHES]
    if len(pairs) > MAX_CURVES:
        picks = np.linspace(0, len(pairs) - 1, MAX_CURVES).round().astype(int)
        pairs = [pairs[i] for i in sorted(set(picks))]
    return first, pairs


def calibrate_convergence(specs: list[ScenarioSpec], say: Any) -> ConvergenceEntry:
    """The curves and the fit for the model of the points (with a target, one model)."""
    spec, pairs = curve_points(specs)
    lr = spec.training.learning_rate
    asynchronous: tuple[Literal["single", "async"], int, float] = (
        "async",
        spec.training.batch_per_worker,
        lr.peak(1, spec.training.batch_per_worker),
    )
    runs: list[tuple[Literal["single", "async"], int, float]] = [
        ("single", batch, rate) for batch, rate in pairs
    ]
    runs.append(asynchronous)
    # the repeats interleaved, so that a drift of the machine spreads over every curve
    curves = [
        measure_curve(spec, kind, batch, rate, repeat)
        for repeat in range(CURVE_REPEATS)
        for kind, batch, rate in runs
    ]
    target = spec.training.target
    metric = target.metric if target is not None else "accuracy"
    initial = 0.1 if metric == "accuracy" else math.log(10)  # chance on the ten digits
    fitted, rms = fit(curves, metric, initial)
    say(
        f"convergence: {spec.model.name} on digits, {len(curves)} curves "
        f"({CURVE_REPEATS} runs at each of the batches "
        f"{', '.join(str(b) for b, _ in pairs)}, and asynchronous at {asynchronous[1]}): "
        f"noise scale {fitted.noise_scale:.3g}, best rate {fitted.lr_max:.3g}, "
        f"{metric} to {fitted.final:.3g}; rms {rms:.3g}"
    )
    return ConvergenceEntry(
        model=spec.model.name,
        data=spec.training.data,
        fit=fitted.model_copy(update={"source": "run-real --calibrate"}),
        rms=rms,
        eval_s=float(
            np.median([c.eval_s for c in curves if c.eval_s is not None and c.kind == "single"])
        ),
        curves=curves,
    )
