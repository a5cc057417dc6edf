"""The request each instance was scheduled by, without its secrets.

The broker delivers again what a dead daemon held, but a request it lost
(a non-durable queue across a broker restart) leaves instances stuck in
'scheduling'. The stuck-instance recovery reschedules such an instance
from the request stored here; ``admin_password`` and the contents of
``injected_files`` are never stored, and ``needs_secrets`` says the
request carried them, in which case the instance goes to ERROR instead.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "instance_requests",
        sa.Column("instance_uuid", sa.String(36), primary_key=True),
        sa.Column("request_spec", sa.Text, nullable=False),
        sa.Column("filter_properties", sa.Text, nullable=False),
        sa.Column("requested_networks", sa.Text),
        sa.Column("is_first_time", sa.Boolean, nullable=False),
        sa.Column("legacy_bdm_in_spec", sa.Boolean, nullable=False),
        sa.Column("needs_secrets", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime),
    )


def downgrade() -> None:
    op.drop_table("instance_requests")
