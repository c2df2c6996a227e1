"""`make validate-published`: the simulator against published GPU-cluster measurements.

Every file of `scenarios/published/` is a source's setup (hardware, network, model, batch,
framework, strategy) written as a scenario, with a `published:` block naming the source,
its table or figure and the figures measured (`measured/published.py`). This simulates
every file from the catalog alone (no calibration profile), compares each figure with its
point, and writes `docs/validation-published.md`: one row per figure (source, setup,
published, simulated, error), the MAPE, the share within tolerance, and whether every pair
of figures of one source's table is ordered as published.

    python tools/validate_published.py [--llm] [--out FILE.md] [--jobs N] [--only NAME ...]

`--llm` (`make validate-llm`) does the same for the transformer training runs of
`scenarios/published/llm/` (Megatron-LM's papers: tensor x pipeline x data layouts on
A100 clusters) into `docs/validation-llm.md`. Each writes its figures' errors to its
table (measured/errors-published.yaml, errors-llm.yaml), from which every simulated
point's interval comes (measured/errors.py), and each document reports how often a figure
falls inside its interval once its source is left out of the classes.

Throughput figures are judged by their relative error (within 8%); scaling efficiencies
by percentage points (within 5). Two figures of one table more than 2% apart (relative
to the smaller) must be ordered by the simulator as published, and so must every ordering
a source states in words (`published.orders`: this point trains faster than that one).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measured import errors  # noqa: E402
from measured.errors import LLM_ERRORS, PUBLISHED_ERRORS, Point  # noqa: E402
from measured.published import Figure, Stated, figures, stated  # noqa: E402
from reports.compare import mape as percent_mape  # noqa: E402
from results.files import git_commit, write_atomic  # noqa: E402
from scenarios import load  # noqa: E402
from sim.runner import run  # noqa: E402

PUBLISHED = ROOT / "scenarios" / "published"
DOC = ROOT / "docs" / "validation-published.md"

BEGIN, END = "<!-- analysis: begin -->", "<!-- analysis: end -->"
#: the issue's targets
MAPE_TARGET = 0.10
WITHIN_TARGET = 0.90
REL_TOLERANCE = 0.08  # throughput: relative error
PP_TOLERANCE = 0.05  # scaling efficiency: percentage points (as a fraction)
TIE = 0.02  # figures of one table closer than this are not judged for order


@dataclass(frozen=True)
class Collection:
    """One set of published figures: where its scenarios are, its document, and what it
    is held to."""

    folder: Path
    doc: Path
    title: str
    intro: str
    command: str
    mape_target: float
    #: the table its errors are written to, the intervals' classes (measured/errors.py)
    errors: Path


GPU = Collection(
    PUBLISHED,
    DOC,
    "Validation against published GPU-cluster measurements",
    "Each file of `scenarios/published/` is the setup its source states (hardware, "
    "network, model, batch, framework and strategy), with the source, the table or "
    "figure and the published numbers in its `published:` block; where the source is "
    "silent, the file's `published.setup` says what was assumed and why. A device's "
    "speed is the source's own single-GPU figure where it gives one "
    "(`device.samples_per_s`), so the prediction is of scaling. Relative error is "
    "(simulated - published) / published; scaling efficiencies are compared in "
    "percentage points.",
    "make validate-published",
    MAPE_TARGET,
    PUBLISHED_ERRORS,
)
LLM = Collection(
    PUBLISHED / "llm",
    ROOT / "docs" / "validation-llm.md",
    "Validation against published transformer training runs",
    "Each file of `scenarios/published/llm/` is a paper's training setup (model shape, "
    "cluster, tensor x pipeline x data layout, micro-batch, global batch, recomputation) "
    "as a scenario of `strategy.kind: hybrid`, the published figures in its `published:` "
    "block; where the paper is silent, `published.setup` says what was assumed. Every "
    "device runs at its catalog speed (datasheet peak x the measured large-GEMM and "
    "memory efficiencies): nothing is fitted to these figures. Iteration times and "
    "TFLOP/s a GPU are turned into sequences a second by the paper's own counts. "
    "Relative error is (simulated - published) / published.",
    "make validate-llm",
    0.05,
    LLM_ERRORS,
)


@dataclass(frozen=True)
class Compared:
    """One published figure beside its simulated value."""

    scenario: str
    figure: Figure
    simulated: float

    @property
    def published(self) -> float:
        return self.figure.published.value

    @property
    def error(self) -> float:
        """Relative error (sim - published) / published."""
        return (self.simulated - self.published) / self.published

    @property
    def efficiency(self) -> bool:
        return self.figure.metric == "scaling_efficiency"

    @property
    def within(self) -> bool:
        if self.efficiency:
            return abs(self.simulated - self.published) <= PP_TOLERANCE + 1e-12
        return abs(self.error) <= REL_TOLERANCE + 1e-12

    @property
    def table(self) -> tuple[str, str]:
        return (self.figure.spec.source, self.figure.spec.table)


@dataclass(frozen=True)
class Ordered:
    """An ordering a source states in words beside the simulated throughputs of its two
    points."""

    scenario: str
    stated: Stated
    faster: float  # simulated samples/s at the point the source says is faster
    slower: float

    @property
    def kept(self) -> bool:
        return self.faster > self.slower


def compare(paths: Sequence[Path], jobs: int = 1) -> list[Compared]:
    """Simulate every scenario and pair each published figure with its simulated value."""
    return check(paths, jobs)[0]


def check(paths: Sequence[Path], jobs: int = 1) -> tuple[list[Compared], list[Ordered]]:
    """Simulate every scenario: each published figure beside its simulated value, and
    each ordering stated in words beside its two points' simulated throughputs."""
    out: list[Compared] = []
    orders: list[Ordered] = []
    for path in paths:
        scenario = load(path)
        wanted = figures(scenario)
        result = run(scenario, jobs=jobs)
        rows = {p.point_id: p.row for p in result.points}
        key = "throughput_samples_per_s"
        for one in stated(scenario):
            orders.append(
                Ordered(
                    scenario.name,
                    one,
                    float(rows[one.faster.id][key]),
                    float(rows[one.slower.id][key]),
                )
            )
        for figure in wanted:
            if figure.reference is not None:  # relative_throughput
                value = float(rows[figure.point.id][key]) / float(rows[figure.reference.id][key])
            else:
                value = float(rows[figure.point.id][figure.metric])
            out.append(Compared(scenario.name, figure, value))
    return out, orders


def error_table(compared: Sequence[Compared], collection: Collection) -> str:
    """The collection's errors table (measured/errors-published.yaml, errors-llm.yaml):
    each throughput figure's signed error with what decides its class (measured/errors.py),
    the intervals every simulated point carries."""
    rows = []
    for c in compared:
        if c.efficiency:
            continue
        point = Point.of(c.figure.point.spec)
        rows.append(
            {
                "source": c.figure.spec.source,
                "scenario": c.scenario,
                "kind": point.kind,
                "protocol": point.protocol,
                "where": point.where,
                "devices": point.devices,
                "error": round(c.error, 4),
            }
        )
    header = (
        f"Written by `{collection.command}` (tools/validate_published.py): each published\n"
        "throughput figure's signed relative error, (simulated - published) / published,\n"
        "with what decides its class: the strategy's kind, the network's protocol, where\n"
        "the communication runs (inside one host, between hosts) and the devices. Read by\n"
        "measured/errors.py for the interval every simulated point carries."
    )
    return errors.table(rows, header)


def mape(compared: Sequence[Compared]) -> float:
    """The figures' mean absolute relative error, as a fraction (nan for none)."""
    percent = percent_mape([c.error for c in compared])
    return math.nan if percent is None else percent / 100


def pairs(compared: Sequence[Compared]) -> tuple[int, int, list[tuple[Compared, Compared]]]:
    """(pairs judged, pairs ordered as published, the misordered ones) within each
    source's table, figures of one metric, more than TIE apart as published."""
    judged = ordered = 0
    wrong: list[tuple[Compared, Compared]] = []
    groups: dict[tuple[str, str, str], list[Compared]] = {}
    for c in compared:
        groups.setdefault((*c.table, c.figure.metric), []).append(c)
    for members in groups.values():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                low, high = sorted((a.published, b.published))
                if high <= low * (1 + TIE):
                    continue
                judged += 1
                if (a.simulated - b.simulated) * (a.published - b.published) > 0:
                    ordered += 1
                else:
                    wrong.append((a, b))
    return judged, ordered, wrong


def _fmt(c: Compared, value: float) -> str:
    if c.figure.metric == "relative_throughput":
        return f"{value:.2f}x"
    if c.efficiency:
        return f"{100 * value:.1f}%"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _err(c: Compared) -> str:
    if c.efficiency:
        return f"{100 * (c.simulated - c.published):+.1f} pp"
    return f"{100 * c.error:+.1f}%"


def _at(c: Compared) -> str:
    return _where(c.figure.published.at)


def _short(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    return str(value)


def _where(at: dict[str, object]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={_short(v)}" for k, v in at.items()) or "-"


def stated_lines(orders: Sequence[Ordered]) -> list[str]:
    """The document's section on the orderings sources state in words."""
    if not orders:
        return []
    lines = [
        "",
        "## Orderings stated in words",
        "",
        "What a source says without figures: the first point trains faster than the second.",
        "",
        "| source | where | faster | slower | simulated, samples/s | kept |",
        "|---|---|---|---|---|---|",
    ]
    for o in orders:
        spec = o.stated.spec
        lines.append(
            f"| [{spec.source}]({spec.url}) | {o.stated.order.note or spec.table} | "
            f"{_where(o.stated.order.faster)} | {_where(o.stated.order.slower)} | "
            f"{o.faster:.3g} / {o.slower:.3g} | {'yes' if o.kept else '**no**'} |"
        )
    return lines


def _coverage_sentence(covered: errors.Coverage) -> str:
    return (
        f" **Intervals: {covered.held} of {covered.tested} figures "
        f"({100 * covered.share:.0f}%)** of both published sets fall inside the "
        f"{100 * errors.LEVEL:.0f}% interval their class gives with their source left out "
        '("Intervals" below).'
    )


def interval_lines(covered: errors.Coverage) -> list[str]:
    """The document's section on the intervals: their classes over every published figure
    (both sets) and their leave-one-source-out coverage (`covered`)."""
    found = errors.figures()
    classes: dict[str, tuple[int, float, float, float]] = {}
    for f in found:
        name, members = errors.class_of(errors.Point(f.kind, f.protocol, f.where, f.devices), found)
        low, high = errors.bounds(members)
        classes[name] = (len(members), sum(members) / len(members), low, high)
    level = f"{100 * errors.LEVEL:.0f}%"
    lines = [
        "",
        "## Intervals",
        "",
        f"Every simulated point carries a {level} interval from the errors of its class "
        "(measured/errors.py: the most specific of kind, protocol, where the communication "
        f"runs and scale that holds {errors.CLASS_MIN} figures; mean +- t s sqrt(1 + 1/n)), "
        "over both published sets (docs/validation-published.md and "
        "docs/validation-llm.md). **Leave-one-source-out coverage: "
        f"{covered.held} of {covered.tested} figures ({100 * covered.share:.0f}%)** fall "
        f"inside the {level} interval their class gives once their source is left out of "
        f"every class (mean width {100 * covered.width:.1f} points of error"
        + (
            f"; {covered.uncovered} figures outside every validated range then)."
            if covered.uncovered
            else ")."
        ),
        "",
        "| class | figures | mean error | interval of the error |",
        "|---|---|---|---|",
    ]
    for name, (n, mean, low, high) in sorted(classes.items()):
        span = f"{100 * low:+.1f}% to {100 * high:+.1f}%"
        lines.append(f"| {name} | {n} | {100 * mean:+.1f}% | {span} |")
    if covered.misses:
        lines += ["", "Outside their interval with their source left out:", ""]
        for f, low, high in covered.misses:
            lines.append(
                f"- {f.source}, {f.scenario} ({f.kind}/{f.protocol}/{f.where}, {f.devices} "
                f"devices): {100 * f.error:+.1f}%, interval {100 * low:+.1f}% to "
                f"{100 * high:+.1f}%."
            )
    return lines


def document(
    compared: Sequence[Compared],
    seconds: float,
    analysis: str,
    collection: Collection = GPU,
    orders: Sequence[Ordered] = (),
) -> str:
    """The collection's document (docs/validation-published.md, docs/validation-llm.md)."""
    covered = errors.coverage()
    today = dt.date.today().isoformat()
    throughput = [c for c in compared if not c.efficiency]
    within = sum(c.within for c in compared)
    judged, ordered, wrong = pairs(compared)
    sources = sorted({c.figure.spec.source for c in compared})
    files = len(list(collection.folder.glob("*.yaml")))
    lines = [
        f"# {collection.title}",
        "",
        f"Made by `{collection.command}` (`tools/validate_published.py`) on {today}, commit "
        f"{git_commit()}, on {platform.node() or 'this machine'} (Python "
        f"{platform.python_version()}): {len(compared)} figures from {len(sources)} sources "
        f"in {files} scenario files, simulated from the "
        f"catalog alone (no calibration profile) in {seconds:.0f} s.",
        "",
        collection.intro,
        "",
        f"**Throughput MAPE: {100 * mape(throughput):.1f}%** over {len(throughput)} "
        f"throughput figures (target {100 * collection.mape_target:.0f}%); all "
        f"{len(compared)} figures "
        f"{100 * mape(compared):.1f}%. **{within} of {len(compared)} figures "
        f"({100 * within / max(len(compared), 1):.0f}%) within tolerance** "
        f"(+-{100 * REL_TOLERANCE:.0f}% of throughput, +-{100 * PP_TOLERANCE:.0f} points of "
        f"scaling efficiency; target {100 * WITHIN_TARGET:.0f}%). **Order: {ordered} of "
        f"{judged} pairs** of figures within a source's table that are more than "
        f"{100 * TIE:.0f}% apart are ordered as published"
        + (
            f"; **{sum(o.kept for o in orders)} of {len(orders)} orderings** its sources "
            "state in words are kept."
            if orders
            else "."
        )
        + _coverage_sentence(covered),
        "",
        "## By source",
        "",
        "| source | figures | MAPE | within tolerance | pairs ordered |",
        "|---|---|---|---|---|",
    ]
    for source in sources:
        mine = [c for c in compared if c.figure.spec.source == source]
        j, o, _ = pairs(mine)
        lines.append(
            f"| {source} | {len(mine)} | {100 * mape(mine):.1f}% | "
            f"{sum(c.within for c in mine)} of {len(mine)} | {o} of {j} |"
        )
    lines += [
        "",
        "## Every figure",
        "",
        "| source | table | scenario | point | setup | published | simulated | error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in compared:
        spec = c.figure.spec
        source = f"[{spec.source}]({spec.url})"
        mark = "" if c.within else " **(out)**"
        lines.append(
            f"| {source} | {spec.table} | {c.scenario} | {_at(c)} | "
            f"{c.figure.point.spec.description or '-'} | {_fmt(c, c.published)} | "
            f"{_fmt(c, c.simulated)} | {_err(c)}{mark} |"
        )
    worst = sorted(compared, key=lambda c: -abs(c.error))[:8]
    lines += ["", "## Largest errors", ""]
    for c in worst:
        lines.append(
            f"- {c.scenario} ({_at(c)}): published {_fmt(c, c.published)}, simulated "
            f"{_fmt(c, c.simulated)} ({_err(c)})."
        )
    if wrong:
        lines += ["", "Pairs ordered otherwise than published:", ""]
        for a, b in wrong:
            lines.append(
                f"- {a.scenario} ({_at(a)}) against {b.scenario} ({_at(b)}): published "
                f"{_fmt(a, a.published)} / {_fmt(b, b.published)}, simulated "
                f"{_fmt(a, a.simulated)} / {_fmt(b, b.simulated)}."
            )
    lines += stated_lines(orders)
    lines += interval_lines(covered)
    lines += ["", "## Analysis", "", BEGIN, analysis.strip(), END, ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="validate-published", description=__doc__)
    parser.add_argument(
        "--llm", action="store_true", help="the transformer runs (scenarios/published/llm/)"
    )
    parser.add_argument("--out", default=None, help="the document to write")
    parser.add_argument("--jobs", type=int, default=2, help="points simulated in parallel")
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run")
    args = parser.parse_args(argv)
    collection = LLM if args.llm else GPU
    paths = sorted(collection.folder.glob("*.yaml"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    started = time.perf_counter()
    compared, orders = check(paths, jobs=args.jobs)
    seconds = time.perf_counter() - started
    out = Path(args.out) if args.out else collection.doc
    analysis = "(no analysis yet)"
    if out.exists():
        text = out.read_text()
        if BEGIN in text and END in text:
            analysis = text.split(BEGIN, 1)[1].split(END, 1)[0]
    if not args.only:  # the classes need every figure
        write_atomic(collection.errors, error_table(compared, collection))
        errors.figures.cache_clear()
    write_atomic(out, document(compared, seconds, analysis, collection, orders))
    throughput = [c for c in compared if not c.efficiency]
    judged, ordered, _ = pairs(compared)
    kept = f", {sum(o.kept for o in orders)} of {len(orders)} stated orderings kept"
    print(
        f"validate-published: {len(compared)} figures, throughput MAPE "
        f"{100 * mape(throughput):.1f}%, {sum(c.within for c in compared)} within tolerance, "
        f"{ordered} of {judged} pairs ordered"
        + (kept if orders else "")
        + f"; {seconds:.0f} s; wrote {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
