"""IsolatedHostsFilter: keep isolated images and isolated hosts to each other."""

from __future__ import annotations

import numpy as np

from nova_sched.conf import CONF
from nova_sched.scheduler import filters


class IsolatedHostsFilter(filters.BaseHostFilter):
    """Images in ``isolated_images`` run only on ``isolated_hosts`` (nova's truth table).

    With ``restrict_isolated_hosts_to_isolated_images`` True (the default)
    isolated hosts take only isolated images::

                        isolated image   other image
        isolated host       pass            fail
        other host          fail            pass

    With it False, isolated hosts take other images too::

                        isolated image   other image
        isolated host       pass            pass
        other host          fail            pass

    With no ``isolated_images`` listed, isolated hosts take no image when
    restricted and every image otherwise; other hosts take every image.
    """

    # The options and the image do not change within a request.
    run_filter_once_per_request = True

    @staticmethod
    def _rule(spec):
        """(restrict, image_isolated or None when no images are listed)."""
        fs = CONF.filter_scheduler
        restrict = fs.restrict_isolated_hosts_to_isolated_images
        if not fs.isolated_images:
            return restrict, None
        return restrict, spec.image_id in fs.isolated_images

    def host_passes(self, host_state, spec) -> bool:
        restrict, image_isolated = self._rule(spec)
        host_isolated = host_state.host in CONF.filter_scheduler.isolated_hosts
        if image_isolated is None:
            return not (restrict and host_isolated)
        if restrict:
            return host_isolated == image_isolated
        return host_isolated or not image_isolated

    def filter_all(self, table, rows, spec):
        restrict, image_isolated = self._rule(spec)
        iso_rows = [r for h in set(CONF.filter_scheduler.isolated_hosts)
                    for r in table.host_rows.get(h, ())]
        host_isolated = np.isin(rows, iso_rows)
        if image_isolated is None:
            return ~host_isolated if restrict else np.ones(len(rows), dtype=bool)
        if restrict:
            return host_isolated if image_isolated else ~host_isolated
        return host_isolated if image_isolated else np.ones(len(rows), dtype=bool)
