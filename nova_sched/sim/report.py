"""The demo's figures: gathered from the database and the timers, then shown.

``summarize`` builds one dict (the ``--json`` object); ``format_text``
renders it as the terminal summary; ``plot`` draws the placements per
second and per-host utilisation with matplotlib (an optional extra,
``pip install nova-sched[plot]``).

The figures:

- ``placed``: instances whose compute cast reached the fake fleet;
  ``failed``: instances the database shows in ERROR, with their fault
  messages grouped (counts and uuids masked);
- ``decisions_per_second``: decisions the scheduling cycle made (one per
  instance) divided by the boot's wall time, from the first cast to the
  last instance placed or failed;
- ``decision_ms``: time inside the driver per instance, as the scheduling
  cycle measures it (``DecisionStats``): the deciding thread's CPU time
  in the driver's ``decide`` (filters and weighers) and its selections
  (the candidates ordered as far as read, their limits), as
  ``bench/decision_bench.py`` times a decision; the waits for the
  cycle's lock and for the interpreter (the fleet shares the process) are
  not in it;
- ``claim_ms``: the wall time of each instance's claim (the database
  transaction that records it);
- ``request_ms``: from the client's ``run_instance`` cast to the arrival of
  the compute cast at the fake node, per placed instance;
- ``placements_per_second``: ``placed`` and ``failed`` counted per whole
  second since the first cast (function ``placements_per_second``); a
  placement counts when its compute cast arrives, a failure when the demo's poll
  sees the instance in ERROR (up to ``boot._ERROR_POLL_INTERVAL`` late),
  so each list sums to its total;
- utilisation: each node's claims (``db.allocations.usage_by_node``) as a
  share of its allocatable capacity, ``total x ratio - reserved`` with the
  ratio the scheduler's resource model gives the node (its own reported
  ratio, else its aggregates' while the Aggregate*Filter runs, else the
  option; ``scheduler.cloud.resources``): 100% means the scheduler can put
  nothing more of that resource there.

Every figure is read through ``nova_sched.db`` functions.
"""

from __future__ import annotations

import collections
import re
import resource
import sys
from typing import Any, Iterable

import numpy as np

from nova_sched import capacity
from nova_sched.capacity import RESOURCES
from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import allocations as db_allocations
from nova_sched.db import instances as db_instances
from nova_sched.scheduler.cloud import resources

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Counts that differ between otherwise identical NoValidHost reasons.
_COUNTS = re.compile(r"(?<=/)\d+|(?<=removed )\d+")
# The unit suffix of each resource's keys in a host_usage entry.
_UNITS = {"ram": "_mb", "vcpu": "", "disk": "_mb"}


def reason_group(message: str) -> str:
    """A fault message with its instance-specific numbers and uuids masked."""
    return _COUNTS.sub("N", _UUID.sub("<uuid>", message or "(no fault recorded)"))


def _percentiles(values, points=(50, 99)) -> dict[str, float]:
    if not len(values):
        return {f"p{p}": 0.0 for p in points}
    got = np.percentile(np.asarray(values, dtype=np.float64), points)
    return {f"p{p}": round(float(v), 3) for p, v in zip(points, got)}


def _spread(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {"min": 0.0, "mean": 0.0, "max": 0.0}
    return {"min": round(float(values.min()), 4),
            "mean": round(float(values.mean()), 4),
            "max": round(float(values.max()), 4)}


def failure_reasons(uuids: list[str]) -> list[dict[str, Any]]:
    """Fault messages of the failed instances, grouped, most common first."""
    messages = db_instances.latest_fault_messages(uuids)
    groups = collections.Counter(reason_group(messages.get(u, "")) for u in uuids)
    return [{"reason": reason, "count": count}
            for reason, count in groups.most_common()]


def host_usage() -> list[dict[str, Any]]:
    """Per node: its claims and allocatable capacity of each resource.

    Keys: ``host``, ``node``, ``instances``, and per resource
    ``ram_claimed_mb``/``ram_allocatable_mb``, ``vcpu_claimed``/
    ``vcpu_allocatable``, ``disk_claimed_mb``/``disk_allocatable_mb``.
    """
    by_host: dict[str, list] = collections.defaultdict(list)
    for agg in db_aggregates.load_for_cache():
        for host in agg.hosts:
            by_host[host].append(agg)
    usage = []
    for node in db_allocations.usage_by_node():
        aggs = by_host.get(node["host"], ())
        entry: dict[str, Any] = {"host": node["host"], "node": node["node"],
                                 "instances": node["instances"]}
        for res in RESOURCES:
            ratio = resources.effective_ratio(
                res, node["node_ratio"][res.name] or 0.0,
                resources.aggregate_ratio(res, aggs))
            unit = _UNITS[res.name]
            entry[f"{res.name}_claimed{unit}"] = node["claimed"][res.name]
            entry[f"{res.name}_allocatable{unit}"] = float(capacity.limit(
                node["total"][res.name], ratio, node["reserved"][res.name]))
        usage.append(entry)
    return usage


def _shares(usage: list[dict], resource: str) -> np.ndarray:
    unit = _UNITS[resource]
    claimed = np.array([u[f"{resource}_claimed{unit}"] for u in usage], dtype=float)
    allocatable = np.array([u[f"{resource}_allocatable{unit}"] for u in usage],
                           dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(allocatable > 0, claimed / allocatable, 0.0)


def state_bytes(host_manager) -> int:
    """Bytes the scheduler's in-memory host state takes.

    The host table's columns, every host state with what it holds (each
    object counted once, however many hosts share it), and the host
    manager's indexes. Not the fleet, the database or the messaging that
    share the demo's process.
    """
    seen: set[int] = set()
    total = 0
    stack: list[Any] = [host_manager.table.states, host_manager.table.index,
                        host_manager.table.host_rows, host_manager.table.node_rows,
                        host_manager._described, host_manager._services,
                        host_manager._parsed_texts]
    total += sum(a.nbytes for a in host_manager.table.columns.values())
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (np.ndarray, type)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not callable(obj):
            stack.append(vars(obj))
    return total


def placements_per_second(placed_at: Iterable[float], failed_at: Iterable[float],
                          start: float) -> dict[str, list[int]]:
    """Placed and failed instances per whole second since ``start``.

    Second ``i`` holds the outcomes timed in ``[start + i, start + i + 1)``;
    both lists cover the same seconds, up to the last outcome of either
    kind, with zeros for seconds in which nothing finished, so each sums to
    its total. An outcome timed before ``start`` (a clock read just ahead
    of it) counts in second 0 rather than being lost.
    """
    placed = [max(int(at - start), 0) for at in placed_at]
    failed = [max(int(at - start), 0) for at in failed_at]
    seconds = max(placed + failed, default=-1) + 1
    counts = {"placed": [0] * seconds, "failed": [0] * seconds}
    for key, buckets in (("placed", placed), ("failed", failed)):
        for second in buckets:
            counts[key][second] += 1
    return counts


def summarize(*, hosts: int, instances: int, requests, seed: int, tracker, outcome,
              stats, startup_s: float, total_s: float, window: int,
              reschedules: int, state_mb: float) -> dict[str, Any]:
    """The run's figures as one JSON-ready dict."""
    failed = sorted(tracker.failed_at)
    boot_s = max(outcome.last_done - outcome.first_cast, 1e-9)
    decisions = stats.count
    decision_pcts = stats.percentiles_ms(50, 99)
    claim_pcts = stats.claim_percentiles_ms(50, 99)
    usage = host_usage()
    violations = [
        u["host"] for u in usage
        if u["ram_claimed_mb"] > u["ram_allocatable_mb"]
        or u["vcpu_claimed"] > u["vcpu_allocatable"]
        or u["disk_claimed_mb"] > u["disk_allocatable_mb"]
    ]
    flavors = collections.Counter()
    for req in requests:
        flavors[req.flavor.name] += len(req.instance_uuids)
    return {
        "hosts": hosts,
        "instances": instances,
        "requests": len(requests),
        "seed": seed,
        "placed": len(tracker.arrived_at),
        "failed": len(failed),
        "lost": instances - len(tracker.arrived_at) - len(failed),
        "failures": failure_reasons(failed),
        "decisions": decisions,
        "decisions_per_second": round(decisions / boot_s, 1),
        "decision_ms": {k: round(float(v), 3) for k, v in
                        zip(("p50", "p99"), (decision_pcts[50], decision_pcts[99]))},
        "claim_ms": {k: round(float(v), 3) for k, v in
                     zip(("p50", "p99"), (claim_pcts[50], claim_pcts[99]))},
        "request_ms": _percentiles(tracker.request_ms()),
        "placements_per_second": placements_per_second(
            tracker.arrived_at.values(), tracker.failed_at.values(),
            outcome.first_cast),
        "utilisation": {res: _spread(_shares(usage, res))
                        for res in ("ram", "vcpu", "disk")},
        "instances_per_host": _spread(np.array([u["instances"] for u in usage],
                                               dtype=float)),
        "capacity_violations": len(violations),
        "reschedules": reschedules,
        "window": window,
        "flavors": dict(flavors.most_common()),
        "elapsed_s": {"startup": round(startup_s, 2), "boot": round(boot_s, 2),
                      "total": round(total_s, 2)},
        "gave_up": outcome.gave_up,
        "stall_reason": outcome.stall_reason,
        # The scheduler's host state, and the whole demo process's peak.
        "scheduler_state_mb": round(state_mb, 1),
        "process_peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _pct(value: float) -> str:
    return f"{value * 100:5.1f}%"


def format_text(summary: dict[str, Any]) -> str:
    """The terminal summary."""
    s = summary
    lines = [
        f"nova-sched-sim: {s['hosts']} hosts, {s['instances']} instances in "
        f"{s['requests']} requests (seed {s['seed']}, {s['window']} in flight)",
        f"  placed              {s['placed']}",
        f"  failed              {s['failed']}",
    ]
    for group in s["failures"]:
        lines.append(f"    {group['count']:6d}  {group['reason']}")
    if s["lost"]:
        lines.append(f"  unfinished          {s['lost']} (neither placed nor failed "
                     "when the run gave up)")
    if s.get("stall_reason"):
        lines.append(f"  gave up: {s['stall_reason']}")
    if s["reschedules"]:
        lines.append(f"  reschedules         {s['reschedules']} (builds refused by "
                     "a fake node and sent back)")
    d, c, r = s["decision_ms"], s["claim_ms"], s["request_ms"]
    lines += [
        f"  decisions/s         {s['decisions_per_second']:.1f}  ({s['decisions']} "
        f"decisions in {s['elapsed_s']['boot']:.1f} s)",
        f"  decision_ms         p50 {d['p50']:.2f}  p99 {d['p99']:.2f}"
        "   (the driver's CPU time per instance: filter, weigh)",
        f"  claim_ms            p50 {c['p50']:.2f}  p99 {c['p99']:.2f}"
        "   (the claim's database transaction, wall time)",
        f"  request_ms          p50 {r['p50']:.2f}  p99 {r['p99']:.2f}"
        "   (client cast -> compute cast arrival)",
        "  utilisation          min    mean    max   (claims / allocatable, per host)",
    ]
    for res, label in (("ram", "RAM"), ("vcpu", "vCPU"), ("disk", "disk")):
        u = s["utilisation"][res]
        lines.append(f"    {label:<16}{_pct(u['min'])}  {_pct(u['mean'])}  "
                     f"{_pct(u['max'])}")
    n = s["instances_per_host"]
    lines.append(f"    {'instances/host':<16}{n['min']:6.0f}  {n['mean']:6.1f}  "
                 f"{n['max']:6.0f}")
    if s["capacity_violations"]:
        lines.append(f"  OVERCOMMITTED HOSTS {s['capacity_violations']}")
    e = s["elapsed_s"]
    lines.append(f"  wall time           {e['total']:.1f} s (startup {e['startup']:.1f} s, "
                 f"boot {e['boot']:.1f} s)")
    lines.append(f"  memory              scheduler state {s['scheduler_state_mb']:.0f} MB "
                 f"(whole demo process peak {s['process_peak_rss_mb']:.0f} MB)")
    return "\n".join(lines)


def plot_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(path: str, usage: list[dict[str, Any]], shapes: dict[str, Any],
         title: str, timeline: dict[str, list[int]] | None = None) -> None:
    """Placements per second over the boot, then per-host RAM and vCPU use.

    ``timeline`` is the summary's ``placements_per_second``; without it
    only the utilisation panels are drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ram = _shares(usage, "ram") * 100
    vcpu = _shares(usage, "vcpu") * 100
    kinds = [getattr(shapes.get(u["host"]), "name", "?") for u in usage]
    order = sorted(range(len(usage)), key=lambda i: (kinds[i], -ram[i]))
    if timeline is not None:
        fig, axes = plt.subplots(3, 1, figsize=(12, 8),
                                 gridspec_kw={"height_ratios": (1.1, 1, 1)})
        _plot_timeline(axes[0], timeline)
        host_axes = axes[1:]
        host_axes[0].sharex(host_axes[1])
    else:
        fig, host_axes = plt.subplots(2, 1, figsize=(12, 6.5), sharex=True)
    colours = {}
    palette = plt.get_cmap("tab10")
    for kind in sorted(set(kinds)):
        colours[kind] = palette(len(colours) % 10)
    x = np.arange(len(order))
    for ax, values, label in ((host_axes[0], ram, "RAM"), (host_axes[1], vcpu, "vCPU")):
        ax.bar(x, values[order], width=1.0,
               color=[colours[kinds[i]] for i in order], linewidth=0)
        ax.set_ylabel(f"{label} claimed\n% of allocatable")
        ax.set_ylim(0, max(100.0, float(values.max()) * 1.05 if len(values) else 100))
        ax.set_xlim(-0.5, max(len(order), 1) - 0.5)
        ax.grid(axis="y", alpha=0.3)
        ax.set_title(f"{label} utilisation per host (colour: host shape)",
                     fontsize="medium", loc="left")
    host_axes[0].tick_params(labelbottom=False)
    host_axes[1].set_xlabel(
        "hosts, grouped by shape (sorted by RAM use within a shape)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    # Above the panel, beside its title: inside it would hide the last
    # group's bars.
    host_axes[0].legend(handles, list(colours), loc="lower right",
                        bbox_to_anchor=(1.0, 1.0), fontsize="small",
                        ncol=len(colours), frameon=False, borderaxespad=0.2,
                        handlelength=1.2, columnspacing=1.2)
    host_axes[1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_timeline(ax, timeline: dict[str, list[int]]) -> None:
    """Placed and failed per second as steps, one second per step."""
    from matplotlib.ticker import MaxNLocator

    placed, failed = timeline["placed"], timeline["failed"]
    edges = np.arange(len(placed) + 1)
    # Steps, not points joined by lines: each value is a count over a whole
    # second, and the area under each step line is the run's total.
    ax.stairs(placed, edges, color="tab:green", linewidth=2, fill=False,
              label=f"placed ({sum(placed)})")
    ax.stairs(failed, edges, color="tab:red", linewidth=2, fill=False,
              label=f"failed ({sum(failed)})")
    ax.set_xlim(0, max(len(placed), 1))
    ax.set_ylim(0, max(placed + failed + [1]) * 1.15)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("seconds since the first boot request")
    ax.set_ylabel("instances per second")
    ax.set_title("placements over time", fontsize="medium", loc="left")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="small", framealpha=0.9)
