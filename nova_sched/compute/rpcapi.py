"""Client side of the compute RPC API: the ``run_instance`` cast (version 2.37)."""

from __future__ import annotations

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.conf import CONF


class ComputeAPI:
    """Casts to one compute node's ``<compute_topic>.<host>`` queue."""

    RUN_INSTANCE_VERSION = "2.37"

    def __init__(self, transport):
        target = messaging.Target(topic=CONF.compute_topic, version="2.0")
        self.client = rpc.get_client(transport, target)

    def run_instance(self, ctxt, instance, host, request_spec, filter_properties,
                     requested_networks, injected_files, admin_password,
                     is_first_time, node=None, legacy_bdm_in_spec=True):
        """Ask ``host`` to build ``instance`` (nova Havana's arguments)."""
        cctxt = self.client.prepare(server=host, version=self.RUN_INSTANCE_VERSION)
        cctxt.cast(ctxt, "run_instance", instance=instance,
                   request_spec=request_spec,
                   filter_properties=filter_properties,
                   requested_networks=requested_networks,
                   injected_files=injected_files,
                   admin_password=admin_password,
                   is_first_time=is_first_time, node=node,
                   legacy_bdm_in_spec=legacy_bdm_in_spec)
