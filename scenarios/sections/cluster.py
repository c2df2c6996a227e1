"""The cluster of a scenario (`cluster:`): hosts of devices, the links inside a host and
the network between hosts, each a catalog name or its own figures; what a host-hour or a
device-hour costs, and what the devices and hosts draw (docs/scenarios.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from ..fields import (
    COMPUTE_DTYPES,
    Bandwidth,
    Bytes,
    Dollars,
    FlopRate,
    Seconds,
    Strict,
    Watts,
    _catalog_ref,
)

#: where an instance's price applies: on-demand (the list price) or spot (interruptible)
Market = Literal["on_demand", "spot"]
#: a price: one amount, or one per market (a catalog instance lists both where published)
Hourly = Dollars | dict[Market, Dollars]


class PowerSpec(Strict):
    """What one device draws: at its thermal design power when busy, `idle` when it waits
    (both in watts), and where the figures come from."""

    tdp: Watts
    idle: Watts
    source: str = ""

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> PowerSpec:
        if self.idle > self.tdp:
            raise ValueError(f"idle ({self.idle:g} W) above tdp ({self.tdp:g} W)")
        return self


class DeviceSpec(Strict):
    """One accelerator (one worker each): peak FLOP/s per dtype x efficiency, or measured."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    peak_flops: dict[str, FlopRate] | None = None
    efficiency: (
        Annotated[float, Field(gt=0, le=1)] | dict[str, Annotated[float, Field(gt=0, le=1)]]
    ) = 0.5
    memory: Bytes | None = None
    memory_bandwidth: Bandwidth | None = None
    # what a transformer's large matrix products reach of `peak_flops` (per dtype), and
    # its memory-bound kernels (norms, softmax, dropout, the optimizer) of
    # `memory_bandwidth`: the transformer layouts' model (kind hybrid); `efficiency` is
    # what a whole CNN step reaches
    matmul_efficiency: dict[str, Annotated[float, Field(gt=0, le=1)]] | None = None
    memory_efficiency: float | None = Field(default=None, gt=0, le=1)
    samples_per_s: dict[str, Annotated[float, Field(gt=0)]] | None = None
    # gpu: collectives run on NCCL (its per-collective and per-step latencies apply);
    # cpu: TensorFlow's gRPC ring on the host
    kind: Literal["gpu", "cpu"] = "gpu"
    # what it draws (energy_kwh); null: unknown, and so is the point's energy
    power: PowerSpec | None = None

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _one_figure_for_all(cls, value: Any) -> Any:
        return {"any": value} if isinstance(value, str) else value

    @field_validator("peak_flops", "efficiency", "matmul_efficiency")
    @classmethod
    def _known_dtypes(cls, value: Any) -> Any:
        for key in value if isinstance(value, dict) else ():
            if key not in COMPUTE_DTYPES:
                raise ValueError(f"unknown dtype {key!r}; use one of {', '.join(COMPUTE_DTYPES)}")
        return value

    @model_validator(mode="after")
    def _needs_speed(self) -> DeviceSpec:
        if not self.peak_flops and not self.samples_per_s:
            raise ValueError("a device needs peak_flops (with efficiency) or samples_per_s")
        return self

    def compute_dtype(self, dtype: str) -> str:
        """The arithmetic a model of `dtype` runs in: float32 runs as TF32 where the device
        has it (TensorFlow's default for convolutions and matmuls on Ampere and newer)."""
        if dtype == "float32" and "tf32" in (self.peak_flops or {}):
            return "tf32"
        return dtype

    def peak_for(self, dtype: str) -> float | None:
        """Datasheet peak for a compute dtype, or the figure given for all dtypes."""
        table = self.peak_flops or {}
        return table.get(dtype, table.get("any"))

    def efficiency_for(self, dtype: str) -> float | None:
        """Sustained fraction of peak for a compute dtype (one number serves all)."""
        if isinstance(self.efficiency, dict):
            return self.efficiency.get(dtype, self.efficiency.get("any"))
        return self.efficiency


class LinkSpec(Strict):
    """A link between the devices of one host (per device, per direction)."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    # the share of `bandwidth` that transfers achieve (protocol overhead)
    goodput: float = Field(default=1.0, gt=0, le=1)
    # what one step of a GPU collective (NCCL) costs on this link, beyond its bytes
    step_latency: Seconds = 0.0


class TierSpec(Strict):
    """One tier of a fat-tree, from the leaves up: `hosts` under one switch group of the
    tier (a leaf's hosts; a pod's; the whole fabric's), and the tier's oversubscription
    (its hosts' bandwidth down over its bandwidth up, 1: non-blocking)."""

    hosts: int = Field(ge=1)
    oversubscription: float = Field(default=1.0, ge=1.0)


class NetworkSpec(Strict):
    """Each host's NIC into one switch (per direction), and the switch's oversubscription;
    or, with `rails`, that many NICs a host, NIC i of every host on leaf switch i (a
    rail-optimized fabric), and `tiers` of a fat-tree above the leaves."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    oversubscription: float = Field(default=1.0, ge=1.0)
    # tcp: kernel sockets (gRPC, NCCL's socket transport); rdma: verbs (InfiniBand, RoCE)
    protocol: Literal["tcp", "rdma"] = "tcp"
    # the share of `bandwidth` that transfers achieve (headers, protocol overhead)
    goodput: float = Field(default=1.0, gt=0, le=1)
    # what one step of a GPU collective (NCCL) costs across the network, beyond its bytes
    step_latency: Seconds = 0.0
    # the payload one TCP connection carries at most (one core drives it); a collective's
    # transfer between hosts moves at most its library's connections x this, a worker's
    # pulls from and pushes to one parameter server this together. Read only with
    # protocol tcp; null: no ceiling beyond the link's share
    stream_bandwidth: Bandwidth | None = None
    # NICs per host, each of `bandwidth`, NIC i of every host on rail (leaf switch) i; null:
    # one NIC a host. Read by the transformer layouts' model (kind hybrid)
    rails: int | None = Field(default=None, ge=1)
    # the fat-tree above the NICs, leaves first: a message between two hosts crosses up to
    # the lowest tier whose switch group holds both, at the NIC's bandwidth over the
    # product of the oversubscriptions on its way (docs/simulator.md, "Fat-trees");
    # empty: one switch of `oversubscription`
    tiers: tuple[TierSpec, ...] = ()

    @model_validator(mode="after")
    def _tiers_grow(self) -> NetworkSpec:
        for lower, upper in zip(self.tiers, self.tiers[1:], strict=False):
            if upper.hosts < lower.hosts or upper.hosts % lower.hosts:
                raise ValueError(
                    f"tiers: a tier of {upper.hosts} hosts above one of {lower.hosts}: each "
                    "tier holds a whole number of the groups below it"
                )
        return self


class PriceSpec(Strict):
    """What renting the cluster costs, in USD per host-hour (a cloud instance) or per
    device-hour: a catalog instance (`p4d.24xlarge`, prices.yaml) or an amount of its own
    (`{per_host_hour: 32.77 USD}`), in the on-demand or the spot market."""

    name: str = "custom"
    base: str | None = None
    description: str = ""
    provider: str = ""
    region: str = ""
    # the catalog device an instance carries, and how many per host (what it rents out)
    device: str | None = None
    devices_per_host: int | None = Field(default=None, ge=1)
    per_host_hour: Hourly | None = None
    per_device_hour: Hourly | None = None
    market: Market = "on_demand"
    source: str = ""
    date: str = ""  # when the price was read (ISO date), prices change

    @model_validator(mode="after")
    def _one_rate_for_the_market(self) -> PriceSpec:
        given = [r for r in (self.per_host_hour, self.per_device_hour) if r is not None]
        if len(given) != 1:
            raise ValueError("give per_host_hour or per_device_hour (one of them, in USD)")
        if isinstance(given[0], dict) and self.market not in given[0]:
            listed = ", ".join(given[0]) or "none"
            raise ValueError(f"no {self.market} price for {self.name} (listed: {listed})")
        return self

    @property
    def per(self) -> Literal["host", "device"]:
        """What one unit of the rate rents: a host (instance) or a device."""
        return "host" if self.per_host_hour is not None else "device"

    @property
    def usd_per_hour(self) -> float:
        """USD per hour of one host or device (`per`), in the scenario's market."""
        rate = self.per_host_hour if self.per_host_hour is not None else self.per_device_hour
        assert rate is not None  # _one_rate_for_the_market
        return rate[self.market] if isinstance(rate, dict) else rate


class ClusterSpec(Strict):
    hosts: int = Field(default=1, ge=1)
    devices_per_host: int = Field(default=1, ge=1)
    # default: the catalog's cpu (one core per worker), what run-real runs on a machine
    # without GPUs
    device: Annotated[DeviceSpec, _catalog_ref("device")] = Field(
        default="cpu", validate_default=True
    )
    host_link: Annotated[LinkSpec, _catalog_ref("link")] = Field(
        default="pcie3", validate_default=True
    )
    network: Annotated[NetworkSpec, _catalog_ref("network")] = Field(
        default="25GbE", validate_default=True
    )
    # between the devices of a host and its CPU (where colocated parameter servers run):
    # one port, whatever `host_link` joins the devices to each other
    cpu_link: Annotated[LinkSpec, _catalog_ref("link")] = Field(
        default="pcie3", validate_default=True
    )
    profile: str | None = None
    # what renting it costs (cost_usd); null: unknown
    price: Annotated[PriceSpec | None, _catalog_ref("price")] = None
    # what a host draws beside its devices (CPUs, memory, NICs, fans); null: the default
    # for the device's kind (costing.host_power_w, docs/scenarios.md)
    host_power: Watts | None = None
    # power usage effectiveness: the data centre's draw per watt of its machines
    pue: float = Field(default=1.1, ge=1.0)

    @property
    def workers(self) -> int:
        return self.hosts * self.devices_per_host
