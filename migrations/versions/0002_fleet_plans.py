"""Fleet plans: stored request and response of POST /v1/fleet-plans, with the catalog version.

Revision ID: 0002_fleet_plans
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_fleet_plans"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "fleet_plans",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.Column("catalog_version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fleet_plans")),
    )
    op.create_index(op.f("ix_fleet_plans_created_at"), "fleet_plans", ["created_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_fleet_plans_created_at"), table_name="fleet_plans")
    op.drop_table("fleet_plans")
