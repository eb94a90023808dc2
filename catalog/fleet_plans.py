"""Stored fleet plans: each POST /v1/fleet-plans answer is kept with its request and the catalog
version it was planned against, so it can be read back by id (JSON or CSV) exactly as sent.

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from catalog.errors import NotFoundError
from catalog.models import FleetPlanRow
from catalog.plans import aware_utc, is_plan_id, new_plan_id

#: Fleet plan ids have the same shape as plan ids (32 hex digits, 128 random bits).
new_fleet_plan_id = new_plan_id


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredFleetPlan:
    id: str
    request: dict[str, Any]
    response: dict[str, Any]
    catalog_version: int
    created_at: datetime


class FleetPlans:
    """Fleet plans on one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def save(
        self,
        *,
        plan_id: str,
        request: Mapping[str, Any],
        response: Mapping[str, Any],
        catalog_version: int,
        created_at: datetime,
    ) -> StoredFleetPlan:
        row = FleetPlanRow(
            id=plan_id,
            request=dict(request),
            response=dict(response),
            catalog_version=catalog_version,
            created_at=created_at,
        )
        self._session.add(row)
        self._session.flush()
        return self._stored(row)

    def get(self, plan_id: str) -> StoredFleetPlan:
        """The stored plan; NotFoundError (404) for an id nobody issued."""
        row = self._session.get(FleetPlanRow, plan_id) if is_plan_id(plan_id) else None
        if row is None:
            raise NotFoundError(f"no fleet plan with id {plan_id!r}", kind="fleet_plan", id=plan_id)
        return self._stored(row)

    @staticmethod
    def _stored(row: FleetPlanRow) -> StoredFleetPlan:
        return StoredFleetPlan(
            id=row.id,
            request=row.request,
            response=row.response,
            catalog_version=row.catalog_version,
            created_at=aware_utc(row.created_at),
        )
