"""GPU efficiency blocks carry memory_compute_overlap (1 = max of memory and compute time, 0 = their sum).

Rows from before this revision hold NULL, which the repository reads as 1.0: the combination
every earlier calibration assumed. The one exception is a row that still carries a reference
calibration fitted with an overlap (catalog/data/gpus.json; below, `REFERENCE`): it gets that
overlap back. That is the row a downgrade to 0004 and an upgrade again would otherwise leave at
1.0, a different (and worse-fitting) performance model than the one its efficiencies were fitted
with. The rule: the slug is a reference GPU's and η_mem, η_compute and the per-step overhead are
exactly the reference fit's; a row whose calibration anyone changed stays NULL (1.0), since the
reference overlap belongs to the reference fit only.

The downgrade drops the column: every GPU's memory_compute_overlap is lost. An upgrade restores
it by the rule above; any other overlap (a calibration of your own) reads 1.0 until re-set.

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

#: The reference catalog's calibrations fitted with an overlap: slug, (η_mem, η_compute, per-step
#: overhead ms) of the fit, and its overlap. A copy, so the migration means the same thing whatever
#: gpus.json holds later.
REFERENCE: tuple[tuple[str, tuple[float, float, float], float], ...] = (
    ("a100-40gb-sxm", (0.6418, 0.778, 2.0), 0.4788),
    ("a100-80gb-sxm", (0.6418, 0.778, 2.0), 0.4788),
    ("a10g", (0.6418, 0.778, 2.0), 0.4788),
    ("b200", (0.6596, 0.3437, 0.0), 0.0),
    ("gb200", (0.7509, 0.3216, 0.5699), 0.0),
    ("h100-pcie", (0.7257, 0.5147, 2.0), 0.2652),
    ("h100-sxm", (0.7257, 0.5147, 2.0), 0.2652),
    ("h200", (0.8211, 0.4923, 2.0), 0.3442),
    ("l4", (0.8255, 0.6103, 2.0), 0.4562),
    ("l40s", (0.8255, 0.6103, 2.0), 0.4562),
    ("mi300x", (0.3387, 0.1807, 2.0), 0.6948),
    ("mi325x", (0.3387, 0.1807, 2.0), 0.6948),
)

_gpus = sa.table(
    "gpus",
    sa.column("slug", sa.String()),
    sa.column("efficiency_memory", sa.Float()),
    sa.column("efficiency_compute", sa.Float()),
    sa.column("efficiency_step_overhead_ms", sa.Float()),
    sa.column("efficiency_memory_compute_overlap", sa.Float()),
)


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("efficiency_memory_compute_overlap", sa.Float(), nullable=True))
    for slug, (memory, compute, overhead_ms), overlap in REFERENCE:
        op.execute(
            _gpus.update()
            .where(
                _gpus.c.slug == slug,
                _gpus.c.efficiency_memory == memory,
                _gpus.c.efficiency_compute == compute,
                _gpus.c.efficiency_step_overhead_ms == overhead_ms,
                _gpus.c.efficiency_memory_compute_overlap.is_(None),
            )
            .values(efficiency_memory_compute_overlap=overlap)
        )


def downgrade() -> None:
    """Drops the column: every GPU's overlap is lost (the upgrade restores the reference ones)."""
    # Batch mode: SQLite before 3.35 cannot DROP COLUMN, so Alembic copies the table there;
    # on PostgreSQL it is a plain ALTER TABLE ... DROP COLUMN.
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("efficiency_memory_compute_overlap")
