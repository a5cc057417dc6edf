"""The broker as oslo.messaging's rabbit driver configures it, on kombu's public API.

``RabbitSettings`` reads ``transport_url`` and the ``[oslo_messaging_rabbit]``
options oslo registers, and makes kombu connections (TLS, heartbeats,
failover order) and the topic's queues and exchanges with the names and
arguments oslo's driver gives them, so oslo.messaging's clients and
servers meet this consumer where they expect it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import ssl
import sys
import uuid
from typing import Any
from urllib import parse

import kombu
import oslo_messaging as messaging
from oslo_utils import netutils

from nova_sched import exception

LOG = logging.getLogger(__name__)

# Seconds kombu's in-memory transport sleeps between two looks at empty
# queues (the embedded demo; no broker): oslo.messaging sets 0, a spin that
# took the demo's decisions' share of the GIL.
_MEMORY_POLL = 0.002


def _queue_arguments(ha: bool, ttl: int, quorum: bool, quorum_limits: dict,
                     stream: bool) -> dict:
    """A queue's declare arguments as the rabbit driver gives them: the
    broker refuses a declaration whose arguments differ from the queue's."""
    if stream:
        return {"x-queue-type": "stream",
                **({"x-max-age": f"{ttl}s"} if ttl > 0 else {})}
    args: dict[str, Any] = {}
    if ha:
        args["x-ha-policy"] = "all"
    if quorum:
        args["x-queue-type"] = "quorum"
        args.update({key: value for key, value in quorum_limits.items() if value})
    if ttl > 0:
        args["x-expires"] = ttl * 1000
    return args


class RabbitSettings:
    """A transport URL and the ``[oslo_messaging_rabbit]`` options, as kombu
    takes them: connections, queue declarations, retries.

    ``conf`` is the transport's (``Transport.conf``: it applies a URL's
    query to the group's options). Options that only later releases of
    oslo.messaging have read as those releases' defaults when absent.
    """

    def __init__(self, conf, url: messaging.TransportURL):
        group = conf.oslo_messaging_rabbit

        def opt(name: str, default: Any) -> Any:
            # oslo.config's NoSuchOptError is an AttributeError.
            return getattr(group, name, default)

        quorum = opt("rabbit_quorum_queue", False)
        ha = opt("rabbit_ha_queues", False)
        if quorum and ha:
            raise exception.ConfigurationError(
                "[oslo_messaging_rabbit] rabbit_quorum_queue and "
                "rabbit_ha_queues are both enabled: a queue is quorum or "
                "mirrored, not both")
        self.prefetch = opt("rabbit_qos_prefetch_count", 0)
        self.stream_fanout = opt("rabbit_stream_fanout", False)
        self.transient_quorum = opt("rabbit_transient_quorum_queue", False)
        if self.stream_fanout and (self.prefetch <= 0 or not self.transient_quorum):
            raise exception.ConfigurationError(
                "[oslo_messaging_rabbit] rabbit_stream_fanout needs "
                "rabbit_qos_prefetch_count above 0 and "
                "rabbit_transient_quorum_queue = true")
        self.durable = opt("amqp_durable_queues", False) or quorum
        self.auto_delete = opt("amqp_auto_delete", False)
        # With a queue manager oslo names fanout queues to outlive a
        # restart (and never deletes them); a stream is shared.
        self.keep_fanout_queue = self.stream_fanout or opt("use_queue_manager", False)
        # oslo.messaging 14.0 spelt two of them "quroum" (their deprecated
        # names since).
        limits = {"x-delivery-limit": opt("rabbit_quorum_delivery_limit", 0),
                  "x-max-in-memory-length": opt(
                      "rabbit_quorum_max_memory_length",
                      opt("rabbit_quroum_max_memory_length", 0)),
                  "x-max-in-memory-bytes": opt(
                      "rabbit_quorum_max_memory_bytes",
                      opt("rabbit_quroum_max_memory_bytes", 0))}
        self.topic_queue_arguments = _queue_arguments(ha, 0, quorum, limits, False)
        self.fanout_queue_arguments = _queue_arguments(
            ha, opt("rabbit_transient_queues_ttl", 1800), self.transient_quorum,
            limits, self.stream_fanout)
        self.consumer_arguments = ({"x-cancel-on-ha-failover": True}
                                   if opt("enable_cancel_on_failover", False) else None)
        self.heartbeat = opt("heartbeat_timeout_threshold", 60)
        self.heartbeat_rate = opt("heartbeat_rate", 2)
        self.reconnect_delay = opt("kombu_reconnect_delay", 1.0)
        self.retry = {"interval_start": opt("rabbit_retry_interval", 1),
                      "interval_step": opt("rabbit_retry_backoff", 2),
                      "interval_max": opt("rabbit_interval_max", 30)}
        self.compression = opt("kombu_compression", None)
        self.missing_reply_queue_wait = opt("kombu_missing_consumer_retry_timeout", 60)
        self._login_method = opt("rabbit_login_method", "AMQPLAIN")
        self._failover_strategy = opt("kombu_failover_strategy", "round-robin")
        self._ssl = self._ssl_params(opt, url) if opt("ssl", False) else False
        kind = url.transport.replace("kombu+", "")
        self.in_memory = kind == "memory"
        self._urls = self._kombu_urls(url, kind)

    @staticmethod
    def _kombu_urls(url, kind: str) -> str:
        """kombu's URLs for the transport URL's hosts, the failover order
        shuffled as oslo.messaging shuffles it (every daemon does not try
        the same node first)."""
        def one(host, username="", password="", hostname=""):
            return "{}://{}:{}@{}:{}/{}".format(
                kind.replace("rabbit", "amqp"),
                parse.quote(host.username or username),
                parse.quote(host.password or password),
                netutils.escape_ipv6(host.hostname) or hostname,
                host.port or 5672, url.virtual_host or "")

        if url.hosts:
            hosts = list(url.hosts)
            random.shuffle(hosts)
            return ";".join(one(host) for host in hosts)
        if url.transport.startswith("kombu+"):
            return f"{kind}://{url.virtual_host or ''}"
        return one(messaging.TransportHost(""), "guest", "guest", "localhost")

    @staticmethod
    def _ssl_params(opt, url):
        params: dict[str, Any] = {}
        version = opt("ssl_version", "")
        if version:
            names = {"tlsv1": "PROTOCOL_TLSv1", "sslv23": "PROTOCOL_SSLv23",
                     "sslv2": "PROTOCOL_SSLv2", "sslv3": "PROTOCOL_SSLv3",
                     "tlsv1_1": "PROTOCOL_TLSv1_1", "tlsv1_2": "PROTOCOL_TLSv1_2"}
            protocol = getattr(ssl, names.get(version.lower(), ""), None)
            if protocol is None:
                raise exception.ConfigurationError(
                    f"[oslo_messaging_rabbit] ssl_version {version} is not "
                    f"one this Python supports")
            params["ssl_version"] = protocol
        for option, key in (("ssl_key_file", "keyfile"), ("ssl_cert_file", "certfile")):
            if opt(option, ""):
                params[key] = opt(option, "")
        if opt("ssl_ca_file", ""):
            params["ca_certs"] = opt("ssl_ca_file", "")
            params["cert_reqs"] = ssl.CERT_REQUIRED
            params["server_hostname"] = (url.hosts[0].hostname
                                         if len(url.hosts) == 1 else None)
        return params or True

    def connection(self, name: str, confirm_each: bool = True) -> kombu.Connection:
        """A new connection (not yet open) to the transport URL's nodes;
        ``name`` shows in the broker's list of connections. Each publish on
        it waits for the broker's confirm, unless ``confirm_each`` is False
        (the caller puts its channel in confirm mode and reads them)."""
        if self.in_memory:
            options: dict[str, Any] = {"polling_interval": _MEMORY_POLL}
        else:
            options = {
                "confirm_publish": confirm_each,
                "client_properties": {
                    "capabilities": {"authentication_failure_close": True,
                                     "connection.blocked": True,
                                     "consumer_cancel_notify": True},
                    "connection_name": (f"{os.path.basename(sys.argv[0])}:"
                                        f"{os.getpid()}:{name}")},
                "on_blocked": lambda reason: LOG.error(
                    "The broker has blocked the connection: %s", reason),
                "on_unblocked": lambda: LOG.info(
                    "The broker has unblocked the connection"),
            }
            if self.heartbeat > 0:
                # A broker gone without closing the socket (a node lost,
                # a partition) fails a write after this long, not after
                # TCP's quarter of an hour.
                options["write_timeout"] = self.heartbeat
                if hasattr(socket, "TCP_USER_TIMEOUT"):
                    options["socket_settings"] = {
                        socket.TCP_USER_TIMEOUT: int(self.heartbeat * 1000)}
        return kombu.Connection(self._urls, ssl=self._ssl,
                                login_method=self._login_method,
                                heartbeat=self.heartbeat,
                                failover_strategy=self._failover_strategy,
                                transport_options=options)

    def topic_queues(self, exchange: str, topic: str, server: str,
                     stream_offset: Any = "last") -> list[kombu.Queue]:
        """The queues of an RPC server on ``topic`` as ``server``: the
        topic's (shared by every server), the server's own and the server's
        fanout queue, with the rabbit driver's names and arguments."""
        topic_exchange = kombu.Exchange(exchange, type="topic", durable=self.durable,
                                        auto_delete=self.auto_delete)
        queues = [kombu.Queue(name, topic_exchange, routing_key=name,
                              durable=self.durable, auto_delete=self.auto_delete,
                              queue_arguments=self.topic_queue_arguments,
                              consumer_arguments=self.consumer_arguments)
                  for name in (topic, f"{topic}.{server}")]
        durable = self.transient_quorum or self.stream_fanout
        fanout = kombu.Exchange(f"{topic}_fanout", type="fanout", durable=durable,
                                auto_delete=True)
        if self.stream_fanout:
            name = f"{topic}_fanout"
            consumer_arguments = {"x-stream-offset": stream_offset}
        else:
            name = f"{topic}_fanout_{uuid.uuid4().hex}"
            consumer_arguments = self.consumer_arguments
        queues.append(kombu.Queue(name, fanout, routing_key=topic, durable=durable,
                                  auto_delete=False,
                                  queue_arguments=self.fanout_queue_arguments,
                                  consumer_arguments=consumer_arguments))
        return queues

    def retry_policy(self, what: str) -> dict:
        """kombu's retry policy for a publish: for ever, at the driver's
        intervals, each failure logged."""
        def errback(exc, interval):
            LOG.error("Could not %s (%s); trying again in %.1f s", what, exc, interval)

        return dict(self.retry, max_retries=None, errback=errback)


def declare_queue(queue: kombu.Queue, channel, channel_errors: tuple,
                  keep_durable: bool = True) -> kombu.Queue:
    """Declare ``queue`` (and its exchange and binding) on ``channel``, with
    the rabbit driver's two ways out of a refused declaration.

    A 404 (NOT_FOUND) deletes and declares again only a queue that is not
    durable: that one lived on a node gone, and its messages with it. A
    durable queue's 404 is raised, for the caller to declare it again
    later: RabbitMQ answers it for a durable queue whose node is down (and
    with a timeout for a queue it could not reach in time), and deleting it
    then would delete every message it holds (every request waiting on the
    topic). ``keep_durable=False`` deletes it as well, as oslo.messaging
    does: for a queue of notifications, whose publisher must not wait for
    that node (the requests whose casts they ride with would wait too).
    """
    bound = queue(channel)
    try:
        bound.declare()
    except channel_errors as err:
        code = getattr(err, "code", None)
        if code == 406 and "inequivalent arg 'durable'" in str(err):
            # The exchange was declared non-durable by another service
            # sharing control_exchange: follow it, as oslo.messaging does.
            LOG.warning("Queue %s could not be declared durable (%s); "
                        "declaring it non-durable", queue.name, err)
            exchange = queue.exchange
            bound = kombu.Queue(
                queue.name, kombu.Exchange(exchange.name, type=exchange.type,
                                           durable=False,
                                           auto_delete=queue.auto_delete),
                routing_key=queue.routing_key, durable=False,
                auto_delete=queue.auto_delete,
                queue_arguments=queue.queue_arguments,
                consumer_arguments=queue.consumer_arguments)(channel)
            bound.declare()
        elif code == 404 and not (queue.durable and keep_durable):
            # A queue left on a node that no longer answers (a transient
            # one's messages are gone with that node); deleted, it is
            # declared anew on a live one (oslo.messaging's bug 2068630).
            LOG.warning("Queue %s is stuck on an unresponsive node (%s); "
                        "deleting and declaring it again", queue.name, err)
            with contextlib.suppress(*channel_errors):
                bound.delete()
            bound.declare()
        elif code == 404:
            LOG.warning("Durable queue %s cannot be declared now (%s); it is "
                        "kept, with its messages, and declared again",
                        queue.name, err)
            raise
        else:
            raise
    return bound


def heartbeat(conn: kombu.Connection, rate: float) -> None:
    """Send and check AMQP heartbeats on a connection nothing is sent on
    now; the broker's heartbeats count only once read, so they are read."""
    conn.heartbeat_check(rate=rate)
    with contextlib.suppress(socket.timeout):
        conn.drain_events(timeout=0.001)


def discard(conn: kombu.Connection | None) -> None:
    """Let go of a connection found broken, without waiting on its socket."""
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.collect()
