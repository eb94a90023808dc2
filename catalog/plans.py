"""Stored plans: each POST /v1/plans answer is kept, immutable, with its request, the catalog
version it was planned against and the deployment name it was made for, so it can be read back
by id and a deployment's plans listed newest first (for re-planning and diffs).

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from catalog.errors import NotFoundError
from catalog.models import PlanRow

#: Ids are 32 hex digits (128 random bits): unguessable and the width of the primary key column.
ID_HEX_DIGITS = 32


def new_plan_id() -> str:
    return secrets.token_hex(ID_HEX_DIGITS // 2)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredPlan:
    id: str
    name: str | None
    request: dict[str, Any]
    response: dict[str, Any]
    catalog_version: int
    created_at: datetime


def aware_utc(moment: datetime) -> datetime:
    """A stored timestamp with its UTC zone back (SQLite drops the zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def is_plan_id(plan_id: str) -> bool:
    """Whether `plan_id` has the shape `new_plan_id` issues (so nothing else reaches the database)."""
    return len(plan_id) == ID_HEX_DIGITS and all(c in "0123456789abcdef" for c in plan_id)


class Plans:
    """Plans on one session. There is no update or delete: a plan is a record of what was answered."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def save(
        self,
        *,
        plan_id: str,
        name: str | None,
        request: Mapping[str, Any],
        response: Mapping[str, Any],
        catalog_version: int,
        created_at: datetime,
    ) -> StoredPlan:
        row = PlanRow(
            id=plan_id,
            name=name,
            request=dict(request),
            response=dict(response),
            catalog_version=catalog_version,
            created_at=created_at,
        )
        self._session.add(row)
        self._session.flush()
        return self._stored(row)

    def get(self, plan_id: str) -> StoredPlan:
        """The stored plan; NotFoundError (404) for an id nobody issued."""
        row = self._session.get(PlanRow, plan_id) if is_plan_id(plan_id) else None
        if row is None:
            raise NotFoundError(f"no plan with id {plan_id!r}", kind="plan", id=plan_id)
        return self._stored(row)

    def list_by_name(self, name: str, *, limit: int = 50) -> list[StoredPlan]:
        """Plans made for deployment `name`, newest first."""
        rows = self._session.scalars(
            select(PlanRow).where(PlanRow.name == name).order_by(PlanRow.created_at.desc(), PlanRow.id).limit(limit)
        )
        return [self._stored(row) for row in rows]

    @staticmethod
    def _stored(row: PlanRow) -> StoredPlan:
        return StoredPlan(
            id=row.id,
            name=row.name,
            request=row.request,
            response=row.response,
            catalog_version=row.catalog_version,
            created_at=aware_utc(row.created_at),
        )
