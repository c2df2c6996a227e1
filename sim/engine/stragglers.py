"""Stragglers: jitter, each device's own speed, persistent slow workers, transient hiccups.

Each kind draws from its own seeded stream per worker, derived from the scenario seed with
`SeedSequence(seed, spawn_key=(replication, stream id, worker))`: adding one kind never
changes another's samples, and worker w draws the same numbers whatever the number of
workers. Draws are indexed by (worker, step) and made in blocks on demand, so a step that
is redone after a restart takes exactly the time it took the first time.
"""

from __future__ import annotations

import numpy as np

from results.streams import device_factor, stream
from scenarios.spec import ScenarioSpec

from .distributions import LogNormal

_BLOCK = 256  # draws made at a time per worker and stream


class Stragglers:
    """Per-(worker, step) compute multipliers and added delays."""

    def __init__(self, spec: ScenarioSpec, replication: int = 0):
        self.seed = spec.seed
        self.replication = replication
        self.jitter = LogNormal(spec.stragglers.jitter)
        self.slow = np.ones(spec.workers)
        variability = spec.stragglers.variability
        if variability:  # each device's own speed, the same at every step
            for w in range(spec.workers):
                self.slow[w] = device_factor(self.seed, replication, w, variability)
        for group in spec.stragglers.slow:
            for w in group.workers:
                self.slow[w] *= group.factor
        transient = spec.stragglers.transient
        self.probability = transient.probability if transient else 0.0
        self.hiccup = transient.delay if transient else 0.0
        self._jitter: dict[int, list[float]] = {}
        self._delay: dict[int, list[float]] = {}
        self._slow = self.slow.tolist()
        self._gens: dict[tuple[str, int], np.random.Generator] = {}

    def _draw(self, name: str, worker: int, cache: dict[int, list[float]], step: int) -> float:
        values = cache.get(worker)
        if values is None or step >= len(values):
            gen = self._gens.get((name, worker))
            if gen is None:
                gen = self._gens[(name, worker)] = stream(self.seed, self.replication, name, worker)
            have = 0 if values is None else len(values)
            blocks = (step - have) // _BLOCK + 1
            fresh = []
            for _ in range(blocks):
                if name == "jitter":
                    fresh.append(self.jitter.sample(gen, _BLOCK))
                else:
                    hit = gen.random(_BLOCK) < self.probability
                    fresh.append(np.where(hit, self.hiccup, 0.0))
            # plain lists: indexing them is what the hot path does, once per worker-step
            values = (values or []) + np.concatenate(fresh).tolist()
            cache[worker] = values
        return values[step]

    def factor(self, worker: int, step: int) -> float:
        """Jitter x persistent slowness of one worker in one step."""
        if not self.jitter.cv:
            return self._slow[worker]
        values = self._jitter.get(worker)
        if values is not None and step < len(values):  # the hot path: already drawn
            return values[step] * self._slow[worker]
        return self._draw("jitter", worker, self._jitter, step) * self._slow[worker]

    def factors(self, workers: int, steps: int) -> np.ndarray:
        """`factor` of every (worker, step) below the given counts, as a (workers, steps)
        array: the same draws."""
        if not self.jitter.cv:
            return np.repeat(self.slow[:workers, None], steps, axis=1)
        return self._drawn("jitter", self._jitter, workers, steps) * self.slow[:workers, None]

    def delays(self, workers: int, steps: int) -> np.ndarray:
        """`delay` of every (worker, step) below the given counts, as a (workers, steps)
        array: the same draws."""
        if self.probability <= 0:
            return np.zeros((workers, steps))
        return self._drawn("transient", self._delay, workers, steps)

    def _drawn(
        self, name: str, cache: dict[int, list[float]], workers: int, steps: int
    ) -> np.ndarray:
        # The lockstep engine asks for every worker's draws at once: a worker not drawn
        # yet gets them from a stream of its own made here and dropped, the same numbers
        # `_draw` would give, without keeping a list and a generator per worker (at
        # 65,536 workers those held 0.6 GB).
        out = np.empty((workers, steps))
        blocks = (steps - 1) // _BLOCK + 1
        for w in range(workers):
            values = cache.get(w)
            if values is not None:
                self._draw(name, w, cache, steps - 1)
                out[w] = cache[w][:steps]
                continue
            gen = stream(self.seed, self.replication, name, w)
            if name == "jitter":
                drawn = np.concatenate([self.jitter.sample(gen, _BLOCK) for _ in range(blocks)])
            else:
                drawn = np.concatenate(
                    [gen.random(_BLOCK) < self.probability for _ in range(blocks)]
                )
                drawn = np.where(drawn, self.hiccup, 0.0)
            out[w] = drawn[:steps]
        return out

    def delay(self, worker: int, step: int) -> float:
        """Seconds a transient hiccup adds to one worker's step (usually 0)."""
        if self.probability <= 0:
            return 0.0
        return self._draw("transient", worker, self._delay, step)
