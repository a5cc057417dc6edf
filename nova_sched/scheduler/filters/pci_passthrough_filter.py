"""PciPassthroughFilter: hosts with the PCI devices a flavor asks for.

A flavor asks with the extra spec ``pci_passthrough:alias`` =
``"a1:2,a2:1"`` (two devices of alias a1, one of a2). Each alias is defined
by ``[pci] alias`` JSON objects: ``name`` plus the device properties a pool
must have, such as ``vendor_id`` and ``product_id`` (``device_type`` is
matched against the pools' ``dev_type``, as nova names it). Several
objects with the same name are alternatives: a pool matching any of them
serves the alias.

Compute nodes report ``pci_stats`` pools (``vendor_id``, ``product_id``,
``count`` and further tags). A host passes when its pools can serve every
request at once: devices are counted across pools, and no device serves
two requests (an exact assignment, where nova assigns greedily in request
order and may miss one). As in nova, pools of physical functions
(``dev_type`` ``type-PF``) and vDPA devices serve only requests that ask
for that device type, and string values match regardless of case.

Left out: NUMA affinity of devices (``numa_policy`` is accepted and
ignored), the placement-era alias keys ``resource_class``, ``traits`` and
``live_migratable``, PCI requests from Neutron ports, and consumption of
devices by claims: the scheduler counts the devices each compute node last
reported, so the instances of one request are not charged against each
other's pools.
"""

from __future__ import annotations

import collections
import json
import logging
from typing import Any, Iterable

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import alike_hosts

LOG = logging.getLogger(__name__)

EXTRA_SPEC = "pci_passthrough:alias"
# Alias keys that do not describe a pool: who the alias is, where to place
# it on NUMA, and Placement-only keys.
_NOT_MATCHED = ("name", "numa_policy", "resource_class", "traits", "live_migratable")
# Device types nova keeps out of requests that do not name them.
_ONLY_IF_REQUESTED = ("type-pf", "vdpa")  # compared lower-cased


def parse_aliases(configured: Iterable[str]) -> dict[str, tuple[dict, ...]]:
    """``[pci] alias`` entries as name -> alternative specs.

    Raises ConfigurationError naming the bad entry.
    """
    aliases: dict[str, list[dict]] = collections.defaultdict(list)
    for text in configured:
        try:
            entry = json.loads(text)
        except ValueError as err:
            raise exception.ConfigurationError(
                f"[pci] alias {text!r} is not valid JSON: {err}") from None
        if not isinstance(entry, dict):
            raise exception.ConfigurationError(
                f"[pci] alias {text!r} must be a JSON object")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise exception.ConfigurationError(
                f"[pci] alias {text!r} has no name")
        spec = {k: v for k, v in entry.items() if k not in _NOT_MATCHED}
        if "device_type" in spec:
            spec["dev_type"] = spec.pop("device_type")
        for key, value in spec.items():
            if not isinstance(value, (str, int, float, bool)):
                raise exception.ConfigurationError(
                    f"[pci] alias {name!r}: {key} must be a string, got "
                    f"{json.dumps(value)}")
        aliases[name.strip()].append(spec)
    return {name: tuple(specs) for name, specs in aliases.items()}


def _configured_aliases() -> dict[str, tuple[dict, ...]]:
    # Parsed whenever asked (a few entries): nothing outlives a request.
    return parse_aliases(CONF.pci.alias or ())


def parse_requests(extra_specs: dict, uuids=()) -> list[tuple[str, int, tuple[dict, ...]]]:
    """The flavor's PCI requests as (alias, count, specs); [] when none.

    InvalidRequestSpec for a malformed extra spec or an alias that
    ``[pci] alias`` does not define.
    """
    value = extra_specs.get(EXTRA_SPEC)
    if value is None or (isinstance(value, str) and not value.strip()):
        return []

    def fail(reason):
        return exception.InvalidRequestSpec(
            f"flavor extra spec {EXTRA_SPEC}={value!r}: {reason}",
            instance_uuids=list(uuids))

    if not isinstance(value, str):
        raise fail("must be text such as 'alias1:2,alias2:1'")
    aliases = _configured_aliases()
    requests = []
    for item in value.split(","):
        name, sep, count = item.partition(":")
        name = name.strip()
        try:
            number = int(count.strip())
        except ValueError:
            number = -1
        if not sep or not name or number < 0:
            raise fail(f"{item.strip()!r} is not name:count")
        if name not in aliases:
            raise fail(f"PCI alias {name!r} is not defined in [pci] alias")
        requests.append((name, number, aliases[name]))
    return requests


def _norm(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _same(have: Any, wanted: Any) -> bool:
    # Case does not matter (nova); nor does "1" against 1 in a JSON report.
    if have is None:
        return False
    return _norm(have) == _norm(wanted) or str(have).lower() == str(wanted).lower()


def _pool_matches(pool: dict, specs: tuple[dict, ...]) -> bool:
    """nova's pci_device_prop_match: every key of any one spec matches."""
    for spec in specs:
        for key, wanted in spec.items():
            have = pool.get(key)
            if have is None and key == "dev_type":
                have = pool.get("device_type")
            if not _same(have, wanted):
                break
        else:
            return True
    return False


def _pool_count(pool: Any) -> int:
    if not isinstance(pool, dict):
        return 0
    count = pool.get("count", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return 0
    return count


def pools_satisfy(pools: list, requests: list[tuple[str, int, tuple[dict, ...]]]) -> bool:
    """Whether the pools hold enough devices for every request at once.

    A flow problem: request i needs count_i devices from the pools it
    matches, pool j gives at most its count. Solved exactly with augmenting
    paths (a handful of requests and pools).
    """
    demands = [count for _, count, _ in requests]
    need = sum(demands)
    if need == 0:
        return True
    usable = [(j, pool) for j, pool in enumerate(pools or []) if _pool_count(pool)]
    supply = {j: _pool_count(pool) for j, pool in usable}
    if sum(supply.values()) < need:
        return False
    edges: list[list[int]] = []
    for _, count, specs in requests:
        wanted_types = {_norm(s.get("dev_type")) for s in specs}
        edges.append([
            j for j, pool in usable
            if _pool_matches(pool, specs)
            and not any(_norm(pool.get("dev_type", pool.get("device_type"))) == t
                        and t not in wanted_types for t in _ONLY_IF_REQUESTED)
        ])
    for i, count in enumerate(demands):
        if count and sum(supply[j] for j in edges[i]) < count:
            return False
    return _max_flow(demands, edges, supply) == need


def _max_flow(demands: list[int], edges: list[list[int]], supply: dict[int, int]) -> int:
    """Edmonds-Karp on source -> requests -> pools -> sink."""
    # Residual capacities: requests are ("r", i), pools ("p", j).
    flow_rp: dict[tuple[int, int], int] = collections.defaultdict(int)
    left_demand = list(demands)
    left_supply = dict(supply)
    total = 0
    while True:
        # BFS from the source over residual edges.
        parent: dict[tuple[str, int], tuple[str, int] | None] = {}
        queue = collections.deque()
        for i, d in enumerate(left_demand):
            if d > 0:
                parent[("r", i)] = None
                queue.append(("r", i))
        end = None
        while queue and end is None:
            kind, n = queue.popleft()
            if kind == "r":
                for j in edges[n]:
                    if ("p", j) not in parent:
                        parent[("p", j)] = (kind, n)
                        if left_supply[j] > 0:
                            end = ("p", j)
                            break
                        queue.append(("p", j))
            else:
                for i in range(len(demands)):
                    if flow_rp[(i, n)] > 0 and ("r", i) not in parent:
                        parent[("r", i)] = (kind, n)
                        queue.append(("r", i))
        if end is None:
            return total
        path = []
        node = end
        while node is not None:
            path.append(node)
            node = parent[node]
        path.reverse()
        start_i = path[0][1]
        amount = min(left_demand[start_i], left_supply[end[1]])
        for a, b in zip(path, path[1:]):
            if a[0] == "p":  # pool -> request: undo earlier flow
                amount = min(amount, flow_rp[(b[1], a[1])])
        for a, b in zip(path, path[1:]):
            if a[0] == "r":
                flow_rp[(a[1], b[1])] += amount
            else:
                flow_rp[(b[1], a[1])] -= amount
        left_demand[start_i] -= amount
        left_supply[end[1]] -= amount
        total += amount


_KIND = "pci_passthrough.pools"


class PciPassthroughFilter(filters.BaseHostFilter):
    """Only hosts whose PCI pools can serve the flavor's device requests."""

    def __init__(self):
        # A bad [pci] alias stops the daemon at start, not a request later.
        _configured_aliases()

    def prepare(self, cycle) -> list[tuple[str, int, tuple[dict, ...]]]:
        """The flavor's PCI requests, with [pci] alias as configured now."""
        spec = cycle.spec
        return parse_requests(spec.extra_specs, spec.instance_uuids)

    def filter_all(self, cycle, rows):
        requests = cycle.prepared(self)
        if not requests:
            return filters.everyone(rows)
        # Nodes reporting the same pools are one kind, judged once.
        kinds = cycle.table.kinds
        codes = cycle.table.pick(
            kinds.codes(_KIND, lambda state: state.pci_stats), rows)
        passes = alike_hosts.judge_kinds(rows, codes, kinds.values(_KIND),
                                         lambda pools: pools_satisfy(pools, requests))
        if LOG.isEnabledFor(logging.DEBUG) and not passes.all():
            LOG.debug("%d hosts lack the PCI devices of %s", int((~passes).sum()),
                      cycle.spec.extra_specs.get(EXTRA_SPEC))
        return passes
