"""Which numbers of a calibration profile a point took, and which it lacked, in words.

meta.json's `calibration` holds these lines (`used`, `not_found`), and `simulate` prints
the missing ones. They are written from a `Calibration` (`sim/costs/measured.py`) and the
point's spec; nothing here computes a cost.
"""

from __future__ import annotations

from typing import Any

from measured.profile import Profile
from scenarios.spec import ScenarioSpec

from .measured import EXCHANGE_PROBE, PAIR_PROBE, Calibration, core_share, pair_fit


def explain(spec: ScenarioSpec, cal: Calibration) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(used, not_found): one line per number taken from the profile or missing from it."""
    used: list[str] = []
    missing: list[str] = []
    _compute_lines(spec, cal, used, missing)
    st = spec.strategy
    if st.pipelined and st.stages > 1 and cal.step_s is not None:
        _pipeline_lines(spec, cal, used, missing)
    if st.in_graph and spec.workers > 1:
        _in_graph_lines(spec, cal, used, missing)
    if cal.transfer is None:
        missing.append(
            f"transfer: no fit in {cal.path}; catalog host_link {spec.cluster.host_link.name} used"
        )
    else:
        _transfer_lines(spec, cal, used, missing)
    if cal.restart_s is not None:
        used.append(_restart_line(cal))
    if spec.strategy.serves_parameters:
        _servers_lines(spec, cal, used, missing)
    return tuple(used), tuple(missing)


def _compute_lines(
    spec: ScenarioSpec, cal: Calibration, used: list[str], missing: list[str]
) -> None:
    """The step time: measured (or extrapolated) for how many processes, beside how many
    servers, and what stages computing side by side share; or the catalog's FLOP model."""
    model, batch, dtype = spec.model, spec.training.batch_per_worker, spec.model.dtype
    if cal.step_s is None:
        missing.append(
            f"compute: no entry for model {model.name} batch {batch} {dtype} in {cal.path}; "
            "catalog FLOP model used"
        )
        return
    what = f"{cal.step_model} batch {batch}" + ("" if dtype == "float32" else f" {dtype}")
    beside = ""
    if cal.servers_beside and any(e.servers == cal.servers_beside for e in cal.profile.compute):
        beside = f" beside {cal.servers_beside} server process(es)"
    how = _how(cal.profile, cal.step_model, batch, dtype, cal.processes)
    used.append(f"compute: {what} (P={cal.processes}{beside}): {cal.step_s * 1e3:.4g} ms{how}")
    if cal.side_by_side is not None:
        processes, side_s = cal.side_by_side
        share = processes * cal.step_s / side_s
        used.append(
            f"compute side by side: {processes} stages at once took {side_s * 1e3:.4g} ms "
            f"a step: the host's stages compute {share:.3g} cores' worth together"
        )


def _pipeline_lines(
    spec: ScenarioSpec, cal: Calibration, used: list[str], missing: list[str]
) -> None:
    """What a pipeline stage's messages cost its core, from the fed stage."""
    st = spec.strategy
    if cal.stage_message_s > 0:
        used.append(
            f"pipeline messages: {cal.stage_message_s * 1e3:.3g} ms of a stage's core for "
            f"each activation or gradient it sends or receives (the stage fed by one of "
            f"its own, {st.micro_batches} micro-batches)"
        )
    else:
        missing.append(
            f"pipeline messages: no fed stage at {st.micro_batches} micro-batches in "
            f"{cal.path} (or it measured no cost); the stages' messages cost their cores nothing"
        )


def _transfer_lines(
    spec: ScenarioSpec, cal: Calibration, used: list[str], missing: list[str]
) -> None:
    """The transfer fit, what a message of a chain pays, what a process moves both ways at
    once, and the cores transfers share."""
    transfer, profile, path = cal.transfer, cal.profile, cal.path
    assert transfer is not None
    scope = "every transfer: one host" if spec.cluster.hosts == 1 else "inside each host"
    bandwidth = transfer.bandwidth / 1e6
    used.append(
        f"transfer: latency {transfer.latency * 1e3:.4g} ms, bandwidth "
        f"{bandwidth:.4g} MB/s ({scope})"
    )
    if profile.messages is not None:
        used.append(
            f"messages: {cal.message_s * 1e3:.3g} ms per message chained in one call (a "
            f"ring's steps); a call of its own (a parameter server's pull or push) pays "
            f"the fit's latency {transfer.latency * 1e3:.4g} ms"
        )
    else:
        missing.append(
            f"messages: no chain probe in {path}; every message pays the fit's latency "
            f"{transfer.latency * 1e3:.4g} ms"
        )
    if cal.duplex_from == PAIR_PROBE:
        pair = pair_fit(profile)
        assert pair is not None
        used.append(
            f"exchange: the 2-process all-reduce moved {pair.bandwidth / 1e6:.4g} MB/s "
            f"each way, each process sending as it receives: a process sends and receives "
            f"together {cal.duplex:.3g} x {bandwidth:.4g} MB/s (one way at most "
            f"{bandwidth:.4g}; its latency and the fits of more processes are not used)"
        )
    elif cal.duplex_from == EXCHANGE_PROBE:
        assert profile.exchange is not None
        used.append(
            f"exchange: {profile.exchange.bandwidth / 1e6:.4g} MB/s each way at once: a "
            f"process sends and receives together {cal.duplex:.3g} x {bandwidth:.4g} MB/s "
            f"(one way at most {bandwidth:.4g})"
        )
    else:
        missing.append(
            f"exchange: no fit in {path}; what a process sends and receives shares the "
            "one-way bandwidth"
        )
    used.append(_cores_line(spec, cal))


def _restart_line(cal: Calibration) -> str:
    """What relaunching the job costs, and how it was measured."""
    if cal.restart_from == "restart":
        return (
            f"restart: {cal.restart_s:.3g} s (the job relaunched from its checkpoint to its "
            "first step, measured) replaces checkpoint.restart_overhead"
        )
    return (
        f"restart: {cal.restart_s:.3g} s (start-up of {cal.processes} single-worker "
        "process(es) measured with the compute; no relaunch of this job measured) "
        "replaces checkpoint.restart_overhead"
    )


def _in_graph_lines(
    spec: ScenarioSpec, cal: Calibration, used: list[str], missing: list[str]
) -> None:
    devices, path = spec.cluster.devices_per_host, cal.path
    if not cal.one_machine:
        missing.append(
            f"in graph: {spec.cluster.hosts} host(s) and no transfer fit in {path}: the "
            "cluster is not the calibrated machine; catalog collectives and no dispatch cost"
        )
        return
    if cal.in_graph is not None:
        fit = cal.in_graph
        used.append(
            f"in graph: the all-reduce among {devices} devices of one process, latency "
            f"{fit.latency * 1e3:.4g} ms, bandwidth {fit.bandwidth / 1e6:.4g} MB/s"
        )
    else:
        missing.append(
            f"in graph: no all-reduce among {devices} devices of one process in {path}; "
            "the all-reduce runs over the transfer fit"
        )
    if cal.dispatch_s > 0:
        used.append(
            f"in graph: the one client costs each of its {devices} devices "
            f"{cal.dispatch_s * 1e3:.3g} ms a step (dispatch probe), "
            f"{devices * cal.dispatch_s * 1e3:.3g} ms in the compute above"
        )
    else:
        missing.append(
            f"in graph: no dispatch probe for {devices} devices in {path} (or it measured "
            "no cost); the one client costs nothing beyond the compute"
        )


_PROBES = {
    PAIR_PROBE: "what each process of the 2-process all-reduce moved each way",
    EXCHANGE_PROBE: "what each process moved each way in the exchange",
}


def _cores_line(spec: ScenarioSpec, cal: Calibration) -> str:
    assert cal.core_rate is not None
    point_to_point = spec.strategy.serves_parameters
    how = f", {_PROBES[cal.core_from]}" if cal.core_from in _PROBES else ""
    if point_to_point and cal.core_from in _PROBES:
        how += ": the job's traffic is point-to-point transfers"
    shares = (
        f"; each worker's compute is CPU work on them, at most one core: "
        f"{core_share(cal.cpus, cal.processes):.3g} of a core with P={cal.processes} "
        "computing at once"
        if cal.shared_cores
        else ""
    )
    return (
        f"cores: {cal.cpus} (transfers in flight on a host share {cal.cpus} x "
        f"{cal.core_rate / 1e6:.4g} MB/s{how}{shares})"
    )


def _servers_lines(
    spec: ScenarioSpec, cal: Calibration, used: list[str], missing: list[str]
) -> None:
    model, path, servers = spec.model, cal.path, spec.strategy.servers
    sync = spec.strategy.sync
    if sync and cal.update_s is not None:
        used.append(
            f"update: {cal.update_s * 1e3:.3g} ms for {model.name} on {servers} server(s), "
            "one coordinator call"
        )
    elif sync:
        missing.append(
            f"update: no entry for {model.name} on {servers} server(s) in {path}; the update "
            "costs the bare coordinator call"
        )
    if cal.coordinator is not None:
        queued = not sync and cal.profile.coordinator is not None
        queued = queued and cal.profile.coordinator.queued is not None  # type: ignore[union-attr]
        how = "queued back to back" if queued else "dispatched and fetched"
        used.append(
            f"coordinator: {cal.coordinator[0] * 1e3:.3g} ms per closure ({how}), "
            f"call {cal.coordinator[1] * 1e3:.3g} ms"
        )
    else:
        missing.append(
            f"coordinator: no round trips in {path}; parameter-server updates cost their "
            "transfers only"
        )
    if cal.closure_s is not None:
        pull, push = cal.closure_s
        what = "push" if sync else "push and update"
        used.append(
            f"closures: a pull of {model.name} from {servers} server(s) takes "
            f"{pull * 1e3:.3g} ms alone, a {what} {push * 1e3:.3g} ms (closures on one "
            "worker, less the dispatch); closures in flight at once share the host's cores "
            "as transfers do"
        )
    elif cal.closures_unplaced:
        where = (
            f"this cluster has {spec.cluster.hosts} hosts"
            if spec.cluster.hosts > 1
            else "the profile has no transfer fit to place the job on it"
        )
        missing.append(
            f"closures: measured on one machine, and {where}; pulls and pushes move the "
            "shards' bytes"
        )
    else:
        missing.append(
            f"closures: none of {model.name} on {servers} server(s) in {path}; pulls and "
            "pushes from the transfer fit"
        )
    if cal.apply_s is not None:
        assert cal.update_s is not None
        used.append(
            f"update: an asynchronous closure pays the update of {model.name} on {servers} "
            f"server(s), {cal.update_s * 1e3:.3g} ms, less the bare call, after its push"
        )


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


def summary(spec: ScenarioSpec, cal: Calibration) -> dict[str, Any]:
    """For meta.json: which numbers came from the profile and which did not."""
    used, missing = explain(spec, cal)
    return {
        "profile": cal.path,
        "machine": cal.profile.machine.model_dump(mode="json"),
        "used": list(used),
        "not_found": list(missing),
    }


def run_summary(points: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """meta.json's `calibration` for a run: the points' summaries merged (first seen
    first), and each point's own under `points`. `profile` and `machine` are lists only
    when the sweep names several profiles."""
    profiles: list[Any] = []
    machines: list[Any] = []
    used: list[str] = []
    not_found: list[str] = []
    for point in points.values():
        if point["profile"] not in profiles:
            profiles.append(point["profile"])
            machines.append(point["machine"])
        for key, out in (("used", used), ("not_found", not_found)):
            out.extend(v for v in point[key] if v not in out)
    return {
        "profile": profiles[0] if len(profiles) == 1 else profiles,
        "machine": machines[0] if len(machines) == 1 else machines,
        "used": used,
        "not_found": not_found,
        "points": {
            point: {"used": s["used"], "not_found": s["not_found"]} for point, s in points.items()
        },
    }
