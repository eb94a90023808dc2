"""Catalog fixtures on top of the shared database fixtures in tests/conftest.py."""

from __future__ import annotations

import pytest

from catalog.repository import Catalog
from tests.catalog.records import FIXTURE_DATA_DIR


@pytest.fixture
def loaded(catalog: Catalog) -> Catalog:
    """The catalog fixture with the small test catalog of tests/catalog/data/ loaded (uncommitted)."""
    assert catalog.load_reference_catalog(FIXTURE_DATA_DIR)
    return catalog
