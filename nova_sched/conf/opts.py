"""Entry points for oslo-config-generator."""

from __future__ import annotations

from nova_sched.conf import (database, default, fake_compute, filter_scheduler,
                             metrics, nova_cells, pci, placement,
                             placement_database, prometheus, scheduler,
                             workarounds)

DEFAULT_TRANSPORT_URL = "rabbit://guest:guest@127.0.0.1:5672/"
DEFAULT_CONTROL_EXCHANGE = "nova"
# Messages a daemon holds unacknowledged (oslo.messaging's default, 0, is
# unlimited). A request is acknowledged once handled, so this bounds what
# a daemon holds in memory and what the broker redelivers if it dies; the
# cost of a small bound is a round trip to the broker when the daemon has
# taken all it may and waits for the next message.
DEFAULT_PREFETCH = 64
# Which node of a cluster's transport_url a connection tries next when its
# node dies. Measured on these machines with a three-node cluster: an RPC
# server whose node was killed was back after 1.1-3.0 s with "shuffle",
# after 8-12.5 s in most runs with oslo's default "round-robin". With one
# node in transport_url it changes nothing.
DEFAULT_FAILOVER_STRATEGY = "shuffle"


def list_opts():
    """(group, options) pairs of every nova-sched option."""
    result = []
    for module in (default, database, scheduler, filter_scheduler, metrics, pci,
                   prometheus, fake_compute, nova_cells, placement,
                   placement_database, workarounds):
        for group, opts in module.list_opts().items():
            result.append((group, opts))
    return result


def set_lib_defaults():
    """nova-sched's defaults for oslo.messaging's options (CONTRACT 2)."""
    import oslo_messaging
    from oslo_config import cfg

    oslo_messaging.set_transport_defaults(DEFAULT_CONTROL_EXCHANGE)
    options = _messaging_options()
    cfg.set_defaults(options.get("DEFAULT", []),
                     transport_url=DEFAULT_TRANSPORT_URL)
    cfg.set_defaults(options.get("oslo_messaging_rabbit", []),
                     rabbit_qos_prefetch_count=DEFAULT_PREFETCH,
                     kombu_failover_strategy=DEFAULT_FAILOVER_STRATEGY)


def _messaging_options() -> dict:
    """oslo.messaging's option objects by group, as its rabbit driver
    registers them.

    Their defaults are what every registration of them starts from, the
    sample config's included; oslo.messaging offers no setter for them but
    ``set_transport_defaults`` (the control exchange), so they are taken
    where it hands them over: a transport is made (it does not connect) on
    a ConfigOpts that keeps what is registered on it.
    """
    import oslo_messaging
    from oslo_config import cfg

    class _Recorder(cfg.ConfigOpts):
        def __init__(self):
            super().__init__()
            self.registered: dict = {}

        def register_opts(self, opts, group=None):
            name = getattr(group, "name", group) or "DEFAULT"
            self.registered.setdefault(name, []).extend(opts)
            return super().register_opts(opts, group=group)

    conf = _Recorder()
    oslo_messaging.get_rpc_transport(conf, url="rabbit://").cleanup()
    return conf.registered
