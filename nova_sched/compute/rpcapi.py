"""Client side of the compute RPC API: the ``run_instance`` cast (version 2.37)."""

from __future__ import annotations

import oslo_messaging as messaging

from nova_sched import rpc
from nova_sched.conf import CONF
from nova_sched.publish_watch import PublishWatch
from nova_sched.scheduler.wire.publisher import Outgoing, Pending, Publisher, envelope, speaks


class ComputeAPI:
    """Casts to one compute node's ``<compute_topic>.<host>`` queue.

    On RabbitMQ (and kombu's in-memory broker) the cast goes out through a
    ``Publisher`` of its own, as oslo.messaging's RPC client would send it
    (its CPU is a third of the client's); on another transport through
    oslo.messaging's client. Either way the broker confirms it before
    ``run_instance`` returns, tried again until it does: a cast is never
    dropped, and the request is acknowledged only after. Messages for the
    same broker may go out with it (``along``), confirmed with it.
    """

    RUN_INSTANCE_VERSION = "2.37"

    def __init__(self, transport, watch: PublishWatch | None = None):
        self.watch = watch or PublishWatch()
        self._serializer = rpc.ContextSerializer()
        url = messaging.TransportURL.parse(transport.conf)
        self._publisher = (Publisher(transport.conf, url, "compute-casts")
                           if speaks(url) else None)
        # The broker messages passed ``along`` must go to: None when the
        # cast goes out through oslo.messaging's client, which takes none.
        self.url = url if self._publisher is not None else None
        self._exchange = transport.conf.control_exchange
        target = messaging.Target(topic=CONF.compute_topic, version="2.0")
        self.client = rpc.get_client(transport, target)

    def run_instance(self, ctxt, instance, host, request_spec, filter_properties,
                     requested_networks, injected_files, admin_password,
                     is_first_time, node=None, legacy_bdm_in_spec=True,
                     along: list[Outgoing] | tuple = (),
                     after: list[Outgoing] | tuple = ()) -> Pending | None:
        """Ask ``host`` to build ``instance`` (nova Havana's arguments).

        ``along`` and ``after``: messages for the broker at ``url``
        published before and after the cast in one batch, confirmed with
        it. Returns what waits for the broker's confirms, or None when
        they were waited for already.
        """
        args = dict(instance=instance, request_spec=request_spec,
                    filter_properties=filter_properties,
                    requested_networks=requested_networks,
                    injected_files=injected_files, admin_password=admin_password,
                    is_first_time=is_first_time, node=node,
                    legacy_bdm_in_spec=legacy_bdm_in_spec)
        what = f"run_instance to {CONF.compute_topic}.{host}"
        if self._publisher is None:
            if along or after:
                raise ValueError("messages along with a cast need its publisher")
            with self.watch.publishing(what):
                self.client.prepare(server=host, version=self.RUN_INSTANCE_VERSION).cast(
                    ctxt, "run_instance", **args)
            return None
        message = {"method": "run_instance", "args": args,
                   "version": self.RUN_INSTANCE_VERSION}
        return self._publisher.send([*along, Outgoing(
            self._exchange, f"{CONF.compute_topic}.{host}",
            envelope(message, self._serializer.serialize_context(ctxt)), what),
            *after], done=self.watch.start(what))

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
