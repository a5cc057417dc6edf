"""A filter that kills the daemon running it, for the poison-request test.

A request with the scheduler hint ``poison`` makes ``host_passes`` end the
process at once (``os._exit``: no cleanup, no acknowledgement), as a crash
in a native library or the kernel's OOM killer would. Loaded with
``available_filters = tests.functional.plugins.poison_filter.filters``.
"""

from __future__ import annotations

import os

from nova_sched.scheduler.filters import BaseHostFilter, all_filters


class PoisonFilter(BaseHostFilter):
    """Passes every host; dies on a request hinted ``poison``."""

    def host_passes(self, host_state, spec) -> bool:
        if spec.scheduler_hints.get("poison"):
            os._exit(70)
        return True


def filters() -> list[type]:
    """Every built-in filter and this one."""
    return [*all_filters(), PoisonFilter]
