"""FilterScheduler: filter, weigh, pick, claim.

One decision, in order (kube-scheduler's Filter, Score, Reserve):

1. ``candidates``: every live node, minus ``ignore_hosts``; with
   ``force_hosts``/``force_nodes`` only those, and then filters are skipped
   (nova's rule);
2. ``filter``: the enabled filters in order, each recording what it removed;
3. ``weigh``: normalised weighers times multipliers, best first;
4. ``claim``: a random node among the best ``host_subset_size`` is claimed
   in the database; a claim lost to another daemon moves on to the next
   best node.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import numpy as np

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import claims as claims_mod
from nova_sched.scheduler import driver, server_groups
from nova_sched.scheduler.decision_stats import DecisionStats
from nova_sched.scheduler.filters import FilterResult, HostFilterHandler
from nova_sched.scheduler.request import RequestSpec
from nova_sched.scheduler.weights import HostWeightHandler, WeighResult

LOG = logging.getLogger(__name__)

# After this many lost claims in one decision the cache is clearly behind
# the database: re-read it once and decide again before giving up.
_LOST_CLAIMS_BEFORE_REFRESH = 8


class FilterScheduler(driver.Scheduler):
    """nova's filter scheduler over the column-wise host table."""

    def __init__(self, host_manager):
        super().__init__(host_manager)
        fs = CONF.filter_scheduler
        self.filter_handler = HostFilterHandler(list(fs.available_filters))
        self.filters = self.filter_handler.get_filters(list(fs.enabled_filters))
        self.weighers = HostWeightHandler().get_weighers(list(fs.weight_classes))
        self.stats = DecisionStats()
        # Decisions in one daemon run one at a time, as kube-scheduler's
        # cycles do; concurrency between daemons is settled by claims.
        self._decide_lock = threading.Lock()
        self._rng = random.Random()

    # -- the stages --------------------------------------------------------
    def candidates(self, spec: RequestSpec) -> tuple[np.ndarray, list, bool]:
        """Live rows after ignore/force; whether filters must be skipped."""
        table = self.host_manager.table
        rows = self.host_manager.candidates()
        removed: list[tuple[str, np.ndarray]] = []
        if spec.ignore_hosts:
            ignored = set(spec.ignore_hosts)
            mask = np.fromiter((table.states[r].host not in ignored for r in rows),
                               dtype=bool, count=len(rows))
            removed.append(("ignore_hosts", rows[~mask]))
            rows = rows[mask]
        forced = bool(spec.force_hosts or spec.force_nodes)
        if forced:
            hosts = {h.lower() for h in spec.force_hosts}
            nodes = set(spec.force_nodes)
            mask = np.fromiter(
                ((not hosts or table.states[r].host.lower() in hosts)
                 and (not nodes or table.states[r].nodename in nodes) for r in rows),
                dtype=bool, count=len(rows))
            removed.append(("force_hosts/force_nodes", rows[~mask]))
            rows = rows[mask]
        return rows, removed, forced

    def filter(self, spec: RequestSpec) -> FilterResult:
        rows, pre_removed, forced = self.candidates(spec)
        considered = len(rows) + sum(len(r) for _, r in pre_removed)
        if forced:
            # nova: forcing a host or node skips the filters entirely.
            result = FilterResult(rows=rows, removed=[], considered=len(rows))
        else:
            result = HostFilterHandler.run(
                self.filters, self.host_manager.table, rows, spec)
        result.removed = pre_removed + result.removed
        result.considered = considered
        return result

    def weigh(self, spec: RequestSpec, rows: np.ndarray) -> WeighResult:
        return HostWeightHandler.weigh(self.weighers, self.host_manager.table, rows, spec)

    def limits(self, row: int) -> dict:
        state = self.host_manager.table.states[row]
        limits: dict = {}
        for flt in self.filters:
            limits.update(flt.limits(state))
        return limits

    def refresh(self) -> None:
        # A full resync replaces the table; rows a decision holds must not
        # change meaning under it.
        with self._decide_lock:
            self.host_manager.refresh()

    # -- one instance ------------------------------------------------------
    def select_one(self, spec, instance_uuid, claim=True, alternates=0):
        """Choose (and claim) a node for one instance; NoValidHost if none."""
        with self._decide_lock:
            self.host_manager.refresh()
            started = time.perf_counter()
            spec = server_groups.with_member_hosts(spec, instance_uuid)
            try:
                return self._select_locked(spec, instance_uuid, claim, alternates)
            finally:
                self.stats.record(time.perf_counter() - started)

    def _select_locked(self, spec, instance_uuid, claim, alternates):
        lost = 0
        for attempt in range(2):
            with self.host_manager.lock:
                filtered = self.filter(spec)
                if not len(filtered.rows):
                    raise exception.NoValidHost(filtered.reason())
                weighed = self.weigh(spec, filtered.rows)
                order = self._subset_first(weighed.rows)
            for position in range(len(order)):
                row = int(order[position])
                state = self.host_manager.table.states[row]
                if claim and instance_uuid:
                    try:
                        self._claim(spec, instance_uuid, state.node_id, row)
                    except exception.ClaimFailed:
                        lost += 1
                        LOG.info("Lost the claim for %s on %s/%s to another "
                                 "scheduler; trying the next host",
                                 instance_uuid, state.host, state.nodename)
                        self.host_manager.refresh_node(state.node_id)
                        if lost % _LOST_CLAIMS_BEFORE_REFRESH == 0:
                            break
                        continue
                else:
                    self.host_manager.consume(row, self._claim_of(spec, instance_uuid,
                                                                  state.node_id))
                chosen = [self._selection(row, weighed)]
                for alt in order[position + 1:position + 1 + alternates]:
                    chosen.append(self._selection(int(alt), weighed))
                return chosen
            if attempt == 0:
                self.host_manager.refresh(force=True)
        raise exception.NoValidHost(
            f"{filtered.reason()}; {lost} claims lost to concurrent schedulers")

    def _subset_first(self, rows: np.ndarray) -> np.ndarray:
        """Weighed rows with a random pick of the best subset moved to the front."""
        subset = max(1, CONF.filter_scheduler.host_subset_size)
        if subset > 1 and len(rows) > 1:
            pick = self._rng.randrange(min(subset, len(rows)))
            if pick:
                return np.concatenate((rows[pick:pick + 1], rows[:pick],
                                       rows[pick + 1:]))
        return rows

    @staticmethod
    def _claim_of(spec, instance_uuid, node_id) -> claims_mod.Claim:
        return claims_mod.Claim(
            instance_uuid=instance_uuid or "",
            node_id=node_id,
            memory_mb=spec.memory_mb,
            vcpus=spec.vcpus,
            disk_mb=spec.disk_mb,
        )

    def _claim(self, spec, instance_uuid, node_id, row) -> None:
        claim = self._claim_of(spec, instance_uuid, node_id)
        claims_mod.claim(claim)
        self.host_manager.consume(row, claim)

    def _selection(self, row, weighed: WeighResult) -> driver.Selection:
        state = self.host_manager.table.states[row]
        where = np.flatnonzero(weighed.rows == row)
        weight = float(weighed.totals[where[0]]) if len(where) else 0.0
        return driver.Selection(host=state.host, nodename=state.nodename,
                                node_id=state.node_id, limits=self.limits(row),
                                weight=weight)

    # -- explain -----------------------------------------------------------
    def explain(self, spec: RequestSpec) -> dict:
        """What a decision would do, without claiming anything."""
        with self._decide_lock:
            self.host_manager.refresh()
            spec = server_groups.with_member_hosts(spec, None)
            with self.host_manager.lock:
                filtered = self.filter(spec)
                weighed = self.weigh(spec, filtered.rows)
                states = self.host_manager.table.states
                hosts = []
                for i, row in enumerate(weighed.rows):
                    state = states[row]
                    hosts.append({
                        "host": state.host,
                        "nodename": state.nodename,
                        "weight": float(weighed.totals[i]),
                        "weights": {name: float(share[i]) for name, share
                                    in weighed.contributions.items()},
                    })
                removed = {
                    name: [[states[r].host, states[r].nodename] for r in rows]
                    for name, rows in filtered.removed
                }
        return {"hosts": hosts, "removed": removed,
                "reason": filtered.reason()}
