"""A one-line progress bar for terminals (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Redraws ``label [####----] done/total  extra`` in place.

    Draws only when ``stream`` is a terminal (unless ``enabled`` says
    otherwise) and at most ``rate`` times a second, so pipes and log files
    get nothing but the summary.
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None, width: int = 28, rate: float = 10.0):
        self.total = max(int(total), 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.width = width
        self._period = 1.0 / rate
        self._last_draw = 0.0
        self._started = time.monotonic()
        self._drawn = False
        self._last_len = 0

    def update(self, done: int, extra: str = "", force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self._period:
            return
        self._last_draw = now
        done = min(max(int(done), 0), self.total) if self.total else int(done)
        share = done / self.total if self.total else 1.0
        filled = int(round(share * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = now - self._started
        eta = ""
        if 0 < done < self.total:
            eta = f"  eta {elapsed / done * (self.total - done):4.0f}s"
        line = (f"{self.label} [{bar}] {done}/{self.total} {share:4.0%}"
                f"  {elapsed:4.0f}s{eta}")
        if extra:
            line += f"  {extra}"
        pad = " " * max(self._last_len - len(line), 0)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._last_len = len(line)
        self._drawn = True

    def close(self, done: int | None = None, extra: str = "") -> None:
        """Draw the final state and end the line."""
        if not self.enabled:
            return
        if done is not None:
            self.update(done, extra, force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
