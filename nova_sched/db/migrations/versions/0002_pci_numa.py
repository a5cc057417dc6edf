"""Compute nodes report PCI device pools and NUMA cells.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.add_column(sa.Column("pci_stats", sa.Text))
        batch.add_column(sa.Column("numa_topology", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("compute_nodes") as batch:
        batch.drop_column("numa_topology")
        batch.drop_column("pci_stats")
