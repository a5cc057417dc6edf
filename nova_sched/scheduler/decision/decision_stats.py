"""Timing of decisions and claims, for the demo's figures and the daemon's log.

Two figures per placed instance, kept apart because they answer different
questions:

- ``decision``: the deciding thread's own CPU time (``time.thread_time``)
  inside the driver's ``decide``: the request's preparation, the filters,
  the weighers. Waits for the cycle's lock, for the interpreter (other
  threads of the daemon, or the demo's fleet in the same process) and for
  the database are not in it, nor is bringing the host table up to date
  with the reports since the last decision, so it is the driver's cost
  whatever else the process does;
- ``claim``: the wall time of the claim in its store (a database
  transaction, or a Placement request): what the instance waits for after
  the decision, and what a decision in this daemon does not wait for.
"""

from __future__ import annotations

import threading

import numpy as np


class _Series:
    """The last ``size`` samples of one figure, in seconds."""

    def __init__(self, size: int):
        self._samples = np.zeros(size, dtype=np.float64)
        self.count = 0

    def add(self, seconds: float) -> None:
        self._samples[self.count % len(self._samples)] = seconds
        self.count += 1

    def recent(self) -> np.ndarray:
        return self._samples[:min(self.count, len(self._samples))].copy()


class DecisionStats:
    """Each placed instance's decision CPU time and claim time, in ring buffers."""

    def __init__(self, size: int = 100_000):
        self._decision = _Series(size)
        self._claim = _Series(size)
        self._lock = threading.Lock()
        self.size = size

    def record(self, decision_s: float, claim_s: float | None = None) -> None:
        """One instance: its decision's CPU seconds and, when it claimed
        something, the claim's wall seconds."""
        with self._lock:
            self._decision.add(decision_s)
            if claim_s is not None:
                self._claim.add(claim_s)

    @property
    def count(self) -> int:
        return self._decision.count

    def percentiles_ms(self, *points: float) -> dict[float, float]:
        """Percentiles of the decisions' CPU time, in milliseconds."""
        return self._percentiles(self._decision, points)

    def claim_percentiles_ms(self, *points: float) -> dict[float, float]:
        """Percentiles of the claims' wall time, in milliseconds."""
        return self._percentiles(self._claim, points)

    def _percentiles(self, series: _Series, points) -> dict[float, float]:
        with self._lock:
            data = series.recent()
        if not len(data):
            return {p: 0.0 for p in points}
        values = np.percentile(data * 1000.0, points)
        return {p: float(v) for p, v in zip(points, values)}
