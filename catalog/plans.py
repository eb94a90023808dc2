"""Stored plans: each POST /v1/plans answer is kept, immutable, with its request, the catalog
version it was planned against and the deployment name it was made for, so it can be read back
by id, a deployment's plans listed newest first (for re-planning and diffs) and every stored plan
listed a page at a time (GET /v1/plans, the explorer's table). The store is the stored-document
store (catalog/documents.py) on the plans table.

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select

from catalog.documents import ID_HEX_DIGITS, DocumentStore, StoredDocument, aware_utc, is_document_id, new_document_id
from catalog.models import PlanRow

__all__ = ["ID_HEX_DIGITS", "PlanPage", "Plans", "StoredPlan", "aware_utc", "is_plan_id", "new_plan_id"]

#: A stored plan: its `name` is the deployment it was made for (None for none).
StoredPlan = StoredDocument
new_plan_id = new_document_id
is_plan_id = is_document_id


@dataclass(frozen=True, slots=True)
class PlanPage:
    """One page of stored plans and how many match the filters on all pages."""

    items: list[StoredPlan]
    total: int


class Plans(DocumentStore[PlanRow]):
    """Plans on one session. There is no update or delete: a plan is a record of what was answered."""

    row_type = PlanRow
    kind = "plan"
    label = "plan"

    def list_by_name(self, name: str, *, limit: int = 50) -> list[StoredPlan]:
        """Plans made for deployment `name`, newest first."""
        rows = self._session.scalars(
            select(PlanRow).where(PlanRow.name == name).order_by(PlanRow.created_at.desc(), PlanRow.id).limit(limit)
        )
        return [self._stored(row) for row in rows]

    def list_plans(self, *, name: str | None = None, model: str | None = None, limit: int = 50, offset: int = 0) -> PlanPage:
        """Stored plans newest first (ties by id, so pages never overlap), only those made for deployment
        `name` and/or of catalog model `model` when given. The model is read from the stored request
        (SQLite's json_extract, PostgreSQL's ->>), so no column or migration is needed for it."""
        if any("\x00" in value for value in (name, model) if value is not None):  # PostgreSQL refuses NUL in text
            return PlanPage(items=[], total=0)
        filters = [PlanRow.name == name] if name is not None else []
        filters += [PlanRow.request["model"].as_string() == model] if model is not None else []
        total = self._session.scalar(select(func.count()).select_from(PlanRow).where(*filters)) or 0
        rows = self._session.scalars(
            select(PlanRow).where(*filters).order_by(PlanRow.created_at.desc(), PlanRow.id).limit(limit).offset(offset)
        )
        return PlanPage(items=[self._stored(row) for row in rows], total=total)
