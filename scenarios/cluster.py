"""The cluster of a scenario (`cluster:`): hosts of devices, the links inside a host and
the network between hosts, each a catalog name or its own figures (docs/scenarios.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from .fields import (
    COMPUTE_DTYPES,
    Bandwidth,
    Bytes,
    FlopRate,
    Seconds,
    Strict,
    _catalog_ref,
)


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
    samples_per_s: dict[str, Annotated[float, Field(gt=0)]] | None = None
    # gpu: collectives run on NCCL (its per-collective and per-step latencies apply);
    # cpu: TensorFlow's gRPC ring on the host
    kind: Literal["gpu", "cpu"] = "gpu"

    @field_validator("peak_flops", mode="before")
    @classmethod
    def _one_figure_for_all(cls, value: Any) -> Any:
        return {"any": value} if isinstance(value, str) else value

    @field_validator("peak_flops", "efficiency")
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


class NetworkSpec(Strict):
    """Each host's NIC into one switch (per direction), and the switch's oversubscription."""

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

    @property
    def workers(self) -> int:
        return self.hosts * self.devices_per_host
