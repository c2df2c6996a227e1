"""The seeded random streams both backends draw from (STYLE.md rule 3).

Every stream is `SeedSequence(seed, spawn_key=(replication, stream id, index))`: adding a
stream never changes another's draws, and worker (or host, or trial) i draws the same
numbers whatever the number of workers. `simulate` and `run-real` use the same keys, so a
straggler's jitter in a real run is the simulated one.
"""

from __future__ import annotations

import numpy as np

#: spawn_key ids of the random streams; new streams get new ids, old ones never change
STREAMS = {
    "jitter": 1,
    "slow": 2,
    "transient": 3,
    "failures": 4,
    "trials": 5,
    "variability": 6,
}


def stream(seed: int, replication: int, name: str, index: int = 0) -> np.random.Generator:
    """The seeded generator of one component (and worker, host or trial)."""
    seq = np.random.SeedSequence(seed, spawn_key=(replication, STREAMS[name], index))
    return np.random.Generator(np.random.PCG64(seq))


def device_factor(seed: int, replication: int, worker: int, cv: float) -> float:
    """Worker `worker`'s device speed factor for the run (`stragglers.variability`): one
    lognormal draw, mean 1, coefficient of variation cv, from its own stream."""
    if cv <= 0:
        return 1.0
    return float(lognormal_factors(stream(seed, replication, "variability", worker), cv, 1)[0])


def lognormal_factors(rng: np.random.Generator, cv: float, size: int) -> np.ndarray:
    """Lognormal multipliers with mean 1 and coefficient of variation cv."""
    if cv <= 0:
        return np.ones(size)
    sigma2 = float(np.log1p(cv**2))
    return rng.lognormal(-0.5 * sigma2, np.sqrt(sigma2), size)
