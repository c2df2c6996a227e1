"""A plan against the real world: run its first candidates with `run-real` and check that
every pair of them the runs tell apart is ordered as the plan ordered it.

    make plan-check PLAN=scenarios/plans/digits-mlp.yaml ARGS="--repeats 4 --out runs/plan-check"
    (python tools/plan_check.py PLAN [--repeats N] [--out DIR] [--profile FILE] [--reuse])

It calibrates this machine for the plan's candidates (`run-real --calibrate` on them as
a sweep, into OUT/profile.yaml; `--profile FILE` takes one made before), runs `trainscale
plan` with that profile (into OUT/plan), then `run-real OUT/plan/top.yaml` with
`real.repeats` runs of each candidate (into OUT/real), and prints, per candidate, the
plan's figure and the runs' mean with its 95% half-width, then the pairs: how many the
runs tell apart at 95% (the pooled run-to-run noise, as `report` judges it) and how many
of those the plan orders the same way. Exit status 1 where one is ordered the other way.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.compare import ordered_pairs, resolution, run_to_run_noise  # noqa: E402

COLUMNS = {"time": "time_to_target_s", "cost": "cost_to_target_usd"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plan_check", description=__doc__)
    parser.add_argument("plan", help="a plan file")
    parser.add_argument("--repeats", type=int, default=4, help="real runs of each candidate")
    parser.add_argument("--out", default="runs/plan-check", help="output directory")
    parser.add_argument("--profile", help="a calibration profile of this machine to use")
    parser.add_argument("--reuse", action="store_true", help="judge the runs already in --out")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    plan_dir, real_dir = out / "plan", out / "real"
    profile = Path(args.profile).resolve() if args.profile else out / "profile.yaml"
    if not args.reuse:
        _run(args, out, profile)
    plan = (
        pd.read_csv(plan_dir / "plan.csv")
        .sort_values("rank")
        .head(len(pd.read_csv(real_dir / "results.csv")))
    )
    real = pd.read_csv(real_dir / "results.csv")  # the sweep's order: the plan's rank order
    predicted = list(plan["plan_time_s"])
    means = list(real["time_to_target_s"])
    for (_, p), (_, r) in zip(plan.iterrows(), real.iterrows(), strict=True):
        print(
            f"{int(p['rank'])}. {p['point']}: plan {p['plan_time_s']:.3f} s "
            f"({p['plan_time_low_s']:.3f} to {p['plan_time_high_s']:.3f}); real "
            f"{r['time_to_target_s']:.3f} s +- {r['time_to_target_ci95_s']:.3f} "
            f"({int(r['replications'])} runs)"
        )
    noise = run_to_run_noise(real, "time_to_target_s", "time_to_target_ci95_s")
    if noise is None:
        print("plan_check: the runs give no noise estimate (repeats >= 2 needed)")
        return 1
    gaps = resolution(means, [int(x) for x in real["replications"]], noise)
    concordant, discordant, apart, pairs = ordered_pairs(predicted, means, gaps)
    print(
        f"run-to-run noise {100 * noise[0]:.1f}% ({noise[1]} dof); the runs tell apart "
        f"{apart} of {pairs} pairs; the plan's ranks order {concordant} of them the same "
        f"way, {discordant} the other way"
    )
    # the order the plan claims: pairs whose intervals do not overlap (the others it calls
    # tied, and does not order)
    low, high = list(plan["plan_time_low_s"]), list(plan["plan_time_high_s"])
    claimed = wrong = 0
    for (i, j), gap in zip(itertools.combinations(range(len(means)), 2), gaps, strict=True):
        if abs(means[i] - means[j]) <= gap:
            continue  # the runs do not tell them apart
        if high[i] < low[j] or high[j] < low[i]:
            claimed += 1
            wrong += (predicted[i] - predicted[j]) * (means[i] - means[j]) < 0
        else:
            print(f"tied in the plan, apart in the runs: {i + 1} and {j + 1}")
    print(
        f"of the {apart} pairs the runs tell apart, the plan claims an order for {claimed} "
        f"(intervals apart) and orders {claimed - wrong} of them as the runs do"
    )
    return 1 if wrong else 0


def _run(args: argparse.Namespace, out: Path, profile: Path) -> None:
    """Calibrate (unless given a profile), plan, and run the plan's first candidates."""
    python = sys.executable
    plan_dir, real_dir = out / "plan", out / "real"
    if not args.profile:
        document = yaml.safe_load(Path(args.plan).read_text())
        document["sweep"] = document.pop("plan")["options"]
        candidates = out / "candidates.yaml"
        candidates.write_text(yaml.safe_dump(document, sort_keys=False))
        calibrate = [str(candidates), "--calibrate", "--out", str(profile), "--force"]
        subprocess.run([python, "-m", "real.cli", *calibrate], check=True, cwd=ROOT)
    plan = [args.plan, "--out", str(plan_dir), "--quiet", "--force"]
    plan += ["--set", f"cluster.profile={profile}"]
    subprocess.run([python, "-m", "planner.cli", *plan], check=True, cwd=ROOT)
    subprocess.run(
        [
            python,
            "-m",
            "real.cli",
            str(plan_dir / "top.yaml"),
            "--out",
            str(real_dir),
            "--force",
            "--set",
            f"real.repeats={args.repeats}",
        ],
        check=True,
        cwd=ROOT,
    )


if __name__ == "__main__":
    sys.exit(main())
