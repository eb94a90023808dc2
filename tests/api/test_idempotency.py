"""Idempotency-Key on the POSTs that create something (plans, re-plans, fleet plans, calibrations,
deployments PUT), on SQLite and PostgreSQL: a retry answers the first result and creates nothing;
the same key with another body is 409; two requests racing with one key store one plan."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from fastapi.responses import JSONResponse
from sqlalchemy import func, select

from api.idempotency import Idempotency, request_hash
from catalog.db import make_engine, make_session_factory
from catalog.models import IdempotencyKeyRow, PlanRow
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_deployments import chat

KEY = "6f1b0c8e-retry-me"


@pytest.fixture
def seeded(client: ApiClient, migrated_database_url: str) -> ApiClient:
    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    return client


def count(url: str, table: type) -> int:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return session.scalar(select(func.count()).select_from(table)) or 0
    finally:
        engine.dispose()


def test_a_retried_plan_answers_the_first_plan_and_stores_one(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    headers = {**admin, "Idempotency-Key": KEY}
    first = seeded.post("/v1/plans", json=chat(15, name="chat"), headers=headers)
    assert first.status_code == 201, first.text
    # the same body with its members in another order is the same request
    reordered = dict(reversed(list(chat(15, name="chat").items())))
    retry = seeded.post("/v1/plans", json=reordered, headers=headers)
    assert retry.status_code == 201
    assert retry.json() == first.json()
    assert retry.headers["location"] == first.headers["location"] == f"/v1/plans/{first.json()['id']}"
    assert retry.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert count(migrated_database_url, PlanRow) == 1
    assert count(migrated_database_url, IdempotencyKeyRow) == 1
    assert seeded.get("/v1/deployments/chat/plans").json()["total"] == 1


def test_the_same_key_with_another_body_is_409(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    headers = {**admin, "Idempotency-Key": KEY}
    assert seeded.post("/v1/plans", json=chat(15), headers=headers).status_code == 201
    problem = assert_problem(seeded.post("/v1/plans", json=chat(16), headers=headers), 409, "idempotency-conflict")
    assert problem["reason"] == "different_request" and KEY in problem["detail"]
    # and on another route
    other = seeded.post("/v1/deployments/x/replan", json={"arrival_rate_rps": 3}, headers=headers)
    assert_problem(other, 409, "idempotency-conflict")
    assert count(migrated_database_url, PlanRow) == 1


def test_without_a_key_every_post_plans_again(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    ids = {seeded.post("/v1/plans", json=chat(15), headers=admin).json()["id"] for _ in range(2)}
    assert len(ids) == 2 and count(migrated_database_url, PlanRow) == 2


def test_a_failed_request_stores_no_answer_so_its_retry_runs_again(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    headers = {**admin, "Idempotency-Key": KEY}
    assert_problem(seeded.post("/v1/plans", json=chat(15, model="no-such-model"), headers=headers), 404, "not-found")
    assert count(migrated_database_url, IdempotencyKeyRow) == 0
    assert seeded.post("/v1/plans", json=chat(15), headers=headers).status_code == 201


def test_malformed_keys_are_400(client: ApiClient, admin: dict[str, str]) -> None:
    for key in (b"", b"x" * 201, b"spaces are not visible ascii", "ключ".encode()):
        response = client.post("/v1/plans", json=chat(15), headers={**admin, "Idempotency-Key": key})
        assert_problem(response, 400, "malformed-header")


def test_a_retried_replan_and_put_create_nothing_new(seeded: ApiClient, admin: dict[str, str]) -> None:
    put_headers = {**admin, "Idempotency-Key": "put-1"}
    settings = chat(15)
    created = seeded.put("/v1/deployments/chat", json=settings, headers=put_headers)
    again = seeded.put("/v1/deployments/chat", json=settings, headers=put_headers)
    assert created.status_code == again.status_code == 201
    assert again.json() == created.json()

    replan_headers = {**admin, "Idempotency-Key": "replan-1"}
    first = seeded.post("/v1/deployments/chat/replan", json={"arrival_rate_rps": 40}, headers=replan_headers)
    retry = seeded.post("/v1/deployments/chat/replan", json={"arrival_rate_rps": 40}, headers=replan_headers)
    assert first.status_code == retry.status_code == 200
    assert retry.json() == first.json()
    assert seeded.get("/v1/deployments/chat/plans").json()["total"] == 2  # PUT's plan and one re-plan


def test_a_retried_fleet_plan_answers_the_first(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = {
        "workloads": [{"name": "chat", "model": "llama-3.1-8b", "prompt_tokens": {"mean": 800, "p99": 3000},
                       "output_tokens": {"mean": 200, "p99": 700}, "slo": {"ttft_ms": 1000, "tpot_ms": 60}, "demand_rps": [4, 8]}],
        "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        "search": {"tp_degrees": [1], "batch_limits": [64], "chunk_budgets": [None]},
    }
    headers = {**admin, "Idempotency-Key": "fleet-1"}
    first = seeded.post("/v1/fleet-plans", json=body, headers=headers)
    assert first.status_code == 201, first.text
    retry = seeded.post("/v1/fleet-plans", json=body, headers=headers)
    assert retry.status_code == 201 and retry.json()["id"] == first.json()["id"]
    assert retry.headers["location"] == first.headers["location"]


def test_two_requests_racing_with_one_key_store_one_plan(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    """The race, step by step on two sessions: both look the key up and find nothing; the first
    stores its plan and key and commits; the second stores its plan, its key insert hits the primary
    key, its transaction (its plan included) rolls back and it answers with the first one's answer.
    (Writers are serialised — SQLite's lock, PostgreSQL's wait on the uncommitted key — so the second
    insert always comes after the first commit.)"""
    engine = make_engine(migrated_database_url)
    sessions = make_session_factory(engine)
    body = {"request": 1}
    try:
        with sessions() as winner_session, sessions() as loser_session:
            winner = Idempotency(winner_session, KEY, "POST", "/v1/plans")
            loser = Idempotency(loser_session, KEY, "POST", "/v1/plans")
            assert winner.replay(body) is None and loser.replay(body) is None
            answers, ids = [], []
            for session, side in ((winner_session, winner), (loser_session, loser)):
                ids.append(new_plan_id())
                Plans(session).save(plan_id=ids[-1], name=None, request=body, response={"id": ids[-1]}, catalog_version=1,
                                    created_at=datetime.now(UTC))
                location = {"Location": f"/v1/plans/{ids[-1]}"}
                answers.append(side.respond(body, JSONResponse({"id": ids[-1]}, status_code=201, headers=location)))
                session.commit()
            first, answer = answers
        assert first.status_code == answer.status_code == 201
        assert json.loads(bytes(answer.body)) == {"id": ids[0]}
        assert answer.headers["location"] == f"/v1/plans/{ids[0]}" and answer.headers["idempotent-replayed"] == "true"
    finally:
        engine.dispose()
    assert count(migrated_database_url, PlanRow) == 1
    assert count(migrated_database_url, IdempotencyKeyRow) == 1


def test_the_request_hash_ignores_member_order_but_not_values() -> None:
    assert request_hash("POST", "/v1/plans", {"a": 1, "b": [1, 2]}) == request_hash("POST", "/v1/plans", {"b": [1, 2], "a": 1})
    assert request_hash("POST", "/v1/plans", {"a": 1}) != request_hash("POST", "/v1/plans", {"a": 2})
    assert request_hash("POST", "/v1/plans", {"a": 1}) != request_hash("POST", "/v1/fleet-plans", {"a": 1})


def test_retried_calibration_answers_the_first(client: ApiClient, admin: dict[str, str]) -> None:
    from tests.api.conftest import GPU_RECORD, MODEL_RECORD
    from tests.api.test_calibrations import FP16_RECORD, _body

    for plural, record in (("gpus", GPU_RECORD), ("models", MODEL_RECORD), ("quantizations", FP16_RECORD)):
        assert client.post(f"/v1/{plural}", json=record, headers=admin).status_code == 201
    headers = {**admin, "Idempotency-Key": "calibration-1"}
    first = client.post("/v1/calibrations", json=_body(), headers=headers)
    assert first.status_code == 201, first.text
    retry = client.post("/v1/calibrations", json=_body(), headers=headers)
    assert retry.status_code == 201 and retry.json() == first.json()
    assert_problem(client.post("/v1/calibrations", json=_body(name="other"), headers=headers), 409, "idempotency-conflict")


def test_a_retried_catalog_create_answers_the_first_201_not_409(client: ApiClient, admin: dict[str, str], gpu_record: dict) -> None:
    headers = {**admin, "Idempotency-Key": "gpu-1"}
    first = client.post("/v1/gpus", json=gpu_record, headers=headers)
    retry = client.post("/v1/gpus", json=gpu_record, headers=headers)
    assert first.status_code == retry.status_code == 201, first.text
    assert retry.json() == first.json()
    assert retry.headers["location"] == first.headers["location"] == "/v1/gpus/h100-sxm"
    assert retry.headers["etag"] == first.headers["etag"]
    assert_problem(client.post("/v1/gpus", json=gpu_record, headers=admin), 409, "already-exists")  # no key: a plain retry
