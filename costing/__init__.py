"""Money and energy of a run: results.csv's `cost_usd`, `energy_kwh`,
`cost_to_target_usd` and `energy_to_target_kwh`.

Both backends call `point_costs` on a point's finished results row (simulated or
measured), so the arithmetic lives here once, below both (docs/architecture.md):

- time billed: the whole run, `training_time_s` + `evaluation_time_s` (the evaluations
  are run, and paid for, too); to the target, `time_to_target_s` (evaluations included).
- money: the price's USD per hour x its units (hosts for a per-host-hour price, devices
  for a per-device-hour one) x hours. Dedicated parameter-server hosts are not priced.
- energy: each device draws `idle + (tdp - idle) x busy` with busy = the point's
  `compute_time_frac`; each host draws its own `host_power` beside its devices; the data
  centre draws `pue` times what its machines draw:
  `E = pue x (workers x (idle + (tdp - idle) x busy) + hosts x host_power) x seconds`.

A figure is empty (NaN) where an input is unknown: no `cluster.price`, a device without
`power`, a point that was not timed, no target reached. `point_costs` also says, for
meta.json's `costs`, which figures were known and where they came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from scenarios import vocab
from scenarios.sections.cluster import ClusterSpec
from scenarios.spec import ScenarioSpec

#: results.csv's columns this package fills (the vocabulary lists them last)
COLUMNS = vocab.MONEY_AND_ENERGY

J_PER_KWH = 3.6e6

#: A host's own draw beside its devices when `cluster.host_power` is not given, as
#: (watts per host, watts per device it holds), by the device's kind. ESTIMATES:
#: gpu: the rest of an 8-GPU server at its maximum is 6.5 kW - 8 x 400 W = 3.3 kW (DGX
#: A100 datasheet, 6.5 kW max) or 10.2 kW - 8 x 700 W = 4.6 kW (DGX H100, 10.2 kW max);
#: Latif et al. 2024 (arXiv:2412.08602) measured an 8-GPU H100 HGX node at 8.4 kW at
#: most while training, so at most 2.8 kW beside GPUs at their 700 W. Two CPU sockets,
#: memory, NICs, NVSwitches and fans at about half their maximum while GPUs train:
#: ~1.5 kW for an 8-GPU server, 300 W + 150 W per device (330-450 W for a 1-GPU host).
#: cpu (a worker is one core, whose own draw the device counts): memory, board, NIC,
#: disks, fans and power-supply losses of a one-socket server, ~60 W.
HOST_POWER_W: dict[str, tuple[float, float]] = {"gpu": (300.0, 150.0), "cpu": (60.0, 0.0)}
HOST_POWER_SOURCE = "ESTIMATE: costing.HOST_POWER_W (docs/scenarios.md, 'Money and energy')"


def host_power_w(cluster: ClusterSpec) -> tuple[float, str]:
    """Watts one host draws beside its devices, and where the figure comes from."""
    if cluster.host_power is not None:
        return cluster.host_power, "cluster.host_power"
    per_host, per_device = HOST_POWER_W[cluster.device.kind]
    return per_host + per_device * cluster.devices_per_host, HOST_POWER_SOURCE


def cost_usd(cluster: ClusterSpec, seconds: float) -> float:
    """USD of renting the cluster for `seconds` at its price (NaN without one)."""
    price = cluster.price
    if price is None or not math.isfinite(seconds):
        return math.nan
    units = cluster.hosts if price.per == "host" else cluster.workers
    return price.usd_per_hour * units * seconds / 3600.0


def power_w(cluster: ClusterSpec, busy: float) -> float:
    """Watts the data centre draws for the cluster with its devices busy a share `busy`
    of the time (NaN where a device's power is unknown)."""
    power = cluster.device.power
    if power is None or not math.isfinite(busy):
        return math.nan
    busy = min(max(busy, 0.0), 1.0)
    device = power.idle + (power.tdp - power.idle) * busy
    host, _ = host_power_w(cluster)
    return cluster.pue * (cluster.workers * device + cluster.hosts * host)


def _number(row: Mapping[str, Any], column: str) -> float:
    value = row.get(column)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def billed_seconds(row: Mapping[str, Any]) -> float:
    """The whole run's seconds: training plus its evaluations (NaN where not timed)."""
    evaluation = _number(row, "evaluation_time_s")
    return _number(row, "training_time_s") + (evaluation if math.isfinite(evaluation) else 0.0)


def point_costs(
    spec: ScenarioSpec, row: Mapping[str, Any]
) -> tuple[dict[str, float], dict[str, Any]]:
    """results.csv's money and energy columns of a point's finished row, and meta.json's
    note of them: which figures were known and where each input came from."""
    cluster = spec.cluster
    whole, to_target = billed_seconds(row), _number(row, "time_to_target_s")
    watts = power_w(cluster, _number(row, "compute_time_frac"))
    columns = {
        "cost_usd": cost_usd(cluster, whole),
        "energy_kwh": watts * whole / J_PER_KWH,
        "cost_to_target_usd": cost_usd(cluster, to_target),
        "energy_to_target_kwh": watts * to_target / J_PER_KWH,
    }
    return columns, _note(spec, row, columns, watts)


def _note(
    spec: ScenarioSpec, row: Mapping[str, Any], columns: Mapping[str, float], watts: float
) -> dict[str, Any]:
    cluster = spec.cluster
    timed = math.isfinite(billed_seconds(row))
    price, power = cluster.price, cluster.device.power
    note: dict[str, Any] = {"known": [c for c in COLUMNS if math.isfinite(columns[c])]}
    if price is None:
        note["price"] = {"known": False, "why": "no cluster.price"}
    else:
        note["price"] = {
            "known": True,
            "name": price.name,
            "market": price.market,
            f"usd_per_{price.per}_hour": price.usd_per_hour,
            "source": price.source or "the scenario",
            "date": price.date,
        }
        if _dedicated(spec):
            note["price"]["not_priced"] = "the dedicated parameter-server hosts"
    if power is None:
        note["power"] = {"known": False, "why": f"no power for device {cluster.device.name}"}
    else:
        host, host_source = host_power_w(cluster)
        note["power"] = {
            "known": True,
            "device": cluster.device.name,
            "tdp_w": power.tdp,
            "idle_w": power.idle,
            "source": power.source or "the scenario",
            "busy_share": _number(row, "compute_time_frac"),
            "host_power_w": host,
            "host_power_source": host_source,
            "pue": cluster.pue,
            "facility_power_w": watts,
        }
    if not timed:
        note["why_empty"] = "the point was not timed (it does not fit its devices)"
    elif not math.isfinite(_number(row, "time_to_target_s")):
        note["why_empty_to_target"] = "no time to target (meta.json's targets says why)"
    return note


def _dedicated(spec: ScenarioSpec) -> bool:
    strategy = spec.strategy
    return bool(strategy.parameter_servers) and strategy.placement == "dedicated"
