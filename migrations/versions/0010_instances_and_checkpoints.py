"""Whole cloud instances, and what a deployment needs to name a model and its quantization.

- `instance_types`: one row per (provider, instance name, region): the GPU it carries, how many,
  the NVLink/Infinity-Fabric domain they share, the scale-out network, vCPUs and RAM, and its
  price per instance-hour with `as_of` and `source` ("" region = the provider's list price).
  Deleting the GPU deletes its instance types.
- `models.checkpoint`: the public checkpoint id an engine loads (a Hugging Face repo id).
- `quantizations.engine_names`: per serving engine, the name that engine gives the scheme
  (e.g. {"vllm": "fp8", "trt-llm": "FP8"}), or null where the scheme has none.

The downgrade drops the table and the two columns; their contents are lost.

Revision ID: 0010_instances_checkpoints
Revises: 0009_api_key_usage
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_instances_checkpoints"
down_revision: str | None = "0009_api_key_usage"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "instance_types",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nvlink_domain", sa.Integer(), nullable=False),
        sa.Column("network_gbit_per_s", sa.Float(), nullable=True),
        sa.Column("vcpus", sa.Integer(), nullable=True),
        sa.Column("ram_gib", sa.Float(), nullable=True),
        sa.Column("on_demand_usd_per_hour", sa.Float(), nullable=False),
        sa.Column("reserved_1y_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("as_of", sa.Date(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_instance_types_gpu_id_gpus"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_types")),
        sa.UniqueConstraint("provider", "name", "region", name=op.f("uq_instance_types_provider_name_region")),
    )
    op.create_index(op.f("ix_instance_types_gpu_id"), "instance_types", ["gpu_id"])
    op.create_index(op.f("ix_instance_types_provider"), "instance_types", ["provider"])
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("checkpoint", sa.String(length=200), nullable=True))
    with op.batch_alter_table("quantizations") as batch:
        batch.add_column(sa.Column("engine_names", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("quantizations") as batch:
        batch.drop_column("engine_names")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("checkpoint")
    op.drop_index(op.f("ix_instance_types_provider"), table_name="instance_types")
    op.drop_index(op.f("ix_instance_types_gpu_id"), table_name="instance_types")
    op.drop_table("instance_types")
