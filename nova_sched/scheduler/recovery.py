"""Recovery of instances whose scheduler died while placing them."""

from __future__ import annotations

import datetime as dt
import logging

from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances

LOG = logging.getLogger(__name__)


def recover_stuck_instances(cycle) -> list[str]:
    """Put instances stuck in 'scheduling' past the timeout into ERROR.

    Their partial claims are released through the scheduling ``cycle`` so
    the capacity comes back. Returns the uuids this daemon recovered.
    """
    timeout = CONF.scheduler.scheduling_timeout
    cutoff = db_api.utcnow() - dt.timedelta(seconds=timeout)
    recovered = []
    for uuid in db_instances.find_stuck(cutoff):
        message = (f"Scheduling timed out: the instance was still being scheduled "
                   f"after {timeout} seconds (its scheduler stopped or lost its "
                   f"database)")
        if db_instances.fail_if_stuck(uuid, message, cutoff):
            cycle.release([uuid])
            recovered.append(uuid)
    if recovered:
        LOG.warning("Recovered %d instances stuck in scheduling: %s",
                    len(recovered), ", ".join(recovered))
    return recovered
