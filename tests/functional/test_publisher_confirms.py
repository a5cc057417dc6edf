"""The daemon's publisher on the real RabbitMQ: a batch published before its
confirms are read arrives whole, in order, as kombu's Producer sends a
message; what the broker refuses is sent again until it is taken.

The publisher runs in the pytest process on a vhost private to this module.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid

import pytest

import cloudlib

pytestmark = pytest.mark.integration

WAIT = 10


@pytest.fixture
def publisher(broker):
    import oslo_messaging as messaging

    from nova_sched import rpc
    from nova_sched.scheduler.wire.publisher import Publisher

    transport = rpc.get_transport(broker.url)
    made = Publisher(transport.conf, messaging.TransportURL.parse(transport.conf, broker.url),
                     "test-publisher")
    try:
        yield made
    finally:
        made.close()
        transport.cleanup()


@pytest.fixture
def reader(broker):
    import kombu

    conn = kombu.Connection(broker.url.replace("rabbit://", "amqp://"), connect_timeout=5)
    conn.connect()
    try:
        yield conn
    finally:
        conn.release()


def _bind(reader, publisher, exchange: str, queue: str, **arguments):
    """A queue bound to the publisher's exchange (declared as it declares it)."""
    import kombu

    kombu.Queue(queue, publisher.exchange(exchange), routing_key=queue,
                queue_arguments=arguments or None)(reader.default_channel).declare()


def _take(reader, queue: str, count: int, timeout: float = WAIT) -> list:
    """``count`` messages from ``queue``, in the order the broker holds them."""
    channel = reader.default_channel
    taken: list = []

    def fetched():
        while len(taken) < count:
            message = channel.basic_get(queue, no_ack=True)
            if message is None:
                return False
            taken.append(message)
        return True

    assert cloudlib.wait_until(fetched, timeout, interval=0.05), (
        f"{len(taken)} of {count} messages arrived in {queue}")
    return taken


def _text(message) -> str:
    # py-amqp decodes a body by its content encoding as it reads it.
    body = message.body
    return body.decode("utf-8") if isinstance(body, bytes) else body


def test_a_batch_arrives_whole_in_order_as_kombus_producer_sends_it(
        broker, publisher, reader):
    import kombu

    from nova_sched.scheduler.wire.publisher import Outgoing

    exchange, queue = f"ex_{uuid.uuid4().hex[:8]}", f"q_{uuid.uuid4().hex[:8]}"
    _bind(reader, publisher, exchange, queue)
    bodies = [f'{{"n": {n}, "text": "caf\\u00e9"}}' for n in range(50)]
    publisher.publish_many([Outgoing(exchange, queue, body, f"message {n}")
                            for n, body in enumerate(bodies)])
    # The same text through kombu's Producer, as this publisher sent it before.
    kombu.Producer(reader.default_channel).publish(
        bodies[0], exchange=publisher.exchange(exchange), routing_key=queue,
        content_type="application/json", content_encoding="utf-8")
    got = _take(reader, queue, 51)
    assert [_text(m) for m in got] == bodies + bodies[:1]
    ours, kombus = got[0], got[-1]
    for prop in ("content_type", "content_encoding", "delivery_mode", "priority"):
        assert ours.properties.get(prop) == kombus.properties.get(prop), prop
    assert ours.headers == kombus.headers
    assert ours.properties["delivery_mode"] == 2


def test_messages_the_broker_refuses_are_sent_again_until_it_takes_them(
        broker, publisher, reader, monkeypatch, caplog):
    """A queue that rejects publishes once full nacks them: the publisher
    logs it and sends those again, not the ones the broker took; each
    message arrives once."""
    from nova_sched.scheduler.wire.publisher import Outgoing

    monkeypatch.setattr(publisher.settings, "reconnect_delay", 0.05)
    exchange, queue = f"ex_{uuid.uuid4().hex[:8]}", f"q_{uuid.uuid4().hex[:8]}"
    _bind(reader, publisher, exchange, queue,
          **{"x-max-length": 2, "x-overflow": "reject-publish"})
    done = threading.Event()
    with caplog.at_level(logging.ERROR):
        sending = threading.Thread(target=lambda: (publisher.publish_many(
            [Outgoing(exchange, queue, f'{{"n": {n}}}', f"message {n}")
             for n in range(6)]), done.set()))
        sending.start()
        assert cloudlib.wait_until(
            lambda: any("refused" in r.getMessage() for r in caplog.records), WAIT,
            interval=0.05), "the broker's refusal was not logged"
        assert not done.is_set(), "publish_many returned with messages refused"
        got = _take(reader, queue, 6)
        sending.join(WAIT)
    assert done.is_set()
    assert sorted(_text(m) for m in got) == sorted(f'{{"n": {n}}}' for n in range(6))
    assert any("Publishing message" in r.getMessage() and "refused" in r.getMessage()
               for r in caplog.records)


# -- the sender's side: oslo.messaging's client ---------------------------------
# A request is the daemons' once the broker has confirmed its cast to the
# sender (nova's compute-api, or any oslo.messaging client); until then it
# is the sender's. These two pin what oslo.messaging's client does with a
# cast the broker does not take, which doc/guarantees.md ("Delivery") tells
# senders to rely on.
def _oslo_client(broker, tmp_path, exchange: str, topic: str):
    import oslo_messaging as messaging

    config = tmp_path / "sender.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {broker.url}\n"
                      f"control_exchange = {exchange}\n"
                      "[oslo_messaging_rabbit]\nrabbit_retry_interval = 1\n"
                      "rabbit_retry_backoff = 0\nkombu_reconnect_delay = 0.1\n")
    transport = messaging.get_rpc_transport(cloudlib.client_conf(config))
    return transport, messaging.get_rpc_client(
        transport, messaging.Target(topic=topic, version="2.0"))


def _n(message) -> int:
    """The ``n`` argument of a cast, read from oslo's 2.0 envelope."""
    return json.loads(json.loads(_text(message))["oslo.message"])["args"]["n"]


def _full_queue(reader, exchange: str, topic: str) -> None:
    """The topic's queue, bound as oslo binds it, refusing publishes past one
    message (the broker nacks them, as it does a publish it cannot take)."""
    import kombu

    kombu.Queue(topic, kombu.Exchange(exchange, type="topic", durable=False),
                routing_key=topic,
                queue_arguments={"x-max-length": 1, "x-overflow": "reject-publish"},
                )(reader.default_channel).declare()


def test_oslo_messagings_cast_never_returns_without_the_brokers_confirm(
        broker, reader, tmp_path):
    """A cast the broker refuses (a nack) either raises MessageDeliveryFailure
    or is published again until the broker takes it, and only then returns
    (which of the two depends on kombu's and py-amqp's releases: kombu 5.7
    with py-amqp 5.4 publish it again, kombu 5.3 with py-amqp 5.1 raise at
    once). It never returns while the broker has not taken it: a sender
    whose cast returned has handed its request over; one whose cast raised
    still holds it."""
    import oslo_messaging as messaging

    exchange, topic = f"ex_{uuid.uuid4().hex[:8]}", f"tq_{uuid.uuid4().hex[:8]}"
    _full_queue(reader, exchange, topic)
    transport, client = _oslo_client(broker, tmp_path, exchange, topic)
    outcome: list = []
    try:
        client.cast({}, "run_instance", n=1)

        def second():
            try:
                client.cast({}, "run_instance", n=2)
                outcome.append("returned")
            except messaging.MessageDeliveryFailure as err:
                outcome.append(err)

        sending = threading.Thread(target=second, daemon=True)
        sending.start()
        sending.join(3)
        assert outcome[:1] != ["returned"], "a cast the broker refused returned"
        (first,) = _take(reader, topic, 1)  # room for one more
        sending.join(WAIT)
        assert outcome, "the refused cast neither raised nor went out again"
        if outcome == ["returned"]:
            (again,) = _take(reader, topic, 1)
            assert (_n(first), _n(again)) == (1, 2)
        else:
            assert _n(first) == 1
        assert reader.default_channel.basic_get(topic, no_ack=True) is None, \
            "the refused cast arrived, or arrived twice"
    finally:
        transport.cleanup()


def test_oslo_messagings_cast_with_a_retry_limit_raises_when_not_confirmed(
        broker, reader, tmp_path):
    """With a retry limit (``prepare(retry=N)``) a cast the broker keeps
    refusing raises MessageDeliveryFailure: the request was not handed
    over, and the sender must cast it again (or fail it visibly)."""
    import oslo_messaging as messaging

    exchange, topic = f"ex_{uuid.uuid4().hex[:8]}", f"tq_{uuid.uuid4().hex[:8]}"
    _full_queue(reader, exchange, topic)
    transport, client = _oslo_client(broker, tmp_path, exchange, topic)
    try:
        client.cast({}, "run_instance", n=1)
        with pytest.raises(messaging.MessageDeliveryFailure):
            client.prepare(retry=1).cast({}, "run_instance", n=2)
        (only,) = _take(reader, topic, 1)
        assert _n(only) == 1
        assert reader.default_channel.basic_get(topic, no_ack=True) is None
    finally:
        transport.cleanup()
