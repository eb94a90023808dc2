"""`POST /v1/plans` with `store: false`: a dry run a reader key may make; the answer is the plan
(200, no Location) and nothing is written: no plan, no deployment, no idempotency record."""

from __future__ import annotations

from sqlalchemy import Engine, text

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_auth_health import issue_key
from tests.api.test_deployments import chat

TABLES = ("plans", "deployments", "idempotency_keys")


def counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in TABLES}


def test_a_reader_key_dry_run_writes_nothing(seeded: ApiClient, engine: Engine) -> None:
    reader = issue_key(engine, "reader")
    assert_problem(seeded.post("/v1/plans", json=chat(15), headers=reader), 403)  # storing needs planner
    before = counts(engine)

    headers = {**reader, "Idempotency-Key": "dry-run-1"}
    dry = seeded.post("/v1/plans", json=chat(15, name="chat", store=False), headers=headers)
    assert dry.status_code == 200, dry.text
    assert "location" not in dry.headers
    plan = dry.json()
    assert plan["name"] == "chat" and plan["plan"]["gpu"] == "h100-sxm" and plan["id"]
    assert counts(engine) == before == {table: 0 for table in TABLES}
    assert_problem(seeded.get(f"/v1/plans/{plan['id']}", headers=reader), 404)
    assert_problem(seeded.get("/v1/deployments/chat", headers=reader), 404)

    stored = seeded.post("/v1/plans", json=chat(15, name="chat"), headers=ADMIN_HEADERS)
    assert stored.status_code == 201
    same = {key: value for key, value in stored.json().items() if key not in ("id", "created_at", "provenance")}
    assert same == {key: value for key, value in plan.items() if key not in ("id", "created_at", "provenance")}
    assert "store" not in seeded.get("/v1/deployments/chat").json()["settings"]  # a switch, not a setting


def test_a_dry_run_as_csv(seeded: ApiClient, engine: Engine) -> None:
    answer = seeded.post("/v1/plans?format=csv", json=chat(15, store=False), headers=issue_key(engine, "reader"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/csv")
    assert counts(engine)["plans"] == 0
