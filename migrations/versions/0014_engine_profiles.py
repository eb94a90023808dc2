"""The serving engine becomes a dimension of the calibration: `engine_profiles` (one GPU's efficiency
per engine and engine generation) and `low_precision_factors` (per architecture, engine and datatype).

Both tables start empty: the reference data (catalog/data/engine_profiles.json, fitted by
bench/engine_profiles.py) is loaded with the reference catalog, and a database upgraded from 0013
keeps planning every GPU × engine pair on its engine-agnostic calibration (planner/engines.py's last
fallback, which the plan states) until `headroom db seed` loads the reference profiles into the empty
tables. The downgrade drops both tables.

Revision ID: 0014_engine_profiles
Revises: 0013_scale_out_network
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_engine_profiles"
down_revision: str | None = "0013_scale_out_network"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "engine_profiles",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("engine", sa.String(length=64), nullable=False),
        sa.Column("engine_generation", sa.String(length=200), nullable=False),
        sa.Column("memory", sa.Float(), nullable=False),
        sa.Column("compute", sa.Float(), nullable=False),
        sa.Column("step_overhead_ms", sa.Float(), nullable=False),
        sa.Column("memory_reserve_fraction", sa.Float(), nullable=False),
        sa.Column("memory_compute_overlap", sa.Float(), nullable=False),
        sa.Column("points", sa.Integer(), nullable=False),
        sa.Column("sources", sa.Integer(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_engine_profiles_gpu_id_gpus"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_profiles")),
        sa.UniqueConstraint(
            "gpu_id", "engine", "engine_generation", name=op.f("uq_engine_profiles_gpu_id_engine_engine_generation")
        ),
    )
    op.create_index(op.f("ix_engine_profiles_gpu_id"), "engine_profiles", ["gpu_id"], unique=False)
    op.create_table(
        "low_precision_factors",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("architecture", sa.String(length=64), nullable=False),
        sa.Column("engine", sa.String(length=64), nullable=False),
        sa.Column("datatype", sa.String(length=64), nullable=False),
        sa.Column("factor", sa.Float(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_low_precision_factors")),
        sa.UniqueConstraint(
            "architecture", "engine", "datatype", name=op.f("uq_low_precision_factors_architecture_engine_datatype")
        ),
    )


def downgrade() -> None:
    op.drop_table("low_precision_factors")
    op.drop_index(op.f("ix_engine_profiles_gpu_id"), table_name="engine_profiles")
    op.drop_table("engine_profiles")
