"""IsolatedHostsFilter: keep isolated images and isolated hosts to each other."""

from __future__ import annotations

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

    run_on_rebuild = True

    def prepare(self, cycle) -> tuple[bool, bool | None]:
        """(restrict, whether the image is isolated; None when none are listed)."""
        fs = CONF.filter_scheduler
        restrict = fs.restrict_isolated_hosts_to_isolated_images
        if not fs.isolated_images:
            return restrict, None
        return restrict, cycle.spec.image_id in fs.isolated_images

    def filter_all(self, cycle, rows):
        restrict, image_isolated = cycle.prepared(self)
        host_rows = cycle.table.host_rows
        iso_rows = [r for h in set(CONF.filter_scheduler.isolated_hosts)
                    for r in host_rows.get(h, ())]
        host_isolated = filters.among(cycle.table, rows, iso_rows)
        if image_isolated is None:
            return ~host_isolated if restrict else filters.everyone(rows)
        if restrict:
            return host_isolated if image_isolated else ~host_isolated
        return host_isolated if image_isolated else filters.everyone(rows)
