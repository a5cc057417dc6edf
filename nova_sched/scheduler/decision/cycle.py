"""One scheduling cycle: how each instance of a request gets its node.

The steps of one instance's placement, in the order the scheduler takes
them (kube-scheduler's schedule_one, with nova's names):

1. prepare: count the attempt (``retry``), find where the instance's
   server group is (``server_groups``), and let every plugin work out what
   it needs from the request (``CycleState``);
2. filter and 3. weigh: the driver's decision over the host table;
4. claim and record: the best node's resources are claimed with the ratios
   the decision judged it by and, for a boot, the instance's host and node
   are recorded in the same transaction; a claim lost to another daemon
   moves on to the next best node;
5. cast: ``run_instance`` to the chosen compute node;
6. report: the ``scheduled`` notification and a log line.

``run_instance`` goes through all six steps, ``select_destinations`` stops
after the claim (its caller builds the instance), ``explain`` after
weighing. They share ``schedule`` (the loop over a request's instances) and
``decide``; the manager only adapts RPC calls to them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Iterator

from nova_sched import exception
from nova_sched.db import instances as db_instances
from nova_sched.scheduler.decision import retry, server_groups
from nova_sched.scheduler.claims import Claim, ClaimStore, Placement
from nova_sched.scheduler.decision.cast_records import CastRecords
from nova_sched.scheduler.decision.cycle_state import CycleState
from nova_sched.scheduler.decision.decision_stats import DecisionStats
from nova_sched.scheduler.driver import Decision, Scheduler, Selection
from nova_sched.scheduler.metrics import SchedulerMetrics
from nova_sched.scheduler.wire.publisher import Pending
from nova_sched.scheduler.wire.request import RequestSpec

LOG = logging.getLogger(__name__)

# After this many claims lost in a row the cache is clearly behind the
# database: re-read all that changed before deciding again.
_LOST_CLAIMS_BEFORE_REFRESH = 8
# Claims lost in a row after which an instance is given up (NoValidHost):
# the cloud is full or far too contended for this instance.
_MAX_LOST_CLAIMS = 32
# Decisions in a row overtaken by operators' changes after which an
# instance is given up: each catch-up reads every change made before it,
# so only a stream of changes faster than a decision gets here.
_MAX_CATCH_UPS = 8


@dataclasses.dataclass(frozen=True)
class BootArgs:
    """What ``run_instance`` passes through to the compute node untouched."""

    # Kept out of repr: a dataclass shown in a log line must not carry them.
    admin_password: Any = dataclasses.field(repr=False)
    injected_files: Any = dataclasses.field(repr=False)
    requested_networks: Any
    is_first_time: Any
    legacy_bdm_in_spec: Any = True


class _Timing:
    """One instance's decision CPU time and claim wall time, summed over its
    tries (a claim lost to another daemon is decided again); see
    ``DecisionStats``."""

    def __init__(self):
        self.decision = 0.0
        self.claim: float | None = None

    @contextlib.contextmanager
    def deciding(self) -> Iterator[None]:
        # Around the driver's work alone (decide, its selections), the
        # cycle's lock held: waiting for it, and bringing the host table up
        # to date, are not counted.
        started = time.thread_time()
        try:
            yield
        finally:
            self.decision += time.thread_time() - started

    @contextlib.contextmanager
    def claiming(self) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.claim = (self.claim or 0.0) + time.perf_counter() - started


@dataclasses.dataclass
class Outcome:
    """What became of one instance: its selections, or the error."""

    instance_uuid: str | None
    selections: list[Selection] = dataclasses.field(default_factory=list)
    error: Exception | None = None
    # The request's end notification went out with this instance's cast.
    ended: bool = False


class SchedulingCycle:
    """Places instances: decide, claim and record, cast, report.

    Decisions in one daemon run one at a time, as kube-scheduler's cycles
    do; concurrency between daemons is settled by the claims.
    """

    def __init__(self, driver: Scheduler, host_manager, claims: ClaimStore,
                 compute_api, notifier, metrics: SchedulerMetrics | None = None):
        self.driver = driver
        self.metrics = metrics if metrics is not None else SchedulerMetrics()
        self.host_manager = host_manager
        self.claims = claims
        self.compute_api = compute_api
        self.notifier = notifier
        self.stats = DecisionStats()
        self._lock = threading.Lock()
        # Instances cast whose cast could not be recorded (database away);
        # a lock of its own, so that recording a cast never waits for a
        # decision.
        self._cast_unrecorded: set[str] = set()
        self._unrecorded_lock = threading.Lock()
        # Casts whose records ride the next claim's transaction.
        self.casts = CastRecords()

    # -- a request --------------------------------------------------------
    def schedule(self, context, spec: RequestSpec, boot: BootArgs | None = None,
                 alternates: int = 0, standing: dict | None = None,
                 events=None, new_request: db_instances.NewRequest | None = None,
                 end_with_cast: bool = False,
                 defer_ack: Callable[[], Callable[[], None]] | None = None
                 ) -> Iterator[Outcome]:
        """Place each instance of the request in turn; one Outcome each.

        With ``boot`` each placement is recorded and cast to its node (a
        failure of one instance leaves the others placed); without it the
        nodes are only claimed, for a caller that builds the instances
        itself. A request without instance uuids (select_destinations of
        Havana's conductor) is decided without claims. DatabaseUnavailable
        propagates: the whole request must wait for the database.
        ``standing`` is ``standing(spec)`` when the caller has it already;
        ``events`` (an EventReporter) has each instance's event finished
        with the record of its cast, in one transaction. ``new_request``:
        a single-instance boot seen for the first time, not recorded yet;
        the claim records it (``records_new_requests``), and AlreadyRecorded
        propagates if it was recorded after all. ``end_with_cast``: the
        request's end notification goes out with its last instance's cast
        when it can (``Outcome.ended``; see ``SchedulerNotifier.taken``).
        ``defer_ack`` (``topic_consumer.defer_ack``, given on a consumer's
        worker): ``new_request``'s cast is recorded by the next claim's
        transaction (``CastRecords``), its message kept until then.
        """
        group = server_groups.resolve(spec, record=True)
        if standing is None:
            standing = self.standing(spec) if boot is not None else {}
        uuids = spec.instance_uuids or [None] * spec.num_instances
        for index, uuid in enumerate(uuids):
            where = standing.get(uuid)
            if where is not None and where.handled:
                # Delivered again after its daemon died: this instance was
                # handled before it did.
                LOG.info("Instance %s was already %s; not scheduled again", uuid,
                         f"cast to {where.host}" if where.cast else where.vm_state)
                yield Outcome(uuid)
                continue
            try:
                if where is not None and where.host is not None:
                    selections = self._recast(context, spec, group, uuid, index,
                                              where, boot, events)
                    if selections:
                        yield Outcome(uuid, selections)
                        continue
                last = end_with_cast and index == len(uuids) - 1
                selections, ended = self._place(
                    context, spec, group, uuid, index, boot, alternates, events,
                    previous_host=where.host if where is not None else None,
                    new_request=new_request, end_with_cast=last, defer_ack=defer_ack)
                yield Outcome(uuid, selections, ended=ended)
            except exception.AlreadyPlaced:
                LOG.info("Instance %s was placed meanwhile by another handler of "
                         "this request (it was published twice); leaving it to "
                         "that one", uuid)
                yield Outcome(uuid)
            except (exception.DatabaseUnavailable, exception.AlreadyRecorded):
                raise
            except Exception as err:
                if isinstance(err, exception.NoValidHost):
                    self.metrics.no_valid_host.inc()
                yield Outcome(uuid, error=err)

    def standing(self, spec: RequestSpec) -> dict:
        """Where a boot request's instances stand before they are placed.

        A compute node that gave instances back (a reschedule) has them
        released and put back to 'scheduling' first; an instance whose host
        is not among the nodes the request already tried was placed again
        by an earlier delivery of this very request, and is left alone.
        """
        standing = db_instances.standing(spec.instance_uuids)
        if retry.is_reschedule(spec):
            tried = retry.tried_nodes(spec)
            back = [u for u in spec.instance_uuids
                    if u not in standing or not standing[u].settled
                    and (standing[u].host, standing[u].node) in tried]
            self.release(back)
            for uuid in back:
                db_instances.set_scheduling(uuid)
                standing.pop(uuid, None)
        return standing

    def explain(self, spec: RequestSpec) -> dict:
        """What a decision would do for the request, claiming nothing."""
        group = server_groups.resolve(spec, record=False)
        # Nothing is claimed, so no claim's transaction checks the table:
        # it catches up with the operators here.
        self.host_manager.catch_up()
        with self._lock:
            self.host_manager.refresh()
            decision = self.decide(spec, group, None)
        return decision.summary()

    def release(self, instance_uuids: list[str]) -> None:
        """Give back the instances' claims (their nodes are re-read)."""
        for node_id in set(self.claims.release(list(instance_uuids))):
            self.host_manager.refresh_node(node_id)

    def keep_fresh(self) -> None:
        """The HostRefresher's turn: the rows changed since its last look,
        or when due every row, applied while decisions go on (under the
        host manager's lock, as reports are); a table rebuilt anew replaces
        the old one between two decisions."""
        if self.host_manager.full_resync_due():
            self.host_manager.full_resync(between_decisions=self._lock)
        else:
            self.host_manager.refresh_changes(may_rebuild=False)

    # -- one instance -------------------------------------------------------
    def _place(self, context, spec: RequestSpec, group, uuid: str | None, index: int,
               boot: BootArgs | None, alternates: int, events=None,
               previous_host: str | None = None,
               new_request: db_instances.NewRequest | None = None,
               end_with_cast: bool = False,
               defer_ack: Callable[[], Callable[[], None]] | None = None
               ) -> tuple[list[Selection], bool]:
        """Decide and claim, then for a boot cast and record: the
        selections, and whether the request's end went with the cast."""
        fprops = retry.next_attempt(spec.filter_properties, uuid)
        spec = dataclasses.replace(spec, filter_properties=fprops)
        placement_index = index if boot is not None else None
        timing = _Timing()
        try:
            selections = self._claim_best(spec, group, uuid, placement_index,
                                          alternates, previous_host, timing, new_request)
        finally:
            self.stats.record(timing.decision, timing.claim)
            self.metrics.decided(timing.decision, timing.claim)
        if new_request is not None and events is not None:
            # Its event was started by the claim's transaction.
            events.adopt(uuid, new_request.event_id)
        ended = False
        if boot is not None:
            defer_ack = defer_ack if new_request is not None else None
            try:
                ended, pending = self._cast(context, spec, uuid, index, selections[0],
                                            boot, end_with_cast)
                if pending is not None and defer_ack is None:
                    pending.wait()
            except Exception:
                # The instance stays unplaced rather than claimed on a node
                # that never heard of it.
                self.release([uuid])
                db_instances.set_scheduling(uuid)
                raise
            # Cast: whatever happens now, the claim stays where it was cast.
            # A record held for the next claim reads the cast's confirm then.
            self._record_cast(uuid, events, defer_ack,
                              pending.wait if pending is not None else None)
        return selections, ended

    def _recast(self, context, spec: RequestSpec, group, uuid: str, index: int,
                where, boot: BootArgs, events=None) -> list[Selection]:
        """An instance claimed by a daemon that died before it was cast.

        The dying daemon may have cast it already: casting it to the same
        node again is harmless (a compute node builds an instance once),
        casting it elsewhere would build it twice. Its claim is taken again
        on that node (replacing the one it holds: still one claim) and it is
        cast there; [] when that node can no longer take it, and it is then
        placed as if new.
        """
        fprops = retry.next_attempt(spec.filter_properties, uuid)
        spec = dataclasses.replace(spec, filter_properties=fprops)
        cycle = self._cycle_state(spec, group, uuid)
        with self._lock:
            self.host_manager.refresh()
            with self.host_manager.lock:
                table = self.host_manager.table
                row = table.row_of(where.host, where.node)
                if row is None:
                    return []
                cycle.table = table
                held = self.driver.selection(cycle, row)
            claim = self.claim_for(spec, uuid, held)
            try:
                self.claims.claim(claim, Placement(held.host, held.nodename, index,
                                                   where.host))
            except exception.ClaimFailed:
                LOG.warning("Instance %s held a claim on %s/%s that cannot be taken "
                            "again; placing it anew", uuid, held.host, held.nodename)
                return []
            self.host_manager.refresh_node(held.node_id)
        with self._unrecorded_lock:
            already_cast = uuid in self._cast_unrecorded
        if already_cast or self.casts.holds(uuid):
            LOG.info("Instance %s was cast to %s/%s before the database went "
                     "away; recording it", uuid, held.host, held.nodename)
            self.casts.confirm(uuid)
        else:
            LOG.info("Instance %s was claimed on %s/%s by a scheduler that "
                     "stopped before casting it; casting it there", uuid,
                     held.host, held.nodename)
            _, pending = self._cast(context, spec, uuid, index, held, boot)
            if pending is not None:
                pending.wait()
        self._record_cast(uuid, events)
        return [held]

    def decide(self, spec: RequestSpec, group, uuid: str | None) -> Decision:
        """Steps 1-3: prepare, filter and weigh for one instance."""
        return self.driver.decide(self._cycle_state(spec, group, uuid))

    def _cycle_state(self, spec: RequestSpec, group, uuid: str | None) -> CycleState:
        hosts_of = self.host_manager.hosts_of
        return CycleState(spec=spec, instance_uuid=uuid, hosts_of=hosts_of,
                          group=server_groups.for_decision(group, uuid, hosts_of))

    def claim_for(self, spec: RequestSpec, uuid: str | None,
                  selection: Selection, counted_through_us: int | None = None,
                  operator_changes: int | None = None) -> Claim:
        """The claim ``uuid`` makes on the selected node: the request's
        resources, judged by the ratios the decision used, with the owner
        and the move's source hosts a claim in Placement records
        (``counted_through_us``, ``operator_changes``: see ``Claim``)."""
        candidate = selection.candidate
        return Claim(instance_uuid=uuid or "", node_id=selection.node_id,
                     memory_mb=spec.memory_mb, vcpus=spec.vcpus,
                     disk_mb=spec.disk_mb, ratios=selection.ratios,
                     node_uuid=selection.node_uuid, project_id=spec.project_id,
                     user_id=spec.user_id, keep_on_hosts=frozenset(spec.ignore_hosts),
                     counted_through_us=counted_through_us,
                     operator_changes=operator_changes,
                     allocations=None if candidate is None else candidate.allocations,
                     mappings=None if candidate is None else candidate.mappings)

    def _offer(self, spec: RequestSpec, uuid: str | None, selection: Selection,
               claim: Claim | None = None) -> Selection:
        """The selection with what a caller needs to claim it itself
        (``claim``: the selection's, when the caller made it already)."""
        selection.allocation_request = self.claims.allocation_request(
            claim or self.claim_for(spec, uuid, selection))
        return selection

    def _claim_best(self, spec, group, uuid, placement_index, alternates,
                    previous_host: str | None = None,
                    timing: _Timing | None = None,
                    new_request: db_instances.NewRequest | None = None
                    ) -> list[Selection]:
        """Step 4: take the best node in memory, then claim it in the database.

        As kube-scheduler "assumes" a pod before binding it, the decision
        counts the instance on its node in the host table while it holds
        the cycle's lock, and the claim's transaction runs after the lock
        is released: the next decision in this daemon already sees the node
        fuller and need not wait for the database. A claim lost to another
        daemon (the guarded UPDATE) takes the assumption back (the node is
        re-read) and decides again. So does a claim decided before the
        table read an operator's latest change (HostTableBehind), once the
        table has caught up: every decision that starts after an operator's
        command returned places as if it saw the change.
        """
        timing = timing if timing is not None else _Timing()
        lost = behind = 0
        doubts_settled = False
        # A claim's transaction checks its decision against the operators'
        # changes; an answer that claims nothing (no instance uuid to claim
        # for, no valid host) is checked by catching up first.
        catch_up = not uuid
        caught_up = False
        while True:
            if catch_up and not caught_up:
                self.host_manager.catch_up()
                caught_up = True
            if lost and lost % _LOST_CLAIMS_BEFORE_REFRESH == 0:
                # Outside the cycle's lock: a full resync under way in the
                # HostRefresher holds the reader and may be waiting for
                # that lock to replace the table.
                self.keep_fresh()
            with self._lock:
                self.host_manager.refresh()
                # Before deciding: the table may read more while it decides.
                seen = self.host_manager.operator_changes
                with timing.deciding():
                    decision = self.decide(spec, group, uuid)
                if (not len(decision.order) and not doubts_settled
                        and self.host_manager.settle_doubts()):
                    # Some figures may have counted a claim of ours twice.
                    doubts_settled = True
                    with timing.deciding():
                        decision = self.decide(spec, group, uuid)
                self.metrics.filtered(decision.filtered.removed_counts())
                if not len(decision.order):
                    if not caught_up and self.host_manager.behind_operators(seen):
                        catch_up = True
                        continue
                    reason = decision.reason()
                    if lost:
                        reason += f"; {lost} claims lost to concurrent schedulers"
                    raise exception.NoValidHost(reason)
                with timing.deciding():
                    # The driver's too: ordering the candidates as far as
                    # they are read, and each one's limits.
                    chosen = decision.selection(0)
                    others = decision.alternates(alternates)
                claim = self.claim_for(spec, uuid, chosen,
                                       self.host_manager.read_through_us(), seen)
                self._offer(spec, uuid, chosen, claim)
                rest = [self._offer(spec, uuid, other) for other in others]
                self.host_manager.consume(int(decision.order[0]), claim)
                if not uuid:
                    # Nothing to claim for (Havana's conductor asks without
                    # uuids): counted in memory only, so the request's next
                    # instance sees it, as nova does.
                    return [chosen] + rest
            placement = None if placement_index is None else Placement(
                chosen.host, chosen.nodename, placement_index, previous_host,
                new_request)
            # A new request's claim records the casts held meanwhile (the
            # other ways of a request write them before they begin).
            riding = self.casts.take() if new_request is not None else []
            if riding:
                placement = dataclasses.replace(
                    placement, casts=tuple(held.record for held in riding))
            try:
                try:
                    with timing.claiming():
                        self.claims.claim(claim, placement)
                except BaseException:
                    self.casts.put_back(riding)
                    raise
                self.casts.written(riding)
                self.host_manager.source.note_confirmed(claim)
                # nova-scheduler's "Selected host" line, with the request's id.
                LOG.debug("Instance %s claimed on %s/%s", uuid, chosen.host,
                          chosen.nodename)
                return [chosen] + rest
            except exception.ClaimFailed as err:
                lost += 1
                self.metrics.claims_lost.inc()
                LOG.info("Lost the claim for %s on %s/%s to another scheduler "
                         "(%s); deciding again", uuid, chosen.host, chosen.nodename,
                         err.message)
                self.host_manager.source.note_withdrawn(claim)
                self.host_manager.refresh_node(chosen.node_id)
                if lost >= _MAX_LOST_CLAIMS:
                    raise exception.NoValidHost(
                        f"{lost} claims lost to concurrent schedulers")
            except exception.HostTableBehind as err:
                behind += 1
                self.host_manager.source.note_withdrawn(claim)
                self._forget_assumption(chosen.node_id)
                if behind > _MAX_CATCH_UPS:
                    raise
                LOG.info("Instance %s was decided before an operator's change "
                         "was read (%s); deciding again", uuid, err.message)
                self.host_manager.catch_up()
            except BaseException:
                self.host_manager.source.note_withdrawn(claim)
                self._forget_assumption(chosen.node_id)
                raise

    def _forget_assumption(self, node_id: int) -> None:
        """Take back an instance counted on a node it could not claim."""
        try:
            self.host_manager.refresh_node(node_id)
        except Exception as err:  # the periodic resync corrects it later
            LOG.warning("Could not re-read compute node %s (%s)", node_id, err)

    def _cast(self, context, spec: RequestSpec, uuid: str, index: int,
              chosen: Selection, boot: BootArgs, end_with_cast: bool = False
              ) -> tuple[bool, Pending | None]:
        """Steps 5 and 6: hand the instance to its node and say so. Whether
        the request's end notification went with the cast, and what waits
        for the broker's confirm of it (None: waited for already)."""
        fprops = spec.filter_properties
        retry.record_host(fprops, chosen.host, chosen.nodename)
        fprops["limits"] = chosen.limits
        # The request's spec with this instance's launch index; what is not
        # changed is shared with the request (nothing changes it after).
        request_spec = dict(spec.raw)
        request_spec["instance_properties"] = dict(
            spec.raw.get("instance_properties") or {}, launch_index=index)
        instance = dict(spec.instance_properties)
        instance.update(
            uuid=uuid, host=chosen.host, node=chosen.nodename,
            vm_state="building", task_state="scheduling", launch_index=index,
            memory_mb=spec.memory_mb, vcpus=spec.vcpus, root_gb=spec.root_gb,
            ephemeral_gb=spec.ephemeral_gb, swap=spec.swap)
        self.notifier.run_instance_scheduled(context, request_spec, chosen.host,
                                             chosen.weight, uuid, base=spec.raw)
        # The request's notifications so far (start, scheduled) go out with
        # the cast when the manager holds them: one wait for the broker's
        # confirms, and once the cast is recorded they cannot be lost. The
        # end too, when this cast is the request's last: the notification
        # thread then has nothing to send for a boot that succeeds.
        end = (context, spec.raw) if end_with_cast else None
        with self.notifier.taken(end) as along:
            pending = self.compute_api.run_instance(
                context, instance=instance, host=chosen.host,
                request_spec=request_spec, filter_properties=fprops,
                requested_networks=boot.requested_networks,
                injected_files=boot.injected_files,
                admin_password=boot.admin_password, is_first_time=boot.is_first_time,
                node=chosen.nodename, legacy_bdm_in_spec=boot.legacy_bdm_in_spec,
                along=along.before, after=along.after)
        LOG.info("Instance %s scheduled to %s/%s (weight %.3f)", uuid,
                 chosen.host, chosen.nodename, chosen.weight)
        return along.ends, pending

    def _record_cast(self, uuid: str, events,
                     defer_ack: Callable[[], Callable[[], None]] | None = None,
                     confirm: Callable[[], None] | None = None) -> None:
        """Record that ``uuid`` was cast, with its event's end.

        A request delivered again must not cast the instance twice. A daemon
        dying between the cast and this record leaves the one window in
        which it will be (to the same node: see _recast). A database gone
        at this moment is remembered here, so that this daemon, resuming
        the request, records the cast instead of sending it again.
        With ``defer_ack`` the record is held for the next claim's
        transaction (``CastRecords``) and the request's message with it;
        ``confirm`` then waits for the broker's confirm of the cast, before
        that transaction writes the record.
        """
        finished = events.finish_on_cast(uuid) if events is not None else None
        if defer_ack is not None:
            self.casts.hold(uuid, finished or {}, defer_ack(), confirm)
            return
        try:
            db_instances.mark_cast(uuid, finished)
        except exception.DatabaseUnavailable:
            with self._unrecorded_lock:
                self._cast_unrecorded.add(uuid)
            raise
        with self._unrecorded_lock:
            self._cast_unrecorded.discard(uuid)
