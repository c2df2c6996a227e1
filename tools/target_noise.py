"""How much a time-to-target measurement moves from one shuffle to the next, per target.

    python tools/target_noise.py SCENARIO [--seeds 5] [--steps 300] [--every 2]
        [--run single:32:0.04 --run async:16:0.02 ...] [--out curves.json]

Runs each `kind:batch:rate` (`single`: one worker; `async`: the scenario's workers under
asynchronous parameter servers) `--seeds` times over different shuffles, evaluating the
held-out loss and accuracy every `--every` updates up to `--steps`, and prints, for a
ladder of accuracy and loss targets, the mean update at which each crosses it and the
coefficient of variation over the seeds. A target whose crossing varies by a fifth needs
tens of runs per point before two points a fifth apart are told apart.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from real.calibrate.convergence import curve_jobs  # noqa: E402
from real.launcher import Launcher  # noqa: E402
from real.protocol import Eval  # noqa: E402
from results.files import write_atomic  # noqa: E402
from scenarios import load  # noqa: E402

TARGETS = {"accuracy": (0.8, 0.85, 0.9, 0.92, 0.94), "loss": (1.0, 0.6, 0.4, 0.3, 0.2)}


def crossing(curve: dict[str, Any], metric: str, value: float) -> int | None:
    for step, v in zip(curve["steps"], curve[metric], strict=True):
        if (v >= value) if metric == "accuracy" else (v <= value):
            return int(step)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--run", action="append", default=[])
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    sets = ("sweep={}", "training.max_epochs=null", f"training.max_steps={args.steps}")
    spec = load(args.scenario, sets).points[0].spec
    runs = [r.split(":") for r in (args.run or ["single:32:0.04", "async:16:0.02"])]
    curves = []
    for seed in range(args.seeds):  # interleaved, as real.repeats runs them
        for kind, batch, rate in runs:
            _, jobs = curve_jobs(spec, kind, int(batch), float(rate), seed, args.every, None)  # type: ignore[arg-type]
            evals = sorted(Launcher(jobs, 600.0, "cpu").run().of(Eval), key=lambda r: r.step)
            curves.append(
                {
                    "run": f"{kind}:{batch}:{rate}",
                    "seed": seed,
                    "steps": [r.step for r in evals],
                    "loss": [r.loss for r in evals],
                    "accuracy": [r.accuracy for r in evals],
                }
            )
    if args.out:
        write_atomic(Path(args.out), json.dumps(curves))
    print("target             " + "  ".join(f"{':'.join(r):>22}" for r in runs))
    for metric, values in TARGETS.items():
        for value in values:
            cells = []
            for run in runs:
                xs = [crossing(c, metric, value) for c in curves if c["run"] == ":".join(run)]
                if None in xs:
                    cells.append(f"{'not reached':>22}")
                    continue
                a = np.asarray(xs, dtype=float)
                cells.append(f"{a.mean():>9.0f} updates, cv {a.std(ddof=1) / a.mean():>4.0%}")
            print(f"{metric} {value:<10g}  " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
