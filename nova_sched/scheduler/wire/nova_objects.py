"""oslo.versionedobjects primitives in nova's namespace, read and written by hand.

Today's nova-conductor talks to the scheduler (RPC API 4.x) in nova objects
serialised as primitives::

    {"nova_object.name": "RequestSpec", "nova_object.namespace": "nova",
     "nova_object.version": "1.15", "nova_object.data": {...},
     "nova_object.changes": ["flavor", ...]}

with nested objects as primitives of their own and ``*List`` objects
holding theirs in the ``objects`` field. nova is never imported to read
them: it pins its own dependencies (and drags in its database, its
configuration and eventlet), which a standalone scheduler must not inherit,
and its object classes would tie us to one nova release while conductors of
several releases talk to us. So this module checks the envelope (name,
namespace, a major version we understand) and hands out ``nova_object.data``
as a plain dict; the caller reads the fields it needs by name, which is what
lets a newer minor version (fields added, none removed or changed: oslo's
rule) through unchanged. The writers build exactly the primitives
oslo.versionedobjects' ``obj_to_primitive`` would for the objects we send back.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from nova_sched import exception

NAMESPACE = "nova"
NAME_KEY = "nova_object.name"
NAMESPACE_KEY = "nova_object.namespace"
VERSION_KEY = "nova_object.version"
DATA_KEY = "nova_object.data"
CHANGES_KEY = "nova_object.changes"
_REQUIRED_KEYS = (NAME_KEY, NAMESPACE_KEY, VERSION_KEY, DATA_KEY)

# Every nova object we read has been at major version 1 since it was
# introduced; a 2.x would mean fields were removed or changed meaning.
DEFAULT_MAJORS: tuple[int, ...] = (1,)

SELECTION_VERSION = "1.1"
SCHEDULER_LIMITS_VERSION = "1.0"

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")
_LIMIT_FIELDS = ("vcpu", "disk_gb", "memory_mb")


def _invalid(reason: str) -> exception.InvalidRequestSpec:
    return exception.InvalidRequestSpec(reason)


def _label(where: str | None, name: str) -> str:
    return where or name


def is_primitive(value: Any, name: str | None = None) -> bool:
    """Whether ``value`` looks like a nova object primitive (of ``name``).

    Only the envelope is looked at; ``unwrap`` is what validates.
    """
    if not isinstance(value, Mapping):
        return False
    if not all(key in value for key in _REQUIRED_KEYS):
        return False
    if value.get(NAMESPACE_KEY) != NAMESPACE:
        return False
    return name is None or value.get(NAME_KEY) == name


def version_tuple(version: Any, where: str = "nova_object.version") -> tuple[int, int]:
    """``"1.15"`` as ``(1, 15)``; InvalidRequestSpec for anything else."""
    match = _VERSION_RE.match(version) if isinstance(version, str) else None
    if match is None:
        raise _invalid(f"{where} must be a version string such as '1.0', "
                       f"got {version!r}")
    return int(match.group(1)), int(match.group(2))


def unwrap(value: Any, name: str, versions: Iterable[int] = DEFAULT_MAJORS,
           where: str | None = None) -> dict:
    """The ``nova_object.data`` dict of a ``name`` primitive.

    ``versions`` are the major versions understood; any minor version of
    them is accepted. ``where`` names the field in error messages (default
    the object name). InvalidRequestSpec saying what is wrong otherwise.
    """
    label = _label(where, name)
    if not isinstance(value, Mapping):
        raise _invalid(f"{label} must be a nova {name} object primitive, got "
                       f"{type(value).__name__}")
    missing = [key for key in _REQUIRED_KEYS if key not in value]
    if missing:
        raise _invalid(f"{label} is not a nova {name} object primitive: no "
                       f"{', '.join(missing)}")
    if value[NAMESPACE_KEY] != NAMESPACE:
        raise _invalid(f"{label} is in namespace {value[NAMESPACE_KEY]!r}, "
                       f"not {NAMESPACE!r}")
    if value[NAME_KEY] != name:
        raise _invalid(f"{label} must be a {name} object, got "
                       f"{value[NAME_KEY]!r}")
    major, _minor = version_tuple(value[VERSION_KEY], f"{label} version")
    majors = tuple(versions)
    if major not in majors:
        understood = ", ".join(f"{m}.x" for m in majors)
        raise _invalid(f"{label} is {name} version {value[VERSION_KEY]}; only "
                       f"{understood} is understood")
    data = value[DATA_KEY]
    if not isinstance(data, Mapping):
        raise _invalid(f"{label} {DATA_KEY} must be a dict, got "
                       f"{type(data).__name__}")
    return dict(data)


def unwrap_list(value: Any, name: str, item_name: str,
                versions: Iterable[int] = DEFAULT_MAJORS,
                item_versions: Iterable[int] = DEFAULT_MAJORS,
                where: str | None = None) -> list[dict]:
    """The data dicts of the items of a ``*List`` primitive (its ``objects``)."""
    label = _label(where, name)
    data = unwrap(value, name, versions, where=label)
    items = data.get("objects", [])
    if not isinstance(items, (list, tuple)):
        raise _invalid(f"{label}.objects must be a list, got "
                       f"{type(items).__name__}")
    item_versions = tuple(item_versions)
    return [unwrap(item, item_name, item_versions, where=f"{label}.objects[{i}]")
            for i, item in enumerate(items)]


def primitive(name: str, version: str, data: Mapping[str, Any],
              changes: Iterable[str] | None = None) -> dict:
    """A primitive as oslo's ``obj_to_primitive`` writes it.

    ``changes`` default to every field in ``data``: an object built with
    all its fields as arguments (as nova builds the ones we send back) has
    them all changed. Sorted, so the same object always serialises the same.
    """
    version_tuple(version, f"{name} version")
    changed = sorted(data if changes is None else changes)
    result = {
        NAME_KEY: name,
        NAMESPACE_KEY: NAMESPACE,
        VERSION_KEY: version,
        DATA_KEY: dict(data),
    }
    # oslo leaves the key out for an object with nothing changed.
    if changed:
        result[CHANGES_KEY] = changed
    return result


def _limit_value(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"limit {field} must be a number, got {value!r}")
    # nova's IntegerField coerces with int(): a fractional limit (total x
    # ratio) is truncated, never rounded up past what the node can take.
    return int(value)


def scheduler_limits_primitive(limits: Mapping[str, Any] | None) -> dict:
    """A ``SchedulerLimits`` 1.0 primitive from our ``limits`` dict.

    As nova's ``SchedulerLimits.from_dict``: every field set (None when the
    dict has no such limit), so every field is a change. ``numa_topology``
    is None: we send no NUMA limits.
    """
    limits = limits or {}
    data: dict[str, Any] = {"numa_topology": None}
    for field in _LIMIT_FIELDS:
        data[field] = _limit_value(limits.get(field), field)
    return primitive("SchedulerLimits", SCHEDULER_LIMITS_VERSION, data)


def selection_primitive(*, compute_node_uuid: str, service_host: str,
                        nodename: str, cell_uuid: str,
                        limits: Mapping[str, Any] | None,
                        availability_zone: str | None,
                        allocation_request: str | None = None,
                        allocation_request_version: str | None = None) -> dict:
    """A ``Selection`` 1.1 primitive, as nova's ``Selection.from_host_state``
    builds it (every field set).

    ``allocation_request`` (the JSON text of a Placement allocation request)
    and ``allocation_request_version`` are None where claims are not
    Placement's: nova's conductor then relies on the claim this scheduler
    made, and takes an alternate without a claim of its own.
    """
    for field, value in (("compute_node_uuid", compute_node_uuid),
                         ("service_host", service_host), ("nodename", nodename),
                         ("cell_uuid", cell_uuid)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"Selection {field} must be a non-empty string, "
                            f"got {value!r}")
    for field, value in (("availability_zone", availability_zone),
                         ("allocation_request", allocation_request),
                         ("allocation_request_version", allocation_request_version)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"Selection {field} must be a string or None, "
                            f"got {value!r}")
    data = {
        "compute_node_uuid": compute_node_uuid,
        "service_host": service_host,
        "nodename": nodename,
        "cell_uuid": cell_uuid,
        "limits": scheduler_limits_primitive(limits),
        "allocation_request": allocation_request,
        "allocation_request_version": allocation_request_version,
        "availability_zone": availability_zone,
    }
    return primitive("Selection", SELECTION_VERSION, data)
