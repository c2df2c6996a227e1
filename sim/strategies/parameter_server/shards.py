"""What a parameter-server step moves: the model's variables dealt to shards (`deal`,
the one deal both `training.py` and `sim/strategies/pipeline.py` use), and the consecutive layers
moved together (`Group`), each with its bytes on every shard.

`dataflow.py` moves a step's groups; how they are chosen is docs/simulator.md,
"Synchronous parameter servers".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

#: a step moves the model in at most this many groups of layers (fusion_buffer not given)
MAX_GROUPS = 16


#: MXNet's KVStore sends an array of fewer elements than this whole to one server and
#: splits a larger one over all servers: the default of MXNET_KVSTORE_BIGARRAY_BOUND,
#: `dmlc::GetEnv("MXNET_KVSTORE_BIGARRAY_BOUND", 1000 * 1000)` in KVStoreDist's
#: constructor (apache/mxnet src/kvstore/kvstore_dist.h, commit 0012f772 and 1.9.1)
MXNET_BIGARRAY_BOUND = 1_000_000
#: MXNet's hash of a small array's key: server (key x 9973) mod servers (same file,
#: EncodeKey at 0012f772, EncodeDefaultKey at 1.9.1)
MXNET_KEY_HASH = 9973


def assign(params: np.ndarray, shards: int, how: str) -> np.ndarray:
    """Parameters of each variable held by each shard: (variables, shards).

    round_robin: whole variables to shards in turn, in creation order (TF's
    replica_device_setter, and ParameterServerStrategy without a partitioner); greedy:
    each whole variable, in creation order, to the shard holding the fewest parameters so
    far (TF's GreedyLoadBalancingStrategy); sliced: every variable split evenly over all
    shards (a fixed-shards partitioner); mxnet: as MXNet's distributed KVStore places its
    keys (`mxnet_assign`). Variables of no parameters hold nothing.
    """
    if how == "mxnet":
        return mxnet_assign(params, shards)
    held = np.zeros((len(params), shards))
    if how == "sliced":
        held += np.asarray(params, dtype=float)[:, None] / shards
        return held
    if how not in ("round_robin", "greedy"):
        raise ValueError(f"unknown partition {how!r}")
    load = np.zeros(shards)
    turn = 0
    for i, p in enumerate(params):
        if p <= 0:
            continue
        j = turn % shards if how == "round_robin" else int(np.argmin(load))
        turn += 1
        held[i, j] = p
        load[j] += p
    return held


def mxnet_assign(params: np.ndarray, shards: int) -> np.ndarray:
    """Parameters of each variable held by each shard, (variables, shards), as MXNet's
    distributed KVStore places them: variable k is key k (MXNet numbers its arrays 0, 1,
    ... in parameter order); an array of fewer than MXNET_BIGARRAY_BOUND elements goes
    whole to server (k x 9973) mod shards, a larger one is cut at round(n / shards x i),
    rounded half away from zero as C's `round`, server i holding the part between cuts i
    and i + 1."""
    held = np.zeros((len(params), shards))
    for key, n in enumerate(np.asarray(params, dtype=float)):
        if n <= 0:
            continue
        if n < MXNET_BIGARRAY_BOUND:
            held[key, key * MXNET_KEY_HASH % shards] = n
            continue
        x = n / shards * np.arange(shards + 1)
        cuts = np.where(x - np.floor(x) >= 0.5, np.ceil(x), np.floor(x))
        # round(n / shards x shards) is n for a whole n; set so that a fractional size
        # (a catalog layer given in millions) still adds up
        cuts[-1] = n
        held[key] = np.diff(cuts)
    return held


@dataclass(frozen=True)
class Dealt:
    """The model's variables dealt to shards, only the shards that hold something kept."""

    held: np.ndarray  # bytes of each variable on each kept shard: (variables, shards)
    shards: tuple[int, ...]  # the index of each kept shard among all the servers
    layers: tuple[int, ...]  # the layer each variable belongs to

    @property
    def total_bytes(self) -> float:
        return float(self.held.sum())

    def by_part(
        self, part_of: Sequence[int] | Mapping[int, int], parts: int, share: int = 1
    ) -> np.ndarray:
        """Bytes of each part on each shard, (parts, shards): each variable's bytes,
        divided by `share` (a tensor-parallel device's share), added to the part its layer
        belongs to (`part_of[layer]`), in creation order."""
        out = np.zeros((parts, len(self.shards)))
        for v, layer in enumerate(self.layers):
            out[part_of[layer]] += self.held[v] / share
        return out


def deal(
    variables: Sequence[float],
    layer_params: Sequence[float],
    shards: int,
    how: str,
    bytes_per_param: float,
) -> Dealt:
    """The variables (parameters of each, in creation order) dealt to `shards` servers
    as `assign` deals them (`how`: the strategy's partition), in bytes."""
    held = assign(np.array(variables, dtype=float), shards, how) * bytes_per_param
    keep = [j for j in range(shards) if held[:, j].sum() > 0]  # shards holding nothing
    layers = variable_layers([float(v) for v in variables], list(layer_params))
    return Dealt(held[:, keep], tuple(keep), tuple(layers))


@dataclass(frozen=True)
class Group:
    """Consecutive layers moved together: their compute and their bytes on each shard."""

    first: int  # index of its first layer (closest to the input)
    last: int  # index of its last layer (closest to the output)
    forward_s: float
    backward_s: float
    nbytes: tuple[float, ...]  # per shard (the training's `shards`)


def variable_layers(variables: Sequence[float], layer_params: Sequence[float]) -> list[int]:
    """The layer each variable belongs to: variables in creation order fill the layers with
    parameters in order (a layer's kernel, then its bias). Where they do not add up layer
    by layer (a model given as one variable), every variable goes to the last layer with
    parameters."""
    with_params = [i for i, p in enumerate(layer_params) if p > 0]
    out: list[int] = []
    k, filled = 0, 0.0
    for size in variables:
        if k >= len(with_params):
            break
        out.append(with_params[k])
        filled += size
        if filled >= layer_params[with_params[k]] * (1 - 1e-9):
            if filled > layer_params[with_params[k]] * (1 + 1e-9):
                break  # a variable spans layers: they do not add up
            k, filled = k + 1, 0.0
    if len(out) != len(variables) or k != len(with_params):
        last = with_params[-1] if with_params else max(len(layer_params) - 1, 0)
        return [last] * len(variables)
    return out


def groups_of(
    forward_s: np.ndarray,
    backward_s: np.ndarray,
    layer_bytes: np.ndarray,
    min_bytes: float,
) -> list[Group]:
    """Consecutive layers closed into groups of at least `min_bytes`, from the output
    (where backward starts) towards the input; layer_bytes is (layers, shards). Returned
    in input -> output order."""
    n = len(forward_s)
    totals = layer_bytes.sum(axis=1)
    bounds: list[tuple[int, int]] = []
    last, size = n - 1, 0.0
    for i in reversed(range(n)):
        size += float(totals[i])
        if size >= min_bytes and size > 0 and i > 0:
            bounds.append((i, last))
            last, size = i - 1, 0.0
    bounds.append((0, last))
    out = []
    for first, end in reversed(bounds):
        span = slice(first, end + 1)
        out.append(
            Group(
                first,
                end,
                float(forward_s[span].sum()),
                float(backward_s[span].sum()),
                tuple(float(x) for x in layer_bytes[span].sum(axis=0)),
            )
        )
    return out
