"""Compute node uuids and the cell's uuid, for today's nova (API 4.x).

Today's nova names a compute node by its uuid (a ``Selection`` carries
``compute_node_uuid``) and a cell by its uuid. A node's uuid is the one its
report sends; a node that sends none gets one derived from its host and
node names (``db.node_uuids.for_node``), the same in every daemon and
kept in the row. The cell's uuid, used where ``[scheduler] cell_uuid`` is
not set, is generated here once and kept in ``settings``.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import uuid

from alembic import op
import sqlalchemy as sa

from nova_sched.db import node_uuids

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.add_column(sa.Column("uuid", sa.String(36)))
    nodes = sa.table("compute_nodes", sa.column("id", sa.Integer),
                     sa.column("host", sa.String), sa.column("hypervisor_hostname", sa.String),
                     sa.column("uuid", sa.String))
    conn = op.get_bind()
    rows = conn.execute(sa.select(nodes.c.id, nodes.c.host,
                                  nodes.c.hypervisor_hostname)).all()
    for node_id, host, nodename in rows:
        conn.execute(nodes.update().where(nodes.c.id == node_id).values(
            uuid=node_uuids.for_node(host, nodename)))
    settings = op.create_table(
        "settings",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
    op.bulk_insert(settings, [{"key": "cell_uuid", "value": str(uuid.uuid4())}])


def downgrade() -> None:
    op.drop_table("settings")
    with op.batch_alter_table("compute_nodes") as batch:
        batch.drop_column("uuid")
