"""Which daemon process last stored a report into a row.

Every daemon re-reads the compute nodes and services whose ``changed_at``
moved. A daemon that stored a report itself applied it to its host table
before writing it, so reading it back is wasted work; at 1,000 reports a
second it was a quarter of a daemon's CPU. ``changed_by`` names the
process that stored the row's latest report (NULL after any other change:
a claim, a release, an operator's command), and a daemon's incremental
refresh skips the rows it wrote itself.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TABLES = ("compute_nodes", "services")


def upgrade() -> None:
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("changed_by", sa.String(64)))


def downgrade() -> None:
    for table in reversed(_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("changed_by")
