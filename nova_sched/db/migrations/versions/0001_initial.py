"""Initial schema: every table of nova_sched.db.models at release 0.1.

Written out by hand rather than from the models so that this revision stays
what it is when the models move on. Columns that the ORM fills with a
default also get a server default, so that rows written by other tools are
whole.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# InnoDB for transactions and foreign keys; utf8mb4 so that any host or
# aggregate name fits. A String(255) index key is 1,020 bytes in utf8mb4,
# and the widest composite key here (two of them) stays under InnoDB's
# 3,072-byte limit for the DYNAMIC row format.
_MYSQL = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4"}


def _zero() -> sa.TextClause:
    return sa.text("0")


def upgrade() -> None:
    op.create_table(
        "instances",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("host", sa.String(255)),
        sa.Column("node", sa.String(255)),
        sa.Column("vm_state", sa.String(255)),
        sa.Column("task_state", sa.String(255)),
        sa.Column("memory_mb", sa.Integer),
        sa.Column("vcpus", sa.Integer),
        sa.Column("root_gb", sa.Integer),
        sa.Column("ephemeral_gb", sa.Integer),
        sa.Column("swap", sa.Integer),
        sa.Column("project_id", sa.String(255)),
        sa.Column("user_id", sa.String(255)),
        sa.Column("availability_zone", sa.String(255)),
        sa.Column("scheduled_at", sa.DateTime),
        sa.Column("launch_index", sa.Integer),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.UniqueConstraint("uuid", name="uniq_instances0uuid"),
        **_MYSQL,
    )
    op.create_index("instances_task_state_idx", "instances", ["task_state", "host"])

    op.create_table(
        "instance_faults",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.Column("code", sa.Integer, nullable=False),
        sa.Column("message", sa.Text),
        sa.Column("details", sa.Text),
        sa.Column("host", sa.String(255)),
        sa.Column("created_at", sa.DateTime),
        **_MYSQL,
    )
    op.create_index(
        "ix_instance_faults_instance_uuid", "instance_faults", ["instance_uuid"]
    )

    op.create_table(
        "instance_actions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("action", sa.String(255), nullable=False),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.Column("request_id", sa.String(255)),
        sa.Column("user_id", sa.String(255)),
        sa.Column("project_id", sa.String(255)),
        sa.Column("start_time", sa.DateTime),
        sa.Column("finish_time", sa.DateTime),
        sa.Column("message", sa.String(255)),
        **_MYSQL,
    )
    op.create_index(
        "instance_actions_uuid_request_idx",
        "instance_actions",
        ["instance_uuid", "request_id"],
    )

    op.create_table(
        "instance_actions_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "action_id",
            sa.Integer,
            sa.ForeignKey("instance_actions.id"),
            nullable=False,
        ),
        sa.Column("event", sa.String(255), nullable=False),
        sa.Column("start_time", sa.DateTime),
        sa.Column("finish_time", sa.DateTime),
        sa.Column("result", sa.String(255)),
        sa.Column("traceback", sa.Text),
        sa.Column("host", sa.String(255)),
        **_MYSQL,
    )
    op.create_index(
        "ix_instance_actions_events_action_id",
        "instance_actions_events",
        ["action_id"],
    )

    op.create_table(
        "services",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("binary", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255)),
        sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("disabled_reason", sa.String(255)),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("changed_at", sa.BigInteger, nullable=False, server_default=_zero()),
        sa.UniqueConstraint("host", "binary", name="uniq_services0host0binary"),
        **_MYSQL,
    )
    op.create_index("services_changed_at_idx", "services", ["changed_at"])

    op.create_table(
        "compute_nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("hypervisor_hostname", sa.String(255), nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column("memory_mb", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column("local_gb", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column("vcpus_used", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column(
            "memory_mb_used", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column("local_gb_used", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column("free_ram_mb", sa.Integer),
        sa.Column("free_disk_gb", sa.Integer),
        sa.Column("disk_available_least", sa.Integer),
        sa.Column("running_vms", sa.Integer),
        sa.Column("current_workload", sa.Integer),
        sa.Column("hypervisor_type", sa.String(255)),
        sa.Column("hypervisor_version", sa.BigInteger),
        sa.Column("cpu_info", sa.Text),
        sa.Column("host_ip", sa.String(64)),
        sa.Column("supported_instances", sa.Text),
        sa.Column("stats", sa.Text),
        sa.Column("metrics", sa.Text),
        sa.Column(
            "reserved_host_memory_mb", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column(
            "reserved_host_disk_mb", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column(
            "reserved_host_cpus", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column(
            "claimed_memory_mb", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column("claimed_vcpus", sa.Integer, nullable=False, server_default=_zero()),
        sa.Column(
            "claimed_disk_mb", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column(
            "claimed_instances", sa.Integer, nullable=False, server_default=_zero()
        ),
        sa.Column("deleted", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("changed_at", sa.BigInteger, nullable=False, server_default=_zero()),
        sa.UniqueConstraint(
            "host", "hypervisor_hostname", name="uniq_compute_nodes0host0node"
        ),
        **_MYSQL,
    )
    op.create_index("compute_nodes_changed_at_idx", "compute_nodes", ["changed_at"])

    op.create_table(
        "allocations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.Column(
            "compute_node_id",
            sa.Integer,
            sa.ForeignKey("compute_nodes.id"),
            nullable=False,
        ),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("disk_mb", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime),
        sa.UniqueConstraint("instance_uuid", name="uniq_allocations0instance_uuid"),
        **_MYSQL,
    )
    op.create_index(
        "ix_allocations_compute_node_id", "allocations", ["compute_node_id"]
    )

    op.create_table(
        "aggregates",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.UniqueConstraint("name", name="uniq_aggregates0name"),
        **_MYSQL,
    )

    op.create_table(
        "aggregate_hosts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "aggregate_id",
            sa.Integer,
            sa.ForeignKey("aggregates.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("host", sa.String(255), nullable=False),
        sa.UniqueConstraint(
            "aggregate_id", "host", name="uniq_aggregate_hosts0agg0host"
        ),
        **_MYSQL,
    )
    op.create_index(
        "ix_aggregate_hosts_aggregate_id", "aggregate_hosts", ["aggregate_id"]
    )

    op.create_table(
        "aggregate_metadata",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "aggregate_id",
            sa.Integer,
            sa.ForeignKey("aggregates.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
        sa.UniqueConstraint(
            "aggregate_id", "key", name="uniq_aggregate_metadata0agg0key"
        ),
        **_MYSQL,
    )
    op.create_index(
        "ix_aggregate_metadata_aggregate_id", "aggregate_metadata", ["aggregate_id"]
    )

    op.create_table(
        "instance_groups",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("uuid", sa.String(36), nullable=False),
        sa.Column("name", sa.String(255)),
        sa.Column("policy", sa.String(255)),
        sa.Column("rules", sa.Text),
        sa.Column("created_at", sa.DateTime),
        sa.UniqueConstraint("uuid", name="uniq_instance_groups0uuid"),
        **_MYSQL,
    )

    op.create_table(
        "instance_group_members",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "group_id",
            sa.Integer,
            sa.ForeignKey("instance_groups.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("instance_uuid", sa.String(36), nullable=False),
        sa.UniqueConstraint(
            "group_id", "instance_uuid", name="uniq_group_members0grp0inst"
        ),
        **_MYSQL,
    )
    op.create_index(
        "ix_instance_group_members_group_id", "instance_group_members", ["group_id"]
    )
    op.create_index(
        "ix_instance_group_members_instance_uuid",
        "instance_group_members",
        ["instance_uuid"],
    )

    counters = op.create_table(
        "change_counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False, server_default=_zero()),
        **_MYSQL,
    )
    # The row exists from the start so that bumping it is a plain UPDATE,
    # which also serialises concurrent aggregate changes on its row lock.
    op.bulk_insert(counters, [{"name": "aggregates", "value": 0}])


def downgrade() -> None:
    for table in (
        "change_counters",
        "instance_group_members",
        "instance_groups",
        "aggregate_metadata",
        "aggregate_hosts",
        "aggregates",
        "allocations",
        "compute_nodes",
        "services",
        "instance_actions_events",
        "instance_actions",
        "instance_faults",
        "instances",
    ):
        op.drop_table(table)
