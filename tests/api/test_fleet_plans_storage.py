"""Fleet-plan storage: one migration head, the table the ORM expects, save/get round trip, 404."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from catalog import migrate
from catalog.db import make_engine
from catalog.errors import NotFoundError
from catalog.fleet_plans import FleetPlans, new_fleet_plan_id


def test_the_migrations_have_exactly_one_head_and_create_fleet_plans(migrated_database_url: str) -> None:
    scripts = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    assert len(scripts.get_heads()) == 1
    assert "0002_fleet_plans" in {script.revision for script in scripts.walk_revisions()}
    engine = make_engine(migrated_database_url)
    try:
        columns = {column["name"] for column in inspect(engine).get_columns("fleet_plans")}
    finally:
        engine.dispose()
    assert columns == {"id", "request", "response", "catalog_version", "created_at"}


def test_a_saved_plan_reads_back_as_stored(session) -> None:
    plans = FleetPlans(session)
    plan_id = new_fleet_plan_id()
    moment = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    request = {"workloads": [{"name": "chat", "demand_rps": [1.5, 2.0]}], "period_hours": 1.0}
    response = {"id": plan_id, "cost": {"usd_total": 12.25}, "nested": {"list": [1, None, "x"]}}
    plans.save(plan_id=plan_id, request=request, response=response, catalog_version=7, created_at=moment)
    session.commit()
    stored = FleetPlans(session).get(plan_id)
    assert stored.id == plan_id and len(plan_id) == 32
    assert stored.request == request and stored.response == response
    assert stored.catalog_version == 7
    assert stored.created_at == moment


@pytest.mark.parametrize("plan_id", ["0" * 32, "short", "Z" * 32, "0" * 33])
def test_unknown_or_malformed_ids_are_not_found(session, plan_id: str) -> None:
    with pytest.raises(NotFoundError) as raised:
        FleetPlans(session).get(plan_id)
    assert raised.value.extensions["id"] == plan_id
