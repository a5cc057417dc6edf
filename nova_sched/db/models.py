"""SQLAlchemy models of the tables of CONTRACT section 4, plus the scheduler's own.

The contract tables keep nova's column names so that operators and tests can
read them directly. The scheduler's own additions: ``allocations`` (the
claims, as nova's Placement keeps them), ``aggregates`` and their hosts and
metadata, and on ``compute_nodes`` the running totals of the claims plus a
``changed_at`` stamp that lets every daemon read only the rows that changed
since it last looked.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Instance(Base):
    __tablename__ = "instances"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, nullable=False)
    host: Mapped[str | None] = mapped_column(String(255))
    node: Mapped[str | None] = mapped_column(String(255))
    vm_state: Mapped[str | None] = mapped_column(String(255))
    task_state: Mapped[str | None] = mapped_column(String(255))
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    vcpus: Mapped[int | None] = mapped_column(Integer)
    root_gb: Mapped[int | None] = mapped_column(Integer)
    ephemeral_gb: Mapped[int | None] = mapped_column(Integer)
    swap: Mapped[int | None] = mapped_column(Integer)
    project_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    scheduled_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # Set when the compute cast is sent (migration 0004): see db/instances.
    cast_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    launch_index: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)

    __table_args__ = (Index("instances_task_state_idx", "task_state", "host"),)


class InstanceRequest(Base):
    """The request an instance was scheduled by, secrets left out (0006)."""

    __tablename__ = "instance_requests"

    instance_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    request_spec: Mapped[str] = mapped_column(Text, nullable=False)
    filter_properties: Mapped[str] = mapped_column(Text, nullable=False)
    requested_networks: Mapped[str | None] = mapped_column(Text)
    is_first_time: Mapped[bool] = mapped_column(Boolean, nullable=False)
    legacy_bdm_in_spec: Mapped[bool] = mapped_column(Boolean, nullable=False)
    needs_secrets: Mapped[bool] = mapped_column(Boolean, nullable=False)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class InstanceFault(Base):
    __tablename__ = "instance_faults"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    code: Mapped[int] = mapped_column(Integer)
    message: Mapped[str | None] = mapped_column(Text)
    details: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class InstanceAction(Base):
    __tablename__ = "instance_actions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    action: Mapped[str] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36))
    request_id: Mapped[str | None] = mapped_column(String(255))
    user_id: Mapped[str | None] = mapped_column(String(255))
    project_id: Mapped[str | None] = mapped_column(String(255))
    start_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    message: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        Index("instance_actions_uuid_request_idx", "instance_uuid", "request_id"),
    )


class InstanceActionEvent(Base):
    __tablename__ = "instance_actions_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    action_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("instance_actions.id"), index=True
    )
    event: Mapped[str] = mapped_column(String(255))
    start_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    finish_time: Mapped[dt.datetime | None] = mapped_column(DateTime)
    result: Mapped[str | None] = mapped_column(String(255))
    traceback: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))


class Service(Base):
    __tablename__ = "services"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    binary: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str | None] = mapped_column(String(255))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    changed_at: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
    # The process whose report was the row's last change (migration 0005).
    changed_by: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        UniqueConstraint("host", "binary", name="uniq_services0host0binary"),
        Index("services_changed_at_idx", "changed_at"),
    )


class ComputeNode(Base):
    __tablename__ = "compute_nodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    hypervisor_hostname: Mapped[str] = mapped_column(String(255))
    # The node's uuid (today's nova's compute_node_uuid; db.node_uuids).
    uuid: Mapped[str | None] = mapped_column(String(36))
    vcpus: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    local_gb: Mapped[int] = mapped_column(Integer, default=0)
    vcpus_used: Mapped[int] = mapped_column(Integer, default=0)
    memory_mb_used: Mapped[int] = mapped_column(Integer, default=0)
    local_gb_used: Mapped[int] = mapped_column(Integer, default=0)
    free_ram_mb: Mapped[int | None] = mapped_column(Integer)
    free_disk_gb: Mapped[int | None] = mapped_column(Integer)
    disk_available_least: Mapped[int | None] = mapped_column(Integer)
    running_vms: Mapped[int | None] = mapped_column(Integer)
    current_workload: Mapped[int | None] = mapped_column(Integer)
    hypervisor_type: Mapped[str | None] = mapped_column(String(255))
    hypervisor_version: Mapped[int | None] = mapped_column(BigInteger)
    cpu_info: Mapped[str | None] = mapped_column(Text)
    host_ip: Mapped[str | None] = mapped_column(String(64))
    supported_instances: Mapped[str | None] = mapped_column(Text)
    stats: Mapped[str | None] = mapped_column(Text)
    metrics: Mapped[str | None] = mapped_column(Text)
    # JSON lists the node reports for PciPassthroughFilter and
    # NUMATopologyFilter (pools of devices; NUMA cells).
    pci_stats: Mapped[str | None] = mapped_column(Text)
    numa_topology: Mapped[str | None] = mapped_column(Text)
    reserved_host_memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    reserved_host_disk_mb: Mapped[int] = mapped_column(Integer, default=0)
    reserved_host_cpus: Mapped[int] = mapped_column(Integer, default=0)
    # The node's own allocation ratios, when its report carries them (as
    # today's nova computes send them); NULL: the scheduler decides
    # (scheduler.cloud.resources). A double, so a ratio such as 1.1 is read back
    # exactly as reported.
    cpu_allocation_ratio: Mapped[float | None] = mapped_column(Double)
    ram_allocation_ratio: Mapped[float | None] = mapped_column(Double)
    disk_allocation_ratio: Mapped[float | None] = mapped_column(Double)
    # Running totals of the allocations held on this node. Kept in the row
    # so that a claim is one conditional UPDATE, atomic on every backend.
    claimed_memory_mb: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    claimed_vcpus: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    claimed_disk_mb: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    claimed_instances: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    deleted: Mapped[bool] = mapped_column(Boolean, default=False, nullable=False)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # Microseconds since the epoch of the last change of any kind (report,
    # claim, release, delete): daemons refresh their cache from rows whose
    # stamp is newer than what they have seen.
    changed_at: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)
    # The process whose report was the row's last change (migration 0005).
    changed_by: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        UniqueConstraint(
            "host", "hypervisor_hostname", name="uniq_compute_nodes0host0node"
        ),
        Index("compute_nodes_changed_at_idx", "changed_at"),
    )


class Allocation(Base):
    """One instance's claim on one compute node."""

    __tablename__ = "allocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(36), unique=True)
    compute_node_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("compute_nodes.id"), index=True
    )
    memory_mb: Mapped[int] = mapped_column(Integer)
    vcpus: Mapped[int] = mapped_column(Integer)
    disk_mb: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    # Names the claim call that wrote the row: a claim run again after a
    # COMMIT whose outcome was lost finds its own row and stops there.
    claim_token: Mapped[str | None] = mapped_column(String(32))


class Aggregate(Base):
    __tablename__ = "aggregates"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class AggregateHost(Base):
    __tablename__ = "aggregate_hosts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    aggregate_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("aggregates.id", ondelete="CASCADE"), index=True
    )
    host: Mapped[str] = mapped_column(String(255))

    __table_args__ = (
        UniqueConstraint("aggregate_id", "host", name="uniq_aggregate_hosts0agg0host"),
    )


class AggregateMetadata(Base):
    __tablename__ = "aggregate_metadata"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    aggregate_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("aggregates.id", ondelete="CASCADE"), index=True
    )
    key: Mapped[str] = mapped_column(String(255))
    value: Mapped[str] = mapped_column(String(255))

    __table_args__ = (
        UniqueConstraint("aggregate_id", "key", name="uniq_aggregate_metadata0agg0key"),
    )


class InstanceGroup(Base):
    """A server group: its policy decides the affinity filters' verdicts."""

    __tablename__ = "instance_groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    name: Mapped[str | None] = mapped_column(String(255))
    policy: Mapped[str | None] = mapped_column(String(255))
    rules: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime | None] = mapped_column(DateTime)


class InstanceGroupMember(Base):
    __tablename__ = "instance_group_members"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    group_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("instance_groups.id", ondelete="CASCADE"), index=True
    )
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)

    __table_args__ = (
        UniqueConstraint("group_id", "instance_uuid", name="uniq_group_members0grp0inst"),
    )


class ChangeCounter(Base):
    """A per-table stamp that tells daemons when small tables changed.

    Aggregates are few and change rarely; daemons reload them whole when
    the 'aggregates' stamp moves instead of tracking row changes.
    """

    __tablename__ = "change_counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0, nullable=False)


class Setting(Base):
    """Deployment-wide values kept in the database (the cell's uuid)."""

    __tablename__ = "settings"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class RequestDelivery(Base):
    """A request a daemon began to handle after the broker delivered it
    again, and how often: the count that tells a poison request (one that
    kills every daemon that handles it) from one a crash merely returned.
    The row goes once the request is handled."""

    __tablename__ = "request_deliveries"

    message_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    method: Mapped[str | None] = mapped_column(String(64))
    starts: Mapped[int] = mapped_column(Integer, default=0, nullable=False)
    # The last start's token: a start retried after an ambiguous COMMIT is
    # not counted twice.
    last_token: Mapped[str | None] = mapped_column(String(96))
    last_host: Mapped[str | None] = mapped_column(String(255))
    first_started_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
    last_started_at: Mapped[dt.datetime | None] = mapped_column(DateTime)
