"""The bounded engine's error against the exact one (docs/performance.md).

    python tools/bounded_error.py [--random 12] [--seed 58] [--bench] [--noise]
        [--out FILE.csv]

Times each case twice on the compiled engine, with `sim.timing: auto` (the replica of
sim/strategies/parameter_server/replica.py, where it applies) and `exact`, and prints per
case the relative error (%) of the throughput, the step time's mean and p99, the mean
staleness and the bytes on the network, and each engine's seconds; `--noise` adds how far
the exact engine's throughput moves with the seed alone (seed + 1 against seed; not for
the benchmark's cases). The cases, synchronous (30 steps after 2 of warm-up) and
asynchronous (30 updates a worker after one):

* `random-K-sync`, `random-K-async`: jobs of the replica's class (dedicated servers,
  512 to 1,024 workers, no oversubscribed core; synchronous, no hiccups), drawn by a
  seeded generator over models, hosts and devices, servers, partitions, fusion,
  overlap, jitter, hiccups, device variability, network and TCP ceilings (the
  synchronous replica's own guard may still leave one to the exact engine);
* every parameter-server point of the bundled scenarios, both ways;
* `--bench`: tools/bench_cases.py's four parameter-server cases at 1,024 workers.

The cases the replica does not take are listed with the engine that times them (the
exact engine's results, by construction).

The last lines give the largest errors over the cases on the replica against the bound
(throughput and mean within 1%, p99 within 3%). `--out` writes the table as CSV.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from bench_cases import CASES  # noqa: E402

from results.files import write_atomic  # noqa: E402
from scenarios import load  # noqa: E402
from scenarios.loader import validate  # noqa: E402
from scenarios.spec import ScenarioSpec  # noqa: E402
from sim.engine.metrics import summarize  # noqa: E402
from sim.simulation import Simulation  # noqa: E402
from sim.strategies.parameter_server import replica  # noqa: E402

#: the bound the issue sets: throughput and mean step time, p99
BOUND = {"throughput": 1.0, "mean": 1.0, "p99": 3.0}
SCENARIOS = ("scenarios/library", "scenarios/validation")
#: the benchmark's parameter-server target cases (tools/bench_cases.py), as it runs them
TARGETS = (
    "ps-sync-1024x64",
    "ps-sync-128x8x64",
    "ps-async-1024x64-equal",
    "ps-async-128x8x64-equal",
)
BENCH = {case.name: case for case in CASES if case.name in TARGETS}
ITERATIONS = 30  # a worker's updates in each case but the benchmark's


def pick(rng: np.random.Generator, options: list[Any]) -> Any:
    return options[int(rng.integers(len(options)))]


def random_job(rng: np.random.Generator, sync: bool) -> ScenarioSpec:
    """A job of the replica's class: dedicated servers, 512 to 1,024 workers."""
    devices = pick(rng, [1, 2, 4, 8])
    hosts = pick(rng, [h for h in (64, 96, 128, 256, 512, 1024) if 512 <= h * devices <= 1024])
    strategy: dict[str, Any] = {
        "kind": "parameter_server",
        "servers": pick(rng, [4, 8, 16, 32, 64]),
        "placement": "dedicated",
        "partition": pick(rng, ["round_robin", "greedy", "sliced", "mxnet"]),
        "overlap": bool(rng.integers(2)),
        "sync": False,
    }
    fusion = pick(rng, [None, "4 MB", "64 MB"])
    if fusion is not None:
        strategy["fusion_buffer"] = fusion
    stragglers: dict[str, Any] = {
        "jitter": pick(rng, [0.0, 0.05, 0.1, 0.2]),
        "variability": pick(rng, [0.0, 0.0, 0.05]),
    }
    if not sync and rng.integers(2):
        stragglers["transient"] = {"probability": 0.05, "delay": "50 ms"}
    network: dict[str, Any] = {
        "bandwidth": pick(rng, ["10 Gbit/s", "25 Gbit/s", "100 Gbit/s"]),
        "latency": "10 us",
    }
    stream = pick(rng, [None, None, "5 Gbit/s"])
    if stream is not None:
        network["stream_bandwidth"] = stream
    document = {
        "version": 1,
        "name": "random",
        "seed": int(rng.integers(1, 1000)),
        "model": pick(rng, ["resnet50", "inception_v3", "vgg16"]),
        "cluster": {
            "hosts": hosts,
            "devices_per_host": devices,
            "device": "v100",
            "host_link": "nvlink2",
            "network": network,
        },
        "training": {"batch_per_worker": 32, "steps": ITERATIONS * hosts * devices},
        "strategy": strategy,
        "stragglers": stragglers,
    }
    return shaped(validate(document), sync)


def shaped(spec: ScenarioSpec, sync: bool) -> ScenarioSpec:
    """The point synchronous, `ITERATIONS` steps after 2 of warm-up, or asynchronous,
    `ITERATIONS` updates a worker after a worker's one of warm-up."""
    strategy = spec.strategy.model_copy(update={"sync": sync, "backup_workers": 0})
    steps, warmup = (ITERATIONS, 2) if sync else (ITERATIONS * spec.workers, spec.workers)
    training = spec.training.model_copy(update={"steps": steps, "warmup_steps": warmup})
    return spec.model_copy(update={"strategy": strategy, "training": training})


def timing(spec: ScenarioSpec, how: str, seed: int | None = None) -> ScenarioSpec:
    update: dict[str, Any] = {"sim": spec.sim.model_copy(update={"timing": how})}
    if seed is not None:
        update["seed"] = seed
    return spec.model_copy(update=update)


def timed(spec: ScenarioSpec) -> tuple[dict[str, Any], str, float]:
    start = time.perf_counter()
    outcome = Simulation(spec).run()
    return summarize(spec, outcome), outcome.engine, time.perf_counter() - start


def measure(case: str, spec: ScenarioSpec, noise: bool) -> dict[str, Any]:
    """One case's row: its errors, or the engine that timed it where not the replica."""
    bounded, engine, bounded_s = timed(timing(spec, "auto"))
    row: dict[str, Any] = {
        "case": case,
        "workers": spec.workers,
        "updates": spec.training.steps,
        "engine": engine,
        "bounded_s": round(bounded_s, 2),
    }
    if engine != replica.NAME:  # not of the replica's class: the exact engine's results
        return row
    exact, _, exact_s = timed(timing(spec, "exact"))

    def error(key: str, of: dict[str, Any]) -> float:
        return 100.0 * (of[key] / exact[key] - 1.0) if exact[key] else 0.0

    row.update(
        copies=replica.factor(Simulation(spec)),
        exact_s=round(exact_s, 2),
        throughput=error("throughput_samples_per_s", bounded),
        mean=error("step_time_mean_s", bounded),
        p99=error("step_time_p99_s", bounded),
        staleness=error("mean_staleness", bounded),
        bytes=error("bytes_on_network", bounded),
    )
    if noise:
        other, _, _ = timed(timing(spec, "exact", spec.seed + 1))
        row["noise"] = error("throughput_samples_per_s", other)
    return row


def bundled() -> list[tuple[str, ScenarioSpec]]:
    """Every parameter-server point of the bundled scenarios, synchronous and
    asynchronous."""
    cases = []
    for folder in SCENARIOS:
        for path in sorted((ROOT / folder).glob("*.yaml")):
            for point in load(path).points:
                if point.spec.strategy.kind == "parameter_server":
                    for sync in (True, False):
                        how = "sync" if sync else "async"
                        cases.append((f"{path.stem}:{point.id}:{how}", shaped(point.spec, sync)))
    return cases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=12, help="random jobs (default 12)")
    parser.add_argument("--seed", type=int, default=58, help="the random jobs' generator")
    parser.add_argument("--bench", action="store_true", help="add the 102,400-update cases")
    parser.add_argument("--no-bundled", action="store_true", help="leave out the scenarios")
    parser.add_argument("--noise", action="store_true", help="the exact engine at seed + 1")
    parser.add_argument("--out", type=Path, help="write the table here (CSV)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    cases = [
        (f"random-{k}-{'sync' if k % 2 else 'async'}", random_job(rng, sync=bool(k % 2)))
        for k in range(args.random)
    ]
    if not args.no_bundled:
        cases += bundled()
    if args.bench:
        for name, bench in BENCH.items():
            cases.append((name, load(ROOT / bench.scenario, bench.sets).points[0].spec))
    rows = []
    for case, spec in cases:
        row = measure(case, spec, noise=args.noise and case not in BENCH)
        rows.append(row)
        print(", ".join(f"{k}={v:+.3f}" if isinstance(v, float) else f"{k}={v}"
                        for k, v in row.items()), flush=True)  # fmt: skip
    table = pd.DataFrame(rows)
    if args.out:
        write_atomic(args.out, table.to_csv(index=False, float_format="%.4f"))
    timed_both = table[table["engine"] == replica.NAME]
    print(f"{len(timed_both)} of {len(table)} cases on the bounded engine")
    for key, bound in BOUND.items():
        worst = float(timed_both[key].abs().max()) if len(timed_both) else 0.0
        print(f"largest |{key} error| {worst:.2f}% (bound {bound:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
