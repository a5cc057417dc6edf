"""Client side of the scheduler RPC API (topic ``scheduler``, version 2.10).

Used by compute-api style callers, by compute nodes (reports, retries) and
by ``nova-sched-manage explain``. Wire-compatible with nova Havana's 2.9.
"""

from __future__ import annotations

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.conf import CONF


class SchedulerAPI:
    """Casts and calls to the scheduler daemons.

    API version history (2.x as nova Havana; 2.10 is nova-sched's):
      2.0  run_instance
      2.7  select_destinations
      2.9  run_instance with legacy_bdm_in_spec
      2.10 compute_node_update, compute_node_delete, instance_delete,
           sync_instance_info, explain; select_destinations return_alternates
    """

    VERSION = "2.10"

    def __init__(self, transport, topic: str | None = None):
        target = messaging.Target(topic=topic or CONF.scheduler_topic, version="2.0")
        self.client = rpc.get_client(transport, target)

    def run_instance(self, ctxt, request_spec, admin_password, injected_files,
                     requested_networks, is_first_time, filter_properties,
                     legacy_bdm_in_spec=True):
        cctxt = self.client.prepare(version="2.9")
        cctxt.cast(ctxt, "run_instance", request_spec=request_spec,
                   admin_password=admin_password, injected_files=injected_files,
                   requested_networks=requested_networks,
                   is_first_time=is_first_time,
                   filter_properties=filter_properties,
                   legacy_bdm_in_spec=legacy_bdm_in_spec)

    def select_destinations(self, ctxt, request_spec, filter_properties,
                            return_alternates=False, timeout=None):
        kwargs = {"request_spec": request_spec,
                  "filter_properties": filter_properties}
        version = "2.7"
        if return_alternates:
            kwargs["return_alternates"] = True
            version = "2.10"
        cctxt = self.client.prepare(version=version, timeout=timeout)
        return cctxt.call(ctxt, "select_destinations", **kwargs)

    def compute_node_update(self, ctxt, compute_node):
        cctxt = self.client.prepare(version="2.10")
        cctxt.cast(ctxt, "compute_node_update", compute_node=compute_node)

    def compute_node_delete(self, ctxt, host, nodename):
        cctxt = self.client.prepare(version="2.10")
        cctxt.cast(ctxt, "compute_node_delete", host=host, nodename=nodename)

    def instance_delete(self, ctxt, instance_uuid):
        cctxt = self.client.prepare(version="2.10")
        cctxt.cast(ctxt, "instance_delete", instance_uuid=instance_uuid)

    def sync_instance_info(self, ctxt, host, instance_uuids):
        cctxt = self.client.prepare(version="2.10")
        cctxt.cast(ctxt, "sync_instance_info", host=host,
                   instance_uuids=instance_uuids)

    def explain(self, ctxt, request_spec, filter_properties, timeout=None):
        cctxt = self.client.prepare(version="2.10", timeout=timeout)
        return cctxt.call(ctxt, "explain", request_spec=request_spec,
                          filter_properties=filter_properties)
