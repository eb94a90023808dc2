"""Stored plans: each POST /v1/plans answer is kept, immutable, with its request, the catalog
version it was planned against and the deployment name it was made for, so it can be read back
by id and a deployment's plans listed newest first (for re-planning and diffs). The store is the
stored-document store (catalog/documents.py) on the plans table.

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

from sqlalchemy import select

from catalog.documents import ID_HEX_DIGITS, DocumentStore, StoredDocument, aware_utc, is_document_id, new_document_id
from catalog.models import PlanRow

__all__ = ["ID_HEX_DIGITS", "Plans", "StoredPlan", "aware_utc", "is_plan_id", "new_plan_id"]

#: A stored plan: its `name` is the deployment it was made for (None for none).
StoredPlan = StoredDocument
new_plan_id = new_document_id
is_plan_id = is_document_id


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
