"""Validation of the reports compute nodes send (``compute_node_update``).

A report with nonsense in it is rejected whole, before it touches the
database or the in-memory host state, so one broken compute node cannot
corrupt what the scheduler knows about it.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from nova_sched import exception, json_text
from nova_sched.capacity import RESOURCES
from nova_sched.db import node_uuids

_REQUIRED_INTS = ("vcpus", "memory_mb", "local_gb")
_OPTIONAL_INTS = (
    "vcpus_used",
    "memory_mb_used",
    "local_gb_used",
    "disk_available_least",
    "running_vms",
    "current_workload",
    "hypervisor_version",
    "reserved_host_memory_mb",
    "reserved_host_disk_mb",
    "reserved_host_cpus",
)
# Free figures may legitimately go negative on an overcommitted node.
_SIGNED_INTS = ("free_ram_mb", "free_disk_gb", "disk_available_least")
_STRINGS = ("hypervisor_type", "host_ip")

# Sizes beyond these are typing errors, not hardware (1 EiB of RAM).
_MAX_VALUE = 2**50


def _int(report: dict, key: str, required: bool) -> int | None:
    value = report.get(key)
    if type(value) is int and 0 <= value <= _MAX_VALUE:
        return value  # the common case, a thousand times a second
    if value is None:
        if required:
            raise exception.InvalidComputeReport(f"{key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise exception.InvalidComputeReport(
            f"{key} must be a number, got {type(value).__name__} {value!r}"
        )
    if isinstance(value, float) and not value.is_integer():
        raise exception.InvalidComputeReport(f"{key} must be whole, got {value!r}")
    value = int(value)
    if key not in _SIGNED_INTS and value < 0:
        raise exception.InvalidComputeReport(f"{key} must not be negative, got {value}")
    if abs(value) > _MAX_VALUE:
        raise exception.InvalidComputeReport(f"{key} is implausibly large: {value}")
    return value


def _ratio(report: dict, key: str) -> float | None:
    """A node's own allocation ratio; None when it sends none.

    Absent, null and 0.0 all mean "none" (the scheduler's rule decides),
    as in today's nova, so 0.0 is stored as NULL.
    """
    value = report.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise exception.InvalidComputeReport(
            f"{key} must be a number, got {type(value).__name__} {value!r}"
        )
    try:
        value = float(value)
    except OverflowError:  # a whole number beyond any double
        value = math.inf
    if not math.isfinite(value) or value < 0:
        raise exception.InvalidComputeReport(
            f"{key} must be a finite non-negative number, got {value!r}"
        )
    return value or None


def _json_value(value: Any, key: str, kind: type) -> tuple[Any, str | None]:
    """(the value, its JSON text to store); a string is parsed first."""
    if value is None:
        return None, None
    if isinstance(value, str):
        try:
            value = json_text.loads(value) if value else kind()
        except ValueError:
            if kind is not str:
                raise exception.InvalidComputeReport(f"{key} is not valid JSON")
    if kind is not str and not isinstance(value, kind):
        raise exception.InvalidComputeReport(
            f"{key} must be a {kind.__name__}, got {type(value).__name__}"
        )
    try:
        return value, json_text.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        raise exception.InvalidComputeReport(f"{key} cannot be serialised")


def _json_text(value: Any, key: str, kind: type) -> str | None:
    return _json_value(value, key, kind)[1]


def _node_uuid(value: Any, host: str, node: str) -> str:
    """The node's uuid as today's nova reports it, else one of its names."""
    if value is None:
        return node_uuids.for_node(host, node)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise exception.InvalidComputeReport(f"uuid must be a UUID, got {value!r}")


def validate(report: Any) -> dict:
    """Check a compute_node dict and return the values to store.

    Raises InvalidComputeReport naming the first bad field.
    """
    if not isinstance(report, dict):
        raise exception.InvalidComputeReport(
            f"compute_node must be a dict, got {type(report).__name__}"
        )
    host = report.get("host")
    node = report.get("hypervisor_hostname")
    for key, value in (("host", host), ("hypervisor_hostname", node)):
        if not isinstance(value, str) or not value.strip() or len(value) > 255:
            raise exception.InvalidComputeReport(f"{key} must be a non-empty name")
    values: dict[str, Any] = {"host": host, "hypervisor_hostname": node,
                              "uuid": _node_uuid(report.get("uuid"), host, node)}
    for key in _REQUIRED_INTS:
        values[key] = _int(report, key, required=True)
    for key in _OPTIONAL_INTS + ("free_ram_mb", "free_disk_gb"):
        value = _int(report, key, required=False)
        if value is not None or key.startswith("reserved_"):
            values[key] = value or 0
    for key in _STRINGS:
        value = report.get(key)
        if value is not None and not isinstance(value, str):
            raise exception.InvalidComputeReport(f"{key} must be a string")
        values[key] = value
    # Always set, so a node that stops sending a ratio goes back to the
    # scheduler's rule rather than keeping the one it sent before.
    for resource in RESOURCES:
        values[resource.ratio_option] = _ratio(report, resource.ratio_option)
    cpu_info = report.get("cpu_info")
    if cpu_info is not None and not isinstance(cpu_info, str):
        cpu_info = _json_text(cpu_info, "cpu_info", dict)
    values["cpu_info"] = cpu_info
    supported, values["supported_instances"] = _json_value(
        report.get("supported_instances"), "supported_instances", list)
    if supported is not None:
        for item in supported:
            if not isinstance(item, (list, tuple)) or len(item) != 3:
                raise exception.InvalidComputeReport(
                    "supported_instances items must be [arch, hypervisor_type, vm_mode]"
                )
    values["stats"] = _json_text(report.get("stats"), "stats", dict)
    values["metrics"] = _json_text(report.get("metrics"), "metrics", list)
    pools, values["pci_stats"] = _json_value(report.get("pci_stats"), "pci_stats", list)
    values["numa_topology"] = _json_text(
        report.get("numa_topology"), "numa_topology", dict)
    for pool in pools or ():
        if not isinstance(pool, dict):
            raise exception.InvalidComputeReport("pci_stats pools must be dicts")
        count = pool.get("count", 0)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise exception.InvalidComputeReport(
                "pci_stats pool count must be a whole non-negative number")
    for used, total in (
        ("reserved_host_memory_mb", "memory_mb"),
        ("reserved_host_cpus", "vcpus"),
    ):
        if values.get(used, 0) > values[total] > 0:
            raise exception.InvalidComputeReport(
                f"{used} ({values[used]}) exceeds {total} ({values[total]})"
            )
    if values.get("reserved_host_disk_mb", 0) > values["local_gb"] * 1024 > 0:
        raise exception.InvalidComputeReport(
            "reserved_host_disk_mb exceeds local_gb"
        )
    return values
