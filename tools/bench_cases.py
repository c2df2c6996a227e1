"""The cases `make bench` times (`tools/bench.py` runs them): each a real command line,
what it shows, the wall time it is held to where one is set, and the families whose
growth exponent it enters."""

from __future__ import annotations

from dataclasses import dataclass, field

RING = "scenarios/library/resnet50-1024-ring.yaml"
PS = "tests/benchmarks/ps-inception3.yaml"
PER_TENSOR = "tests/benchmarks/per-tensor-resnet152.yaml"
MLP = "scenarios/library/mlp-localhost.yaml"
TRIALS = "tests/benchmarks/trials-mlp.yaml"
HYBRID = "scenarios/library/gpt2-xl-hybrid-64.yaml"
LLM = "tests/benchmarks/llm-405b-class.yaml"
LAYOUTS = "scenarios/library/gpt3-175b-layouts.yaml"
LAYOUT_PLAN = "scenarios/plans/llama2-70b-layouts.yaml"
PS_HOSTS = "tests/benchmarks/ps-resnet50-128x8.yaml"
PLAN = "scenarios/plans/resnet50-imagenet.yaml"
#: the bundled plan widened to 1,008 candidates, every one simulated: 3 instances x
#: 8 host counts x 6 strategies x 7 batches
PLAN_1000 = (
    "plan.options.cluster.hosts=[1, 2, 4, 8, 16, 32, 64, 128]",
    "plan.options.strategy=[{kind: allreduce, algorithm: ring}, "
    "{kind: allreduce, algorithm: tree}, {kind: allreduce, algorithm: hierarchical}, "
    "{kind: allreduce, algorithm: halving_doubling}, "
    "{kind: parameter_server, servers: 8, placement: colocated}, "
    "{kind: parameter_server, servers: 8, placement: dedicated}]",
    "plan.options.training.batch_per_worker=[16, 32, 48, 64, 96, 128, 256]",
    "plan.search.method=grid",
)
SPARK = ("--master", "local[2]")
#: the exact engine alone (`sim.timing: auto` lets the replica time large PS jobs)
EXACT = "sim.timing=exact"
#: the parameter-server target cases as `simulate` runs them (held to their targets),
#: and on the exact engine: (name suffix, what it adds, sets, whether held)
TWINS: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("", "", (), True),
    ("-exact", ", exact engine", (EXACT,), False),
)


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    scenario: str
    sets: tuple[str, ...] = ()
    target_s: float | None = None  # the wall time it is held to, where one is set
    target_bytes: float | None = None  # the peak memory it is held to, where one is set
    # (family, size): the cases of a family differ in that size only (growth exponent)
    families: tuple[tuple[str, float], ...] = field(default=())
    command: str = "sim.cli"  # or real.cli: run-real
    args: tuple[str, ...] = ()  # beyond the scenario, the sets and --out


def _ring(hosts: int, steps: int = 100, *sets: str) -> tuple[str, ...]:
    return (f"cluster.hosts={hosts}", f"training.steps={steps}", *sets)


CASES = [
    Case(
        "llm-16384",
        "Llama 3 405B, 16,384 H100s: tensor 8 x pipeline 16 (uneven ends) x data 128, one step",
        LLM,
        target_s=10.0,
        families=(("llm-gpus", 16384),),
    ),
    Case(
        "llm-1024",
        "the same layout on 1,024 H100s (data 8), one step",
        LLM,
        ("cluster.hosts=128", "training.global_batch=128"),
        target_s=2.0,
        families=(("llm-gpus", 1024),),
    ),
    Case(
        "plan-llama2-70b-layouts",
        "trainscale plan over 240 layouts of Llama 2 70B on 512-1,024 H100s",
        LAYOUT_PLAN,
        target_s=300.0,
        command="planner.cli",
    ),
    Case(
        "gpt3-175b-layouts",
        "GPT-3 175B on 1,024 A100s, 10 layouts and recomputations (the README's question)",
        LAYOUTS,
        target_s=10.0,
    ),
    Case(
        "ring-256",
        "ResNet-50 ring, 256 workers (32 servers x 8 V100), 100 steps, 5% jitter",
        RING,
        _ring(32),
        families=(("ring, workers", 256),),
    ),
    Case(
        "ring-1024",
        "same, 1,024 workers (128 x 8)",
        RING,
        _ring(128),
        2.0,
        families=(("ring, workers", 1024), ("ring, steps", 100)),
    ),
    Case(
        "ring-4096",
        "same, 4,096 workers",
        RING,
        _ring(512),
        families=(("ring, workers", 4096),),
    ),
    Case(
        "ring-16384",
        "same, 16,384 workers",
        RING,
        _ring(2048),
        60.0,
        families=(("ring, workers", 16384),),
    ),
    Case(
        "ring-65536",
        "same, 65,536 workers (8,192 x 8); steps.csv a row per step (held to 1 GB too)",
        RING,
        _ring(8192),
        20.0,
        families=(("ring, workers", 65536),),
    ),
    Case(
        "ring-1024-analytical",
        "same, 1,024 workers, analytical network",
        RING,
        _ring(128, 100, "sim.network_model=analytical"),
    ),
    Case(
        "ring-1024-1000-steps",
        "same, 1,024 workers, 1,000 steps (target: 10.5 x the 100-step target)",
        RING,
        _ring(128, 1000),
        21.0,
        families=(("ring, steps", 1000),),
    ),
    Case(
        "pipeline-64",
        "GPT-2 XL, 8-stage 1F1B pipelines (16 micro-batches) on 8 DGX-1 servers, 64 V100s, "
        "10 steps",
        HYBRID,
        ("sweep={}", "cluster.hosts=8", "training.steps=10"),
        families=(("pipeline, devices", 64),),
    ),
    Case(
        "pipeline-512",
        "same, 512 V100s (64 servers)",
        HYBRID,
        ("sweep={}", "cluster.hosts=64", "training.steps=10"),
        families=(("pipeline, devices", 512),),
    ),
    Case(
        "ps-sync-50x17",
        "synchronous PS, 50 workers, 17 servers, greedy, Inception-v3, 200 steps",
        PS,
        (),
        2.0,
    ),
    *(
        Case(
            f"ps-sync-{n}x{n // 16}",
            f"synchronous PS, {n} workers, {n // 16} servers, round-robin, 100 steps",
            PS,
            (
                f"cluster.hosts={n}",
                f"strategy.servers={n // 16}",
                "strategy.partition=round_robin",
                "training.steps=100",
                EXACT,
            ),
            families=(
                ("ps sync, workers (servers = workers / 16)", n),
                *((("ps sync, steps", 100),) if n == 128 else ()),
            ),
        )
        for n in (64, 128, 256, 512)
    ),
    Case(
        "ps-sync-128x8-1000-steps",
        "same, 128 workers, 8 servers, 1,000 steps",
        PS,
        (
            "cluster.hosts=128",
            "strategy.servers=8",
            "strategy.partition=round_robin",
            "training.steps=1000",
        ),
        families=(("ps sync, steps", 1000),),
    ),
    *(
        Case(
            f"ps-sync-{n}x8",
            f"synchronous PS, {n} workers, 8 servers, round-robin, 100 steps",
            PS,
            (
                f"cluster.hosts={n}",
                "strategy.servers=8",
                "strategy.partition=round_robin",
                "training.steps=100",
                EXACT,
            ),
            families=(("ps sync, workers (8 servers)", n),),
        )
        for n in (64, 1024)
    ),
    Case(
        "ps-vs-ring-sweep",
        "scenarios/library/parameter-servers-vs-ring.yaml: 8 -> 1,024 workers, 8 parameter "
        "servers (dedicated, colocated) and ring all-reduce, 24 points",
        "scenarios/library/parameter-servers-vs-ring.yaml",
        (),
        60.0,
    ),
    Case(
        "plan-resnet50",
        "trainscale plan: ResNet-50 to 75.9% over 3 AWS instances x 1-64 hosts x 3 strategies "
        "x 4 batches (252 candidates, a grid), --jobs 2",
        PLAN,
        (),
        300.0,
        command="planner.cli",
        args=("--jobs", "2"),
    ),
    Case(
        "ps-async-1024x64",
        "asynchronous PS, 1,024 workers, 64 servers, 1,024 updates (one per worker)",
        PS,
        (
            "cluster.hosts=1024",
            "strategy.servers=64",
            "strategy.partition=round_robin",
            "strategy.sync=false",
            "training.steps=1024",
            EXACT,
        ),
    ),
    *(
        Case(
            f"ps-async-1024x64-equal{suffix}",
            "asynchronous PS, 1,024 workers, 64 servers, 102,400 updates (the sync case's "
            f"samples){what}",
            PS,
            (
                "cluster.hosts=1024",
                "strategy.servers=64",
                "strategy.partition=round_robin",
                "strategy.sync=false",
                "training.steps=102400",
                *sets,
            ),
            20.0 if held else None,
        )
        for suffix, what, sets, held in TWINS
    ),
    *(
        Case(
            f"ps-sync-1024x64{suffix}",
            f"synchronous PS, 1,024 workers, 64 servers, 100 steps{what}",
            PS,
            (
                "cluster.hosts=1024",
                "strategy.servers=64",
                "strategy.partition=round_robin",
                "training.steps=100",
                *sets,
            ),
            10.0 if held else None,
            families=(("ps sync, workers (servers = workers / 16)", 1024),) if not held else (),
        )
        for suffix, what, sets, held in TWINS
    ),
    *(
        Case(
            f"ps-sync-128x8x64{suffix}",
            "synchronous PS, ResNet-50 on 128 hosts x 8 V100 (NVLink 2, 25 GbE), 64 dedicated "
            f"servers, 100 steps{what}",
            PS_HOSTS,
            sets,
            10.0 if held else None,
            target_bytes=1e9,
        )
        for suffix, what, sets, held in TWINS
    ),
    *(
        Case(
            f"ps-async-128x8x64-equal{suffix}",
            f"same, asynchronous, 102,400 updates (the synchronous case's samples){what}",
            PS_HOSTS,
            ("strategy.sync=false", "training.steps=102400", *sets),
            20.0 if held else None,
            target_bytes=1e9,
        )
        for suffix, what, sets, held in TWINS
    ),
    Case(
        "ps-sync-128x8x64-agg",
        "same, synchronous, local_aggregation: each host's 8 devices reduce over NVLink "
        "and push once, 100 steps",
        PS_HOSTS,
        ("strategy.local_aggregation=true",),
        10.0,
        target_bytes=1e9,
    ),
    Case(
        "ps-async-128x8x64-agg-equal",
        "same, asynchronous, 12,800 host updates of 8 devices' batches (the synchronous "
        "case's samples)",
        PS_HOSTS,
        ("strategy.local_aggregation=true", "strategy.sync=false", "training.steps=12800"),
        20.0,
        target_bytes=1e9,
    ),
    Case(
        "plan-1000",
        "trainscale plan: ResNet-50 to 75.9%, 3 AWS instances x 1-128 hosts x 6 strategies "
        "x 7 batches (1,008 candidates, a grid), --jobs 2",
        PLAN,
        PLAN_1000,
        300.0,
        command="planner.cli",
        args=("--jobs", "2"),
    ),
    Case(
        "per-tensor-152x8",
        "per-tensor all-reduce (fusion 0 B), ResNet-152, 8 workers, 22 steps",
        PER_TENSOR,
        (),
        2.0,
    ),
    Case(
        "real-local-2w",
        "run-real: mlp-localhost's 2-worker ring (and its 1-worker baseline), local processes",
        MLP,
        ("sweep.cluster.devices_per_host=[2]",),
        command="real.cli",
    ),
    Case(
        "real-spark-2w",
        "same, as Spark barrier stages on local[2]",
        MLP,
        ("sweep.cluster.devices_per_host=[2]",),
        command="real.cli",
        args=SPARK,
    ),
    Case(
        "trials-local-4",
        "run-real: 4 single-worker MLP trials on 2 slots, local processes",
        TRIALS,
        command="real.cli",
    ),
    Case(
        "trials-spark-4",
        "same, as Spark tasks on local[2]",
        TRIALS,
        command="real.cli",
        args=SPARK,
    ),
]
#: (what, the local case, the Spark case, what the difference is divided by)
OVERHEADS = [
    ("a run of the 2-worker job and its baseline", "real-local-2w", "real-spark-2w", 1),
    ("a trial", "trials-local-4", "trials-spark-4", 4),
]
