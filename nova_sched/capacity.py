"""Havana's capacity arithmetic, written once for the decision and the claim.

A node can hold instances up to ``total x allocation_ratio - reserved`` of
each resource; an instance fits when ``claimed + requested`` stays within
that limit. The same two expressions serve the decision, over NumPy
columns, and the claim guard, over SQLAlchemy columns (the database
evaluates them under its row lock), so what a filter passes is what a claim
on an idle node accepts.

Which ratio applies to a node (its own, its aggregates', the option) is the
scheduler's business (``nova_sched.scheduler.cloud.resources``); this module only
knows the arithmetic and the names of each resource's figures.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Resource:
    """One kind of resource a claim takes and the names of its figures."""

    # Short name used in claims, ratios and the demo's report.
    name: str
    # The option in [filter_scheduler] with the cloud-wide ratio; also the
    # aggregate metadata key, the compute report's key and the
    # compute_nodes column holding the node's own ratio.
    ratio_option: str
    # The filter whose being enabled lets aggregates set the ratio.
    aggregate_filter: str
    # The key of nova's ``limits`` dict sent to the compute node.
    limit_key: str


RAM = Resource("ram", "ram_allocation_ratio", "AggregateRamFilter", "memory_mb")
VCPU = Resource("vcpu", "cpu_allocation_ratio", "AggregateCoreFilter", "vcpu")
DISK = Resource("disk", "disk_allocation_ratio", "AggregateDiskFilter", "disk_gb")
RESOURCES = (RAM, VCPU, DISK)


def limit(total, ratio, reserved):
    """What a node can hand out: ``total x ratio - reserved``."""
    return total * ratio - reserved


def fits(claimed, requested, node_limit):
    """Whether ``requested`` more stays within the node's limit."""
    return claimed + requested <= node_limit
