"""Retry bookkeeping of nova Havana, in one place.

A compute node that fails a build casts ``run_instance`` back to the
scheduler with ``filter_properties['retry']`` (``num_attempts``, the
``hosts`` tried as ``[host, node]`` pairs, and ``exc``, the failure). Each
scheduling attempt counts itself here, RetryFilter keeps the instance off
the nodes already tried, and past ``[scheduler] max_attempts`` the instance
fails with "Exceeded max scheduling attempts".

nova's rules: no retry bookkeeping when ``max_attempts`` is 1 or the
request forces hosts or nodes (rescheduling is disabled then).
"""

from __future__ import annotations

import copy
import logging

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.wire.request import RequestSpec

LOG = logging.getLogger(__name__)

# The group's handle, kept (see nova_sched.conf).
_SCHEDULER = CONF.scheduler


def is_reschedule(spec: RequestSpec) -> bool:
    """Whether a compute node sent the request back after a failed build."""
    return bool(spec.retry and spec.retry.get("exc"))


def tried_nodes(spec: RequestSpec) -> set[tuple[str, str]]:
    """The (host, node) pairs earlier attempts of the request were cast to."""
    hosts = (spec.retry or {}).get("hosts") or []
    return {(pair[0], pair[1]) for pair in hosts
            if isinstance(pair, (list, tuple)) and len(pair) == 2}


def next_attempt(filter_properties: dict, instance_uuid: str | None) -> dict:
    """A copy of ``filter_properties`` counting this attempt.

    NoValidHost when the instance has had its ``max_attempts`` already.
    Only the top level and ``retry`` are copied: the scheduler changes
    nothing else of a request's filter properties (it adds ``limits`` and
    the retry's hosts), and copying all of them was most of this call.
    """
    fprops = dict(filter_properties)
    if fprops.get("retry") is not None:
        fprops["retry"] = copy.deepcopy(fprops["retry"])
    max_attempts = _SCHEDULER.max_attempts
    if (max_attempts == 1 or fprops.get("force_hosts")
            or fprops.get("force_nodes")):
        return fprops
    retry = fprops.pop("retry", None) or {}
    if retry:
        retry["num_attempts"] = int(retry.get("num_attempts", 1)) + 1
        retry.setdefault("hosts", [])
    else:
        retry = {"num_attempts": 1, "hosts": []}
    fprops["retry"] = retry
    if retry.get("exc"):
        LOG.info("Rescheduling instance %s after a failed build on %s: %s",
                 instance_uuid, retry["hosts"][-1:] or "?", retry["exc"])
    if retry["num_attempts"] > max_attempts:
        raise exception.NoValidHost(
            f"Exceeded max scheduling attempts {max_attempts} for instance "
            f"{instance_uuid}. Last exception: {retry.get('exc')}"
        )
    return fprops


def record_host(filter_properties: dict, host: str, node: str) -> None:
    """Note the node chosen for this attempt (RetryFilter avoids it next time)."""
    retry = filter_properties.get("retry")
    if retry is not None:
        retry.setdefault("hosts", []).append([host, node])
