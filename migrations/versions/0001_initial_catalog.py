"""Initial catalog: GPUs, models, quantization schemes, efficiency profiles, API keys, catalog version.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _row_version_columns() -> list[sa.Column]:
    return [
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "gpus",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("vendor", sa.String(length=32), nullable=False),
        sa.Column("architecture", sa.String(length=32), nullable=False),
        sa.Column("memory_gb", sa.Float(), nullable=False),
        sa.Column("memory_bandwidth_gb_per_s", sa.Float(), nullable=False),
        sa.Column("peak_tflops_fp32", sa.Float(), nullable=True),
        sa.Column("peak_tflops_tf32", sa.Float(), nullable=True),
        sa.Column("peak_tflops_bf16", sa.Float(), nullable=True),
        sa.Column("peak_tflops_fp16", sa.Float(), nullable=True),
        sa.Column("peak_tflops_fp8", sa.Float(), nullable=True),
        sa.Column("peak_tflops_int8", sa.Float(), nullable=True),
        sa.Column("peak_tflops_fp4", sa.Float(), nullable=True),
        sa.Column("interconnect_gb_per_s", sa.Float(), nullable=False),
        sa.Column("interconnect_latency_us", sa.Float(), nullable=True),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("price_on_demand_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("price_reserved_1y_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("price_as_of", sa.Date(), nullable=True),
        sa.Column("price_source", sa.Text(), nullable=True),
        sa.Column("efficiency_memory", sa.Float(), nullable=True),
        sa.Column("efficiency_compute", sa.Float(), nullable=True),
        sa.Column("efficiency_step_overhead_ms", sa.Float(), nullable=True),
        sa.Column("efficiency_memory_reserve_fraction", sa.Float(), nullable=True),
        sa.Column("efficiency_source", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        *_row_version_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpus")),
        sa.UniqueConstraint("slug", name=op.f("uq_gpus_slug")),
    )
    op.create_index(op.f("ix_gpus_vendor"), "gpus", ["vendor"])
    op.create_index(op.f("ix_gpus_architecture"), "gpus", ["architecture"])

    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("params_total", sa.BigInteger(), nullable=False),
        sa.Column("params_active", sa.BigInteger(), nullable=False),
        sa.Column("layers", sa.Integer(), nullable=False),
        sa.Column("hidden_size", sa.Integer(), nullable=False),
        sa.Column("attention_heads", sa.Integer(), nullable=False),
        sa.Column("kv_heads", sa.Integer(), nullable=False),
        sa.Column("head_dim", sa.Integer(), nullable=False),
        sa.Column("intermediate_size", sa.Integer(), nullable=False),
        sa.Column("vocab_size", sa.Integer(), nullable=False),
        sa.Column("max_context_tokens", sa.Integer(), nullable=False),
        sa.Column("moe_experts", sa.Integer(), nullable=True),
        sa.Column("moe_experts_per_token", sa.Integer(), nullable=True),
        sa.Column("moe_shared_experts", sa.Integer(), nullable=True),
        sa.Column("moe_expert_params", sa.BigInteger(), nullable=True),
        sa.Column("moe_layers", sa.Integer(), nullable=True),
        sa.Column("mla_kv_lora_rank", sa.Integer(), nullable=True),
        sa.Column("mla_rope_head_dim", sa.Integer(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        *_row_version_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
        sa.UniqueConstraint("slug", name=op.f("uq_models_slug")),
    )

    op.create_table(
        "quantizations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("weight_bytes_per_param", sa.Float(), nullable=False),
        sa.Column("element_bytes", sa.Float(), nullable=False),
        sa.Column("compute_dtype", sa.String(length=16), nullable=False),
        sa.Column("kv_cache_dtypes", sa.JSON(), nullable=False),
        sa.Column("min_architecture", sa.String(length=32), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        *_row_version_columns(),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_quantizations")),
        sa.UniqueConstraint("slug", name=op.f("uq_quantizations_slug")),
    )

    op.create_table(
        "efficiency_profiles",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("model_slug", sa.String(length=64), nullable=True),
        sa.Column("weights_slug", sa.String(length=64), nullable=True),
        sa.Column("memory", sa.Float(), nullable=False),
        sa.Column("compute", sa.Float(), nullable=False),
        sa.Column("step_overhead_ms", sa.Float(), nullable=False),
        sa.Column("memory_reserve_fraction", sa.Float(), nullable=False),
        sa.Column("include_comm", sa.Boolean(), nullable=False),
        sa.Column("memory_compute_overlap", sa.Float(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=True),
        *_row_version_columns(),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_efficiency_profiles_gpu_id_gpus"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_efficiency_profiles")),
        sa.UniqueConstraint("gpu_id", "name", name=op.f("uq_efficiency_profiles_gpu_id_name")),
    )
    op.create_index(op.f("ix_efficiency_profiles_gpu_id"), "efficiency_profiles", ["gpu_id"])

    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
    )

    catalog_meta = op.create_table(
        "catalog_meta",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_meta")),
    )
    # The empty catalog is version 0; every catalog write increments it.
    op.bulk_insert(catalog_meta, [{"id": 1, "version": 0, "updated_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("catalog_meta")
    op.drop_table("api_keys")
    op.drop_index(op.f("ix_efficiency_profiles_gpu_id"), table_name="efficiency_profiles")
    op.drop_table("efficiency_profiles")
    op.drop_table("quantizations")
    op.drop_table("models")
    op.drop_index(op.f("ix_gpus_architecture"), table_name="gpus")
    op.drop_index(op.f("ix_gpus_vendor"), table_name="gpus")
    op.drop_table("gpus")
