"""Requests delivered again, counted; claims that know their own writer.

A request whose handler kills the daemon comes back from the broker to
the next daemon, and the next. Each start of a redelivered request is
counted here, so that past ``[scheduler] poison_delivery_limit`` starts it
is put into ERROR and acknowledged instead of circling between daemons.

``allocations.claim_token`` names the claim call that wrote the row: on a
Galera cluster a COMMIT can be lost with its node and still have
committed, and the claim run again must find its own row rather than
take the instance for one placed by somebody else.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "request_deliveries",
        sa.Column("message_id", sa.String(64), primary_key=True),
        sa.Column("method", sa.String(64)),
        sa.Column("starts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_token", sa.String(96)),
        sa.Column("last_host", sa.String(255)),
        sa.Column("first_started_at", sa.DateTime),
        sa.Column("last_started_at", sa.DateTime),
    )
    with op.batch_alter_table("allocations") as batch:
        batch.add_column(sa.Column("claim_token", sa.String(32)))


def downgrade() -> None:
    with op.batch_alter_table("allocations") as batch:
        batch.drop_column("claim_token")
    op.drop_table("request_deliveries")
