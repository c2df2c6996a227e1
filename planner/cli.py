"""`trainscale plan FILE`: which candidate of a plan's options reaches its target fastest,
cheapest or with the least energy, and how sure the prediction is.

Writes plan.csv, plan.html, best.yaml, top.yaml and meta.json into --out (default
runs/<name>/plan), beside the search's study (plan-study.log): the same command into
the same directory resumes an interrupted plan. docs/planning.md has a worked example.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from commands.args import ArgumentParser, scenario_parser
from results.files import claim_output, origin
from scenarios import UserError
from scenarios.point_ids import describe

from .page import figure
from .rank import rank
from .search import explore
from .space import load_plan
from .write import write_plan

EXAMPLES = [
    "trainscale plan scenarios/plans/digits-mlp.yaml --out runs/plan-digits",
]


def build_parser() -> ArgumentParser:
    parser = scenario_parser("plan", __doc__ or "", "plan", EXAMPLES)
    parser.add_argument("--jobs", type=int, default=1, help="candidates simulated at once")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no warnings")
    return parser


class Bar:
    """The candidates evaluated, on stderr (on a terminal only)."""

    def __init__(self, name: str, quiet: bool):
        from tqdm import tqdm

        self.bar = tqdm(
            desc=name,
            unit="candidate",
            file=sys.stderr,
            disable=True if quiet else None,
            leave=False,
        )

    def tick(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        if args.jobs < 1:
            raise UserError(f"--jobs: must be at least 1, got {args.jobs}")
        space = load_plan(args.scenario, args.sets)
        out_dir = Path(args.out) if args.out else Path("runs") / space.name / "plan"
        if out_dir.exists() and not out_dir.is_dir():
            raise UserError(f"--out: {out_dir} exists and is not a directory")
        claim_output(out_dir, origin(args.written_by or "plan", space.name), args.force)
        space.check()  # a candidate that is no scenario: refused before any work
        first = space.point(0).spec.cluster
        if first.device.name == "cpu" and first.profile is None and not args.quiet:
            print(
                "plan: warning: the candidates run on this machine's cores, predicted from "
                "the catalog's generic core: calibrate it (run-real --calibrate) and name "
                "the profile in cluster.profile (docs/planning.md)",
                file=sys.stderr,
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        bar = Bar(space.name, args.quiet)
        try:
            judged = explore(space, out_dir, args.jobs, bar.tick)
        finally:
            bar.close()
        ranking = rank(space.plan, judged)
    except UserError as exc:
        print(f"plan: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "plan: interrupted; the candidates simulated are kept: run it again to resume",
            file=sys.stderr,
        )
        return 130
    seconds = time.perf_counter() - started
    write_plan(out_dir, space, judged, ranking, seconds)
    top = ranking.recommended
    print(
        f"plan: {len(judged)} of {space.size} candidates evaluated in {seconds:,.1f} s; "
        f"wrote {out_dir}/plan.csv, plan.html, best.yaml, top.yaml"
    )
    for objective, j in ranking.best.items():
        said = figure(j, objective)
        name = describe(j.point.spec.model_dump(mode="json"))
        print(
            f"  best {objective}: {name} (candidate {j.index}): {said['value']}, "
            f"{said['interval']}"
        )
    if ranking.tied:
        print(
            f"  tied with candidate {top.index} within the intervals: {len(ranking.tied)} "
            "candidates (plan.csv's tied column)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
