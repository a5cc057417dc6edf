"""SchedulerManagerV4: the RPC endpoint today's nova calls (API 4.5).

Served beside the Havana endpoint (``manager.SchedulerManager``, 2.10) on
the same topic and server: oslo.messaging hands a message to the endpoint
whose major version matches the caller's. This one only translates:
``spec_obj`` (a RequestSpec primitive, ``spec_obj``) becomes the same
internal request the Havana path parses, decisions and claims are the
2.10 endpoint's own (``SchedulerManager.select``), and its Selections go
back as nova's ``Selection`` primitives (``nova_objects``) or nova's legacy
dicts. The fanout casts nova sends every scheduler (aggregates, instance
info) are applied to the same store the ``nova-sched-manage`` commands and
the Havana casts change. nova is never imported.
"""

from __future__ import annotations

import dataclasses
import json
import logging

import oslo_messaging as messaging

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import aggregates as db_aggregates
from nova_sched.db import settings as db_settings
from nova_sched.db.aggregates import AggregateInfo
from nova_sched.placement import CANDIDATES_VERSION
from nova_sched.scheduler.wire import nova_objects, request
from nova_sched.scheduler.wire import spec_obj as spec_objects
from nova_sched.scheduler.metrics import counted

LOG = logging.getLogger(__name__)

# nova's own default for an argument it did not send (4.0-4.2 callers).
_UNSET = object()


class SchedulerManagerV4:
    """Today's nova's scheduler API (4.5) over the Havana endpoint's work."""

    target = messaging.Target(version="4.5")

    def __init__(self, manager):
        self.manager = manager
        self.metrics = manager.metrics
        self._cell_uuid: str | None = None

    def cell_uuid(self) -> str | None:
        """``[scheduler] cell_uuid``, else the one ``db sync`` generated."""
        if CONF.scheduler.cell_uuid:
            return CONF.scheduler.cell_uuid
        if self._cell_uuid is None:
            self._cell_uuid = db_settings.cell_uuid()
        return self._cell_uuid

    # -- select_destinations ------------------------------------------------
    @messaging.expose
    @messaging.expected_exceptions(exception.NovaNoValidHost,
                                   exception.InvalidRequestSpec)
    @counted
    def select_destinations(self, context, request_spec=None, filter_properties=None,
                            spec_obj=_UNSET, instance_uuids=None,
                            return_objects=False, return_alternates=False):
        """Choose and claim a node for every instance, or for none (4.0-4.5).

        4.3 and later send ``spec_obj``, a RequestSpec primitive (4.4 adds
        ``instance_uuids``, 4.5 ``return_objects`` and
        ``return_alternates``); 4.0-4.2 send Havana-like ``request_spec``
        and ``filter_properties``. With ``return_objects`` the answer is, per
        instance, a list of Selection 1.1 primitives (the choice, then up to
        ``max_attempts - 1`` alternates when ``return_alternates``);
        otherwise ``[{'host', 'nodename', 'limits'}]``. No fit: nova's own
        ``nova.exception.NoValidHost`` with the per-filter reason.
        """
        if spec_obj is _UNSET or spec_obj is None:
            legacy = spec_objects.legacy_4_0(request_spec, filter_properties)
        else:
            legacy = spec_objects.to_legacy(spec_obj, instance_uuids)
        spec = request.parse(*legacy)
        if spec.is_rebuild:
            # A rebuild on its own host only asks whether the host still
            # passes the filters; nothing moves, so nothing is claimed
            # (nova's request_is_rebuild).
            spec = dataclasses.replace(spec, instance_uuids=[])
        try:
            chosen = self.manager.select(context, spec, alternates=return_alternates)
        except exception.NoValidHost as err:
            raise exception.NovaNoValidHost(err.reason) from None
        except exception.PlacementUnavailable as err:
            # As nova-scheduler answers when Placement does not: no host,
            # here with the reason, after waiting for it.
            raise exception.NovaNoValidHost(err.message) from None
        if not return_objects:
            return [selections[0].to_dict() for selections in chosen]
        cell = self.cell_uuid()
        keep = None if return_alternates else 1
        return [[nova_objects.selection_primitive(
                    compute_node_uuid=s.node_uuid, service_host=s.host,
                    nodename=s.nodename, cell_uuid=s.cell_uuid or cell, limits=s.limits,
                    availability_zone=s.availability_zone,
                    allocation_request=(None if s.allocation_request is None
                                        else json.dumps(s.allocation_request)),
                    allocation_request_version=(None if s.allocation_request is None
                                                else CANDIDATES_VERSION))
                 for s in selections[:keep]]
                for selections in chosen]

    # -- fanout casts ---------------------------------------------------------
    @messaging.expose
    @counted
    def update_aggregates(self, context, aggregates):
        """Aggregates created or changed in nova: stored as nova has them."""
        if not isinstance(aggregates, list):
            aggregates = [aggregates]
        source = self.manager.host_manager.source
        for primitive in aggregates:
            name, hosts, metadata = _aggregate(primitive)
            if source.tracks_instances:
                # nova's API database is the source's; this is news of it.
                source.set_aggregates([AggregateInfo(
                    id=_aggregate_id(primitive), name=name, hosts=frozenset(hosts),
                    metadata=metadata, uuid=_aggregate_uuid(primitive))])
            else:
                db_aggregates.replace(name, hosts, metadata)
            LOG.info("Aggregate %s from nova: hosts %s, metadata %s", name,
                     sorted(hosts), metadata)
        self._seen_by_next_decision()

    @messaging.expose
    @counted
    def delete_aggregate(self, context, aggregate):
        """An aggregate deleted in nova."""
        name, _hosts, _metadata = _aggregate(aggregate)
        source = self.manager.host_manager.source
        if source.tracks_instances:
            source.set_aggregates([], deleted=[name])
            LOG.info("Aggregate %s deleted by nova", name)
        elif db_aggregates.delete(name):
            LOG.info("Aggregate %s deleted by nova", name)
        self._seen_by_next_decision()

    @messaging.expose
    @counted
    def update_instance_info(self, context, host_name, instance_info):
        """Instances nova knows on ``host_name`` (one Instance or a list)."""
        uuids = _instance_uuids(instance_info)
        self.manager.note_instances(host_name, uuids)
        self._seen_by_next_decision()

    @messaging.expose
    @counted
    def delete_instance_info(self, context, host_name, instance_uuid):
        """An instance gone from ``host_name``: its claim is released."""
        self.manager.forget_instance(instance_uuid)
        self._seen_by_next_decision()

    @messaging.expose
    @counted
    def sync_instance_info(self, context, host_name, instance_uuids):
        """Every instance on ``host_name``: as the Havana API's cast."""
        self.manager.reconcile_host(host_name, instance_uuids)
        self._seen_by_next_decision()

    def _seen_by_next_decision(self) -> None:
        # The cast's news is in this daemon's table before its handler
        # returns, not at the host table's next refresh; other daemons
        # handle their own copy of the fanout.
        self.manager.host_manager.catch_up()


def _aggregate(primitive) -> tuple[str, list[str], dict]:
    """(name, hosts, metadata) of an Aggregate primitive; the zone is in
    the metadata (``availability_zone``), as nova keeps it."""
    data = nova_objects.unwrap(primitive, "Aggregate")
    name, hosts = data.get("name"), data.get("hosts") or []
    metadata = data.get("metadata") or {}
    if (not isinstance(name, str) or not isinstance(hosts, list)
            or not isinstance(metadata, dict)):
        raise exception.InvalidRequestSpec(
            "an Aggregate needs a name, a list of hosts and a metadata dict")
    return name, [str(host) for host in hosts], metadata


def _aggregate_id(primitive) -> int:
    """An Aggregate primitive's id (0 when it has none)."""
    value = nova_objects.unwrap(primitive, "Aggregate").get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _aggregate_uuid(primitive) -> str | None:
    """An Aggregate primitive's uuid, its Placement aggregate's (None: none)."""
    value = nova_objects.unwrap(primitive, "Aggregate").get("uuid")
    return value if isinstance(value, str) and value else None


def _instance_uuids(primitive) -> list[str]:
    """The uuids of an Instance or InstanceList primitive."""
    # nova's Instance and InstanceList are at major version 2.
    if nova_objects.is_primitive(primitive, "InstanceList"):
        items = nova_objects.unwrap_list(primitive, "InstanceList", "Instance",
                                         versions=(2,), item_versions=(2,))
    else:
        items = [nova_objects.unwrap(primitive, "Instance", versions=(2,))]
    uuids = [item.get("uuid") for item in items]
    if not all(isinstance(uuid, str) for uuid in uuids):
        raise exception.InvalidRequestSpec("an Instance without a uuid")
    return uuids
