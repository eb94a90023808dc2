"""API keys: issue one (shown once, only the SHA-256 of its secret stored), authenticate a presented
key, list keys with when each was last used, and revoke one (it answers 401 from the next request)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast, overload

from sqlalchemy import Engine, Table, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from catalog.errors import InvalidRecordError
from catalog.models import ApiKeyRow
from catalog.records import API_KEY_ROLES

_API_KEY_PATTERN = re.compile(r"^hr_([0-9a-f]{16})_([A-Za-z0-9_-]{20,})$")
#: `last_used_at` is written at most once per key in this interval: a busy key costs one short
#: write a minute, not one per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredApiKey:
    """A key as an administrator sees it: never its secret."""

    id: str
    role: str
    created_at: datetime  # always aware (UTC)
    last_used_at: datetime | None
    revoked_at: datetime | None

    @property
    def prefix(self) -> str:
        """What the key itself starts with (`hr_<id>_`), to recognise it in a vault or a config file."""
        return f"hr_{self.id}_"


def _secret_sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_id_of(text: str) -> str:
    """The key id in `text`: a whole key, its prefix `hr_<id>` (with or without the `_`) or the bare id."""
    parts = text.strip().split("_")
    return parts[1] if len(parts) >= 2 and parts[0] == "hr" else text.strip()


class ApiKeys:
    """The API keys on one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def create(self, role: str) -> str:
        """A new key `hr_<key id>_<secret>` for `role` (admin, planner or reader). Only the SHA-256
        of the secret is stored: the returned plaintext is the only copy."""
        if role not in API_KEY_ROLES:
            raise InvalidRecordError(
                f"unknown role {role!r}",
                errors=[{"field": "role", "message": f"must be one of {', '.join(API_KEY_ROLES)}"}],
            )
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        self._session.add(ApiKeyRow(id=key_id, secret_sha256=_secret_sha256(secret), role=role, created_at=datetime.now(UTC)))
        self._session.flush()
        return f"hr_{key_id}_{secret}"

    def role_for_key(self, key: str, *, record_use: bool = False) -> str | None:
        """The role of a valid, unrevoked key, or None (malformed, unknown, wrong secret, revoked).
        The secret's hash is compared in constant time. `record_use` notes the use in `last_used_at`."""
        match = _API_KEY_PATTERN.fullmatch(key) if isinstance(key, str) else None
        if match is None:
            return None
        key_id, secret = match.groups()
        row = self._session.get(ApiKeyRow, key_id, populate_existing=True)  # a revocation counts at once
        presented = _secret_sha256(secret)
        stored = presented if row is None else row.secret_sha256
        matches = hmac.compare_digest(presented.encode(), stored.encode())
        if row is None or not matches or row.revoked_at is not None:
            return None
        if record_use:
            self._record_use(key_id)
        return row.role

    def list(self) -> list[StoredApiKey]:
        """Every key ever issued, revoked ones included, oldest first."""
        rows = self._session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id))
        return [_stored(row) for row in rows]

    def revoke(self, key_id: str) -> StoredApiKey | None:
        """Revoke the key (it stays listed with `revoked_at`); None if no key has this id. Revoking
        twice keeps the first time."""
        row = self._session.get(ApiKeyRow, key_id)
        if row is None:
            return None
        if row.revoked_at is None:
            row.revoked_at = datetime.now(UTC)
            self._session.flush()
        return _stored(row)

    def _record_use(self, key_id: str) -> None:
        """`last_used_at = now` in its own short transaction, not the request's: a plan that takes a
        minute must not hold a lock on its key's row, and a failure here never fails the request."""
        now = datetime.now(UTC)
        statement = (
            update(cast(Table, ApiKeyRow.__table__))
            .where(ApiKeyRow.id == key_id)
            .where(or_(ApiKeyRow.last_used_at.is_(None), ApiKeyRow.last_used_at < now - LAST_USED_RESOLUTION))
            .values(last_used_at=now)
        )
        engine = self._session.get_bind()
        if not isinstance(engine, Engine) or isinstance(engine.pool, StaticPool):
            return  # a session bound to one connection, or one shared connection (in-memory SQLite): no second transaction
        try:
            with engine.connect() as connection:
                connection.execute(statement)
                connection.commit()
        except SQLAlchemyError:  # a busy database: the use goes unrecorded, the request goes on
            return


@overload
def _aware(moment: datetime) -> datetime: ...
@overload
def _aware(moment: None) -> None: ...
@overload
def _aware(moment: datetime | None) -> datetime | None: ...
def _aware(moment: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every one stored here is UTC."""
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def _stored(row: ApiKeyRow) -> StoredApiKey:
    return StoredApiKey(
        id=row.id,
        role=row.role,
        created_at=_aware(row.created_at),
        last_used_at=_aware(row.last_used_at),
        revoked_at=_aware(row.revoked_at),
    )
