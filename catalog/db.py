"""Database URL, engine and session factory.

The URL comes from `HEADROOM_DATABASE_URL` (any SQLAlchemy URL; `postgresql+psycopg://user@host/db`
for PostgreSQL). Without it Headroom uses the SQLite file `./headroom.db` in the working directory.
SQLite connections run with foreign keys enforced and the write-ahead log, so readers do not block
the writer.
"""

from __future__ import annotations

import os

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import StaticPool

DATABASE_URL_ENV = "HEADROOM_DATABASE_URL"
DEFAULT_DATABASE_URL = "sqlite:///./headroom.db"


def default_database_url() -> str:
    """`HEADROOM_DATABASE_URL` if set and non-empty, else the SQLite file ./headroom.db."""
    return os.environ.get(DATABASE_URL_ENV) or DEFAULT_DATABASE_URL


def normalize_url(url: str | URL) -> URL:
    """Parse `url`; a bare `postgresql://` or `postgres://` gets the psycopg (v3) driver we ship."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _is_memory_sqlite(url: URL) -> bool:
    return url.database in (None, "", ":memory:") or url.query.get("mode") == "memory"


def _enable_sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
    finally:
        cursor.close()


def make_engine(url: str | URL) -> Engine:
    """An engine for `url`. SQLite: foreign keys on and WAL on every connection, usable from
    the API's worker threads; an in-memory SQLite URL shares one connection. PostgreSQL:
    psycopg 3, connections checked before use."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        if _is_memory_sqlite(parsed):
            engine = create_engine(parsed, connect_args={"check_same_thread": False}, poolclass=StaticPool)
        else:
            engine = create_engine(parsed, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _enable_sqlite_pragmas)
        return engine
    return create_engine(parsed, pool_pre_ping=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose objects stay readable after commit; the caller commits or rolls back."""
    return sessionmaker(bind=engine, expire_on_commit=False)
