"""Recovery of instances whose scheduler died while placing them.

The broker delivers again what a dead daemon held unacknowledged, so this
sweep is for what redelivery cannot cover: a request the broker itself
lost (a queue that was not durable across a broker restart). An instance
still being scheduled after ``[scheduler] scheduling_timeout`` is
rescheduled from the request stored with it (``db.instances.stored_request``)
when that request needs no secret; otherwise it goes to ERROR with a fault
saying why. Either way its partial claims are released.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Callable

from nova_sched.conf import CONF
from nova_sched.db import api as db_api
from nova_sched.db import instances as db_instances

LOG = logging.getLogger(__name__)

Reschedule = Callable[[str, db_instances.StoredRequest], None]


def recover_stuck_instances(cycle, reschedule: Reschedule | None = None) -> list[str]:
    """Reschedule or fail the instances stuck in scheduling past the timeout.

    ``reschedule(uuid, stored)`` schedules one instance again from its
    stored request (the manager's); without it every stuck instance goes
    to ERROR. Several daemons may sweep at once: a guarded UPDATE lets one
    of them have each instance. Returns the uuids this daemon recovered.
    """
    timeout = CONF.scheduler.scheduling_timeout
    cutoff = db_api.utcnow() - dt.timedelta(seconds=timeout)
    recovered = []
    for uuid in db_instances.find_stuck(cutoff):
        if cycle.casts.holds(uuid):
            continue  # cast by this daemon; its record waits for the database
        stored = db_instances.stored_request(uuid)
        if (reschedule is not None and stored is not None
                and not stored.needs_secrets):
            if db_instances.take_over_stuck(uuid, cutoff):
                cycle.release([uuid])
                db_instances.set_scheduling(uuid)
                LOG.warning("Instance %s was still being scheduled after %d s "
                            "(its scheduler stopped); scheduling it again", uuid,
                            timeout)
                reschedule(uuid, stored)
                recovered.append(uuid)
            continue
        if stored is not None and stored.needs_secrets:
            message = (f"The scheduler died while placing the instance, and it "
                       f"cannot be rescheduled: its request carried an admin "
                       f"password or injected files, which are never stored "
                       f"(still unplaced after {timeout} seconds)")
        else:
            message = (f"Scheduling timed out: the instance was still being "
                       f"scheduled after {timeout} seconds (its scheduler stopped "
                       f"or lost its database)")
        if db_instances.fail_if_stuck(uuid, message, cutoff):
            cycle.release([uuid])
            recovered.append(uuid)
    if recovered:
        LOG.warning("Recovered %d instances stuck in scheduling: %s",
                    len(recovered), ", ".join(recovered))
    return recovered
