"""The probes of `run-real --calibrate` besides compute: each launches TensorFlow
processes that run a probe (`real/process/probe.py`) and fits or summarizes what they
report.

- transfer: one tensor moved between two TensorFlow processes (a server and a client, gRPC
  on loopback) at sizes from 1 KiB to 32 MiB, pull and push, fitted by least squares to
  time = latency + bytes / bandwidth; and exchange: the same sizes moved both ways at once
  (one call reads a variable of the server and writes another), fitted the same way per
  direction, which says how much of what a process sends and receives overlaps; and
  messages: a call that reads one small tensor, and one that reads a chain of 8, each
  read waiting for the one before: what each further message inside one call costs;
- coordinator: ClusterCoordinator's own round trips, a closure dispatched and fetched and
  a function run on a server variable (latency only);
- all-reduce: MultiWorkerMirroredStrategy's ring all-reduce among N processes, or among
  the N devices of one process (MirroredStrategy), fitted the same way;
- update: the call that applies a synchronous round's update on the parameter servers,
  and the closures beside it.

Each `describe_*` says in one line what a probe measured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from measured.profile import (
    CLOSURES,
    CLOSURES_CPU,
    CollectiveFit,
    Coordinator,
    Fit,
    Messages,
    Sample,
    UpdateEntry,
)
from scenarios.sections.dynamics import StragglerSpec
from scenarios.spec import ScenarioSpec, StrategySpec

from ..job import Job, Probe, Server
from ..launcher import Launcher, LaunchResult
from ..protocol import ProbeSample
from ..runner import COLLECTIVE_TIMEOUT_S, common_of
from .pool import fit_alpha_beta

#: message sizes probed (bytes): 1 KiB to 32 MiB, roughly x8 apart
SIZES = (1 << 10, 1 << 13, 1 << 16, 1 << 19, 1 << 21, 1 << 23, 1 << 25)
REPEATS = 15
#: reads chained in one call by the small-message probe (each waits for the one before)
CHAIN = 8
WARMUP = 2
#: update calls timed per model and server count
UPDATE_REPEATS = 40
#: seconds any one calibration launch may take
TIMEOUT_S = 600.0


def _fit(samples: dict[int, list[float]]) -> dict[str, Any]:
    medians = sorted((b, float(np.median(t))) for b, t in samples.items())
    alpha, beta, r2, worst = fit_alpha_beta(medians)
    return {
        "latency": f"{alpha} s",
        "bandwidth": f"{beta} B/s",
        "r2": r2,
        "max_rel_residual": worst,
        "points": [
            Sample.model_validate({"bytes": f"{b} B", "time": f"{t} s"}) for b, t in medians
        ],
    }


def single_worker(spec: ScenarioSpec) -> ScenarioSpec:
    """The point as one plain worker: no strategy, no stragglers, no failures."""
    return spec.model_copy(
        update={"strategy": StrategySpec(), "stragglers": StragglerSpec(), "failures": ()}
    )


def _probe_samples(
    result: LaunchResult, kinds: tuple[str, ...], worker: int = 0
) -> dict[int, list[float]]:
    samples: dict[int, list[float]] = {}
    for r in result.of(ProbeSample):
        if r.kind in kinds and r.worker == worker:
            samples.setdefault(int(r.bytes), []).append(float(r.time_s))
    return samples


def measure_transfer(device: str = "cpu") -> tuple[Fit, Fit, Messages]:
    """One tensor moved between two processes one way (pull and push), the same size both
    ways at once (exchange, per direction), and small messages inside one call."""
    jobs: list[Job] = [
        Probe(
            role="chief",
            probe="transfer",
            sizes=list(SIZES),
            repeats=REPEATS,
            warmup=WARMUP,
            chain=CHAIN,
        ),
        Server(role="ps"),
    ]
    result = Launcher(jobs, TIMEOUT_S, device).run()
    one_way = Fit.model_validate(_fit(_probe_samples(result, ("pull", "push"))))
    exchange = Fit.model_validate(_fit(_probe_samples(result, ("exchange",))))
    return one_way, exchange, messages_of(result.of(ProbeSample))


def messages_of(records: Iterable[ProbeSample]) -> Messages:
    """The chain probe's medians: one read in a call, and the slope per further read."""
    times: dict[int, list[float]] = {}
    for r in records:
        if r.kind == "chain":
            times.setdefault(int(r.messages or 0), []).append(float(r.time_s))
    if len(times) != 2:
        raise RuntimeError(f"calibration: chain probe gave {sorted(times)} call lengths, not 2")
    (one, first), (chain, longest) = sorted((k, float(np.median(v))) for k, v in times.items())
    chained = max(0.0, (longest - first) / (chain - one))
    return Messages.model_validate(
        {
            "first": f"{first} s",
            "chained": f"{chained} s",
            "chain": chain,
            "samples": min(len(v) for v in times.values()),
        }
    )


def measure_allreduce(workers: int, device: str = "cpu", in_graph: bool = False) -> CollectiveFit:
    """The all-reduce among `workers` processes, or (`in_graph`) among as many devices of
    one process."""
    common = Probe(
        workers=workers,
        probe="allreduce",
        sizes=list(SIZES),
        repeats=REPEATS,
        warmup=WARMUP,
        device=device,
        collective_timeout_s=COLLECTIVE_TIMEOUT_S,
    )
    if in_graph:
        jobs = [common.replace(workers=1, local_devices=workers)]
    else:
        jobs = [common.replace(index=i) for i in range(workers)]
    result = Launcher(jobs, TIMEOUT_S, device).run()
    return CollectiveFit.model_validate(
        {"workers": workers, **_fit(_probe_samples(result, ("allreduce",)))}
    )


def measure_coordinator(device: str = "cpu") -> Coordinator:
    jobs: list[Job] = [
        Probe(role="chief", probe="coordinator", repeats=30, warmup=5),
        Server(role="worker"),
        Server(role="ps"),
    ]
    result = Launcher(jobs, TIMEOUT_S, device).run()
    dispatch = _probe_samples(result, ("dispatch",))[4]
    call = _probe_samples(result, ("call",))[4]
    queued = _probe_samples(result, ("queued",))[4]
    return Coordinator.model_validate(
        {
            "dispatch": f"{float(np.median(dispatch))} s",
            "call": f"{float(np.median(call))} s",
            "queued": f"{float(np.median(queued))} s",
            "samples": len(dispatch),
        }
    )


def measure_update(spec: ScenarioSpec) -> UpdateEntry:
    """The call that applies a synchronous round's update of the point's model on its
    parameter servers (`probe.update`), with one worker and `strategy.servers` servers."""
    _, base = common_of(single_worker(spec), 1)
    servers = spec.strategy.servers
    jobs: list[Job] = [
        Probe(
            role="chief",
            probe="update",
            keras=base.keras,
            learning_rate=base.learning_rate,
            repeats=UPDATE_REPEATS,
            warmup=WARMUP + 3,
        ),
        Server(role="worker"),
    ]
    jobs += [Server(role="ps", index=j) for j in range(servers)]
    result = Launcher(jobs, TIMEOUT_S, spec.real.device).run()
    t = np.asarray(_probe_samples(result, ("update",))[0])
    closures = {
        kind: f"{float(np.mean(_probe_samples(result, (kind,))[0]))} s" for kind in CLOSURES
    }
    for kind in CLOSURES_CPU:  # where the machine has /proc/stat
        if cpu := _probe_samples(result, (kind,)).get(0):
            closures[kind] = f"{float(np.mean(cpu))} s"

    return UpdateEntry.model_validate(
        {
            "model": spec.model.name,
            "dtype": spec.model.dtype,
            "servers": servers,
            "time": f"{float(np.mean(t))} s",
            "p10": f"{float(np.percentile(t, 10))} s",
            "p90": f"{float(np.percentile(t, 90))} s",
            "samples": len(t),
            **closures,
        }
    )


def describe_fit(what: str, fit: Fit) -> str:
    return (
        f"{what}: latency {fit.latency * 1e3:.3g} ms, bandwidth {fit.bandwidth / 1e6:.4g} MB/s;"
        f" fit r2 {fit.r2:.4f}, worst residual {fit.max_rel_residual:.0%}"
    )


def describe_transfer(transfer: Fit, exchange: Fit, messages: Messages) -> str:
    """What the transfer probe measured: one way, both ways at once, small messages."""
    return "\n".join(
        (
            describe_fit("transfer (one tensor between two processes)", transfer),
            describe_fit("exchange (a tensor each way at once; bandwidth per direction)", exchange),
            f"messages: a call reading one small tensor {messages.first * 1e3:.3g} ms; "
            f"each further read the call waits for {messages.chained * 1e3:.3g} ms "
            f"(chains of {messages.chain})",
        )
    )


def describe_coordinator(c: Coordinator) -> str:
    """What the coordinator probe measured: its round trips, in milliseconds."""
    return (
        f"coordinator (ClusterCoordinator round trips): dispatch a closure "
        f"{c.dispatch * 1e3:.3g} ms, queued closures {(c.queued or 0) * 1e3:.3g} ms "
        f"each, call on a server {c.call * 1e3:.3g} ms"
    )


def describe_update(u: UpdateEntry) -> str:
    """What the update probe measured: the coordinator's call and the closures beside it."""

    def ms(name: str) -> str:
        return f"{(getattr(u, name) or 0) * 1e3:.3g}"

    cpu = ", ".join(ms(f"{kind}_cpu") for kind in CLOSURES)
    return (
        f"update: {u.model} on {u.servers} server(s), one coordinator call: "
        f"{ms('time')} ms (p10 {ms('p10')}, p90 {ms('p90')}); "
        f"closures that read the model {ms('closure_read')} ms, and push to accumulators "
        f"{ms('closure_accumulate')} ms, or apply {ms('closure_apply')} ms, a bare closure "
        f"{ms('closure_bare')} ms" + (f" (CPU {cpu} ms)" if u.closure_bare_cpu is not None else "")
    )
