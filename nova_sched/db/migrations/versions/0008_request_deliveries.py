"""Requests delivered again, counted: poison requests are given up.

A request whose handler kills the daemon comes back from the broker to
the next daemon, and the next. Each start of a redelivered request is
counted here, so that past ``[scheduler] poison_delivery_limit`` starts it
is put into ERROR and acknowledged instead of circling between daemons.

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


def downgrade() -> None:
    op.drop_table("request_deliveries")
