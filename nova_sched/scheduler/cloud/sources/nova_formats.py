"""The compute node columns today's nova writes in its own formats, read as
nova's scheduler reads them.

nova-compute stores several ``compute_nodes`` columns as JSON of its
versioned objects; the host table keeps the plain shapes the compute
reports use (CONTRACT section 3). Each function here takes the column's
text as nova wrote it and returns the report's shape as JSON text (or
None), never raising: a column nova-sched cannot read leaves the node
without that description, and the filter that needs it says so.

* ``metrics``: a MonitorMetricList's ``to_list()`` (``[{"name", "value",
  "timestamp", "source"}]``), kept as stored: ``monitor_metrics`` turns a
  value into what nova's scheduler sees, for nodes of either source.
* ``numa_topology``: a NUMATopology primitive; its NUMACells become
  ``{"cells": [{"id", "cpus", "memory_mb", "cpu_usage", "memory_usage"}]}``.
* ``pci_stats``: a PciDevicePoolList primitive; its pools become
  ``[{"vendor_id", "product_id", "numa_node", "count", tag: value...}]``
  (PciDevicePool.to_dict: the tags beside the fields).
* ``stats``, ``supported_instances``, ``cpu_info``: plain JSON already.
"""

from __future__ import annotations

import json
from typing import Any

_DATA = "nova_object.data"


def _loads(text: Any) -> Any:
    if not text or not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _data(value: Any) -> dict:
    if isinstance(value, dict) and isinstance(value.get(_DATA), dict):
        return value[_DATA]
    return value if isinstance(value, dict) else {}


def metrics(text: str | None) -> str | None:
    items = _loads(text)
    if not isinstance(items, list):
        return None
    read = []
    for item in items:
        item = _data(item)
        if isinstance(item.get("name"), str):
            read.append(item)
    return json.dumps(read)


def _int_set(value: Any) -> list[int]:
    if isinstance(value, (list, tuple, set)):
        return sorted(int(v) for v in value if isinstance(v, int))
    return []


def numa_topology(text: str | None) -> str | None:
    topology = _data(_loads(text))
    cells = topology.get("cells")
    if not isinstance(cells, list):
        return None
    read = []
    for cell in cells:
        cell = _data(cell)
        read.append({
            "id": cell.get("id"),
            # nova 34's unpinned guests use the shared CPUs (cpuset); a host
            # with dedicated CPUs only has none of those.
            "cpus": _int_set(cell.get("cpuset")),
            # Dedicated CPUs (a pinned guest's) and those pinned already.
            "pcpus": _int_set(cell.get("pcpuset")),
            "pinned": len(_int_set(cell.get("pinned_cpus"))),
            "memory_mb": cell.get("memory") or 0,
            "cpu_usage": cell.get("cpu_usage") or 0,
            "memory_usage": cell.get("memory_usage") or 0,
        })
    return json.dumps({"cells": read})


def pci_stats(text: str | None) -> str | None:
    value = _loads(text)
    pools = _data(value).get("objects") if isinstance(value, dict) else value
    if not isinstance(pools, list):
        return None
    read = []
    for pool in pools:
        pool = _data(pool)
        entry = {key: pool.get(key) for key in ("vendor_id", "product_id",
                                                "numa_node", "count")}
        tags = pool.get("tags")
        if isinstance(tags, dict):
            entry.update({k: v for k, v in tags.items() if k not in entry})
        read.append(entry)
    return json.dumps(read)
