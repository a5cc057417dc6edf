"""The count of operators' changes to what decisions read.

A row of ``change_counters`` that every aggregate and service change bumps
(``db.operator_changes``): a claim decided on a host table that has not
read the latest of them is refused and decided again.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op
import sqlalchemy as sa

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COUNTERS = sa.table("change_counters", sa.column("name", sa.String),
                     sa.column("value", sa.BigInteger))


def upgrade() -> None:
    # Present from the start, so that a bump is a plain UPDATE whose row
    # lock serialises concurrent changes.
    op.bulk_insert(_COUNTERS, [{"name": "operator_changes", "value": 0}])


def downgrade() -> None:
    op.execute(_COUNTERS.delete().where(_COUNTERS.c.name == "operator_changes"))
