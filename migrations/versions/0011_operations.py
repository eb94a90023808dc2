"""Long-running requests as operations, run by task workers.

- `operations`: one row per asynchronous request (a what-if sweep asked with `Prefer:
  respond-async`, or one estimated to run past the threshold): its kind, state (queued, running,
  succeeded, failed, cancelled), the request as sent, progress (`units_done` of `units_total`),
  the result or the problem it failed with, and whether a cancel was asked for.
- `operation_units`: the independent pieces an operation fans out into (a sweep's points), each
  with its state, result, attempts and last error, so a redelivered unit whose result is stored
  does nothing and a restarted service knows what is left. Deleting an operation deletes its units.

The downgrade drops both tables; the operations and their results are lost.

Revision ID: 0011_operations
Revises: 0010_instances_checkpoints
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_operations"
down_revision: str | None = "0010_instances_checkpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operations",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("units_total", sa.Integer(), nullable=False),
        sa.Column("units_done", sa.Integer(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("result_location", sa.String(length=200), nullable=True),
        sa.Column("problem", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operations")),
    )
    op.create_index(op.f("ix_operations_created_at"), "operations", ["created_at"])
    op.create_index(op.f("ix_operations_state"), "operations", ["state"])
    op.create_table(
        "operation_units",
        sa.Column("operation_id", sa.String(length=32), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["operation_id"], ["operations.id"], name=op.f("fk_operation_units_operation_id_operations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("operation_id", "index", name=op.f("pk_operation_units")),
    )


def downgrade() -> None:
    op.drop_table("operation_units")
    op.drop_index(op.f("ix_operations_state"), table_name="operations")
    op.drop_index(op.f("ix_operations_created_at"), table_name="operations")
    op.drop_table("operations")
