"""Linux perf around a benchmark's phase: where a process's CPU goes in C.

py-spy (``pyspy.py``) sees Python frames only while a thread holds the
interpreter. The daemon's CPU that it cannot see (SQLite's C code, the
kernel's sockets and file I/O, threads handing the interpreter to one
another, the interpreter's own allocator) shows here, by shared object
and by symbol, with CPU milliseconds per request. ``perf record -e
cpu-clock`` samples on the CPU's clock, so it works in virtual machines
without hardware counters; it needs perf (Debian's ``linux-perf``) and
the right to profile the process (root, or perf_event_paranoid <= 1).
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
from pathlib import Path

from attached import Attached

# Samples a second of each thread's CPU.
RATE = 999
# A line of ``perf script -F comm,ip,sym,dso``: thread, address, symbol
# (empty when unknown), shared object.
_SAMPLE = re.compile(r"^\s*(.+?)\s+[0-9a-f]+\s*(.*?)\s+\((.*)\)$")


def available() -> bool:
    """Whether perf is installed here."""
    return shutil.which("perf") is not None


class Recording:
    """``perf record`` of ``pid``'s threads into ``data`` from ``start()`` to
    ``stop()``."""

    def __init__(self, pid: int, data: Path, rate: int = RATE):
        self.pid, self.data, self.rate = pid, Path(data), rate
        self._attached = Attached(
            ["perf", "record", "-e", "cpu-clock", "-F", str(rate), "-p", str(pid),
             "-o", str(self.data)], self.data)

    def start(self) -> "Recording":
        self._attached.start()
        return self

    def stop(self, requests: int) -> dict | None:
        """Stop recording; ``summarise`` of what was recorded, None without it."""
        if not self._attached.finish():
            return None
        return summarise(self.data, requests, self.rate)


def summarise(data: Path, requests: int, rate: int = RATE, top: int = 25) -> dict:
    """CPU ms per request by shared object, by thread name and by symbol,
    from ``perf script`` of ``data``."""
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym,dso"],
                         capture_output=True, text=True, check=False).stdout
    by_dso: collections.Counter = collections.Counter()
    by_thread: collections.Counter = collections.Counter()
    by_sym: collections.Counter = collections.Counter()
    samples = 0
    for line in out.splitlines():
        found = _SAMPLE.match(line)
        if found is None:
            continue
        comm, sym, dso = found.group(1), found.group(2) or "?", found.group(3)
        samples += 1
        by_dso[_short_dso(dso)] += 1
        by_thread[comm] += 1
        by_sym[f"{sym} ({_short_dso(dso)})"] += 1
    ms = 1000.0 / rate / max(requests, 1)

    def rows(counter, n=top):
        return [(name, n_ * ms, 100.0 * n_ / max(samples, 1))
                for name, n_ in counter.most_common(n)]
    return {"samples": samples, "ms_per_request": samples * ms,
            "by_dso": rows(by_dso, 12), "by_thread": rows(by_thread, 12),
            "by_symbol": rows(by_sym)}


def _short_dso(dso: str) -> str:
    name = dso.rsplit("/", 1)[-1]
    if name.startswith("[kernel"):
        return "kernel"
    return name.split(".cpython-")[0]


def text(summary: dict, title: str) -> str:
    """The summary as the benchmark prints it."""
    lines = [f"\n{title}: {summary['samples']} samples, "
             f"{summary['ms_per_request']:.2f} CPU ms per request"]
    for heading, key in (("by shared object", "by_dso"), ("by thread", "by_thread"),
                         ("by symbol", "by_symbol")):
        lines.append(f"  {heading}: ms per request, % of samples")
        lines.extend(f"    {ms:6.3f}  {pct:5.1f}  {name[:70]}"
                     for name, ms, pct in summary[key])
    return "\n".join(lines)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="CPU ms per request by shared object, thread and symbol "
                    "of a `perf record -e cpu-clock` file")
    parser.add_argument("--requests", type=int, required=True,
                        help="requests handled while it was recorded")
    parser.add_argument("--rate", type=int, default=RATE, help="its -F")
    parser.add_argument("data", nargs="+", type=Path)
    args = parser.parse_args()
    for path in args.data:
        print(text(summarise(path, args.requests, args.rate), str(path)))
