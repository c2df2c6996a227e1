"""How far the simulator's predictions have been from measurements, by kind of prediction:
the intervals `trainscale plan` puts around what it predicts.

Two tables, both data files beside this module:

- `errors-published.yaml` (written by `make validate-published`): each published
  throughput figure's signed relative error, (simulated - published) / published, by
  class: the strategy's kind and the network's protocol (`allreduce/rdma`, ...), and
  `all` of them pooled.
- `errors-target.yaml`: the signed relative error of the updates to a target,
  (simulated - measured) / measured, over the points of the time-to-target validation
  (docs/validation.md).

A prediction of a time (and of what grows with it: cost, energy) at throughput error e
is off by the factor 1 + e (a throughput predicted 5% high is a time 5% short of the
truth, the truth being the prediction x 1.05), and a time to target by (1 + e) / (1 + u)
for the updates' error u. The interval is the range of those factors over the class's
measured errors: with n errors, about (n - 1) / (n + 1) of further predictions of the
class fall inside it, if the class's errors are alike.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
PUBLISHED_ERRORS = HERE / "errors-published.yaml"
TARGET_ERRORS = HERE / "errors-target.yaml"


@dataclass(frozen=True)
class Interval:
    """The factors a prediction is multiplied by for the interval's ends, and the class
    of validation cases they come from (with how many errors)."""

    low: float
    high: float
    basis: str

    def around(self, value: float) -> tuple[float, float]:
        return value * self.low, value * self.high


def error_class(kind: str, protocol: str) -> str:
    """The class of a point: its strategy's kind and its network's protocol."""
    return f"{kind}/{protocol}"


@functools.cache
def _tables() -> tuple[dict[str, list[float]], list[float]]:
    published = yaml.safe_load(PUBLISHED_ERRORS.read_text())["throughput"]
    target = yaml.safe_load(TARGET_ERRORS.read_text())["updates_to_target"]["errors"]
    return {k: [float(e) for e in v["errors"]] for k, v in published.items()}, [
        float(u) for u in target
    ]


def interval(kind: str, protocol: str, to_target: bool) -> Interval:
    """The interval of a time predicted for a point of this kind over this protocol: from
    its class's published errors where the class has at least 3, otherwise from all of
    them; to a target, widened by the updates' errors."""
    published, target = _tables()
    name = error_class(kind, protocol)
    errors = published.get(name, [])
    if len(errors) < 3:
        name, errors = "all", published["all"]
    low, high = 1 + min(errors), 1 + max(errors)
    basis = f"{name} ({len(errors)} published figures)"
    if to_target:
        low, high = low / (1 + max(target)), high / (1 + min(target))
        basis += f" x updates to target ({len(target)} points)"
    return Interval(low, high, basis)
