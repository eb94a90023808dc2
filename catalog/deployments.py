"""Named deployments and idempotency keys.

A deployment is a name, the plan request it is planned (and re-planned) with, its hysteresis
settings and the id of the plan now in force; its history is every plan stored under its name
(catalog/plans.py), newest first. Idempotency keys hold the first answer to a POST so a retry
can be answered with it. Like `Catalog`, these speak plain dicts and dataclasses and the caller
owns the transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from catalog.errors import NotFoundError, VersionConflictError
from catalog.models import DeploymentRow, IdempotencyKeyRow, PlanRow
from catalog.plans import Plans, StoredPlan, aware_utc
from planner.diff import Hysteresis


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredDeployment:
    name: str
    request: dict[str, Any]
    hysteresis: dict[str, Any]
    current_plan_id: str | None
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanPage:
    items: list[StoredPlan]
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentPage:
    items: list[StoredDeployment]
    total: int


class Deployments:
    """Deployments on one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def get(self, name: str) -> StoredDeployment:
        """The deployment; NotFoundError (404) for a name nobody created."""
        return self._stored(self._row(name))

    def find(self, name: str) -> StoredDeployment | None:
        row = self._session.get(DeploymentRow, name)
        return None if row is None else self._stored(row)

    def list(self, *, limit: int = 50, offset: int = 0) -> DeploymentPage:
        """Deployments by name, one page at a time."""
        total = self._session.scalar(select(func.count()).select_from(DeploymentRow)) or 0
        rows = self._session.scalars(select(DeploymentRow).order_by(DeploymentRow.name).limit(limit).offset(offset))
        return DeploymentPage(items=[self._stored(row) for row in rows], total=total)

    def save(
        self,
        *,
        name: str,
        request: Mapping[str, Any],
        hysteresis: Mapping[str, Any],
        if_version: int | None = None,
    ) -> tuple[StoredDeployment, bool]:
        """Create the deployment or replace its settings (its plans and current plan stay);
        returns it and whether it was created. `if_version` guards an update (412 otherwise)."""
        now = datetime.now(UTC)
        if if_version is not None:
            row = self._locked_row(name)
            if row is None:
                raise NotFoundError(f"no deployment named {name!r} to update at version {if_version}", kind="deployment", id=name)
            self._check_version(row, if_version)
            created = False
        else:
            row, created = self._upsert(name, request=request, hysteresis=hysteresis, current_plan_id=None, now=now)
        if not created:
            row.request = dict(request)
            row.hysteresis = dict(hysteresis)
            row.updated_at = now
        self._session.flush()
        return self._stored(row), created

    def adopt(
        self,
        name: str,
        plan_id: str,
        *,
        request: Mapping[str, Any] | None = None,
        default_hysteresis: Mapping[str, Any] | None = None,
    ) -> StoredDeployment:
        """Make `plan_id` the deployment's current plan (creating the deployment with `request` and
        `default_hysteresis` when it does not exist; replacing its request when one is given)."""
        now = datetime.now(UTC)
        if request is None:
            row = self._locked_row(name)
            if row is None:
                raise NotFoundError(f"no deployment named {name!r}", kind="deployment", id=name)
            created = False
        else:
            row, created = self._upsert(
                name, request=request, hysteresis=default_hysteresis or {}, current_plan_id=plan_id, now=now
            )
        if not created:
            row.current_plan_id = plan_id
            if request is not None:
                row.request = dict(request)
            row.updated_at = now
        self._session.flush()
        return self._stored(row)

    def record_named_plan(self, name: str | None, plan_id: str, request: Mapping[str, Any]) -> None:
        """A plan made with a deployment `name` (POST /v1/plans) becomes its current plan; the first one
        creates the deployment with `request` (less its name) and the default hysteresis."""
        if name is not None:
            template = {key: value for key, value in request.items() if key != "name"}
            self.adopt(name, plan_id, request=template, default_hysteresis=asdict(Hysteresis()))

    def update_request(self, name: str, request: Mapping[str, Any]) -> StoredDeployment:
        """Replace the request the deployment is re-planned with (the newest forecast), plan unchanged."""
        row = self._row(name)
        row.request = dict(request)
        row.updated_at = datetime.now(UTC)
        self._session.flush()
        return self._stored(row)

    def history(self, name: str, *, limit: int = 50, offset: int = 0) -> PlanPage:
        """Plans stored under the deployment's name, newest first; 404 for an unknown deployment."""
        self._row(name)
        total = self._session.scalar(select(func.count()).select_from(PlanRow).where(PlanRow.name == name)) or 0
        rows = self._session.scalars(
            select(PlanRow)
            .where(PlanRow.name == name)
            .order_by(PlanRow.created_at.desc(), PlanRow.id)
            .limit(limit)
            .offset(offset)
        )
        return PlanPage(items=[Plans(self._session).get(row.id) for row in rows], total=total)

    def _locked_row(self, name: str) -> DeploymentRow | None:
        """The row, read afresh and locked until the transaction ends (PostgreSQL: a concurrent
        writer waits here and then sees the winner's version, so an unconditional write never
        trips over a version it did not ask for; SQLite serialises writers anyway)."""
        return self._session.scalar(
            select(DeploymentRow).where(DeploymentRow.name == name).with_for_update().execution_options(populate_existing=True)
        )

    def _upsert(
        self, name: str, *, request: Mapping[str, Any], hysteresis: Mapping[str, Any], current_plan_id: str | None, now: datetime
    ) -> tuple[DeploymentRow, bool]:
        """The deployment's row, locked, created with these values if nobody has (then True).
        The insert comes first and does nothing on a name taken meanwhile, so two writers creating
        one name both succeed (the later one updates) instead of the later one failing on the key;
        on SQLite it also takes the write lock before the row is read."""
        insert = postgresql_insert if self._session.get_bind().dialect.name == "postgresql" else sqlite_insert
        result = self._session.execute(
            insert(cast(Table, DeploymentRow.__table__))
            .values(
                name=name,
                request=dict(request),
                hysteresis=dict(hysteresis),
                current_plan_id=current_plan_id,
                version=1,
                created_at=now,
                updated_at=now,
            )
            .on_conflict_do_nothing(index_elements=["name"])
            .returning(DeploymentRow.__table__.c.name)
        )
        created = result.first() is not None  # a row comes back only from an insert that happened
        row = self._locked_row(name)
        if row is None:
            raise NotFoundError(f"no deployment named {name!r}", kind="deployment", id=name)
        return row, created

    def _row(self, name: str) -> DeploymentRow:
        row = self._session.get(DeploymentRow, name)
        if row is None:
            raise NotFoundError(f"no deployment named {name!r}", kind="deployment", id=name)
        return row

    @staticmethod
    def _check_version(row: DeploymentRow, if_version: int | None) -> None:
        if if_version is not None and row.version != if_version:
            raise VersionConflictError(
                f"deployment {row.name!r} is at version {row.version}, not {if_version}: read it again and retry",
                current_version=row.version,
            )

    @staticmethod
    def _stored(row: DeploymentRow) -> StoredDeployment:
        return StoredDeployment(
            name=row.name,
            request=row.request,
            hysteresis=row.hysteresis,
            current_plan_id=row.current_plan_id,
            version=row.version,
            created_at=aware_utc(row.created_at),
            updated_at=aware_utc(row.updated_at),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredAnswer:
    """A request sent with an idempotency key: its first answer, or `status` None while in progress."""

    scope: str
    key: str
    request_hash: str
    method: str
    path: str
    claim_token: str
    status: int | None
    headers: dict[str, str]
    body: str
    created_at: datetime


class IdempotencyKeys:
    """Idempotency keys on one session, per caller `scope`. A key is claimed (an in-progress row,
    flushed) before its request's work starts and answered in the work's transaction; rows created
    before `since` (the idempotency window) count as absent. A concurrent claim of the same key
    surfaces in `claim` as sqlalchemy's IntegrityError."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def find(self, scope: str, key: str, *, since: datetime) -> StoredAnswer | None:
        row = self._session.get(IdempotencyKeyRow, (scope, key), populate_existing=True)
        return None if row is None or aware_utc(row.created_at) < since else self._stored(row)

    def claim(
        self, *, scope: str, key: str, request_hash: str, method: str, path: str, claim_token: str, since: datetime
    ) -> StoredAnswer | None:
        """The live row for the key if there is one; else claim it (expired rows, this key's included,
        removed first: only expired ones, as a claim made since the lookup must stand) and return None."""
        if (stored := self.find(scope, key, since=since)) is not None:
            return stored
        self._session.execute(delete(IdempotencyKeyRow).where(IdempotencyKeyRow.created_at < since))
        self._session.add(
            IdempotencyKeyRow(
                scope=scope,
                key=key,
                request_hash=request_hash,
                method=method,
                path=path,
                claim_token=claim_token,
                created_at=datetime.now(UTC),
            )
        )
        self._session.flush()
        return None

    def take_over(self, stored: StoredAnswer, *, claim_token: str) -> bool:
        """Claim a key whose claimer is gone (its claim outlived any request); False if it moved on meanwhile."""
        result = self._session.execute(
            update(IdempotencyKeyRow)
            .where(
                IdempotencyKeyRow.scope == stored.scope,
                IdempotencyKeyRow.key == stored.key,
                IdempotencyKeyRow.claim_token == stored.claim_token,
                IdempotencyKeyRow.response_status.is_(None),
            )
            .values(claim_token=claim_token, created_at=datetime.now(UTC))
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def answer(self, *, scope: str, key: str, claim_token: str, status: int, headers: Mapping[str, str], body: str) -> bool:
        """Store the claimed key's answer; False when the claim is no longer this claimer's."""
        result = self._session.execute(
            update(IdempotencyKeyRow)
            .where(
                IdempotencyKeyRow.scope == scope,
                IdempotencyKeyRow.key == key,
                IdempotencyKeyRow.claim_token == claim_token,
                IdempotencyKeyRow.response_status.is_(None),
            )
            .values(response_status=status, response_headers=dict(headers), response_body=body)
            .execution_options(synchronize_session=False)
        )
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]

    def release(self, *, scope: str, key: str, claim_token: str) -> None:
        """Drop an unanswered claim (its request failed), so a retry runs again."""
        self._session.execute(
            delete(IdempotencyKeyRow)
            .where(
                IdempotencyKeyRow.scope == scope,
                IdempotencyKeyRow.key == key,
                IdempotencyKeyRow.claim_token == claim_token,
                IdempotencyKeyRow.response_status.is_(None),
            )
            .execution_options(synchronize_session=False)
        )

    @staticmethod
    def _stored(row: IdempotencyKeyRow) -> StoredAnswer:
        return StoredAnswer(
            scope=row.scope,
            key=row.key,
            request_hash=row.request_hash,
            method=row.method,
            path=row.path,
            claim_token=row.claim_token,
            status=row.response_status,
            headers=dict(row.response_headers or {}),
            body=row.response_body or "",
            created_at=aware_utc(row.created_at),
        )
