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

from nova_sched.sim import boot, cloud, flavors, report
from nova_sched.sim.progress import ProgressBar

# Seconds to wait for the scheduler to learn about every node at start.
_REPORT_TIMEOUT_BASE = 30.0
_REPORT_TIMEOUT_PER_HOST = 0.05


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
            bar = ProgressBar(hosts, "hosts   ", enabled=show_progress)
            known = sim.report_all(_REPORT_TIMEOUT_BASE + hosts * _REPORT_TIMEOUT_PER_HOST,
                                   progress=bar.update)
            bar.close(known)
            if known < hosts:
                raise RuntimeError(f"only {known} of {hosts} compute nodes reached "
                                   "the scheduler in time")
            startup_s = time.perf_counter() - started
            bar = ProgressBar(instances, "booting ", enabled=show_progress)
            outcome = boot.boot(
                sim.scheduler_api, requests, tracker,
                progress=lambda done, placed, failed: bar.update(
                    done, f"placed {placed}  failed {failed}"))
            bar.close(tracker.completed, f"placed {len(tracker.arrived_at)}  "
                      f"failed {len(tracker.failed_at)}")
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
