"""SchedulerManager: the RPC endpoint of the scheduler topic (version 2.10).

An adapter between RPC calls and the modules that do the work: it checks
the request (``request``), records it (``db.instances`` and the
``schedule`` event), hands its instances to the scheduling cycle
(``cycle``, which decides, claims, casts and reports), and turns each
outcome into what the caller sees: a placement, an ERROR with its fault,
a reply or a remote exception. Whatever goes wrong with one request is
recorded against its instances and logged; nothing escapes to take the
daemon down or to lose the next request.
"""

from __future__ import annotations

import datetime as dt
import logging
import traceback

import oslo_messaging as messaging

from nova_sched import exception, rpc
from nova_sched.compute import rpcapi as compute_rpcapi
from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import compute_nodes as db_nodes
from nova_sched.db import instances as db_instances
from nova_sched.instance_actions import EventReporter, event_start
from nova_sched.scheduler import driver
from nova_sched.scheduler.wire import topic_consumer
from nova_sched.scheduler.cloud import compute_report
from nova_sched.scheduler.decision import retry
from nova_sched.scheduler.wire import recovery, request
from nova_sched.placement import PlacementClient
from nova_sched.publish_watch import PublishWatch
from nova_sched.scheduler.claim_stores import load_claim_store
from nova_sched.scheduler.decision.cycle import BootArgs, SchedulingCycle
from nova_sched.scheduler.host_manager import HostManager
from nova_sched.scheduler.metrics import SchedulerMetrics, counted, outcome_of
from nova_sched.scheduler.wire.notifications import SchedulerNotifier
from nova_sched.scheduler.wire.parked import ParkedRequest, ParkedRequests
from nova_sched.scheduler.cloud.host_refresher import HostRefresher
from nova_sched.scheduler.cloud.report_ingest import ReportIngest
from nova_sched.scheduler.cloud.sources import load_source

LOG = logging.getLogger(__name__)


class SchedulerManager:
    """Chooses hosts for instances and keeps the host states they need."""

    target = messaging.Target(version="2.10")

    def __init__(self, transport, notification_transport=None,
                 host_manager: HostManager | None = None,
                 metrics: SchedulerMetrics | None = None):
        self.host = CONF.host
        # One Placement client for the nova source's reads and the claims.
        uses_placement = (CONF.scheduler.claims == "placement"
                          or CONF.scheduler.host_source == "nova_cells")
        self.placement = PlacementClient() if uses_placement else None
        self.host_manager = host_manager or HostManager(load_source(self.placement))
        self.metrics = metrics if metrics is not None else SchedulerMetrics()
        self.publishes = PublishWatch(on_slow=self.metrics.slow_publish)
        self.notifier = SchedulerNotifier(notification_transport or transport,
                                          self.host, self.publishes)
        self.cycle = SchedulingCycle(
            driver.load_driver(CONF.scheduler.driver, self.host_manager),
            self.host_manager, load_claim_store(self.host_manager, self.placement),
            compute_rpcapi.ComputeAPI(transport, self.publishes), self.notifier,
            self.metrics)
        self.parked = ParkedRequests()
        self.reports = ReportIngest(self.host_manager)
        self.refresher = HostRefresher(self.cycle)

    def stop_publishing(self) -> None:
        """Send the notifications still queued and close the connections the
        compute casts and notifications went out on (the daemon stops)."""
        self.notifier.stop()
        close = getattr(self.cycle.compute_api, "close", None)
        if close is not None:
            close()

    def problem(self) -> str | None:
        """What keeps the scheduler from its work now (for /healthz): a
        publish waiting for the broker, nova's databases or Placement
        unreachable; None when all answer."""
        problem = self.publishes.problem() or self.host_manager.source.problem()
        if problem is None and self.placement is not None:
            reason = self.placement.reachable()
            problem = None if reason is None else f"placement unreachable: {reason}"
        return problem

    # -- run_instance -------------------------------------------------------
    @messaging.expose
    def run_instance(self, context, request_spec, admin_password, injected_files,
                     requested_networks, is_first_time, filter_properties,
                     legacy_bdm_in_spec=True):
        """Place each instance of the request and cast it to its compute node.

        A cast: outcomes are recorded in the database (placement or ERROR
        with a fault), in the instances' ``schedule`` events and in
        notifications. Instances placed before a failure keep their place.
        """
        try:
            spec = request.parse(request_spec, filter_properties)
        except exception.InvalidRequestSpec as err:
            self._reject(context, request_spec, err)
            self.metrics.request("run_instance", "invalid")
            return
        boot = BootArgs(admin_password, injected_files, requested_networks,
                        is_first_time, legacy_bdm_in_spec)
        try:
            outcome = self._handle(context, spec, boot)
        except exception.DatabaseUnavailable as err:
            outcome = "parked"
            LOG.error("Request %s for instances %s could not reach the database "
                      "(%s); parked until it answers again", context.request_id,
                      spec.instance_uuids, err.message)
            self.parked.park(ParkedRequest(context, request_spec, filter_properties,
                                           boot, spec.instance_uuids,
                                           ack=topic_consumer.defer_ack()))
        self.metrics.request("run_instance", outcome)

    def _handle(self, context, spec: request.RequestSpec, boot: BootArgs) -> str:
        """Schedule a parsed request; its outcome for the metrics (``ok``,
        ``no_valid_host``, ``invalid``, ``error`` or ``duplicate``). Only
        DatabaseUnavailable escapes."""
        try:
            # Its notifications wait to go out with its casts.
            with self.notifier.holding(self.cycle.compute_api.url):
                return self._run_instance(context, spec, boot)
        except exception.DatabaseUnavailable:
            raise
        except Exception:
            LOG.exception("Request %s for instances %s failed unexpectedly",
                          context.request_id, spec.instance_uuids)
            for uuid in spec.instance_uuids:
                self._set_error(context, spec.raw, uuid,
                                "Unexpected scheduler error; see the scheduler log",
                                details=traceback.format_exc())
            return "error"

    def _run_instance(self, context, spec: request.RequestSpec, boot: BootArgs) -> str:
        sizes = {k: getattr(spec, k) for k in
                 ("memory_mb", "vcpus", "root_gb", "ephemeral_gb", "swap")}
        stored = db_instances.StoredRequest(
            spec.raw, spec.filter_properties, boot.requested_networks,
            boot.is_first_time, boot.legacy_bdm_in_spec,
            needs_secrets=bool(boot.admin_password or boot.injected_files))
        announced = False
        if retry.is_reschedule(spec):
            # Where its instances stand must include the casts held.
            self.cycle.casts.flush()
            db_instances.ensure_instances(spec.instance_uuids,
                                          spec.instance_properties, sizes,
                                          request=stored)
            # Instances the compute node gave back are released first.
            return self._place_recorded(context, spec, boot, self.cycle.standing(spec))
        if len(spec.instance_uuids) == 1 and self.cycle.claims.records_new_requests:
            new = db_instances.NewRequest(
                spec.instance_uuids[0], spec.instance_properties, sizes, stored,
                event_start(context, "schedule", self.host), db_api.utcnow())
            try:
                return self._place_new(context, spec, boot, new)
            except exception.AlreadyRecorded:
                LOG.info("Request %s for instance %s was recorded before (delivered "
                         "again, or published twice); reading where it stands",
                         context.request_id, new.uuid)
                announced = True
        # Where its instances stand must include the casts held.
        self.cycle.casts.flush()
        # One transaction records the request and starts its events.
        standing, started = db_instances.begin_request(
            spec.instance_uuids, spec.instance_properties, sizes, stored,
            event_start(context, "schedule", self.host))
        return self._place_recorded(context, spec, boot, standing, started, announced)

    def _place_new(self, context, spec: request.RequestSpec, boot: BootArgs,
                   new: db_instances.NewRequest) -> str:
        """A boot of one instance seen for the first time, most boots: its
        rows are written by the transaction that claims its node, one where
        the general way takes two. AlreadyRecorded when it had rows after
        all, before anything is cast."""
        result = "ok"
        ended = False
        with EventReporter(context, "schedule", [new.uuid], self.host,
                           started={}) as events:
            self.notifier.run_instance_start(context, spec.raw)
            # On a consumer's worker the cast's record waits for the next
            # claim, or for the worker to find no request waiting.
            defer_ack = topic_consumer.defer_ack if topic_consumer.in_handler() else None
            for outcome in self.cycle.schedule(context, spec, boot, standing={},
                                               events=events, new_request=new,
                                               end_with_cast=True, defer_ack=defer_ack):
                ended = outcome.ended
                if outcome.error is None:
                    continue
                if new.event_id is None and not self._record_failed(new, events):
                    result = "duplicate"
                    continue
                result = outcome_of(outcome.error)
                self._fail(context, spec, outcome, events)
            if not ended:
                self.notifier.run_instance_end(context, spec.raw)
        return result

    def _record_failed(self, new: db_instances.NewRequest, events: EventReporter) -> bool:
        """A new request failed before its claim wrote its rows: write them
        now, as the general way would have, to hold the failure. False when
        they show another handler has the instance (the request was
        published twice): its failure is then not ours to record.
        AlreadyRecorded when an earlier delivery claimed it and did not
        record a cast: the general way casts it to that node."""
        where = db_instances.standing([new.uuid]).get(new.uuid)
        if where is not None and where.host is not None and not where.handled:
            # Claimed by an earlier delivery whose daemon died before
            # recording its cast (it may have cast it): the general way
            # casts it to the node it holds, never elsewhere.
            raise exception.AlreadyRecorded(uuid=new.uuid)
        standing, started = db_instances.begin_request(
            [new.uuid], new.props, new.sizes, new.request, new.start)
        where = standing.get(new.uuid)
        if where is not None and (where.host is not None or where.handled):
            LOG.info("Instance %s was placed meanwhile by another handler of its "
                     "request (it was published twice); leaving it to that one",
                     new.uuid)
            return False
        events.adopt(new.uuid, started[new.uuid])
        return True

    def _place_recorded(self, context, spec: request.RequestSpec, boot: BootArgs,
                        standing: dict, started: dict | None = None,
                        announced: bool = False) -> str:
        """A request whose instances have rows: place those not handled yet.
        ``announced``: its start notification went out already."""
        pending = db_instances.to_place(spec.instance_uuids, standing)
        if not pending:
            # Delivered again after the daemon that handled it died before
            # acknowledging it: there is nothing left to do.
            LOG.info("Request %s for instances %s was handled already",
                     context.request_id, spec.instance_uuids)
            return "duplicate"
        failures = set()
        ended = False
        with EventReporter(context, "schedule", pending, self.host,
                           started=started) as events:
            if not announced:
                self.notifier.run_instance_start(context, spec.raw)
            for outcome in self.cycle.schedule(context, spec, boot,
                                               standing=standing, events=events,
                                               end_with_cast=True):
                ended = outcome.ended
                if outcome.error is not None:
                    failures.add(outcome_of(outcome.error))
                    self._fail(context, spec, outcome, events)
            if not ended:
                self.notifier.run_instance_end(context, spec.raw)
        # The worst of the request's instances.
        for worst in ("error", "invalid", "no_valid_host"):
            if worst in failures:
                return worst
        return "ok"

    def _fail(self, context, spec, outcome, events) -> None:
        """One instance could not be placed: ERROR, fault, event, notification."""
        uuid, err = outcome.instance_uuid, outcome.error
        if isinstance(err, exception.NoValidHost):
            LOG.warning("Instance %s: %s", uuid, err.message)
            events.fail(uuid, err.message)
            self._set_error(context, spec.raw, uuid, err.message)
        elif isinstance(err, exception.InvalidRequestSpec):
            # Found by a filter (a malformed JsonFilter query, an unknown
            # PCI alias): the caller's mistake, not ours.
            LOG.error("Instance %s: %s", uuid, err.message)
            events.fail(uuid, err.message)
            self._set_error(context, spec.raw, uuid, err.message, code=400)
        else:
            details = "".join(traceback.format_exception(err))
            LOG.error("Instance %s could not be scheduled: %s", uuid, details)
            events.fail(uuid, details)
            self._set_error(context, spec.raw, uuid,
                            f"Scheduler error: {type(err).__name__}: {err}",
                            details=details)

    def write_held_casts(self, idle: bool = False) -> None:
        """Record the casts held for the next claim (``CastRecords``) now:
        the consumer's workers call it when no request waits (``idle``),
        the periodic tasks and a stopping daemon too. A database away
        leaves them held, their messages unacknowledged."""
        try:
            self.cycle.casts.flush(idle=idle)
        except exception.DatabaseUnavailable as err:
            LOG.warning("Casts made could not be recorded yet (%s); they are "
                        "recorded once the database answers", err.message)

    def recover_stuck(self) -> list[str]:
        """The periodic sweep of instances stuck in scheduling (``recovery``)."""
        return recovery.recover_stuck_instances(self.cycle, self._reschedule_stored)

    def _reschedule_stored(self, uuid: str, stored: db_instances.StoredRequest
                           ) -> None:
        """Schedule one instance again from its stored request."""
        request_spec = dict(stored.request_spec, instance_uuids=[uuid],
                            num_instances=1)
        spec = request.parse(request_spec, stored.filter_properties)
        boot = BootArgs(None, [], stored.requested_networks, stored.is_first_time,
                        stored.legacy_bdm_in_spec)
        context = rpc.admin_context()
        self._handle(context, spec, boot)

    def resume_parked(self) -> int:
        """Handle the requests parked during a database outage; how many.

        Instances placed or failed meanwhile (by this request's earlier
        attempt or the stuck-instance recovery) are left out.
        """
        items = self.parked.take_all()
        for number, item in enumerate(items):
            LOG.info("Resuming parked request %s for instances %s",
                     item.context.request_id, item.instance_uuids)
            try:
                # Requests are idempotent: instances placed meanwhile (by
                # another daemon, or the stuck-instance recovery) are left.
                spec = request.parse(item.request_spec, item.filter_properties)
                self._handle(item.context, spec, item.boot)
            except exception.DatabaseUnavailable:
                for rest in items[number:]:
                    self.parked.park(rest)
                return number
            item.ack()
        return len(items)

    def _reject(self, context, request_spec, err: exception.InvalidRequestSpec):
        """A malformed request: fail every instance it names, visibly."""
        if not err.instance_uuids:
            LOG.error("Rejected run_instance request %s without any instance "
                      "uuid: %s", context.request_id, err.reason)
            return
        LOG.error("Rejected run_instance request %s for instances %s: %s",
                  context.request_id, err.instance_uuids, err.reason)
        self._fail_all(context, request_spec, err.instance_uuids, err.message, 400)

    def give_up(self, context, args, reason: str) -> None:
        """Fail a poison ``run_instance`` request (``poison.PoisonGuard``)
        without handling it: its instances not placed yet go into ERROR
        with ``reason`` as their fault. Not an RPC method."""
        args = args if isinstance(args, dict) else {}
        request_spec = args.get("request_spec")
        uuids = request.find_instance_uuids(request_spec)
        if not uuids:
            LOG.error("Gave up a run_instance request naming no instance: %s",
                      reason)
            return
        try:
            unplaced = db_instances.to_place(uuids, db_instances.standing(uuids))
        except exception.DatabaseUnavailable:
            unplaced = uuids
        LOG.error("Gave up run_instance request %s for instances %s: %s",
                  context.request_id, unplaced, reason)
        self._fail_all(context, request_spec, unplaced, reason, 500)

    def _fail_all(self, context, request_spec, uuids: list[str], message: str,
                  code: int) -> None:
        """ERROR, fault, failed ``schedule`` event and notification for each
        of ``uuids``, recorded even when the request never was."""
        if not uuids:
            return
        props = request_spec.get("instance_properties") if isinstance(
            request_spec, dict) else None
        try:
            db_instances.ensure_instances(uuids,
                                          props if isinstance(props, dict) else {})
            with EventReporter(context, "schedule", uuids, self.host) as events:
                for uuid in uuids:
                    events.fail(uuid, message)
                    self._set_error(context, request_spec, uuid, message, code=code)
        except exception.DatabaseUnavailable as db_err:
            LOG.error("Could not record the failure of %s: %s", uuids,
                      db_err.message)

    def _set_error(self, context, request_spec, uuid, reason, code=500,
                   details=None) -> None:
        db_instances.mark_error(uuid, reason, code=code, details=details,
                                host=self.host)
        self.notifier.run_instance_error(context, request_spec, uuid, reason)

    # -- select_destinations ------------------------------------------------
    @messaging.expose
    @messaging.expected_exceptions(exception.NoValidHost, exception.InvalidRequestSpec)
    @counted
    def select_destinations(self, context, request_spec, filter_properties,
                            return_alternates=False):
        """Choose and claim a node for every instance, or for none.

        Returns ``[{'host', 'nodename', 'limits'}]`` per instance, or with
        ``return_alternates`` a list per instance: the choice first, then up
        to ``max_attempts - 1`` unclaimed alternates. NoValidHost (with the
        reason) when any instance cannot be placed; claims made for the
        earlier instances of the request are then released.
        """
        spec = request.parse(request_spec, filter_properties)
        chosen = self.select(context, spec, return_alternates)
        if return_alternates:
            return [[s.to_dict() for s in selections] for selections in chosen]
        return [selections[0].to_dict() for selections in chosen]

    def select(self, context, spec: request.RequestSpec, alternates: bool
               ) -> list[list]:
        """Claim a node for every instance of ``spec``, or for none: per
        instance, the Selection claimed then (with ``alternates``) up to
        ``max_attempts - 1`` unclaimed alternates. The first error (such as
        NoValidHost) is raised after the earlier claims are released. Both
        RPC APIs' ``select_destinations`` are this."""
        count = CONF.scheduler.max_attempts - 1 if alternates else 0
        placed = []
        for outcome in self.cycle.schedule(context, spec, alternates=count):
            if outcome.error is not None:
                self.cycle.release([o.instance_uuid for o in placed if o.instance_uuid])
                raise outcome.error
            placed.append(outcome)
        return [outcome.selections for outcome in placed]

    # -- host state reports -------------------------------------------------
    @messaging.expose
    def compute_node_update(self, context, compute_node):
        """Take a compute node's report; it is also the host's heartbeat.

        Validated here, then applied to the host table at once and written
        to the database in batches (``report_ingest``).
        """
        try:
            values = compute_report.validate(compute_node)
        except exception.InvalidComputeReport as err:
            host = compute_node.get("host") if isinstance(compute_node, dict) else None
            LOG.error("Ignored report from compute host %r: %s", host, err.reason)
            self.metrics.report("invalid")
            self.metrics.request("compute_node_update", "invalid")
            return
        self.reports.submit(values)
        self.metrics.report("accepted")
        self.metrics.request("compute_node_update", "ok")

    @messaging.expose
    @counted
    def compute_node_delete(self, context, host, nodename):
        """Forget a node: it takes no more instances."""
        if db_nodes.mark_deleted(host, nodename):
            LOG.info("Compute node %s/%s deleted", host, nodename)
        self.host_manager.note_deleted(host, nodename)

    @messaging.expose
    @counted
    def instance_delete(self, context, instance_uuid):
        """Release an instance's claim."""
        self.forget_instance(instance_uuid)

    def forget_instance(self, instance_uuid: str) -> None:
        """An instance deleted: its claim released, its row marked (both
        RPC APIs' deletes)."""
        for node_id in set(self.cycle.claims.forget([instance_uuid])):
            self.host_manager.refresh_node(node_id)
        if self.host_manager.source.tracks_instances:
            self.host_manager.source.forget_instance(instance_uuid)
        db_instances.mark_deleted(instance_uuid)
        if self.host_manager.has_unclaimed():
            # It may have been one nova reported without a claim.
            self.host_manager.recount_unclaimed()

    @messaging.expose
    @counted
    def sync_instance_info(self, context, host, instance_uuids):
        """Reconcile the claims on ``host`` with the instances it runs.

        Claims of instances the host does not list are released once they
        are older than ``[scheduler] scheduling_timeout`` (younger ones may
        be builds still on their way); listed instances the scheduler does
        not know are recorded.
        """
        self.reconcile_host(host, instance_uuids)

    def reconcile_host(self, host: str, instance_uuids) -> None:
        """``sync_instance_info`` of both RPC APIs."""
        listed = set(instance_uuids or [])
        if self.host_manager.source.tracks_instances:
            # nova's cells know the host's instances; nothing is recorded here.
            self.host_manager.source.sync_instances(host, listed)
            return
        claims = self.cycle.claims
        held = claims.held_on_host(host)
        cutoff = db_api.utcnow() - dt.timedelta(seconds=CONF.scheduler.scheduling_timeout)
        stale = claims.older_than([u for u in held if u not in listed], cutoff)
        if stale:
            LOG.info("Releasing %d claims on %s that it no longer reports", len(stale),
                     host)
            self.cycle.release(stale)
        self._record_unclaimed(host, listed - set(held))

    def note_instances(self, host: str, instance_uuids) -> None:
        """Instances running on ``host``: those the scheduler does not know
        are recorded there; the affinity filters and NumInstancesFilter
        count them."""
        if self.host_manager.source.tracks_instances:
            self.host_manager.source.note_instances(host, instance_uuids)
            return
        self._record_unclaimed(
            host, set(instance_uuids) - set(self.cycle.claims.held_on_host(host)))

    def _record_unclaimed(self, host: str, unclaimed: set[str]) -> None:
        if unclaimed:
            db_instances.record_unknown(sorted(unclaimed), host)
            self.host_manager.recount_unclaimed()

    # -- explain ------------------------------------------------------------
    @messaging.expose
    @messaging.expected_exceptions(exception.NoValidHost, exception.InvalidRequestSpec)
    @counted
    def explain(self, context, request_spec, filter_properties):
        """A dry run: what each filter removed and how survivors weigh.

        Returns ``{'hosts': [{'host', 'nodename', 'weight', 'weights'}],
        'removed': {filter: [[host, node], ...]}, 'reason': ...}``; nothing
        is claimed or recorded.
        """
        return self.cycle.explain(request.parse(request_spec, filter_properties))

