"""Database URL defaults and engine settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from catalog.db import DEFAULT_DATABASE_URL, default_database_url, make_engine, normalize_url


def test_default_url_is_an_sqlite_file_in_the_working_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEADROOM_DATABASE_URL", raising=False)
    assert default_database_url() == DEFAULT_DATABASE_URL == "sqlite:///./headroom.db"


def test_database_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_DATABASE_URL", "postgresql+psycopg://u@db:5432/headroom")
    assert default_database_url() == "postgresql+psycopg://u@db:5432/headroom"


def test_bare_postgresql_urls_get_the_psycopg3_driver() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"


def test_sqlite_connections_enforce_foreign_keys_and_use_wal(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        for _ in range(2):  # every pooled connection, not just the first
            with engine.connect() as connection:
                assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
                assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        engine.dispose()
