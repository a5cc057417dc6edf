"""py-spy around a benchmark's phase: record a process, summarise the stacks.

``py-spy`` (``pip install py-spy``) attaches to a running process from the
outside: nothing in the daemon changes while it is profiled.
"""

from __future__ import annotations

import collections
from pathlib import Path

from attached import Attached


class Recording:
    """``py-spy record`` of ``pid`` (and its children) into ``raw`` (collapsed
    stacks) from ``start()`` to ``stop()``.

    ``--gil``: only the threads holding the interpreter, not those waiting
    for the broker or the database, so the samples are where the CPU goes.
    """

    def __init__(self, pid: int, raw: Path, rate: int = 200):
        self.pid, self.raw, self.rate = pid, Path(raw), rate
        self._attached = Attached(
            ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
             "--gil", "--rate", str(rate), "--format", "raw", "--output", str(self.raw)],
            self.raw)

    def start(self) -> "Recording":
        self._attached.start()
        return self

    def stop(self) -> dict | None:
        """Stop recording; the summary (see ``summarise``), None without one."""
        return summarise(self.raw) if self._attached.finish() else None


def summarise(raw: Path, top: int = 15) -> dict:
    """py-spy's raw (collapsed) stacks: the functions with the most samples,
    on top of the stack (self) and anywhere in it (total)."""
    own: collections.Counter = collections.Counter()
    total: collections.Counter = collections.Counter()
    samples = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        own[_short(frames[-1])] += n
        for frame in {_short(f) for f in frames if not f.startswith(_GENERIC)}:
            total[frame] += n

    def pct(counter):
        return [(name, round(100 * n / samples, 1)) for name, n in counter.most_common(top)]
    return {"samples": samples, "self": pct(own), "total": pct(total)}


_GENERIC = ("process ", "thread ", "Thread._bootstrap", "Thread.run ", "<module> (")


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``: a function's
    samples together, whichever of its lines they were on."""
    name, _, where = frame.partition(" (")
    if not where:
        return name
    return f"{name} ({where.rsplit('/', 1)[-1].rsplit(':', 1)[0].rstrip(')')})"


# The request path's steps, for ``steps``: a stack counts in the step of
# the deepest frame it holds among these (function names as py-spy gives
# them, without their modules), or in its thread's step, or in "other".
STEPS = (
    ("the decision (driver)", ("FilterScheduler.decide",)),
    ("the host table's refresh", ("HostManager.refresh",)),
    ("the claim's transaction", ("DatabaseClaims.claim",)),
    ("recording the cast", ("SchedulingCycle._record_cast",)),
    ("publishing (py-amqp framing, confirms)", ("Publisher.publish_many",)),
    ("JSON of messages", ("pack_text",)),
    ("scrubbing notifications", ("scrub",)),
    ("log lines", ("Logger.info", "Logger.warning", "Logger.debug")),
    ("parsing the request", ("parse",)),
    ("the cast's other work", ("SchedulingCycle._cast",)),
    ("the cycle's other work (lock, timing, ranking)", ("SchedulingCycle._claim_best",)),
    ("the request's other work (events, notifications)", ("SchedulerManager.run_instance",)),
    ("the notification thread's other work", ("NotificationSender._run",)),
    ("reports written by their thread", ("ReportIngest._run",)),
    ("the consumer thread, the workers' loops (reports included)",
     ("TopicConsumer._consume_loop", "TopicConsumer._work_loop")),
)


def steps(raw: Path, requests: int, rate: int = 200) -> list[tuple[str, float, float]]:
    """(step, ms of samples per request, % of samples) for each of STEPS
    and "other", from ``py-spy record --format raw`` of ``requests``
    requests at ``rate`` samples a second."""
    names = {name: label for label, found in STEPS for name in found}
    counts: collections.Counter = collections.Counter()
    samples = 0
    for line in Path(raw).read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples += int(count)
        label = "other"
        for frame in reversed(stack.split(";")):
            label = names.get(frame.strip().partition(" (")[0], label)
            if label != "other":
                break
        counts[label] += int(count)
    per_request = 1000.0 / rate / max(requests, 1)
    order = [label for label, _ in STEPS] + ["other"]
    rows = [(label, counts[label] * per_request, 100.0 * counts[label] / max(samples, 1))
            for label in order]
    rows.append(("all samples", samples * per_request, 100.0))
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        description="Samples per request by step, from py-spy's raw stacks "
                    "(e2e_bench.py --py-spy --keep leaves py-spy-requests.txt)")
    parser.add_argument("raw", nargs="+", type=Path)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--rate", type=int, default=200)
    args = parser.parse_args()
    tables = [steps(raw, args.requests, args.rate) for raw in args.raw]
    print(f"{'step':<52}" + "".join(f"{'ms/req':>9}{'%':>7}" for _ in tables))
    for i, (label, _, _) in enumerate(tables[0]):
        print(f"{label:<52}" + "".join(f"{t[i][1]:9.3f}{t[i][2]:7.1f}" for t in tables))
