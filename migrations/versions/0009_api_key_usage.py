"""API keys record when they were last used and when they were revoked.

`api_keys` gets two nullable columns: `last_used_at` (written at most once a minute per key) and
`revoked_at` (a revoked key stays listed and answers 401). Existing keys stay valid and unused.
The downgrade drops both columns and deletes the revoked keys, which the old schema could not
tell from valid ones.

Revision ID: 0009_api_key_usage
Revises: 0008_idempotency_scope
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_api_key_usage"
down_revision: str | None = "0008_idempotency_scope"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM api_keys WHERE revoked_at IS NOT NULL")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("revoked_at")
        batch.drop_column("last_used_at")
