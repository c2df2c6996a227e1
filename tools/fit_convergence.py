"""Fit ResNet-50's statistical-efficiency parameters (scenarios/catalog/convergence.yaml)
to Goyal et al. 2017's ImageNet top-1 errors, and show the fit beside every figure.

    python tools/fit_convergence.py          # the catalog entry against the figures
    python tools/fit_convergence.py --fit    # fit again from the entry (Nelder-Mead; minutes)

Each figure is a 90-epoch run at a global batch kn: the rate 0.1 per 256 scaled by the
rule (linear: kn/256; sqrt; none), warm-up over 5 epochs (gradual from 0.1, constant at
0.1, or none), the rate divided by 10 at epochs 30, 60 and 80 (Goyal et al. sec. 5.1).
The model's error after the last update stands for their median of the last 5 epochs.
The noise scale at the start is McCandlish et al.'s (Table 1), not fitted. FIT figures
are fitted; HELD figures are not, and show what the model predicts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scenarios import catalog
from scenarios.sections.convergence import ConvergenceSpec, Updates, values  # noqa: E402
from workloads import convergence  # noqa: E402
from workloads.schedule import schedule  # noqa: E402

IMAGES = 1_281_167  # ImageNet-1k training images

# (kn, warm-up, rule, rate per 256, published top-1 error %): Goyal et al. 2017,
# arXiv 1706.02677, Table 1 (8k warm-up), Table 2a (rates, rules), Fig. 3 legends (kn)
FIT = [
    (256, "gradual", "linear", 0.1, 23.60),
    (256, "gradual", "linear", 0.05, 23.92),
    (256, "gradual", "linear", 0.2, 23.68),
    (8192, "gradual", "linear", 0.1, 23.74),
    (8192, "none", "linear", 0.1, 24.84),
    (8192, "gradual", "linear", 0.05, 24.27),
    (8192, "gradual", "linear", 0.2, 24.05),
    (16384, "gradual", "linear", 0.1, 24.79),
]
HELD = [
    (128, "gradual", "linear", 0.1, 23.49),
    (512, "gradual", "linear", 0.1, 23.48),
    (1024, "gradual", "linear", 0.1, 23.53),
    (2048, "gradual", "linear", 0.1, 23.49),
    (4096, "gradual", "linear", 0.1, 23.56),
    (32768, "gradual", "linear", 0.1, 27.55),
    (65536, "gradual", "linear", 0.1, 33.96),
    (8192, "constant", "linear", 0.1, 25.88),
    (8192, "gradual", "none", 0.1, 41.67),
    (8192, "gradual", "sqrt", 0.1, 26.22),
]


def final_error(spec: ConvergenceSpec, kn: int, warm: str, rule: str, rate: float) -> float:
    """Top-1 error (%) after Goyal et al.'s 90 epochs at global batch kn."""
    total = int(np.ceil(90 * IMAGES / kn))
    rates = schedule(
        rate,
        rule,
        kn / 256,
        kn,
        IMAGES,
        5.0 if warm == "gradual" else 0.0,
        "step",
        (30.0, 60.0, 80.0),
        0.1,
        total,
    ).rates(np.arange(total))
    if warm == "constant":
        rates = np.where(np.arange(total) < 5 * IMAGES / kn, rate, rates)
    metric = values(spec, Updates(rates, np.full(total, float(kn)), np.zeros(total), IMAGES))
    return 100.0 * (1.0 - float(metric[-1]))


def spec_of(x: np.ndarray) -> ConvergenceSpec:
    scale, exponent, final, growth, lr_max, sharp, early, damage = (float(v) for v in x)
    return ConvergenceSpec(
        metric="accuracy",
        initial=0.001,
        final=min(0.999, 1.0 / (1.0 + np.exp(-final))),
        scale_samples=float(np.exp(scale)),
        exponent=float(np.exp(exponent)),
        noise_scale=1000.0,
        noise_growth=float(np.exp(growth)),
        lr_max=float(np.exp(lr_max)),
        early_sharpness=float(np.exp(-abs(sharp))),
        early_epochs=float(np.exp(early)),
        early_damage=float(np.exp(damage)),
    )


def x_of(spec: ConvergenceSpec) -> np.ndarray:
    """spec_of's inverse: where a search from `spec` starts."""
    final = min(spec.final, 0.999)
    return np.array(
        [
            np.log(spec.scale_samples),
            np.log(spec.exponent),
            np.log(final / (1.0 - final)),
            np.log(max(spec.noise_growth, 1e-6)),
            np.log(spec.lr_max),
            -np.log(spec.early_sharpness),
            np.log(max(spec.early_epochs, 1e-6)),
            np.log(max(spec.early_damage, 1e-12)),
        ]
    )


def fit() -> ConvergenceSpec:
    from scipy.optimize import minimize

    def loss(x: np.ndarray) -> float:
        try:
            spec = spec_of(x)
        except ValueError:
            return 1e9
        return sum((final_error(spec, *row[:4]) - row[4]) ** 2 for row in FIT)

    convergence.EXACT_UPDATES = 3000  # coarser while searching
    x0 = x_of(ConvergenceSpec(**catalog.entry("convergence", "resnet50")))
    x0[-1] = max(x0[-1], -5.0)  # an entry with no early damage starts from some
    best = minimize(loss, x0, method="Nelder-Mead", options={"maxiter": 3000, "fatol": 1e-5})
    convergence.EXACT_UPDATES = 20_000
    return spec_of(best.x)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="fit again")
    args = parser.parse_args()
    if args.fit:
        spec = fit()
        print({k: v for k, v in spec.model_dump().items() if k not in ("name", "base")})
    else:
        spec = ConvergenceSpec(**catalog.entry("convergence", "resnet50"))
    print("| kn | warm-up | rule | rate per 256 | published top-1 error | model | |")
    print("|---|---|---|---|---|---|---|")
    for rows, kind in ((FIT, "fitted"), (HELD, "held out")):
        for kn, warm, rule, rate, published in rows:
            model = final_error(spec, kn, warm, rule, rate)
            cells = (f"{kn:,}", warm, rule, f"{rate:g}", f"{published:.2f}%", f"{model:.2f}%", kind)
            print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
