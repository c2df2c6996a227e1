"""The numbers a calibration profile (`cluster.profile`) gives one point, and only numbers.

A profile (`measured/profile.py`, written by `run-real --calibrate`) measures the machine
at hand, never the multi-worker runs a simulation predicts. `calibrate` reads it once per
point through the profile's own look-ups and returns a frozen `Calibration`; the cost
model (`sim/costs/__init__.py`) turns that into what the engine asks, and
`sim/costs/explain.py` says in words which numbers were taken and which were missing.
What each number is and how the engine uses it is docs/simulator.md, "Calibration".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from measured.profile import Fit, Profile, restart_job, server_processes
from scenarios.spec import ScenarioSpec

T = TypeVar("T")

#: the probes a rate can come from (`Calibration.duplex_from`, `core_from`): the
#: 2-process all-reduce and the exchange
PAIR_PROBE, EXCHANGE_PROBE = "allreduce", "exchange"


@dataclass(frozen=True)
class Calibration:
    """What a profile holds for one point; None where it holds nothing for it."""

    path: str
    profile: Profile
    processes: int  # worker processes computing at once on a host
    servers_beside: int  # listening server processes beside the computing ones
    step_s: float | None  # measured single-worker step time with `processes` at once
    step_model: str  # the model name (or its catalog base) the step time was found under
    transfer: Fit | None  # the point-to-point fit between two processes of one host
    one_machine: bool  # hosts == 1: every process of the job is on the calibrated machine
    # each message of one call chained after another (the chain probe's slope, at most the
    # fit's latency), and what a call of its own pays beyond it
    message_s: float = 0.0
    call_s: float = 0.0
    # what a process's port carries both ways together, in multiples of one way, and the
    # fit it came from ("allreduce": the 2-process all-reduce; "exchange"; "": neither)
    duplex: float = 1.0
    duplex_from: str = ""
    # bytes/s one busy core moves between processes, and the probe it came from
    # ("allreduce", "exchange", or "transfer": the one-way fit)
    core_rate: float | None = None
    core_from: str = ""
    # the workers' compute is CPU work the transfers share the host's cores with
    shared_cores: bool = False
    # a pipeline stage's core, for each activation or gradient it sends or receives (the
    # fed stage's step beyond the stage's alone, less the input's gradient, per message)
    stage_message_s: float = 0.0
    # a pipeline's stages computed from the stage alone (`step_s`, `processes` 1): the
    # stages side by side as measured, (P, their step time), which the host's compute
    # shares (`beside_capacity`); None: compute is the side-by-side figure throughout
    side_by_side: tuple[int, float] | None = None
    # in-graph replication on the calibrated machine: the all-reduce among the devices of
    # one process (the profile's in_graph fit for the host's devices)
    in_graph: Fit | None = None
    # in graph: what the one client costs each device it drives, a step (the dispatch
    # probe: one process's forward and backward on D devices, less D processes', over D),
    # already in `step_s`
    dispatch_s: float = 0.0
    # processes started to their first step: what relaunching the job costs, and how it
    # was measured ("restart": this job relaunched; "startup": single-worker processes)
    restart_s: float | None = None
    restart_from: str = ""
    # one evaluation of the held-out samples, measured for the model and data (the
    # profile's convergence entry); None: not measured
    eval_s: float | None = None
    # parameter servers: the coordinator's round trips (a closure dispatched and fetched,
    # or queued under asynchronous training; a bare call on a server)
    coordinator: tuple[float, float] | None = None
    # the model's update on its servers, one coordinator call
    update_s: float | None = None
    # a closure's pull and push alone (probes less the dispatch); the push of an
    # asynchronous closure includes its update
    closure_s: tuple[float, float] | None = None
    # closures measured, but not usable here (the cluster is not the calibrated machine)
    closures_unplaced: bool = False
    # without closures: what an asynchronous closure pays beyond its push
    apply_s: float | None = None

    @property
    def cpus(self) -> int:
        return self.profile.machine.cpus

    @property
    def compute_cores(self) -> float | None:
        """Cores one worker's compute held when its step time was measured: P processes
        computing at once on `cpus` cores, at most one each. None where compute does not
        share the cores with transfers (`shared_cores`)."""
        return core_share(self.cpus, self.processes) if self.shared_cores else None

    @property
    def beside_capacity(self) -> float | None:
        """Bytes/s the compute of a host's processes shares, in the cores' unit: P stages
        side by side each ran alone_s / side_s as fast as alone, so together they had
        P x that of one core."""
        if self.side_by_side is None or self.core_rate is None or self.step_s is None:
            return None
        processes, side_s = self.side_by_side
        return processes * self.core_rate * self.step_s / side_s

    @property
    def loopback_capacity(self) -> float | None:
        """Bytes/s all transfers in flight on one host share: cores x what one core moves."""
        return None if self.core_rate is None else self.cpus * self.core_rate


def calibrate(spec: ScenarioSpec, profile: Profile | None) -> Calibration | None:
    """The calibration of one point, or None when the scenario names no profile."""
    if profile is None or spec.cluster.profile is None:
        return None
    batch, dtype = spec.training.batch_per_worker, spec.model.dtype
    strategy = spec.strategy
    processes, servers_beside, micro = computing_at_once(spec, profile)
    step_s, step_model = _measured_step(spec, profile, processes, servers_beside, micro)
    transfer = profile.transfer
    one_machine = spec.cluster.hosts == 1 and transfer is not None
    message_s = call_s = 0.0
    if transfer is not None:
        message_s = message_latency(profile, transfer)
        call_s = transfer.latency - message_s
    duplex, duplex_from = _duplex(profile, transfer)
    core_rate, core_from = _core_rate(profile, transfer, strategy.serves_parameters)
    restart_s, restart_from = None, ""
    if spec.failures and step_s is not None:
        restart_s, restart_from = _restart(spec, profile, step_model, processes)
    convergence = profile.convergence_for(spec.model.name, spec.training.data)
    eval_s = None if convergence is None else convergence.eval_s
    servers: dict[str, Any] = {}
    if strategy.serves_parameters:
        servers = _servers(spec, profile, one_machine)
    in_graph, dispatch_s = None, 0.0
    if strategy.in_graph and one_machine:
        devices = spec.cluster.devices_per_host
        in_graph = next((f for f in profile.in_graph if f.workers == devices), None)
        dispatch_s = client_dispatch(profile, step_model, batch, dtype, devices)
        if step_s is not None:
            step_s += devices * dispatch_s
    stage_message_s = 0.0
    side_by_side = None
    shared_cores = one_machine and step_s is not None and spec.sim.network_model == "flow"
    if strategy.pipelined and strategy.stages > 1 and step_s is not None:
        stage_message_s, side_by_side, alone_s = _stage_numbers(
            spec, profile, step_model, micro, processes, step_s, shared_cores
        )
        if side_by_side is not None:  # the stages compute from the stage alone
            step_s, processes = alone_s, 1
    return Calibration(
        path=spec.cluster.profile,
        profile=profile,
        processes=processes,
        servers_beside=servers_beside,
        step_s=step_s,
        step_model=step_model,
        transfer=transfer,
        one_machine=one_machine,
        message_s=message_s,
        call_s=call_s,
        duplex=duplex,
        duplex_from=duplex_from,
        core_rate=core_rate,
        core_from=core_from,
        shared_cores=shared_cores,
        restart_s=restart_s,
        restart_from=restart_from,
        eval_s=eval_s,
        in_graph=in_graph,
        dispatch_s=dispatch_s,
        stage_message_s=stage_message_s,
        side_by_side=side_by_side,
        **servers,
    )


def computing_at_once(spec: ScenarioSpec, profile: Profile) -> tuple[int, int, int]:
    """How the point's step time is looked up: (worker processes computing at once on a
    host, server processes listening beside them, micro-batches). A pipeline's stages of
    every layer run side by side, a core each, with no servers."""
    strategy = spec.strategy
    if strategy.pipelined:
        return min(strategy.stages, profile.machine.cpus), 0, strategy.micro_batches
    # parameter servers and the coordinator listen while the workers compute
    servers_beside = server_processes(strategy.kind, strategy.servers)
    return spec.cluster.devices_per_host, servers_beside, 1


def _measured_step(
    spec: ScenarioSpec, profile: Profile, processes: int, servers_beside: int, micro: int
) -> tuple[float | None, str]:
    """The measured step time (None without one) and the name it was found under: the
    model's own, or failing that its catalog base."""
    model = spec.model
    for candidate in (model.name, model.base):
        if candidate is None:
            continue
        step_s = profile.step_time(
            candidate,
            spec.training.batch_per_worker,
            model.dtype,
            processes=processes,
            servers=servers_beside,
            micro_batches=micro,
            layout=spec.strategy.hybrid,
        )
        if step_s is not None:
            return step_s, candidate
    return None, model.name


def _core_rate(
    profile: Profile, transfer: Fit | None, point_to_point: bool
) -> tuple[float | None, str]:
    """Bytes/s one busy core moves between processes, and the probe it came from (the
    transfer fit where neither probe was run); None without a transfer fit."""
    if transfer is None:
        return None, ""
    probe = core_probe(profile, point_to_point)
    return (transfer.bandwidth, "transfer") if probe is None else (probe[1].bandwidth, probe[0])


def _restart(
    spec: ScenarioSpec, profile: Profile, step_model: str, processes: int
) -> tuple[float | None, str]:
    """What relaunching the job costs and how it was measured: this job relaunched
    ("restart"), or else single-worker processes started ("startup"); None, "" neither."""
    batch, dtype = spec.training.batch_per_worker, spec.model.dtype
    kind, job_servers = restart_job(spec.strategy)
    restart_s = profile.restart(step_model, batch, dtype, kind, spec.workers, job_servers)
    if restart_s is not None:
        return restart_s, "restart"
    restart_s = profile.startup(step_model, batch, dtype, processes)
    return restart_s, "startup" if restart_s is not None else ""


def _stage_numbers(
    spec: ScenarioSpec,
    profile: Profile,
    step_model: str,
    micro: int,
    processes: int,
    step_s: float,
    shared_cores: bool,
) -> tuple[float, tuple[int, float] | None, float | None]:
    """A pipeline's stages: what each message costs a stage's core; where the flow
    network shares the host's compute among stages side by side, (P, the step time side
    by side), else None; and the step time of the stage alone (None: not measured)."""
    batch, dtype = spec.training.batch_per_worker, spec.model.dtype
    # the stage alone and fed, each measured with no other stage working beside it
    alone_s, fed_s = (
        profile.step_time(step_model, batch, dtype, micro_batches=micro, fed=fed)
        for fed in (False, True)
    )
    stage_message_s = 0.0
    if alone_s is not None and fed_s is not None:
        stage_message_s = message_cost(spec, alone_s, fed_s)
    # a stage computing while the others wait runs as fast as alone; side by side, as
    # measured side by side: the flow network shares the host's compute among them
    if shared_cores and processes > 1 and alone_s is not None and alone_s < step_s:
        return stage_message_s, (processes, step_s), alone_s
    return stage_message_s, None, alone_s


def client_dispatch(profile: Profile, model: str, batch: int, dtype: str, devices: int) -> float:
    """Seconds a step that in-graph replication's one client costs each of the `devices`
    it drives: the dispatch probe's forward and backward of one process on the devices
    less that of as many processes at once, over the devices (none below zero, which is
    the probe's noise; 0 where the profile has no such probe)."""
    apart, together = (
        profile.step_time(model, batch, dtype, devices, gradients_only=True, in_graph=g)
        for g in (False, True)
    )
    if apart is None or together is None:
        return 0.0
    return max(0.0, together - apart) / devices


def message_cost(spec: ScenarioSpec, alone_s: float, fed_s: float) -> float:
    """Seconds of a stage's core per message, from one stage of every layer measured alone
    (`alone_s`) and fed by a stage of its own (`fed_s`): fed, the stage receives each
    micro-batch's input and sends back the input's gradient, which it then computes as
    well, one forward's FLOPs of its first layer (of the (forward + backward) FLOPs the
    stage alone computes, less that forward: it takes no gradient of its input)."""
    table = spec.model.layer_table()
    total = sum(fwd + bwd for _, _, fwd, bwd in table)
    first = table[0][2]
    alone_flops = total - first
    computed_s = alone_s * (1.0 + first / alone_flops) if alone_flops > 0 else alone_s
    return max(0.0, fed_s - computed_s) / (2 * spec.strategy.micro_batches)


def _duplex(profile: Profile, transfer: Fit | None) -> tuple[float, str]:
    """What a process's port carries both ways together, in multiples of one way: from the
    2-process all-reduce (each process sends half the tensor as it receives the other half,
    twice: the fit's bandwidth is the rate each way; duplex = 2 B_ar / B, at most 2, below 1
    where both ways together move less than one way alone), or the exchange probe
    (2 B_x / B within [1, 2]); 1 without either."""
    if transfer is None:
        return 1.0, ""
    pair = pair_fit(profile)
    if pair is not None:
        return min(2.0, 2 * pair.bandwidth / transfer.bandwidth), PAIR_PROBE
    if profile.exchange is not None:
        duplex = min(2.0, max(1.0, 2 * profile.exchange.bandwidth / transfer.bandwidth))
        return duplex, EXCHANGE_PROBE
    return 1.0, ""


def _servers(spec: ScenarioSpec, profile: Profile, one_machine: bool) -> dict[str, Any]:
    """The parameter-server numbers: coordinator, update, closures, asynchronous apply."""
    model, dtype, strategy = spec.model, spec.model.dtype, spec.strategy
    servers = strategy.servers
    update_s = of_model(model, lambda name: profile.update(name, dtype, servers))
    coordinator = None
    if profile.coordinator is not None:
        c = profile.coordinator
        # an asynchronous job queues its closures: their results are fetched later
        first = c.dispatch if strategy.sync or c.queued is None else c.queued
        coordinator = (first, c.call)
    measured = of_model(model, lambda name: profile.closures(name, dtype, servers))
    closure_s = None
    if measured is not None and one_machine:
        read, accumulate, apply = measured
        dispatch = profile.coordinator.dispatch if profile.coordinator is not None else 0.0
        # differences below zero are the probes' noise and count as none
        pull = max(read - dispatch, 0.0)
        push = max((accumulate if strategy.sync else apply) - read, 0.0)
        closure_s = (pull, push)
    apply_s = None
    if closure_s is None and not strategy.sync and update_s is not None:
        apply_s = max(update_s - (coordinator[1] if coordinator else 0.0), 0.0)
    return {
        "coordinator": coordinator,
        "update_s": update_s,
        "closure_s": closure_s,
        "closures_unplaced": measured is not None and not one_machine,
        "apply_s": apply_s,
    }


def of_model(model: Any, find: Callable[[str], T | None]) -> T | None:
    """What the profile has for the model, or failing that for its catalog `base`."""
    for name in (model.name, model.base):
        if name is not None and (found := find(name)) is not None:
            return found
    return None


def message_latency(profile: Profile, transfer: Fit) -> float:
    """Each message of one call chained after another: the chain probe's slope (never more
    than the fit's latency), or the fit's latency without the probe."""
    if profile.messages is None:
        return transfer.latency
    return min(profile.messages.chained, transfer.latency)


def core_share(cpus: int, processes: int) -> float:
    """Cores each of `processes` computing at once holds on `cpus` cores: one at most."""
    return min(1.0, cpus / processes)


def core_probe(profile: Profile, point_to_point: bool) -> tuple[str, Fit] | None:
    """The probe whose per-process rate each way is what a busy core moves: the 2-process
    all-reduce for collectives, the exchange for point-to-point transfers, or the other
    one where the job's own is missing."""
    pair = (PAIR_PROBE, pair_fit(profile))
    exchange = (EXCHANGE_PROBE, profile.exchange)
    first, second = (exchange, pair) if point_to_point else (pair, exchange)
    for name, fit in (first, second):
        if fit is not None:
            return name, fit
    return None


def pair_fit(profile: Profile) -> Fit | None:
    """The profile's 2-process all-reduce fit, if it has one."""
    return next((fit for fit in profile.allreduce if fit.workers == 2), None)
