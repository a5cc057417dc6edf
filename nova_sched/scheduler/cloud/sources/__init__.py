"""Host sources: where the host table learns what compute nodes exist.

``compute_reports`` (the default) and ``nova_cells``, chosen by
``[scheduler] host_source``; ``base`` holds their interface.
"""

from __future__ import annotations

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.cloud.sources.base import HostRows, HostSource

__all__ = ["HostRows", "HostSource", "load_source"]


def load_source(placement=None) -> HostSource:
    """The source ``[scheduler] host_source`` names."""
    name = CONF.scheduler.host_source
    if name == "nova_cells":
        from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource

        return NovaCellsSource(placement=placement)
    if name == "compute_reports":
        from nova_sched.scheduler.cloud.sources.compute_reports import ComputeReportsSource

        return ComputeReportsSource()
    raise exception.ConfigurationError(f"unknown [scheduler] host_source {name!r}")
