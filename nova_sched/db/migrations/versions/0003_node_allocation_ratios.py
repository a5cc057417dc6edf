"""Compute nodes report their own allocation ratios.

Today's nova computes send ``cpu_allocation_ratio``, ``ram_allocation_ratio``
and ``disk_allocation_ratio`` with their reports; a node's own ratio, when
present, overrides its aggregates' and the options'. NULL means the node
sent none.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_RATIOS = ("cpu_allocation_ratio", "ram_allocation_ratio", "disk_allocation_ratio")


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        for name in _RATIOS:
            batch.add_column(sa.Column(name, sa.Double))


def downgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        for name in reversed(_RATIOS):
            batch.drop_column(name)
