"""Stored documents: answers kept immutable with their request and the catalog version they were
planned against, read back by id exactly as sent. Plans (catalog/plans.py) and fleet plans
(catalog/fleet_plans.py) are both such documents and differ only in their table, their 404's
wording and, for plans, the deployment name a plan was made for; so one store serves both,
parameterised by its row type.

Like `Catalog`, this speaks plain dicts and the caller owns the transaction.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from sqlalchemy.orm import Session

from catalog.errors import NotFoundError

#: Ids are 32 hex digits (128 random bits): unguessable and the width of the primary key column.
ID_HEX_DIGITS = 32


def new_document_id() -> str:
    return secrets.token_hex(ID_HEX_DIGITS // 2)


def is_document_id(document_id: str) -> bool:
    """Whether `document_id` has the shape `new_document_id` issues (so nothing else reaches the database)."""
    return len(document_id) == ID_HEX_DIGITS and all(c in "0123456789abcdef" for c in document_id)


def aware_utc(moment: datetime) -> datetime:
    """A stored timestamp with its UTC zone back (SQLite drops the zone)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class DocumentRow(Protocol):
    """The columns every stored-document table has (catalog.models.PlanRow, FleetPlanRow)."""

    id: Any
    request: Any
    response: Any
    catalog_version: Any
    created_at: Any


RowT = TypeVar("RowT", bound=DocumentRow)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredDocument:
    """One stored answer. `name` is the deployment a plan was made for; None for a plan made for
    none and for every fleet plan (their table has no such column)."""

    id: str
    request: dict[str, Any]
    response: dict[str, Any]
    catalog_version: int
    created_at: datetime
    name: str | None = None


class DocumentStore(Generic[RowT]):
    """The documents of one table on one session. There is no update or delete: a document is a
    record of what was answered. Subclasses name the row type and what a 404 calls the document."""

    row_type: ClassVar[type[Any]]
    #: The problem's `kind` and the 404's wording, e.g. ("plan", "plan").
    kind: ClassVar[str]
    label: ClassVar[str]

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
        **columns: Any,
    ) -> StoredDocument:
        """Store one document; `columns` are the table's own further columns (a plan's `name`)."""
        row = self.row_type(
            id=plan_id,
            request=dict(request),
            response=dict(response),
            catalog_version=catalog_version,
            created_at=created_at,
            **columns,
        )
        self._session.add(row)
        self._session.flush()
        return self._stored(row)

    def get(self, plan_id: str) -> StoredDocument:
        """The stored document; NotFoundError (404) for an id nobody issued."""
        row = self._session.get(self.row_type, plan_id) if is_document_id(plan_id) else None
        if row is None:
            raise NotFoundError(f"no {self.label} with id {plan_id!r}", kind=self.kind, id=plan_id)
        return self._stored(row)

    @staticmethod
    def _stored(row: DocumentRow) -> StoredDocument:
        return StoredDocument(
            id=row.id,
            name=getattr(row, "name", None),
            request=row.request,
            response=row.response,
            catalog_version=row.catalog_version,
            created_at=aware_utc(row.created_at),
        )
