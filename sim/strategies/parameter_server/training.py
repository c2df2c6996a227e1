"""Parameter servers, composed from parts: synchronous (with backup workers), with host
aggregation, and asynchronous (with SSP and the evaluation barrier).

Variables (`ModelSpec.variables`: kernel and bias of each layer, in creation order, where
the model's builder is known; else one per layer) are spread over the shards by
`partition` (`shards.py`). Round-robin over variables is TensorFlow's own placement:
with two servers an MLP's kernels all land on the first and its biases on the second.

The parts, each a module:

* `ServerGroup` (`servers.py`): the shards, pulls, pushes and what the servers'
  calls and updates cost;
* `Dataflow` (`dataflow.py`): the groups of layers a step moves, and one node's
  pull, compute and push of them as TensorFlow's dataflow runs a step;
* `SyncRounds` (`sync.py`): each step's update once enough members have pushed;
* `HostAggregation` (`hosts.py`): a host's devices reduce first and push once;
  asynchronously, `AsyncHostAggregatedTraining` (`asynchronous_hosts.py`);
* `StalenessBound` and `EvaluationBarrier` (`asynchronous.py`): what holds asynchronous
  workers back.

A pipeline's replicas push to a `ServerGroup` of their own (`sim/strategies/pipeline.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.engine.training import Training

from .asynchronous import AsynchronousTraining
from .asynchronous_hosts import AsyncHostAggregatedTraining
from .hosts import HostAggregatedTraining, aggregated
from .sync import SynchronousTraining

if TYPE_CHECKING:
    from sim.engine.simulation import Simulation


def ParameterServerTraining(sim: Simulation, start_step: int) -> Training:  # noqa: N802
    """The parameter-server training the strategy composes:

    * synchronous: server group + dataflow + synchronous rounds of the workers;
    * synchronous with `local_aggregation` on hosts of several devices: the same, the
      rounds counting hosts, each host's devices aggregated first;
    * asynchronous: server group + dataflow + an update per push, with the SSP bound
      (`max_iterations_ahead` / `staleness`) and the evaluation barrier where given;
    * asynchronous with `local_aggregation` on hosts of several devices: the same, each
      host's devices aggregated first and pushing once, an update per host push.
    """
    hosted = aggregated(sim) > 1
    if not sim.spec.strategy.sync:
        if hosted:
            return AsyncHostAggregatedTraining(sim, start_step)
        return AsynchronousTraining(sim, start_step)
    if hosted:
        return HostAggregatedTraining(sim, start_step)
    return SynchronousTraining(sim, start_step)
