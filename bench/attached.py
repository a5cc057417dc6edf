"""A profiler attached to a running process for one phase of a benchmark."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path


class Attached:
    """``command`` (a profiler writing to ``output``) run from ``start()``
    until ``finish()`` stops it as Ctrl-C would; its own output goes to
    ``output`` with the suffix ``.log``."""

    def __init__(self, command: list[str], output: Path):
        self.command, self.output = command, Path(output)
        self._proc: subprocess.Popen | None = None
        self._log = None

    def start(self) -> "Attached":
        self._log = open(self.output.with_suffix(".log"), "w")
        self._proc = subprocess.Popen(self.command, stdout=self._log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        time.sleep(1.0)  # attached before the phase begins
        return self

    def finish(self) -> bool:
        """Stop the profiler; whether it left its output."""
        if self._proc is None:
            return False
        self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        self._log.close()
        self._proc = None
        return self.output.exists()
