"""Alembic, driven from Python: the migration scripts live in `migrations/` next to this package,
so these functions work from any working directory and from an installed wheel."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

from catalog.db import normalize_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str | URL) -> Config:
    """An Alembic config for `url` with `script_location` pointing at the shipped migrations."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = normalize_url(url).render_as_string(hide_password=False)
    return config


def upgrade(url: str | URL, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` ("head" by default)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | URL, revision: str) -> None:
    """Migrate the database at `url` down to `revision`; "base" drops every table."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest revision id of the shipped migrations."""
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {MIGRATIONS_DIR}")
    return head


def current_revision(url: str | URL) -> str | None:
    """The revision the database at `url` is at; None for an unmigrated database."""
    engine = create_engine(normalize_url(url), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def is_at_head(url: str | URL) -> bool:
    """Whether the database at `url` is migrated to the newest revision (what /readyz checks)."""
    return current_revision(url) == head_revision()
