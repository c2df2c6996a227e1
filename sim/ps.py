"""Parameter servers, composed from parts: synchronous (with backup workers), with host
aggregation, and asynchronous (with SSP and the evaluation barrier).

Variables (`ModelSpec.variables`: kernel and bias of each layer, in creation order, where
the model's builder is known; else one per layer) are spread over the shards by
`partition` (`sim/shards.py`). Round-robin over variables is TensorFlow's own placement:
with two servers an MLP's kernels all land on the first and its biases on the second.

The parts, each a module:

* `ServerGroup` (`sim/ps_servers.py`): the shards, pulls, pushes and what the servers'
  calls and updates cost;
* `Dataflow` (`sim/ps_dataflow.py`): the groups of layers a step moves, and one node's
  pull, compute and push of them as TensorFlow's dataflow runs a step;
* `SyncRounds` (`sim/ps_sync.py`): each step's update once enough members have pushed;
* `HostAggregation` (`sim/ps_hosts.py`): a host's devices reduce first and push once;
  asynchronously, `AsyncHostAggregatedTraining` (`sim/ps_async_hosts.py`);
* `StalenessBound` and `EvaluationBarrier` (`sim/ps_async.py`): what holds asynchronous
  workers back.

A pipeline's replicas push to a `ServerGroup` of their own (`sim/pipeline.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .ps_async import AsynchronousTraining
from .ps_async_hosts import AsyncHostAggregatedTraining
from .ps_hosts import HostAggregatedTraining
from .ps_sync import SynchronousTraining
from .training import Training

if TYPE_CHECKING:
    from .simulation import Simulation


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
    strategy = sim.spec.strategy
    if not strategy.sync:
        if strategy.local_aggregation and sim.topology.devices_per_host > 1:
            return AsyncHostAggregatedTraining(sim, start_step)
        return AsynchronousTraining(sim, start_step)
    if strategy.local_aggregation and sim.topology.devices_per_host > 1:
        return HostAggregatedTraining(sim, start_step)
    return SynchronousTraining(sim, start_step)
