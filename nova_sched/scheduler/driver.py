"""The driver interface and what every driver shares: placement results,
loading a driver by name, and the retry bookkeeping of nova Havana.
"""

from __future__ import annotations

import dataclasses
import logging

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import loadables
from nova_sched.scheduler.request import RequestSpec

LOG = logging.getLogger(__name__)

DRIVER_ALIASES = {
    "filter_scheduler": "nova_sched.scheduler.filter_scheduler.FilterScheduler",
    "chance_scheduler": "nova_sched.scheduler.chance.ChanceScheduler",
    # Havana's dotted names, so an old nova.conf keeps working.
    "nova.scheduler.filter_scheduler.FilterScheduler":
        "nova_sched.scheduler.filter_scheduler.FilterScheduler",
    "nova.scheduler.chance.ChanceScheduler":
        "nova_sched.scheduler.chance.ChanceScheduler",
}


@dataclasses.dataclass
class Selection:
    """A node chosen for an instance, with what the compute node must know."""

    host: str
    nodename: str
    node_id: int
    limits: dict
    weight: float = 0.0

    def to_dict(self) -> dict:
        return {"host": self.host, "nodename": self.nodename, "limits": self.limits}


class Scheduler:
    """Base class of scheduler drivers.

    A driver chooses nodes for a request: ``select`` returns one list per
    instance, the chosen node first, followed by up to ``alternates``
    unclaimed fallbacks. When ``claim`` is true the chosen node's resources
    are claimed for the instance; a request that cannot be placed raises
    NoValidHost with the reason.
    """

    def __init__(self, host_manager):
        self.host_manager = host_manager

    def select_one(self, spec: RequestSpec, instance_uuid: str | None,
                   claim: bool = True, alternates: int = 0) -> list[Selection]:
        raise NotImplementedError

    def refresh(self) -> None:
        """Bring the host states up to date between decisions."""
        self.host_manager.refresh()

    def release(self, instance_uuids: list[str]) -> None:
        """Give back the claims of instances (their nodes are re-read)."""
        from nova_sched.scheduler import claims

        for node_id in set(claims.release(instance_uuids)):
            self.host_manager.refresh_node(node_id)


def load_driver(name: str, host_manager) -> Scheduler:
    """The driver named by ``[scheduler] driver``; ConfigurationError if unknown."""
    path = DRIVER_ALIASES.get(name, name)
    if "." not in path:
        raise exception.ConfigurationError(
            f"unknown scheduler driver {name!r}; use filter_scheduler, "
            "chance_scheduler or a dotted class path"
        )
    cls = loadables.import_object(path)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise exception.ConfigurationError(f"{name} is not a scheduler driver class")
    return cls(host_manager)


def populate_retry(filter_properties: dict, instance_uuid: str | None) -> None:
    """Count this scheduling attempt; NoValidHost past max_attempts.

    nova Havana's rules: no retry bookkeeping when max_attempts is 1 or the
    request forces hosts or nodes (rescheduling is disabled then).
    """
    max_attempts = CONF.scheduler.max_attempts
    if (max_attempts == 1 or filter_properties.get("force_hosts")
            or filter_properties.get("force_nodes")):
        return
    retry = filter_properties.pop("retry", None) or {}
    if retry:
        retry["num_attempts"] = int(retry.get("num_attempts", 1)) + 1
        retry.setdefault("hosts", [])
    else:
        retry = {"num_attempts": 1, "hosts": []}
    filter_properties["retry"] = retry
    if retry.get("exc"):
        LOG.info("Rescheduling instance %s after a failed build on %s: %s",
                 instance_uuid, retry["hosts"][-1:] or "?", retry["exc"])
    if retry["num_attempts"] > max_attempts:
        raise exception.NoValidHost(
            f"Exceeded max scheduling attempts {max_attempts} for instance "
            f"{instance_uuid}. Last exception: {retry.get('exc')}"
        )


def add_retry_host(filter_properties: dict, host: str, node: str) -> None:
    retry = filter_properties.get("retry")
    if retry is not None:
        retry.setdefault("hosts", []).append([host, node])
