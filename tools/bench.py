"""`make bench`: how fast `simulate` is at the scales users simulate, and what running on
Spark costs `run-real` (not part of CI).

Every case is the real command line in a fresh process (imports, the 1-worker baseline and
file writing included). Per case: wall time (the best of `--repeats` runs), peak resident
memory of the process (`ru_maxrss` of the child), and worker-steps per second (workers x
steps simulated, warm-up included, per second of wall). Families of cases that differ in
one size give the cost's growth exponent in it: the slope of log(wall) against log(size)
between consecutive sizes.

The `run-real` cases run a job as local processes and the same job as a Spark barrier
stage on `local[2]`, and independent trials as processes and as Spark tasks; their
differences are Spark's overhead per run and per trial (they need TensorFlow, pyspark and
a Java runtime: `make test` installs the first two).

Each run appends its figures, with the machine, the date and the git commit, to
`tests/benchmarks/results.jsonl` (kept in the repository, so that a regression shows as a
line that differs from the one before), and rewrites `docs/performance.md` from the
latest figure of every case.

    python tools/bench.py [--only NAME ...] [--repeats N] [--timeout S] [--no-record]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_cases import CASES, OVERHEADS, Case  # noqa: E402

from results.files import write_atomic  # noqa: E402

RESULTS = ROOT / "tests" / "benchmarks" / "results.jsonl"
DOC = ROOT / "docs" / "performance.md"


def _workers_steps(out: Path) -> float:
    """workers x (steps + warm-up) over the points of a result directory."""
    import csv

    meta = json.loads((out / "meta.json").read_text())
    total = 0.0
    with (out / "results.csv").open() as f:
        for row in csv.DictReader(f):
            point = next(p for p in meta["points"] if p["id"] == row["point"])
            warmup = point["resolved"]["training"]["warmup_steps"]
            total += float(row["workers"]) * (float(row["steps"]) + warmup)
    return total


def run_case(case: Case, repeats: int, timeout: float) -> dict[str, Any]:
    walls, rss = [], 0
    work = math.nan
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out"
            argv = [sys.executable, "-m", case.command, case.scenario, "--quiet"]
            argv += ["--out", str(out), *case.args]
            for s in case.sets:
                argv += ["--set", s]
            started = time.perf_counter()
            child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
            deadline = started + timeout
            while True:
                pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    child.kill()
                    _, status, usage = os.wait4(child.pid, 0)
                    return {"case": case.name, "timed_out_s": timeout}
                time.sleep(0.02)
            walls.append(time.perf_counter() - started)
            if os.waitstatus_to_exitcode(status) != 0:
                return {"case": case.name, "failed": " ".join(argv[1:])}
            rss = max(rss, usage.ru_maxrss * 1024)  # Linux: kilobytes (the largest process)
            if case.command == "sim.cli":
                work = _workers_steps(out)
    best = min(walls)
    return {
        "case": case.name,
        "wall_s": best,
        "walls_s": walls,
        "peak_rss_bytes": rss,
        "worker_steps_per_s": work / best if math.isfinite(work) else None,
    }


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance() -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "machine": {
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
    }


def load_results() -> list[dict[str, Any]]:
    if not RESULTS.exists():
        return []
    return [json.loads(line) for line in RESULTS.read_text().splitlines() if line.strip()]


def exponents(latest: dict[str, dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(family, 'size a -> size b', slope of log wall against log size)."""
    families: dict[str, list[tuple[float, float]]] = {}
    for case in CASES:
        wall = latest.get(case.name, {}).get("wall_s")
        for family, size in case.families:
            if wall is not None:
                families.setdefault(family, []).append((size, wall))
    out = []
    for family, points in families.items():
        points.sort()
        for (a, wa), (b, wb) in zip(points, points[1:], strict=False):
            out.append((family, f"{a:,.0f} -> {b:,.0f}", math.log(wb / wa) / math.log(b / a)))
    return out


BEGIN, END = "<!-- analysis: begin -->", "<!-- analysis: end -->"


def document(records: list[dict[str, Any]], analysis: str = "(no analysis yet)") -> str:
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        latest[r["case"]] = r
    lines = [
        "# Performance of `simulate`, and Spark's overhead for `run-real`",
        "",
        "Made by `make bench` (`tools/bench.py`) from `tests/benchmarks/results.jsonl`, the",
        "latest figure of every case; each case is the command line in a fresh process",
        "(imports, the 1-worker baseline and file writing included), the best of its runs;",
        "peak memory is the largest process's (for `simulate` only).",
        "",
        "| case | what | wall | target | peak memory | worker-steps/s | measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in CASES:
        target = ", ".join(
            [
                *([f"<= {case.target_s:g} s"] if case.target_s else []),
                *([f"<= {case.target_bytes / 1e9:g} GB"] if case.target_bytes else []),
            ]
        )
        if case.name not in latest:
            lines.append(f"| `{case.name}` | {case.what} | not measured | {target} | | | |")
            continue
        r = latest[case.name]
        where = f"{r['date'][:10]}, {r['commit'][:8]}{' (dirty)' if r.get('dirty') else ''}"
        if "failed" in r:
            lines.append(f"| `{case.name}` | {case.what} | failed | {target} | | | {where} |")
            continue
        if "timed_out_s" in r:
            lines.append(
                f"| `{case.name}` | {case.what} | > {r['timed_out_s']:.0f} s (stopped) "
                f"| {target} | | | {where} |"
            )
            continue
        rate = r["worker_steps_per_s"]
        shown = f"{rate:,.0f}" if rate is not None else ""
        # run-real's processes are not all the command's own on Spark: no memory shown
        memory = f"{r['peak_rss_bytes'] / 2**20:,.0f} MiB" if case.command == "sim.cli" else ""
        lines.append(
            f"| `{case.name}` | {case.what} | {r['wall_s']:.1f} s | {target} "
            f"| {memory} | {shown} | {where} |"
        )
    slopes = exponents(latest)
    if slopes:
        lines += [
            "",
            "Growth of the cost (slope of log wall time against log size; 1 is linear):",
            "",
            "| family | sizes | exponent |",
            "|---|---|---|",
            *(f"| {family} | {sizes} | {slope:.2f} |" for family, sizes, slope in slopes),
        ]
    costs = [
        (what, (latest[spark]["wall_s"] - latest[local]["wall_s"]) / per)
        for what, local, spark, per in OVERHEADS
        if "wall_s" in latest.get(local, {}) and "wall_s" in latest.get(spark, {})
    ]
    if costs:
        lines += [
            "",
            "Spark's overhead for `run-real` (the Spark case's wall time less the local one's):",
            "",
            "| per | overhead |",
            "|---|---|",
            *(f"| {what} | {cost:.1f} s |" for what, cost in costs),
        ]
    machines = {json.dumps(r["machine"], sort_keys=True) for r in latest.values()}
    lines += ["", "Machines: " + "; ".join(sorted(machines)) + "."]
    lines += ["", "## Where the time goes", "", BEGIN, analysis.strip(), END]
    return "\n".join(lines) + "\n"


def kept_analysis() -> str:
    """The hand-written part of docs/performance.md, kept from one run to the next."""
    text = DOC.read_text() if DOC.exists() else ""
    if BEGIN in text and END in text:
        return text.split(BEGIN, 1)[1].split(END, 1)[0]
    return "(no analysis yet)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="these cases only")
    parser.add_argument("--repeats", type=int, default=2, help="runs per case (best kept)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--no-record", action="store_true", help="print, keep nothing")
    args = parser.parse_args(argv)
    names = {c.name for c in CASES}
    unknown = sorted(set(args.only or []) - names)
    if unknown:
        parser.error(f"--only: unknown case {unknown[0]!r}; one of {', '.join(sorted(names))}")
    chosen = [c for c in CASES if not args.only or c.name in args.only]
    records = load_results()
    where = provenance()
    for case in chosen:
        result = {**where, **run_case(case, args.repeats, args.timeout)}
        if "failed" in result:
            shown = f"failed: {result['failed']}"
        elif "timed_out_s" in result:
            shown = f"stopped after {result['timed_out_s']:.0f} s"
        else:
            rate = result["worker_steps_per_s"]
            shown = f"{result['wall_s']:.2f} s, {result['peak_rss_bytes'] / 2**20:,.0f} MiB" + (
                f", {rate:,.0f} worker-steps/s" if rate is not None else ""
            )
        print(f"bench: {case.name}: {shown}", flush=True)
        records.append(result)
        if not args.no_record:
            write_atomic(RESULTS, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
            write_atomic(DOC, document(records, kept_analysis()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
