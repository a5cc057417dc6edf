"""When the scheduler cast each instance to its compute node.

A request is acknowledged to the broker only once handled, so a daemon
that dies leaves it to be delivered again. ``cast_at`` lets the next
daemon tell an instance already handed to its node (leave it) from one
only claimed (cast it to the node it holds), so that no instance is cast
twice and none is forgotten. NULL: not cast (yet, or again after a retry).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("cast_at", sa.DateTime))
    # Instances placed before this revision were cast when they were placed.
    op.execute("UPDATE instances SET cast_at = scheduled_at "
               "WHERE host IS NOT NULL AND scheduled_at IS NOT NULL")


def downgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("cast_at")
