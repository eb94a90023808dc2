"""Seeding the shipped reference catalog (catalog/data/) into a migrated test database, for API
tests that evaluate real GPUs and models."""

from __future__ import annotations

from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog


def seed_reference_catalog(database_url: str) -> None:
    """Load catalog/data/ into the (empty, migrated) database at `database_url` and commit."""
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            if not Catalog(session).load_reference_catalog():
                raise RuntimeError(f"the catalog at {database_url} was not empty")
            session.commit()
    finally:
        engine.dispose()
