"""What `simulate` takes from a calibration profile (`cluster.profile`), and what it does not.

A profile (`scenarios/profile.py`, written by `run-real --calibrate`) measures the machine
at hand, never the multi-worker runs a simulation predicts. From it the simulator takes:

- **compute**: the measured step time of one single-worker training process for the
  point's model, batch and dtype, with P = the host's workers running at once
  (`Profile.step_time`: measured for P, or extrapolated by sharing the cores beyond the
  largest count measured). It replaces the catalog's FLOP model; `sim/compute.py` spreads
  it over the layers in proportion to their FLOPs, so buckets and overlap still work.
- **transfer**: the point-to-point fit `time = latency + bytes / bandwidth` between two
  processes on one host. It replaces `host_link` (every message inside a host); with
  `hosts: 1` the whole job runs on the calibrated machine, as run-real runs it, so it is
  what every message costs (dedicated parameter servers are processes on that machine).
  Collectives and parameter servers are predicted from it by their algorithms; of the
  profile's `allreduce` fits only the 2-process one's bandwidth is used (**exchange** and
  **cores**, below); fits of more processes, and every fit's latency, are never used.
- **messages**: a call's latency is mostly the call: one that reads a small tensor from
  the other process costs milliseconds, while each further read the same call waits for
  costs a fraction of that (the chain probe's slope). A collective's ring steps are
  messages of one op, each waiting for the one before: each pays `chained`. A parameter
  server's pull or push without closures measured (below) is a call of its own and pays
  the fit's latency, as the transfer probe's calls did (`call_s` on top of `chained`).
- **coordinator** (parameter servers): the round trips of the framework's coordinator,
  measured with nothing of any size moved: every update waits for its closure to reach
  the worker, before the pull: `dispatch` (a closure scheduled and its result fetched) in
  a synchronous round, whose coordinator fetches every closure before it applies the
  update; `queued` (closures scheduled back to back, per closure) under asynchronous
  training, whose closures are queued and fetched later. A synchronous round's update is
  one call the coordinator makes on the servers once the gradients are in (`call`, or the
  measured `update` below).
- **update** (parameter servers): the optimizer's update of the point's model on its
  number of servers, applied by one coordinator call (`updates`, measured alone). It is
  the synchronous round's closing call (in place of the bare `call`). It grows with the
  servers: the update's ops read the optimizer's scalars across servers. Asynchronous
  closures do not make this call: each applies its own gradients inside the closure.
- **closures** (parameter servers, one machine): closures of the model on one worker and
  the point's servers, nothing computed, each dispatched and fetched alone, measured
  beside the update. A closure's pull is the reading closure less the bare dispatch; its
  push the accumulating closure (synchronous) or the applying one (asynchronous: push
  and update) less the reading one. A closure moves the model's variables several at
  once, on several threads, faster than the transfer probe moves one tensor (here 7 ms
  for the 4.4 MB MLP, against 11 ms by the fit): it is bound by no process's port, only
  by the host's cores (`cores` below), and never by the server, which serves several
  closures at once. Closures in flight at once share the cores as transfers do, their
  bytes only: each pull or push waits out its round trips (its time alone less what the
  model's bytes take on the cores alone), then moves the bytes as one flow on the cores
  (sim/ps.py).
  Without closures (older profiles, or a cluster of more hosts than the one they were
  measured on) pulls and pushes move the shards' bytes by the transfer fit, and an
  asynchronous closure pays the update call less the bare call after its push.
- **exchange**: what a process moves sending and receiving at once: a process's port
  carries one direction at B and both together at `duplex` x B. Where the profile has a
  2-process all-reduce fit (`allreduce`, workers 2), it is that collective's rate each way,
  B_ar: each process sends half the tensor as it receives the other half, in each of the
  ring's two steps, so the fit's bandwidth is the rate each way, and duplex = 2 B_ar / B
  (at most 2; below 1 where both ways together move less than one way alone, as on a VM
  measured 2026-11-30: 305 MB/s each way against 679 one way). Otherwise the exchange
  probe (one call reading a server's variable while writing another of the same size):
  its per-direction bandwidth B_x, duplex = 2 B_x / B within [1, 2] (1: they share B; 2:
  full duplex). The two-process ring, where each process sends its chunk as it receives
  the other's, is where this shows.
- **cores** (`machine.cpus`): moving a tensor between processes on loopback is CPU work
  at both ends (serialising, copying through the kernel, deserialising). Two probes keep
  two processes busy moving tensors both ways at once: the 2-process all-reduce (B_ar
  each way, a collective's traffic: its chunks are reduced as they arrive) and the
  exchange (B_x each way, two plain transfers). What a busy core moves is the rate of
  the probe like the job's traffic: B_ar for collectives, B_x for a parameter server's
  pulls and pushes (`point_to_point`); the transfers in flight on a host share
  `cpus x` that (a per-host link in the flow network). On a VM measured 2026-11-30 the
  3- and 4-process rings moved what B_ar says within a few per cent, where B_x (a
  third higher) made them 13-25% too fast; two or three workers' closures at once
  slowed each other by what B_x says, and B_ar made the parameter-server sweep 5-11%
  too slow (docs/validation.md). Without the job's probe, the other's; without either,
  each transfer in flight occupies one core at the one-way bandwidth
  (`cpus x bandwidth`). On one machine (and in the flow network)
  the workers' compute is CPU work on the same cores (`shared_cores`): the measured step
  held min(1, cpus / P) of a core, so it is that much core time, a flow on one core of
  the worker's own and the loopback. As many computing at once as measured, and nothing
  else, take the measured time; fewer take less (a core each at most); transfers in
  flight beside them take their share of the cores, and compute its share of theirs.

Not taken: parameter-server processes do not count among the P processes computing at
once (in a synchronous step they serve pushes and pulls while the workers wait; the CPU
they spend moving tensors is the transfer's, above); links between hosts (hosts > 1) stay
the catalog's `network`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from scenarios.profile import Fit, Profile, restart_job, server_processes
from scenarios.spec import ClusterSpec, ScenarioSpec

T = TypeVar("T")


@dataclass(frozen=True)
class Calibration:
    """The measured numbers one simulated point uses, and what the profile lacked."""

    path: str
    profile: Profile
    processes: int  # worker processes computing at once on a host
    step_s: float | None  # measured single-worker step time with `processes` at once
    transfer: Fit | None
    one_machine: bool  # hosts == 1: every process of the job is on the calibrated machine
    used: tuple[str, ...]
    not_found: tuple[str, ...]
    # ClusterCoordinator round trips: (dispatch a closure and fetch it, a call on a server)
    coordinator: tuple[float, float] | None = None
    # processes started to their first step: what relaunching the job costs
    restart_s: float | None = None
    # the model's update on its parameter servers, one coordinator call
    update_s: float | None = None
    # a closure's pull and push on the point's servers, each alone (the closure probes,
    # less the dispatch); the push of an asynchronous closure includes its update
    closure_s: tuple[float, float] | None = None
    # without closures measured: what an asynchronous closure pays beyond its push (the
    # update call's ops without the call)
    apply_s: float | None = None
    # what a process's port carries both ways together, in multiples of one way
    duplex: float = 1.0
    # the workers' compute is CPU work the transfers share the host's cores with (one
    # machine, a measured step time, a transfer fit, the flow network)
    shared_cores: bool = False
    # the job's traffic is point-to-point transfers (parameter servers), not collectives:
    # what a busy core moves is the exchange's rate, not the 2-process all-reduce's
    point_to_point: bool = False

    @property
    def message_s(self) -> float:
        """Latency of each message on the calibrated link: a message of one call chained
        after another (the profile's `messages.chained`), or the fit's latency without it."""
        assert self.transfer is not None
        return _message_latency(self.profile, self.transfer)

    @property
    def call_s(self) -> float:
        """What a point-to-point call pays before its first message, beyond the message's
        own latency: the fit's latency less `message_s` (0 without a transfer fit)."""
        return 0.0 if self.transfer is None else self.transfer.latency - self.message_s

    @property
    def cpus(self) -> int:
        return self.profile.machine.cpus

    @property
    def core_rate(self) -> float | None:
        """Bytes/s one busy core moves between processes (`loopback_capacity` / cpus): the
        unit the host's cores are shared in, by transfers and, on one machine, compute."""
        if self.transfer is None:
            return None
        return _per_core(self.profile, self.transfer, self.point_to_point)

    @property
    def compute_cores(self) -> float | None:
        """Cores one worker's compute held when its step time was measured: P processes
        computing at once on `cpus` cores, at most one each (`processes` <= cpus: a core
        each). None where compute does not share the cores with transfers (`shared_cores`)."""
        if not self.shared_cores:
            return None
        return _core_share(self.cpus, self.processes)

    @property
    def loopback_capacity(self) -> float | None:
        """Bytes/s all transfers in flight on one host share: cores x what one core moves.

        Moving a tensor costs CPU at both ends (serialising and copying out, copying in and
        deserialising). Two probes keep two processes busy moving tensors both ways: the
        2-process all-reduce (a collective's traffic, with its reductions) and the exchange
        (two transfers at once, nothing reduced: a parameter server's traffic). Each core
        moves what each process moved each way in the probe of the job's traffic, or the
        other's without it; without either, each transfer in flight occupies one core at
        the one-way bandwidth."""
        rate = self.core_rate
        return None if rate is None else self.cpus * rate

    def cluster(self, cluster: ClusterSpec) -> ClusterSpec:
        """The cluster with the calibrated link between processes of one host."""
        if self.transfer is None:
            return cluster
        # SI floats already: copy rather than validate (validation wants unit strings)
        link = cluster.host_link.model_copy(
            update={
                "name": "calibrated",
                "base": None,
                "description": f"point-to-point transfer measured in {self.path}",
                "bandwidth": self.transfer.bandwidth,
                "latency": self.message_s,
            }
        )
        return cluster.model_copy(update={"host_link": link})

    def summary(self) -> dict[str, Any]:
        """For meta.json: which numbers came from the profile and which did not."""
        return {
            "profile": self.path,
            "machine": self.profile.machine.model_dump(mode="json"),
            "used": list(self.used),
            "not_found": list(self.not_found),
        }


def calibrate(spec: ScenarioSpec, profile: Profile | None) -> Calibration | None:
    """The calibration of one point, or None when the scenario names no profile."""
    if profile is None or spec.cluster.profile is None:
        return None
    model, batch, dtype = spec.model, spec.training.batch_per_worker, spec.model.dtype
    processes = spec.cluster.devices_per_host
    # parameter servers and the coordinator listen while the workers compute
    servers = server_processes(spec.strategy.kind, spec.strategy.servers)
    measured_beside = any(e.servers == servers for e in profile.compute) if servers else False
    used: list[str] = []
    not_found: list[str] = []
    step_s, name = None, model.name
    for candidate in (model.name, model.base):
        if candidate is None:
            continue
        step_s = profile.step_time(candidate, batch, dtype, processes=processes, servers=servers)
        if step_s is not None:
            name = candidate
            break
    what = f"{name} batch {batch}" + ("" if dtype == "float32" else f" {dtype}")
    if step_s is not None:
        how = _how(profile, name, batch, dtype, processes)
        beside = f" beside {servers} server process(es)" if measured_beside else ""
        used.append(f"compute: {what} (P={processes}{beside}): {step_s * 1e3:.4g} ms{how}")
    else:
        not_found.append(
            f"compute: no entry for model {model.name} batch {batch} {dtype} in "
            f"{spec.cluster.profile}; catalog FLOP model used"
        )
    transfer = profile.transfer
    # every process of the job on the calibrated machine (dedicated servers too)
    one_machine = spec.cluster.hosts == 1 and transfer is not None
    if transfer is not None:
        scope = "every transfer: one host" if spec.cluster.hosts == 1 else "inside each host"
        used.append(
            f"transfer: latency {transfer.latency * 1e3:.4g} ms, bandwidth "
            f"{transfer.bandwidth / 1e6:.4g} MB/s ({scope})"
        )
        if profile.messages is not None:
            used.append(
                f"messages: {_message_latency(profile, transfer) * 1e3:.3g} ms per message chained "
                f"in one call (a ring's steps); a call of its own (a parameter server's pull "
                f"or push) pays the fit's latency {transfer.latency * 1e3:.4g} ms"
            )
        else:
            not_found.append(
                f"messages: no chain probe in {spec.cluster.profile}; every message pays "
                f"the fit's latency {transfer.latency * 1e3:.4g} ms"
            )
    else:
        not_found.append(
            f"transfer: no fit in {spec.cluster.profile}; catalog host_link "
            f"{spec.cluster.host_link.name} used"
        )
    duplex = 1.0
    pair = _pair(profile)
    if transfer is not None and pair is not None:
        # the collective itself: each of 2 processes sends half the tensor as it receives
        # the other half, twice; its fitted bandwidth is the rate each way
        duplex = min(2.0, 2 * pair.bandwidth / transfer.bandwidth)
        used.append(
            f"exchange: the 2-process all-reduce moved {pair.bandwidth / 1e6:.4g} MB/s each "
            f"way, each process sending as it receives: a process sends and receives together "
            f"{duplex:.3g} x {transfer.bandwidth / 1e6:.4g} MB/s (one way at most "
            f"{transfer.bandwidth / 1e6:.4g}; its latency and the fits of more processes are "
            "not used)"
        )
    elif transfer is not None and profile.exchange is not None:
        duplex = min(2.0, max(1.0, 2 * profile.exchange.bandwidth / transfer.bandwidth))
        used.append(
            f"exchange: {profile.exchange.bandwidth / 1e6:.4g} MB/s each way at once: a "
            f"process sends and receives together {duplex:.3g} x "
            f"{transfer.bandwidth / 1e6:.4g} MB/s (one way at most {transfer.bandwidth / 1e6:.4g})"
        )
    elif transfer is not None:
        not_found.append(
            f"exchange: no fit in {spec.cluster.profile}; what a process sends and receives "
            "shares the one-way bandwidth"
        )
    shared_cores = one_machine and step_s is not None and spec.sim.network_model == "flow"
    point_to_point = spec.strategy.kind == "parameter_server"
    if transfer is not None:
        per_core = _per_core(profile, transfer, point_to_point)
        probe = _core_probe(profile, point_to_point)
        how = "" if probe is None else f", {probe[0]}"
        if point_to_point and probe is not None:
            how += ": the job's traffic is point-to-point transfers"
        cpus = profile.machine.cpus
        shares = (
            f"; each worker's compute is CPU work on them, at most one core: "
            f"{_core_share(cpus, processes):.3g} of a core with P={processes} computing at once"
            if shared_cores
            else ""
        )
        used.append(
            f"cores: {cpus} (transfers in flight on a host share "
            f"{cpus} x {per_core / 1e6:.4g} MB/s{how}{shares})"
        )
    restart_s = None
    if spec.failures and step_s is not None:
        strategy, job_servers = restart_job(spec.strategy)
        restart_s = profile.restart(name, batch, dtype, strategy, spec.workers, job_servers)
        if restart_s is not None:
            used.append(
                f"restart: {restart_s:.3g} s (the job relaunched from its checkpoint to its "
                "first step, measured) replaces checkpoint.restart_overhead"
            )
        else:
            restart_s = profile.startup(name, batch, dtype, processes)
            if restart_s is not None:
                used.append(
                    f"restart: {restart_s:.3g} s (start-up of {processes} single-worker "
                    "process(es) measured with the compute; no relaunch of this job measured) "
                    "replaces checkpoint.restart_overhead"
                )
    coordinator = None
    update_s = None
    closure_s = None
    apply_s = None
    if spec.strategy.kind == "parameter_server":
        servers = spec.strategy.servers
        update_s = _of_model(model, lambda name: profile.update(name, dtype, servers))
        if spec.strategy.sync and update_s is not None:
            used.append(
                f"update: {update_s * 1e3:.3g} ms for {model.name} on {servers} server(s), "
                "one coordinator call"
            )
        elif spec.strategy.sync:
            not_found.append(
                f"update: no entry for {model.name} on {servers} server(s) in "
                f"{spec.cluster.profile}; the update costs the bare coordinator call"
            )
        if profile.coordinator is not None:
            c = profile.coordinator
            if spec.strategy.sync or c.queued is None:
                coordinator = (c.dispatch, c.call)
                how = "dispatched and fetched"
            else:  # an asynchronous job queues its closures: results are fetched later
                coordinator = (c.queued, c.call)
                how = "queued back to back"
            used.append(
                f"coordinator: {coordinator[0] * 1e3:.3g} ms per closure ({how}), "
                f"call {coordinator[1] * 1e3:.3g} ms"
            )
        else:
            not_found.append(
                f"coordinator: no round trips in {spec.cluster.profile}; parameter-server "
                "updates cost their transfers only"
            )
        closure_s, line = _closures(spec, profile, one_machine)
        (used if closure_s is not None else not_found).append(line)
        if closure_s is None and not spec.strategy.sync and update_s is not None:
            apply_s = max(update_s - (coordinator[1] if coordinator else 0.0), 0.0)
            used.append(
                f"update: an asynchronous closure pays the update of {model.name} on "
                f"{servers} server(s), {update_s * 1e3:.3g} ms, less the bare call, after "
                "its push"
            )
    return Calibration(
        update_s=update_s,
        closure_s=closure_s,
        apply_s=apply_s,
        restart_s=restart_s,
        coordinator=coordinator,
        path=spec.cluster.profile,
        profile=profile,
        processes=processes,
        step_s=step_s,
        transfer=transfer,
        duplex=duplex,
        one_machine=one_machine,
        shared_cores=shared_cores,
        point_to_point=point_to_point,
        used=tuple(used),
        not_found=tuple(not_found),
    )


def _of_model(model: Any, find: Callable[[str], T | None]) -> T | None:
    """What the profile has for the model, or failing that for its catalog `base`."""
    for name in (model.name, model.base):
        if name is not None and (found := find(name)) is not None:
            return found
    return None


def _closures(
    spec: ScenarioSpec, profile: Profile, one_machine: bool
) -> tuple[tuple[float, float] | None, str]:
    """A closure's pull and push on the point's servers, each alone, and the line saying
    so. The profile's closures of the model (one worker, nothing computed, each
    dispatched and fetched alone): the pull is the reading closure less the bare
    dispatch; the push is the accumulating closure (synchronous) or the applying one
    (asynchronous: push and update) less the reading one. Differences below zero are
    the probes' noise and count as none. They were measured on one machine: they hold
    only where the job is placed on it (`one_machine`, as the topology places it); a
    cluster of more hosts moves its tensors over its network instead."""
    model, dtype, servers = spec.model, spec.model.dtype, spec.strategy.servers
    measured = _of_model(model, lambda name: profile.closures(name, dtype, servers))
    if measured is None:
        return None, (
            f"closures: none of {model.name} on {servers} server(s) in "
            f"{spec.cluster.profile}; pulls and pushes from the transfer fit"
        )
    if not one_machine:
        where = (
            f"this cluster has {spec.cluster.hosts} hosts"
            if spec.cluster.hosts > 1
            else "the profile has no transfer fit to place the job on it"
        )
        return None, (
            f"closures: measured on one machine, and {where}; pulls and pushes move the "
            "shards' bytes"
        )
    read, accumulate, apply = measured
    dispatch = profile.coordinator.dispatch if profile.coordinator is not None else 0.0
    pull = max(read - dispatch, 0.0)
    push = max((accumulate if spec.strategy.sync else apply) - read, 0.0)
    what = "push" if spec.strategy.sync else "push and update"
    return (pull, push), (
        f"closures: a pull of {model.name} from {servers} server(s) takes "
        f"{pull * 1e3:.3g} ms alone, a {what} {push * 1e3:.3g} ms (closures on one "
        "worker, less the dispatch); closures in flight at once share the host's cores "
        "as transfers do"
    )


def _message_latency(profile: Profile, transfer: Fit) -> float:
    """Each message of one call chained after another: the chain probe's slope (never more
    than the fit's latency), or the fit's latency without the probe."""
    if profile.messages is None:
        return transfer.latency
    return min(profile.messages.chained, transfer.latency)


def _core_share(cpus: int, processes: int) -> float:
    """Cores each of `processes` computing at once holds on `cpus` cores: one at most."""
    return min(1.0, cpus / processes)


def _per_core(profile: Profile, transfer: Fit, point_to_point: bool = False) -> float:
    """Bytes/s one busy core moves between processes: what each process moved each way in
    the probe of the job's traffic, the 2-process all-reduce for collectives, the exchange
    for point-to-point transfers (`point_to_point`), or the other probe without it; the
    one-way bandwidth without either."""
    found = _core_probe(profile, point_to_point)
    return transfer.bandwidth if found is None else found[1].bandwidth


def _core_probe(profile: Profile, point_to_point: bool) -> tuple[str, Fit] | None:
    """The probe `_per_core` takes its rate from, and how to say so."""
    pair = ("what each process of the 2-process all-reduce moved each way", _pair(profile))
    exchange = ("what each process moved each way in the exchange", profile.exchange)
    first, second = (exchange, pair) if point_to_point else (pair, exchange)
    for how, fit in (first, second):
        if fit is not None:
            return how, fit
    return None


def _pair(profile: Profile) -> Fit | None:
    """The profile's 2-process all-reduce fit, if it has one."""
    return next((fit for fit in profile.allreduce if fit.workers == 2), None)


def _how(profile: Profile, model: str, batch: int, dtype: str, processes: int) -> str:
    """How the step time was had: measured, or extrapolated from which process count."""
    counts = sorted(
        e.processes
        for e in profile.compute
        if e.model == model and e.batch_per_worker == batch and e.dtype == dtype
    )
    if processes in counts:
        return ""
    below = [c for c in counts if c < processes]
    if below:
        return f", extrapolated from P={below[-1]} by sharing the cores"
    return f", taken from P={counts[0]} (fewest measured)"


def run_summary(points: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """meta.json's `calibration` for a run: the points' summaries merged (first seen
    first), and each point's own under `points`. `profile` and `machine` are lists only
    when the sweep names several profiles."""
    profiles: list[Any] = []
    machines: list[Any] = []
    used: list[str] = []
    not_found: list[str] = []
    for summary in points.values():
        if summary["profile"] not in profiles:
            profiles.append(summary["profile"])
            machines.append(summary["machine"])
        for key, out in (("used", used), ("not_found", not_found)):
            out.extend(v for v in summary[key] if v not in out)
    return {
        "profile": profiles[0] if len(profiles) == 1 else profiles,
        "machine": machines[0] if len(machines) == 1 else machines,
        "used": used,
        "not_found": not_found,
        "points": {
            point: {"used": s["used"], "not_found": s["not_found"]} for point, s in points.items()
        },
    }
