"""FilterScheduler: nova's filter scheduler over the column-wise host table.

One decision, in order (kube-scheduler's PreFilter, Filter, Score):

1. ``prepare``: every enabled filter and weigher works out what it needs
   from the request, once, before any host is asked;
2. candidates: every live node, minus ``ignore_hosts``; with
   ``force_hosts``/``force_nodes`` only those, and then filters are skipped
   (nova's rule);
3. filter: the enabled filters in order, each recording what it removed;
4. weigh: normalised weighers times multipliers, best first; then a
   random node among the best ``host_subset_size`` is moved to the front.

Claiming the chosen node is the scheduling cycle's step, not the driver's.
"""

from __future__ import annotations

import random

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import driver
from nova_sched.scheduler.cycle_state import CycleState
from nova_sched.scheduler.filters import HostFilterHandler
from nova_sched.scheduler.weights import HostWeightHandler


class FilterScheduler(driver.Scheduler):
    """nova's filter scheduler: filters, then normalised weighers."""

    def __init__(self, host_manager):
        super().__init__(host_manager)
        fs = CONF.filter_scheduler
        self.filters = HostFilterHandler(list(fs.available_filters)).get_filters(
            list(fs.enabled_filters))
        self.weighers = HostWeightHandler().get_weighers(list(fs.weight_classes))
        self._rng = random.Random()

    def decide(self, cycle: CycleState) -> driver.Decision:
        spec = cycle.spec
        forced = bool(spec.force_hosts or spec.force_nodes)
        # The table is only referenced here; preparation must not read rows,
        # which change until the lock below is taken.
        cycle.table = self.host_manager.table
        # nova: forcing a host or node skips the filters entirely.
        filters = [] if forced else self.filters
        cycle.prepare(filters + self.weighers)
        with self.host_manager.lock:
            cycle.table = self.host_manager.table
            rows, removed = self._candidates(cycle, forced)
            considered = len(rows) + sum(len(r) for _, r in removed)
            filtered = HostFilterHandler.run(filters, cycle, rows)
            filtered.removed = removed + filtered.removed
            filtered.considered = considered
            weighed = HostWeightHandler.weigh(self.weighers, cycle, filtered.rows)
            order = self._order(weighed.rows)
        return driver.Decision(cycle=cycle, filtered=filtered, weighed=weighed,
                               order=order, driver=self)

    def limits(self, cycle: CycleState, row: int) -> dict:
        limits: dict = {}
        for flt in self.filters:
            limits.update(flt.limits(cycle, row))
        return limits

    def _candidates(self, cycle: CycleState, forced: bool
                    ) -> tuple[np.ndarray, list[tuple[str, np.ndarray]]]:
        """Live rows after ignore_hosts and force_hosts/force_nodes."""
        table, spec = cycle.table, cycle.spec
        rows = self.host_manager.candidates()
        removed: list[tuple[str, np.ndarray]] = []
        if spec.ignore_hosts:
            ignored = [r for h in set(spec.ignore_hosts)
                       for r in table.host_rows.get(h, ())]
            mask = ~np.isin(rows, ignored)
            removed.append(("ignore_hosts", rows[~mask]))
            rows = rows[mask]
        if forced:
            hosts = {h.lower() for h in spec.force_hosts}
            nodes = set(spec.force_nodes)
            wanted = [r for host, host_rows in table.host_rows.items()
                      if not hosts or host.lower() in hosts
                      for r in host_rows
                      if not nodes or table.states[r].nodename in nodes]
            mask = np.isin(rows, wanted)
            removed.append(("force_hosts/force_nodes", rows[~mask]))
            rows = rows[mask]
        return rows, removed

    def _order(self, rows: np.ndarray) -> np.ndarray:
        """Weighed rows with a random pick of the best subset moved to the front."""
        subset = max(1, CONF.filter_scheduler.host_subset_size)
        if subset > 1 and len(rows) > 1:
            pick = self._rng.randrange(min(subset, len(rows)))
            if pick:
                return np.concatenate((rows[pick:pick + 1], rows[:pick],
                                       rows[pick + 1:]))
        return rows
