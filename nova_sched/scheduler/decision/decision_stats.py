"""Timing of decisions, for the demo's figures and the daemon's log."""

from __future__ import annotations

import threading

import numpy as np


class DecisionStats:
    """Seconds each instance's decision and claim took, in a ring buffer."""

    def __init__(self, size: int = 100_000):
        self._samples = np.zeros(size, dtype=np.float64)
        self._count = 0
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        with self._lock:
            self._samples[self._count % len(self._samples)] = seconds
            self._count += 1

    @property
    def count(self) -> int:
        return self._count

    def percentiles_ms(self, *points: float) -> dict[float, float]:
        with self._lock:
            n = min(self._count, len(self._samples))
            data = self._samples[:n].copy()
        if not n:
            return {p: 0.0 for p in points}
        values = np.percentile(data * 1000.0, points)
        return {p: float(v) for p, v in zip(points, values)}
