"""Stored fleet plans: each POST /v1/fleet-plans answer is kept with its request and the catalog
version it was planned against, so it can be read back by id (JSON or CSV) exactly as sent. The
store is the stored-document store (catalog/documents.py) on the fleet plans table.

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

from catalog.documents import DocumentStore, StoredDocument, new_document_id
from catalog.models import FleetPlanRow

__all__ = ["FleetPlans", "StoredFleetPlan", "new_fleet_plan_id"]

#: Fleet plan ids have the same shape as plan ids (32 hex digits, 128 random bits).
new_fleet_plan_id = new_document_id
#: A stored fleet plan (its `name` is always None: fleet plans belong to no deployment).
StoredFleetPlan = StoredDocument


class FleetPlans(DocumentStore[FleetPlanRow]):
    """Fleet plans on one session."""

    row_type = FleetPlanRow
    kind = "fleet_plan"
    label = "fleet plan"
