"""GPUs carry their scale-out network per GPU: the NIC a disaggregated plan's KV cache crosses between nodes.

Until now every GPU's pools were planned over one ConnectX-7 NDR 400 Gb/s NIC per GPU across nodes
(planner/disagg.py DEFAULT_SCALE_OUT), optimistic for PCIe servers whose whole instance shares one
100–400 Gb/s network. Three nullable columns: `scale_out_gbit_per_s` (Gb/s per GPU, one direction),
`scale_out_latency_us` and `scale_out_source`. A GPU left NULL uses the planner's documented default
(and the plan says so in `transfer.link_source`).

The reference rows are seeded from the platform each GPU ships in (`REFERENCE`, cited): a copy, so
the migration means the same thing whatever catalog/data/gpus.json holds later. The seed writes
only rows whose new columns are still NULL. The downgrade drops the columns (the figures are lost;
an upgrade seeds the reference rows again).

Revision ID: 0013_scale_out_network
Revises: 0012_pcie_collectives
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_scale_out_network"
down_revision: str | None = "0012_pcie_collectives"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: RDMA latency: built for under 10 µs end to end (NVIDIA RoCE/InfiniBand docs), taken as its upper
#: bound, as planner/disagg.py's default link does; it is 0.1 % of a 10 ms transfer.
_RDMA_LATENCY_US = 10.0
#: Cloud Ethernet (AWS ENA/EFA) publishes no latency figure: NULL, the planner's default applies.

#: Per GPU: (Gb/s per GPU one direction, latency µs or None, source).
REFERENCE: tuple[tuple[str, float, float | None, str], ...] = (
    (
        "a100-40gb-sxm",
        200,
        _RDMA_LATENCY_US,
        "NVIDIA DGX A100 User Guide: eight single-port ConnectX-6 HDR 200 Gb/s for the compute fabric, one per GPU",
    ),
    (
        "a100-80gb-sxm",
        200,
        _RDMA_LATENCY_US,
        "NVIDIA DGX A100 User Guide: eight single-port ConnectX-6 HDR 200 Gb/s for the compute fabric, one per GPU",
    ),
    (
        "h100-sxm",
        400,
        _RDMA_LATENCY_US,
        (
            "NVIDIA DGX H100 User Guide §1.2.3: eight ConnectX-7 cards, one per GPU, each NDR 400 Gb/s "
            "(Azure ND H100 v5: 8 x 400G ConnectX-7 NDR InfiniBand per 8-GPU VM)"
        ),
    ),
    (
        "h200",
        400,
        _RDMA_LATENCY_US,
        "NVIDIA DGX H200 (same system board as DGX H100, User Guide §1.2.3): eight ConnectX-7 NDR 400 Gb/s, one per GPU",
    ),
    (
        "b200",
        400,
        _RDMA_LATENCY_US,
        "NVIDIA DGX B200 User Guide: eight ConnectX-7 NDR 400 Gb/s (OSFP) for the compute fabric, one per GPU",
    ),
    (
        "gb200",
        400,
        _RDMA_LATENCY_US,
        "Azure ND GB200 v6 (learn.microsoft.com ND GB200 v6 series): 4 x 400 Gb/s ConnectX-7 InfiniBand per 4-GPU VM",
    ),
    (
        "mi300x",
        400,
        _RDMA_LATENCY_US,
        (
            "Azure ND MI300X v5 series (learn.microsoft.com, nd-mi300x-v5-series): InfiniBand GPUDirect RDMA, "
            "8 x 400 Gigabit NDR per 8-GPU VM"
        ),
    ),
    (
        "l40s",
        50,
        None,
        (
            "AWS EC2 G6e (aws.amazon.com/ec2/instance-types/g6e): g6e.48xlarge, 8 x L40S, 400 Gbps network "
            "-> 400 / 8 = 50 Gb/s per GPU; latency not published (planner default)"
        ),
    ),
    (
        "l4",
        12.5,
        None,
        (
            "AWS EC2 G6 (aws.amazon.com/ec2/instance-types/g6): g6.48xlarge, 8 x L4, 100 Gbps network "
            "-> 100 / 8 = 12.5 Gb/s per GPU; latency not published (planner default)"
        ),
    ),
    (
        "a10g",
        12.5,
        None,
        (
            "AWS EC2 G5 (aws.amazon.com/ec2/instance-types/g5): g5.48xlarge, 8 x A10G, 100 Gbps network "
            "-> 100 / 8 = 12.5 Gb/s per GPU; latency not published (planner default)"
        ),
    ),
)

_gpus = sa.table(
    "gpus",
    sa.column("slug", sa.String()),
    sa.column("scale_out_gbit_per_s", sa.Float()),
    sa.column("scale_out_latency_us", sa.Float()),
    sa.column("scale_out_source", sa.Text()),
)


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("scale_out_gbit_per_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("scale_out_latency_us", sa.Float(), nullable=True))
        batch.add_column(sa.Column("scale_out_source", sa.Text(), nullable=True))
    for slug, gbit_per_s, latency_us, source in REFERENCE:
        op.execute(
            _gpus.update()
            .where(_gpus.c.slug == slug, _gpus.c.scale_out_gbit_per_s.is_(None))
            .values(scale_out_gbit_per_s=gbit_per_s, scale_out_latency_us=latency_us, scale_out_source=source)
        )


def downgrade() -> None:
    """The columns go, and every GPU's scale-out figures with them."""
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("scale_out_source")
        batch.drop_column("scale_out_latency_us")
        batch.drop_column("scale_out_gbit_per_s")
