"""Alembic migrations of the Headroom database; run them through `catalog.migrate`."""
