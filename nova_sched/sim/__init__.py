"""The embedded demo behind ``nova-sched-sim`` (CONTRACT section 1).

One process holds the scheduler daemon, a fleet of simulated compute nodes
and a compute-api client, on the in-memory transport and an in-memory
SQLite database (``cloud``). The client boots a seeded stream of mixed
flavors (``flavors``) through ``run_instance`` casts (``boot``); the
figures come from the database, the scheduling cycle's timer and the
client's and fleet's clocks (``report``).
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

from tqdm import tqdm

from nova_sched.sim import boot, cloud, flavors, report

# Seconds to wait for the scheduler to learn about every node at start.
_REPORT_TIMEOUT_BASE = 30.0
_REPORT_TIMEOUT_PER_HOST = 0.05
# Seconds between redraws of a progress bar: often enough to look alive,
# seldom enough to take nothing noticeable from the scheduler (GIL).
_PROGRESS_MININTERVAL = 0.1


@dataclasses.dataclass
class SimResult:
    summary: dict[str, Any]
    usage: list[dict[str, Any]]
    shapes: dict[str, flavors.HostShape]


def run(hosts: int, instances: int, seed: int, *, window: int = boot.DEFAULT_WINDOW,
        show_progress: bool | None = None) -> SimResult:
    """Build the cloud, boot the instances, gather the figures, tear down.

    ``show_progress`` None: a progress bar when stderr is a terminal.
    The in-memory database stays configured afterwards, for inspection.
    """
    started = time.perf_counter()
    rng = random.Random(seed)
    fleet = flavors.fleet(rng, hosts)
    requests = flavors.boot_requests(rng, instances)
    tracker = boot.BootTracker(window)
    with cloud.embedded_config(hosts):
        sim = cloud.EmbeddedCloud(fleet, tracker.note_arrival)
        try:
            sim.start()
            with _progress_bar(hosts, "hosts", "host", show_progress) as bar:
                known = sim.report_all(
                    _REPORT_TIMEOUT_BASE + hosts * _REPORT_TIMEOUT_PER_HOST,
                    progress=lambda count: _advance(bar, count))
            if known < hosts:
                raise RuntimeError(f"only {known} of {hosts} compute nodes reached "
                                   "the scheduler in time")
            startup_s = time.perf_counter() - started
            with _progress_bar(instances, "booting", "instance", show_progress) as bar:
                outcome = boot.boot(
                    sim.scheduler_api, requests, tracker,
                    progress=lambda done, placed, failed: _advance(
                        bar, done, placed=placed, failed=failed))
                # boot() stops reporting once the last instance is done.
                _advance(bar, tracker.completed, placed=len(tracker.arrived_at),
                         failed=len(tracker.failed_at))
            if outcome.client_error is not None:
                raise RuntimeError(f"the compute-api client failed: "
                                   f"{outcome.client_error!r}")
            reschedules = sum(n.builds_failed_total for n in sim.nodes.values())
            state_mb = report.state_bytes(sim.host_manager) / 2**20
        finally:
            sim.stop()
        summary = report.summarize(
            hosts=hosts, instances=instances, requests=requests, seed=seed,
            tracker=tracker, outcome=outcome, stats=sim.decision_stats,
            startup_s=startup_s, total_s=time.perf_counter() - started,
            window=tracker.window, reschedules=reschedules, state_mb=state_mb)
        usage = report.host_usage()
    return SimResult(summary=summary, usage=usage, shapes=sim.shapes)


def _progress_bar(total: int, desc: str, unit: str, show: bool | None) -> tqdm:
    # disable=None is tqdm's own terminal check on stderr: pipes and log
    # files get the summary alone. miniters=0 redraws on time only, so the
    # elapsed time and ETA keep moving while the counts stand still.
    return tqdm(total=total, desc=desc, unit=unit,
                disable=None if show is None else not show,
                mininterval=_PROGRESS_MININTERVAL, miniters=0, leave=True)


def _advance(bar: tqdm, done: int, **postfix: int) -> None:
    # The callers report running totals; tqdm counts increments.
    if postfix:
        bar.set_postfix(postfix, refresh=False)
    bar.update(done - bar.n)
