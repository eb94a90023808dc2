"""GPU efficiency blocks carry memory_compute_overlap (1 = max of memory and compute time, 0 = their sum).

Rows from before this revision hold NULL, which the repository reads as 1.0: the combination
every earlier calibration assumed.

Revision ID: 0005_gpu_efficiency_overlap
Revises: 0004_deployments
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_gpu_efficiency_overlap"
down_revision: str | None = "0004_deployments"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("efficiency_memory_compute_overlap", sa.Float(), nullable=True))


def downgrade() -> None:
    # Batch mode: SQLite before 3.35 cannot DROP COLUMN, so Alembic copies the table there;
    # on PostgreSQL it is a plain ALTER TABLE ... DROP COLUMN.
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("efficiency_memory_compute_overlap")
