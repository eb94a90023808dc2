"""GPU prices move to a table of their own, one row per (provider, GPU, region).

The upgrade creates `gpu_prices` and copies each GPU's price block into it, the provider read
from the block's source text (the first of coreweave, lambda, tensorwave, aws it names;
"unattributed" when it names none). The GPU price columns stay as a deprecated mirror of the
record API's `price_usd_per_hour` block; plans read only `gpu_prices`.

The downgrade drops `gpu_prices`: the rows of every provider other than the one a GPU's own
columns carry, and every region, reserved_3y and spot price, are lost. A GPU whose columns are
empty gets its on-demand and reserved_1y price back from one of its rows first (region-less
rows before regional ones, then by provider name), so no GPU loses its only price.

Revision ID: 0006_gpu_prices
Revises: 0005_gpu_efficiency_overlap
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0006_gpu_prices"
down_revision: str | None = "0005_gpu_efficiency_overlap"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Providers the reference catalog's sources named before this revision, by their slug.
_PROVIDER_NAMES = {"coreweave": "coreweave", "lambda": "lambda", "tensorwave": "tensorwave", "aws": "aws"}
UNATTRIBUTED = "unattributed"

_gpus = sa.table(
    "gpus",
    sa.column("id", sa.Integer()),
    sa.column("price_on_demand_usd_per_hour", sa.Float()),
    sa.column("price_reserved_1y_usd_per_hour", sa.Float()),
    sa.column("price_as_of", sa.Date()),
    sa.column("price_source", sa.Text()),
)


def provider_of(source: str | None) -> str:
    """The provider a price source names first (a derived reserved price cites AWS's discount
    after the provider's own name, so the earliest mention is the seller)."""
    text = (source or "").lower()
    found = [(text.find(name), slug) for name, slug in _PROVIDER_NAMES.items() if name in text]
    return min(found)[1] if found else UNATTRIBUTED


def upgrade() -> None:
    gpu_prices = op.create_table(
        "gpu_prices",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("gpu_id", sa.Integer(), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("on_demand_usd_per_hour", sa.Float(), nullable=False),
        sa.Column("reserved_1y_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("reserved_3y_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("spot_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("as_of", sa.Date(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], name=op.f("fk_gpu_prices_gpu_id_gpus"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gpu_prices")),
        sa.UniqueConstraint("provider", "gpu_id", "region", name=op.f("uq_gpu_prices_provider_gpu_id_region")),
    )
    op.create_index(op.f("ix_gpu_prices_gpu_id"), "gpu_prices", ["gpu_id"])
    op.create_index(op.f("ix_gpu_prices_provider"), "gpu_prices", ["provider"])

    connection = op.get_bind()
    now = datetime.now(UTC)
    priced = connection.execute(sa.select(_gpus).where(_gpus.c.price_on_demand_usd_per_hour.is_not(None))).all()
    rows = [
        {
            "provider": provider_of(gpu.price_source),
            "gpu_id": gpu.id,
            "region": "",
            "on_demand_usd_per_hour": gpu.price_on_demand_usd_per_hour,
            "reserved_1y_usd_per_hour": gpu.price_reserved_1y_usd_per_hour,
            "reserved_3y_usd_per_hour": None,
            "spot_usd_per_hour": None,
            # A price block without a date predates dated prices; the migration day is the
            # latest it can be from.
            "as_of": gpu.price_as_of or now.date(),
            "source": gpu.price_source or "price carried over from the GPU record (no source given)",
            "version": 1,
            "created_at": now,
            "updated_at": now,
        }
        for gpu in priced
    ]
    if rows:
        op.bulk_insert(gpu_prices, rows)


def downgrade() -> None:
    connection = op.get_bind()
    gpu_prices = sa.table(
        "gpu_prices",
        sa.column("provider", sa.String()),
        sa.column("gpu_id", sa.Integer()),
        sa.column("region", sa.String()),
        sa.column("on_demand_usd_per_hour", sa.Float()),
        sa.column("reserved_1y_usd_per_hour", sa.Float()),
        sa.column("as_of", sa.Date()),
        sa.column("source", sa.Text()),
    )
    unpriced = {
        gpu_id for (gpu_id,) in connection.execute(sa.select(_gpus.c.id).where(_gpus.c.price_on_demand_usd_per_hour.is_(None)))
    }
    restored: set[int] = set()
    for price in connection.execute(sa.select(gpu_prices).order_by(gpu_prices.c.region, gpu_prices.c.provider)).all():
        if price.gpu_id not in unpriced or price.gpu_id in restored:
            continue
        restored.add(price.gpu_id)
        connection.execute(
            sa.update(_gpus)
            .where(_gpus.c.id == price.gpu_id)
            .values(
                price_on_demand_usd_per_hour=price.on_demand_usd_per_hour,
                price_reserved_1y_usd_per_hour=price.reserved_1y_usd_per_hour,
                price_as_of=price.as_of,
                price_source=f"{price.provider}: {price.source}",
            )
        )
    op.drop_index(op.f("ix_gpu_prices_provider"), table_name="gpu_prices")
    op.drop_index(op.f("ix_gpu_prices_gpu_id"), table_name="gpu_prices")
    op.drop_table("gpu_prices")
