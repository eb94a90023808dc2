"""GPU efficiency blocks carry the calibration's confidence: a grade and the evidence behind it.

Six nullable columns (`efficiency_confidence_*`); a NULL grade reads as an ungraded calibration.
The upgrade grades the reference GPUs as the reference catalog of this revision does
(catalog/data/gpus.json, computed by bench/confidence.py), but only a row whose efficiencies are
still the reference values graded: a GPU whose calibration was changed is left ungraded, since
the evidence describes the reference fit, not the new one.

The downgrade drops the six columns: every GPU's grade, point and source counts, out-of-sample
error, carried-over donor and below-usual-range flag are lost (the efficiencies themselves stay).

Revision ID: 0007_calibration_confidence
Revises: 0006_gpu_prices
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_calibration_confidence"
down_revision: str | None = "0006_gpu_prices"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS: tuple[tuple[str, sa.types.TypeEngine], ...] = (
    ("efficiency_confidence_grade", sa.String(length=16)),
    ("efficiency_confidence_points", sa.Integer()),
    ("efficiency_confidence_sources", sa.Integer()),
    ("efficiency_confidence_out_of_sample_error", sa.Float()),
    ("efficiency_confidence_carried_over_from", sa.String(length=64)),
    ("efficiency_confidence_below_usual_range", sa.Boolean()),
)

#: The reference catalog's graded calibrations at this revision: slug, (η_mem, η_compute, overhead
#: ms, overlap) that were graded, (grade, points, sources, out-of-sample error, carried over from,
#: below usual range). A copy, so the migration means the same thing whatever gpus.json holds later.
REFERENCE: tuple[tuple[str, tuple[float, float, float, float], tuple[str, int, int, float | None, str | None, bool]], ...] = (
    ("a100-40gb-sxm", (0.6418, 0.778, 2.0, 0.4788), ("low", 0, 0, None, "a100-80gb-sxm", False)),
    ("a100-80gb-sxm", (0.6418, 0.778, 2.0, 0.4788), ("low", 8, 2, 0.4253, None, False)),
    ("a10g", (0.6418, 0.778, 2.0, 0.4788), ("low", 0, 0, None, "a100-80gb-sxm", False)),
    ("b200", (0.6596, 0.3437, 0.0, 0.0), ("medium", 20, 1, 0.1878, None, False)),
    ("gb200", (0.7509, 0.3216, 0.5699, 0.0), ("low", 20, 1, 0.2465, None, False)),
    ("h100-pcie", (0.7257, 0.5147, 2.0, 0.2652), ("low", 0, 0, None, "h100-sxm", False)),
    ("h100-sxm", (0.7257, 0.5147, 2.0, 0.2652), ("medium", 36, 2, 0.112, None, False)),
    ("h200", (0.8211, 0.4923, 2.0, 0.3442), ("medium", 30, 1, 0.1559, None, False)),
    ("l4", (0.8255, 0.6103, 2.0, 0.4562), ("low", 0, 0, None, "l40s", False)),
    ("l40s", (0.8255, 0.6103, 2.0, 0.4562), ("low", 6, 1, 0.2136, None, False)),
    ("mi300x", (0.3387, 0.1807, 2.0, 0.6948), ("low", 7, 2, 0.1784, None, True)),
    ("mi325x", (0.3387, 0.1807, 2.0, 0.6948), ("low", 0, 0, None, "mi300x", True)),
)

_gpus = sa.table(
    "gpus",
    sa.column("slug", sa.String()),
    sa.column("efficiency_memory", sa.Float()),
    sa.column("efficiency_compute", sa.Float()),
    sa.column("efficiency_step_overhead_ms", sa.Float()),
    sa.column("efficiency_memory_compute_overlap", sa.Float()),
    *(sa.column(name, type_) for name, type_ in _COLUMNS),
)


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        for name, type_ in _COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    for slug, (memory, compute, overhead_ms, overlap), evidence in REFERENCE:
        op.execute(
            _gpus.update()
            .where(
                _gpus.c.slug == slug,
                _gpus.c.efficiency_memory == memory,
                _gpus.c.efficiency_compute == compute,
                _gpus.c.efficiency_step_overhead_ms == overhead_ms,
                _gpus.c.efficiency_memory_compute_overlap == overlap,
            )
            .values(dict(zip((name for name, _ in _COLUMNS), evidence, strict=True)))
        )


def downgrade() -> None:
    # Batch mode: SQLite before 3.35 cannot DROP COLUMN, so Alembic copies the table there;
    # on PostgreSQL it is a plain ALTER TABLE ... DROP COLUMN.
    with op.batch_alter_table("gpus") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
