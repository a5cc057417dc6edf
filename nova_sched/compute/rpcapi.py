"""Client side of the compute RPC API: the ``run_instance`` cast (version 2.37)."""

from __future__ import annotations

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.conf import CONF
from nova_sched.publish_watch import PublishWatch


class ComputeAPI:
    """Casts to one compute node's ``<compute_topic>.<host>`` queue."""

    RUN_INSTANCE_VERSION = "2.37"

    def __init__(self, transport, watch: PublishWatch | None = None):
        target = messaging.Target(topic=CONF.compute_topic, version="2.0")
        self.client = rpc.get_client(transport, target)
        self.watch = watch or PublishWatch()

    def run_instance(self, ctxt, instance, host, request_spec, filter_properties,
                     requested_networks, injected_files, admin_password,
                     is_first_time, node=None, legacy_bdm_in_spec=True):
        """Ask ``host`` to build ``instance`` (nova Havana's arguments)."""
        cctxt = self.client.prepare(server=host, version=self.RUN_INSTANCE_VERSION)
        # oslo.messaging retries the publish until the broker confirms it
        # (failing over between the nodes of a cluster): it is never
        # dropped, and the request is acknowledged only after.
        with self.watch.publishing(f"run_instance to {CONF.compute_topic}.{host}"):
            self._cast(cctxt, ctxt, instance, request_spec, filter_properties,
                       requested_networks, injected_files, admin_password,
                       is_first_time, node, legacy_bdm_in_spec)

    @staticmethod
    def _cast(cctxt, ctxt, instance, request_spec, filter_properties,
              requested_networks, injected_files, admin_password,
              is_first_time, node, legacy_bdm_in_spec) -> None:
        cctxt.cast(ctxt, "run_instance", instance=instance,
                   request_spec=request_spec,
                   filter_properties=filter_properties,
                   requested_networks=requested_networks,
                   injected_files=injected_files,
                   admin_password=admin_password,
                   is_first_time=is_first_time, node=node,
                   legacy_bdm_in_spec=legacy_bdm_in_spec)
