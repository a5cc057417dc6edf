"""nova-sched's configuration: every option group registered on cfg.CONF.

oslo.messaging registers its tracing and metrics groups on the global
cfg.CONF only, so the service uses the global object rather than a private
ConfigOpts.

Modules read on every decision keep a group's handle (``CONF.<group>``, the
object oslo.config hands out, taken at import): a read through it spares
oslo.config finding the group first, half the microsecond each of the
dozens of option reads a decision makes costs. The handle reads the
current value each time, overrides and reloads included.
"""

from __future__ import annotations

from oslo_config import cfg

from nova_sched.conf import (database, default, fake_compute, filter_scheduler,
                             metrics, nova_cells, pci, placement,
                             placement_database, prometheus, scheduler,
                             workarounds)

CONF = cfg.CONF

_MODULES = (default, database, scheduler, filter_scheduler, metrics, pci,
            prometheus, fake_compute, nova_cells, placement,
            placement_database, workarounds)


def register_all(conf: cfg.ConfigOpts) -> None:
    for module in _MODULES:
        module.register_opts(conf)


register_all(CONF)
