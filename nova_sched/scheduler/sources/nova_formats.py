"""The compute node columns today's nova writes in its own formats, read as
nova's scheduler reads them.

nova-compute stores several ``compute_nodes`` columns as JSON of its
versioned objects; the host table keeps the plain shapes the compute
reports use (CONTRACT section 3). Each function here takes the column's
text as nova wrote it and returns the report's shape as JSON text (or
None), never raising: a column nova-sched cannot read leaves the node
without that description, and the filter that needs it says so.

* ``metrics``: a MonitorMetricList's ``to_list()`` (``[{"name", "value",
  "timestamp", "source"}]``). A percentage (``cpu.percent``,
  ``cpu.user.percent``...) is stored as a fraction (value / 100); nova's
  scheduler multiplies it back by 100 into MonitorMetric's integer field,
  which truncates (0.29 becomes 28). The host table gets the value nova's
  scheduler sees.
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


def metric_value(name: str, value: Any) -> Any:
    """A stored metric's value as nova's scheduler sees it."""
    if (name.endswith(".percent") and isinstance(value, (int, float))
            and not isinstance(value, bool)):
        return int(value * 100)
    return value


def metrics(text: str | None) -> str | None:
    items = _loads(text)
    if not isinstance(items, list):
        return None
    read = []
    for item in items:
        item = _data(item)
        name = item.get("name")
        if not isinstance(name, str):
            continue
        read.append(dict(item, value=metric_value(name, item.get("value"))))
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
