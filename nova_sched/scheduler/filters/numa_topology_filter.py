"""NUMATopologyFilter: hosts whose NUMA cells can hold the guest's cells.

The common case of nova's filter. A request asks for a guest NUMA topology
with the flavor extra spec ``hw:numa_nodes`` = N or the image property
``hw_numa_nodes`` (not both: nova forbids an image overriding the flavor).
The guest's CPUs and memory are split into N cells:

* by hand with ``hw:numa_cpus.X`` (a CPU list such as ``0-3,^2,5``) and
  ``hw:numa_mem.X`` (MB) for every cell X, or the image properties
  ``hw_numa_cpus.X`` / ``hw_numa_mem.X``: every guest CPU in exactly one
  cell and the cells' memory adding up to the flavor's;
* else evenly, which needs the flavor's vCPUs and memory to divide by N.

A malformed or inconsistent request fails with InvalidRequestSpec saying
why (where nova's API would refuse the flavor/image pair).

Compute nodes report ``numa_topology`` as ``{"cells": [{"id": 0, "cpus":
[0, 1, ...], "memory_mb": 8192, "cpu_usage": 0, "memory_usage": 0}, ...]}``.
As in nova's ``_numa_fit_instance_cell`` for unpinned guests, a guest cell
fits a host cell when it is no bigger than the cell (no overcommit against
itself) and the cell's usage plus the guest cell stays within ``len(cpus) x
CPU ratio`` CPUs and ``memory_mb x RAM ratio`` MB, the node's effective
allocation ratios (``scheduler.cloud.resources``: its own reported ratio, its
aggregates' or the option, as for RamFilter and CoreFilter). A
host passes when the guest's cells fit on distinct host cells (any
assignment; nova tries permutations, this finds a matching). A request
without a NUMA topology passes every host; a host without a usable topology
fails a request with one.

Dedicated CPUs (``hw:cpu_policy`` / ``hw_cpu_policy`` = dedicated) imply a
one-cell topology when none is asked, as nova's ``numa_get_constraints``
does, and a pinned guest's cells fit on a host cell's dedicated CPUs
(``pcpus``, its ``pcpuset``; the shared ones of a host that reports none,
as before nova split them) less those pinned already, without overcommit.
So a host without a NUMA topology never takes a pinned guest, which is how
nova rejects the VCPU hosts its PCPU fallback query brings back.

Left out, compared with nova:

* the ``mixed`` policy and ``hw:cpu_dedicated_mask``, thread policies
  (``hw:cpu_thread_policy``), emulator threads and realtime masks, which
  are judged as an unpinned guest's;
* huge pages and page sizes (``hw:mem_page_size``), host cells' ``mempages``,
  and virtual persistent memory;
* PCI-NUMA affinity (``numa_policy`` of PCI aliases, ``hw:pci_numa_affinity_policy``)
  and network NUMA affinity (``physnets``/tunneled);
* nova's packing/spreading order of host cells (only whether a fit exists
  matters to a filter) and ``limits['numa_topology']`` sent to the compute
  node;
* per-cell usage comes from the compute node's last report: claims the
  scheduler makes do not say which cell they use, so instances of one
  request are not charged against each other's cells (RamFilter and
  CoreFilter still bound the host's totals).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any

import numpy as np

from nova_sched import capacity, exception
from nova_sched.capacity import RAM, VCPU
from nova_sched.scheduler import filters
from nova_sched.scheduler.placement_model import guest_constraints
from nova_sched.scheduler.wire import image_meta
from nova_sched.scheduler.wire.cpu_spec import parse_cpu_spec
from nova_sched.scheduler.wire.nova_image_model import NUMA_NODES_MAX

LOG = logging.getLogger(__name__)



@dataclasses.dataclass(frozen=True)
class GuestCell:
    id: int
    cpus: int
    memory_mb: int


@dataclasses.dataclass(frozen=True)
class HostCell:
    id: Any
    cpus: int
    memory_mb: int
    cpu_usage: float
    memory_usage: float
    # Dedicated CPUs of the cell and how many are pinned.
    pcpus: int = 0
    pinned: float = 0


@dataclasses.dataclass(frozen=True)
class Guest:
    """The guest's cells, and whether its CPUs are pinned (dedicated)."""

    cells: list[GuestCell]
    pinned: bool = False


def _cell_values(extra_specs: dict, image: image_meta.ImageProperties,
                 what: str) -> list | None:
    """The cells' CPU sets (``what`` = cpus) or MB (mem); None when not given.

    From the flavor's ``hw:numa_<what>.X``, X = 0, 1, ... up to the first
    missing one, or the image's ``hw_numa_<what>`` (nova's model of its
    ``hw_numa_<what>.X`` properties, read the same way).
    """
    flavor = []
    for cell in range(NUMA_NODES_MAX):
        key = f"hw:numa_{what}.{cell}"
        if key not in extra_specs:
            break
        flavor.append(extra_specs[key])
    image_cells = image.get(f"hw_numa_{what}")
    if flavor and image_cells is not None:
        raise ValueError(
            f"image property hw_numa_{what} may not override the flavor's "
            f"hw:numa_{what}")
    if not flavor:
        return image_cells
    return [parse_cpu_spec(cpus) for cpus in flavor] if what == "cpus" else flavor


def _node_count(extra_specs: dict, image: image_meta.ImageProperties) -> int | None:
    flavor = extra_specs.get("hw:numa_nodes")
    image = image.get("hw_numa_nodes")
    if flavor and image:
        raise ValueError("image property hw_numa_nodes may not override the "
                         "flavor's hw:numa_nodes")
    nodes = flavor or image
    if nodes is None or nodes == "":
        return None
    try:
        if isinstance(nodes, bool) or (isinstance(nodes, float) and not nodes.is_integer()):
            raise ValueError
        count = int(nodes)
    except (TypeError, ValueError):
        raise ValueError(f"hw:numa_nodes must be a whole number, got {nodes!r}") from None
    if count < 1:
        raise ValueError(f"hw:numa_nodes must be at least 1, got {nodes!r}")
    if count > NUMA_NODES_MAX:
        raise ValueError(f"hw:numa_nodes must be at most {NUMA_NODES_MAX}, got {nodes!r}")
    return count


def guest_cells(vcpus: int, memory_mb: int, extra_specs: dict,
                image: image_meta.ImageProperties,
                implied: bool = False) -> list[GuestCell] | None:
    """The guest's NUMA cells; None when the request has no NUMA topology
    (``implied``: one cell then, as nova gives a pinned guest).

    ValueError saying what is wrong with an inconsistent request.
    """
    nodes = _node_count(extra_specs, image)
    if nodes is None and implied:
        nodes = 1
    if nodes is None:
        return None
    cpu_list = _cell_values(extra_specs, image, "cpus")
    mem_list = _cell_values(extra_specs, image, "mem")
    if cpu_list is None and mem_list is None:
        if vcpus % nodes or memory_mb % nodes:
            raise ValueError(
                f"{vcpus} vCPUs and {memory_mb} MB cannot be split evenly over "
                f"{nodes} NUMA nodes; set hw:numa_cpus.X and hw:numa_mem.X")
        return [GuestCell(i, vcpus // nodes, memory_mb // nodes) for i in range(nodes)]
    if cpu_list is None or mem_list is None or len(cpu_list) != nodes \
            or len(mem_list) != nodes:
        raise ValueError(
            f"hw:numa_cpus.X and hw:numa_mem.X must both be given for each of "
            f"the {nodes} NUMA nodes")
    unassigned = set(range(vcpus))
    cells = []
    for node in range(nodes):
        cpus = cpu_list[node]
        for cpu in sorted(cpus):
            if cpu >= vcpus:
                raise ValueError(f"hw:numa_cpus.{node} names CPU {cpu}; the "
                                 f"flavor's CPUs are 0-{vcpus - 1}")
            if cpu not in unassigned:
                raise ValueError(f"CPU {cpu} is in more than one NUMA node")
            unassigned.discard(cpu)
        try:
            memory = int(mem_list[node])
            if memory < 0:
                raise ValueError
        except (TypeError, ValueError):
            raise ValueError(f"hw:numa_mem.{node} must be a whole number of MB, "
                             f"got {mem_list[node]!r}") from None
        cells.append(GuestCell(node, len(cpus), memory))
    if unassigned:
        raise ValueError(f"CPUs {sorted(unassigned)} are in no NUMA node")
    total = sum(c.memory_mb for c in cells)
    if total != memory_mb:
        raise ValueError(f"hw:numa_mem.X add up to {total} MB; the flavor has "
                         f"{memory_mb} MB")
    return cells


def _number(value: Any, default: float = 0) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError
    return value


def host_cells(topology: Any) -> list[HostCell] | None:
    """The reported cells; None when the host has no usable topology."""
    if not isinstance(topology, dict):
        return None
    cells = topology.get("cells")
    if not isinstance(cells, list) or not cells:
        return None
    parsed = []
    try:
        for cell in cells:
            cpus = cell["cpus"]
            if not isinstance(cpus, list):
                raise ValueError
            pcpus = cell.get("pcpus")
            parsed.append(HostCell(
                id=cell.get("id"),
                cpus=len(cpus),
                memory_mb=_number(cell.get("memory_mb")),
                cpu_usage=_number(cell.get("cpu_usage")),
                memory_usage=_number(cell.get("memory_usage")),
                pcpus=len(pcpus) if isinstance(pcpus, list) else 0,
                pinned=_number(cell.get("pinned")),
            ))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return parsed


def _figures(host_state, pinned: bool = False) -> tuple | None:
    """The host's cells as a hashable tuple of what fit() reads (for a
    pinned guest, the dedicated CPUs as the cell's CPUs and those pinned as
    its usage); None when the host has no usable topology."""
    cells = host_cells(host_state.numa_topology)
    if cells is None:
        return None
    if pinned:
        if not any(c.pcpus for c in cells):
            # Reported before nova split shared and dedicated CPUs.
            return tuple((c.cpus, c.memory_mb, c.pinned, c.memory_usage) for c in cells)
        return tuple((c.pcpus, c.memory_mb, c.pinned, c.memory_usage) for c in cells)
    return tuple((c.cpus, c.memory_mb, c.cpu_usage, c.memory_usage) for c in cells)


# Host cells judged column-wise; a host with more (or with figures a
# float64 does not hold exactly) is judged on its own.
_CELLS_MAX = 4
_EXACT = 2 ** 53
# Kind: [number of cells (-1: none, -2: judged on its own), then per cell
# cpus, memory_mb, cpu_usage, memory_usage].
_CELLS = "numa_topology.cells"
_PINNED_CELLS = "numa_topology.pinned_cells"
_NO_TOPOLOGY, _ON_ITS_OWN = -1.0, -2.0


def _pinned_cells_row(host_state) -> list[float]:
    """``_cells_row`` for a pinned guest."""
    return _cells_row(host_state, pinned=True)


def _cells_row(host_state, pinned: bool = False) -> list[float]:
    """The node's cells as one row of numbers (see ``_CELLS``)."""
    row = [0.0] * (1 + 4 * _CELLS_MAX)
    figures = _figures(host_state, pinned)
    if figures is None:
        row[0] = _NO_TOPOLOGY
    elif len(figures) > _CELLS_MAX or any(
            isinstance(v, int) and abs(v) >= _EXACT for cell in figures for v in cell):
        row[0] = _ON_ITS_OWN
    else:
        row[0] = len(figures)
        for i, cell in enumerate(figures):
            row[1 + 4 * i: 5 + 4 * i] = cell
    return row


def _fits(guest: GuestCell, cell: HostCell, cpu_ratio: float,
          ram_ratio: float) -> bool:
    # No overcommit of a guest cell against itself (nova).
    if guest.memory_mb > cell.memory_mb or guest.cpus > cell.cpus:
        return False
    # A cell reserves nothing: its limit is its size times the node's ratio.
    return (capacity.fits(cell.cpu_usage, guest.cpus,
                          capacity.limit(cell.cpus, cpu_ratio, 0))
            and capacity.fits(cell.memory_usage, guest.memory_mb,
                              capacity.limit(cell.memory_mb, ram_ratio, 0)))


def fit(guests: list[GuestCell], cells: list[HostCell], cpu_ratio: float,
        ram_ratio: float) -> dict[int, int] | None:
    """guest cell index -> host cell index on distinct cells, or None.

    A bipartite matching by augmenting paths: a fit exists exactly when
    one of nova's permutations of host cells would succeed.
    """
    if len(cells) < len(guests):
        return None
    options = [[j for j, cell in enumerate(cells) if _fits(g, cell, cpu_ratio, ram_ratio)]
               for g in guests]
    owner: dict[int, int] = {}  # host cell -> guest cell

    def place(i: int, seen: set[int]) -> bool:
        for j in options[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or place(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in sorted(range(len(guests)), key=lambda i: len(options[i])):
        if not place(i, set()):
            return None
    return {i: j for j, i in owner.items()}


class NUMATopologyFilter(filters.BaseHostFilter):
    """Only hosts whose NUMA cells can hold the requested guest cells."""

    def prepare(self, cycle) -> Guest | None:
        """The guest's cells; None when the request has no NUMA topology."""
        spec = cycle.spec
        try:
            pinned = guest_constraints.cpu_policy(
                guest_constraints.FlavorImage.of(spec)) == "dedicated"
        except exception.NoValidHost:
            pinned = False  # a conflict nova refuses: the Placement step says so
        try:
            cells = guest_cells(spec.vcpus, spec.memory_mb, spec.extra_specs,
                                spec.image_props, implied=pinned)
            return None if cells is None else Guest(cells, pinned)
        except ValueError as err:
            raise exception.InvalidRequestSpec(
                f"NUMA topology request: {err}",
                instance_uuids=list(spec.instance_uuids)) from None

    def filter_all(self, cycle, rows):
        guest: Guest | None = cycle.prepared(self)
        if guest is None:
            return filters.everyone(rows)
        guests = guest.cells
        table, resources = cycle.table, cycle.resources
        if guest.pinned:
            cells = table.kinds.numbers(_PINNED_CELLS, _pinned_cells_row, np.float64,
                                        1 + 4 * _CELLS_MAX)
        else:
            cells = table.kinds.numbers(_CELLS, _cells_row, np.float64, 1 + 4 * _CELLS_MAX)
        if 4 * len(rows) >= table.size > 64:
            # Most of the table: every row, then the rows picked.
            cpu_ratio = 1.0 if guest.pinned else resources.ratios(VCPU)
            passes = _fit_all(guests, cells, cpu_ratio, resources.ratios(RAM)).take(rows)
        else:
            # A pinned CPU is never shared: no ratio.
            cpu_ratio = 1.0 if guest.pinned else resources.ratio(VCPU, rows)
            passes = _fit_all(guests, cells.take(rows, axis=1), cpu_ratio,
                              resources.ratio(RAM, rows))
        alone = np.flatnonzero(table.pick(cells[0], rows) == _ON_ITS_OWN)
        for i in alone.tolist():
            row = int(rows[i])
            ratios = resources.ratios_at(row)
            passes[i] = self._judge(table.states[row], guest,
                                    1.0 if guest.pinned else ratios[VCPU.name],
                                    ratios[RAM.name])
        if LOG.isEnabledFor(logging.DEBUG) and not passes.all():
            LOG.debug("%d hosts cannot hold the instance's %d NUMA cells (or have "
                      "no NUMA topology)", int((~passes).sum()), len(guests))
        return passes

    @staticmethod
    def _judge(state, guest: Guest, cpu_ratio: float, ram_ratio: float) -> bool:
        """One host, with fit() (hosts with many cells or huge figures)."""
        figures = _figures(state, guest.pinned)
        if figures is None:
            return False
        cells = [HostCell(i, *f) for i, f in enumerate(figures)]
        return fit(guest.cells, cells, cpu_ratio, ram_ratio) is not None


def _fit_all(guests: list[GuestCell], cells: np.ndarray, cpu_ratio: np.ndarray,
             ram_ratio: np.ndarray) -> np.ndarray:
    """fit() for every host at once; ``cells[k]`` holds the k-th number of
    each host's ``_cells_row``.

    Which host cells can take a guest cell is a bit mask per row, worked
    out once per distinct guest cell and host cell position. The guest
    cells fit on distinct host cells exactly when every set of them reaches
    at least as many host cells as it has members (Hall's theorem); for
    guest cells alike only the largest such set matters, so the check is a
    few mask operations per set of distinct guest cells. Rows judged on
    their own come out False here.
    """
    count = cells[0]
    hosts = len(count)
    passes = count >= len(guests)
    if len(guests) > _CELLS_MAX or not passes.any():
        return np.zeros(hosts, dtype=bool)
    kinds = sorted({(g.cpus, g.memory_mb) for g in guests})
    reach = {kind: np.zeros(hosts, dtype=np.uint8) for kind in kinds}
    for j in range(int(min(count.max(), _CELLS_MAX))):
        cpus, memory, cpu_usage, memory_usage = cells[1 + 4 * j: 5 + 4 * j]
        present = count > j
        cpu_limit = capacity.limit(cpus, cpu_ratio, 0)
        memory_limit = capacity.limit(memory, ram_ratio, 0)
        for kind in kinds:
            guest_cpus, guest_memory = kind
            takes = (present & (guest_memory <= memory) & (guest_cpus <= cpus)
                     & capacity.fits(cpu_usage, guest_cpus, cpu_limit)
                     & capacity.fits(memory_usage, guest_memory, memory_limit))
            reach[kind] |= takes.view(np.uint8) << np.uint8(j)
    members = collections.Counter((g.cpus, g.memory_mb) for g in guests)
    for chosen in range(1, 1 << len(kinds)):
        union = np.zeros(hosts, dtype=np.uint8)
        wanted = 0
        for i, kind in enumerate(kinds):
            if chosen >> i & 1:
                union |= reach[kind]
                wanted += members[kind]
        passes &= np.bitwise_count(union) >= wanted
    return passes
