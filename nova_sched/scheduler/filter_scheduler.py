"""FilterScheduler: nova's filter scheduler over the column-wise host table.

One decision, in order (kube-scheduler's PreFilter, Filter, Score):

1. ``prepare``: every enabled filter and weigher works out what it needs
   from the request, once, before any host is asked;
2. candidates: every live node, minus ``ignore_hosts``; with
   ``force_hosts``/``force_nodes`` only those, and then filters are skipped
   (nova's rule); then, where the host source keeps Placement's model,
   only the hosts Placement would offer allocation candidates on
   (``decision.provider_candidates``), as nova-scheduler asks Placement
   before its filters, forced hosts included;
3. filter: the enabled filters in order, each recording what it removed;
4. sample: with ``max_hosts_to_score`` or ``percentage_of_hosts_to_score``
   set, only a window of the hosts that passed is weighed (off by default);
5. weigh: normalised weighers times multipliers, best first; then a
   random node among the best ``host_subset_size`` is moved to the front.
   Only the first few candidates are put in order unless more are read
   (a lost claim, alternates, explain).

Claiming the chosen node is the scheduling cycle's step, not the driver's.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import random

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import driver
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.decision.provider_candidates import ProviderCandidates
from nova_sched.scheduler.filters import HostFilterHandler, among
from nova_sched.scheduler.weights import HostWeightHandler

LOG = logging.getLogger(__name__)

# percentage_of_hosts_to_score never samples fewer hosts than this
# (kube-scheduler's minFeasibleNodesToFind).
MIN_HOSTS_SCORED_BY_PERCENTAGE = 100
# See keep_decision_memory: glibc's mallopt parameters and the values set.
_M_TOP_PAD, _M_MMAP_THRESHOLD = -2, -3
_TOP_PAD = _MMAP_THRESHOLD = 32 * 2**20


@functools.cache
def keep_decision_memory() -> None:
    """Ask glibc to keep freed memory for the next decision.

    A decision over 100,000 hosts makes some 10 to 30 MB of arrays and
    frees them when it ends. By default glibc gives that memory back to the
    kernel (arrays of more than 128 KB are mappings of their own) and the
    next decision takes it again page by page, a page fault per 4 KB, which
    costs about as much as the decision's arithmetic (more in a virtual
    machine). Taking arrays of up to 32 MB from the heap and keeping 32 MB
    free at its top spares it. Done once per process; with another C
    library, nothing is done.
    """
    try:
        libc = ctypes.CDLL(None)  # the process's own C library
        done = (libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
                and libc.mallopt(_M_TOP_PAD, _TOP_PAD))
    except (OSError, AttributeError):
        done = 0
    if not done:
        LOG.debug("mallopt(M_TOP_PAD) is not available; decisions over large "
                  "fleets will fault their memory in again each time")


# The group's handle, kept (see nova_sched.conf).
_FILTER_SCHEDULER = CONF.filter_scheduler


def hosts_to_score(feasible: int) -> int:
    """How many of ``feasible`` hosts a decision weighs (sampling options)."""
    fs = _FILTER_SCHEDULER
    count = feasible
    if fs.max_hosts_to_score > 0:
        count = min(count, fs.max_hosts_to_score)
    if fs.percentage_of_hosts_to_score < 100:
        count = min(count, max(math.ceil(feasible * fs.percentage_of_hosts_to_score
                                          / 100), MIN_HOSTS_SCORED_BY_PERCENTAGE))
    return max(count, min(feasible, fs.host_subset_size))


class FilterScheduler(driver.Scheduler):
    """nova's filter scheduler: filters, then normalised weighers."""

    def __init__(self, host_manager):
        super().__init__(host_manager)
        fs = CONF.filter_scheduler
        self.filters = HostFilterHandler(list(fs.available_filters)).get_filters(
            list(fs.enabled_filters))
        self.weighers = HostWeightHandler().get_weighers(list(fs.weight_classes))
        self.provider_candidates = ProviderCandidates(host_manager)
        self._rng = random.Random()
        # The table row the next sample starts at (kube's nextStartNodeIndex).
        self._next_sample = 0
        keep_decision_memory()

    def decide(self, cycle: CycleState) -> driver.Decision:
        spec = cycle.spec
        # A rebuild names its host as forced, yet asks the filters that
        # judge rebuilds (nova: forcing skips the filters unless the request
        # carries _nova_check_type).
        forced = bool(spec.force_hosts or spec.force_nodes) and not spec.is_rebuild
        # The table is only referenced here; preparation must not read rows,
        # which change until the lock below is taken.
        cycle.table = self.host_manager.table
        # nova: forcing a host or node skips the filters entirely.
        filters = [] if forced else self.filters
        if spec.is_rebuild:
            filters = [f for f in filters if f.run_on_rebuild]
        if self.provider_candidates.model is not None:
            filters = [f for f in filters if not f.judged_by_placement]
        cycle.prepare([self.provider_candidates] + filters + self.weighers)
        with self.host_manager.lock:
            cycle.table = self.host_manager.table
            rows, removals, considered = self._candidates(cycle)
            rows, offered = self.provider_candidates.narrow(cycle, rows)
            removals += offered
            filtered = HostFilterHandler.run(filters, cycle, rows)
            filtered.removals[:0] = removals
            filtered.considered = considered
            sampled = self._sample(filtered.rows)
            weighed = HostWeightHandler.weigh(self.weighers, cycle, sampled)
            order = self._order(weighed.ranking())
        return driver.Decision(cycle=cycle, filtered=filtered, weighed=weighed,
                               order=order, driver=self)

    def limits(self, cycle: CycleState, row: int) -> dict:
        limits: dict = {}
        in_placement = cycle.placement is not None
        for flt in self.filters:
            if not (in_placement and flt.judged_by_placement):
                limits.update(flt.limits(cycle, row))
        return limits

    def _candidates(self, cycle: CycleState):
        """Live rows after ignore_hosts, the cells out of reach or not
        asked for, requested_destination and force_hosts/force_nodes, what
        those removed (FilterResult.removals) and how many were live."""
        table, spec = cycle.table, cycle.spec
        rows = self.host_manager.candidates()
        considered = len(rows)
        removals = []
        if spec.ignore_hosts:
            ignored = [r for h in set(spec.ignore_hosts)
                       for r in table.host_rows.get(h, ())]
            mask = ~among(table, rows, ignored)
            removals.append(("ignore_hosts", rows, ~mask, len(rows) - int(mask.sum())))
            rows = rows[mask]
        unreachable = [code for code in map(table.cell_code,
                                            self.host_manager.unreachable_cells())
                       if code is not None]
        if unreachable:
            mask = ~np.isin(table.pick(table.col("cell_code"), rows), unreachable)
            removals.append(("cell database unreachable", rows, ~mask,
                             len(rows) - int(mask.sum())))
            rows = rows[mask]
        if spec.destination_cell is not None:
            # A move nova keeps in the instance's cell: nova's host manager
            # reads only that cell, so the others are no candidates at all.
            # Nodes of no cell (not read from nova's cells) are the one cell
            # this daemon answers for ([scheduler] cell_uuid), the cell its
            # Selections name, so a move never leaves them.
            codes = table.pick(table.col("cell_code"), rows)
            code = table.cell_code(spec.destination_cell)
            mask = codes == 0 if code is None else (codes == code) | (codes == 0)
            removals.append(("requested_destination.cell", rows, ~mask,
                             len(rows) - int(mask.sum())))
            rows = rows[mask]
        if spec.destination is not None:
            # nova's requested_destination (a move, or a boot with a host):
            # only that host (and node), but, unlike force_hosts, filtered.
            host, node = spec.destination
            wanted = [r for r in table.host_rows.get(host, ())
                      if node is None or table.states[r].nodename == node]
            mask = among(table, rows, wanted)
            removals.append(("requested_destination", rows, ~mask,
                             len(rows) - int(mask.sum())))
            rows = rows[mask]
        if spec.force_hosts or spec.force_nodes:
            hosts = {h.lower() for h in spec.force_hosts}
            nodes = set(spec.force_nodes)
            wanted = [r for host, host_rows in table.host_rows.items()
                      if not hosts or host.lower() in hosts
                      for r in host_rows
                      if not nodes or table.states[r].nodename in nodes]
            mask = among(table, rows, wanted)
            removals.append(("force_hosts/force_nodes", rows, ~mask,
                             len(rows) - int(mask.sum())))
            rows = rows[mask]
        return rows, removals, considered

    def _sample(self, rows: np.ndarray) -> np.ndarray:
        """The hosts to weigh among those that passed (all unless sampling).

        A window of ``hosts_to_score`` hosts in table order, starting where
        the previous decision's window ended and wrapping around, so that
        every passing host is weighed in turn.
        """
        count = hosts_to_score(len(rows)) if self.weighers else len(rows)
        if count >= len(rows):
            return rows
        start = int(np.searchsorted(rows, self._next_sample))
        window = np.take(rows, np.arange(start, start + count), mode="wrap")
        self._next_sample = int(window[-1]) + 1
        return window

    def _order(self, ranking):
        """The weighed candidates (a weights.Ranking, best first) with a
        random pick of the best ``host_subset_size`` moved to the front."""
        subset = max(1, _FILTER_SCHEDULER.host_subset_size)
        if subset > 1 and len(ranking) > 1:
            pick = self._rng.randrange(min(subset, len(ranking)))
            if pick:
                return ranking.moved_to_front(pick)
        return ranking
