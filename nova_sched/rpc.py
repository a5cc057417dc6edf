"""oslo.messaging plumbing: transports, servers, clients, the notifier.

Request contexts travel as plain dicts (oslo.context's ``to_dict()`` form);
the serializer turns them into RequestContext objects on the way in and
back into dicts on the way out, tolerating missing keys from older callers.
"""

from __future__ import annotations

import uuid
from typing import Any

import oslo_messaging as messaging
from oslo_messaging import opts as messaging_opts
from oslo_context import context as o_context

from nova_sched.conf import CONF, opts

_transport_defaults_set = False


def set_defaults() -> None:
    """Apply nova-sched's defaults for oslo.messaging's options once."""
    global _transport_defaults_set
    if not _transport_defaults_set:
        opts.set_lib_defaults()
        # Registered here rather than on first get_transport(), so that
        # transport_url can be overridden (tests, the demo) before that.
        # oslo.messaging's public option listing; its DEFAULT group holds
        # transport_url and control_exchange.
        for group, options in messaging_opts.list_opts():
            if group is None:
                CONF.register_opts(options)
        _transport_defaults_set = True


set_defaults()


class RequestContext(o_context.RequestContext):
    """The caller's identity and request id, as oslo.context defines them."""

    @classmethod
    def from_wire(cls, values: Any) -> "RequestContext":
        values = dict(values) if isinstance(values, dict) else {}
        if not values.get("request_id"):
            values["request_id"] = "req-" + str(uuid.uuid4())
        # Older callers send 'user'/'tenant' or omit ids; from_dict copes
        # with missing keys and ignores the unknown ones.
        ctx = cls.from_dict(values)
        if not ctx.request_id:
            ctx.request_id = values["request_id"]
        return ctx

    # No attribute hook here: one on __setattr__ (to keep the logging
    # values between a line's two reads of them) tripled the cost of making
    # a context, which a request does twice, for a saving of one read.

    def to_wire(self) -> dict:
        data = self.to_dict()
        # Never forward a token to logs or notifications.
        data.pop("auth_token", None)
        return data


def admin_context() -> RequestContext:
    return RequestContext(is_admin=True, overwrite=False)


class ContextSerializer(messaging.NoOpSerializer):
    def serialize_context(self, ctxt):
        if isinstance(ctxt, RequestContext):
            return ctxt.to_wire()
        if isinstance(ctxt, o_context.RequestContext):
            data = ctxt.to_dict()
            data.pop("auth_token", None)
            return data
        return dict(ctxt or {})

    def deserialize_context(self, ctxt):
        return RequestContext.from_wire(ctxt)


def get_transport(url: str | None = None) -> messaging.Transport:
    return messaging.get_rpc_transport(CONF, url=url)


def get_notification_transport(url: str | None = None):
    return messaging.get_notification_transport(CONF, url=url)


def get_server(transport, target, endpoints, serializer=None):
    return messaging.get_rpc_server(
        transport,
        target,
        endpoints,
        serializer=serializer or ContextSerializer(),
        # Only methods marked @messaging.expose are callable over RPC, so a
        # public helper on an endpoint never becomes part of the API.
        access_policy=messaging.ExplicitRPCAccessPolicy,
    )


def get_client(transport, target, version_cap=None, serializer=None):
    return messaging.get_rpc_client(
        transport,
        target,
        version_cap=version_cap,
        serializer=serializer or ContextSerializer(),
    )


# Connection attempts a notification's publish makes before it is dropped:
# in effect, until the broker is back. ``[oslo_messaging_notifications]
# retry``'s "-1, for ever" does not reach every path: a connection the
# notifier's pool opens anew is given -1 as kombu's max_retries, which
# kombu reads as "none", so the first refused node (one killed in a
# cluster) dropped the notification.
NOTIFY_RETRIES = 2 ** 31


# The notifications' topic (CONTRACT section 3); priority is appended.
NOTIFY_TOPICS = ("notifications",)


def get_notifier(transport, publisher_id: str) -> messaging.Notifier:
    """Notifier on topic 'notifications' with the messagingv2 driver (CONTRACT 3)."""
    return messaging.Notifier(
        transport,
        publisher_id=publisher_id,
        driver="messagingv2",
        topics=list(NOTIFY_TOPICS),
        serializer=ContextSerializer(),
        retry=NOTIFY_RETRIES,
    )
