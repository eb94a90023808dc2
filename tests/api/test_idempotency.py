"""Idempotency-Key on the POSTs that create something (plans, re-plans, fleet plans, calibrations,
deployments PUT), on SQLite and PostgreSQL: a retry answers the first result and creates nothing;
the same key with another body is 409; two requests racing with one key store one plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.responses import JSONResponse
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from api.idempotency import Idempotency, IdempotencyConflictError, caller_scope, request_hash
from api.settings import Settings
from catalog.api_keys import ApiKeys
from catalog.db import make_engine, make_session_factory
from catalog.models import IdempotencyKeyRow, PlanRow
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_deployments import chat

KEY = "6f1b0c8e-retry-me"


def count(url: str, table: type) -> int:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return session.scalar(select(func.count()).select_from(table)) or 0
    finally:
        engine.dispose()


def test_a_retried_plan_answers_the_first_plan_and_stores_one(
    seeded: ApiClient, admin: dict[str, str], migrated_database_url: str
) -> None:
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


def test_a_failed_request_stores_no_answer_so_its_retry_runs_again(
    seeded: ApiClient, admin: dict[str, str], migrated_database_url: str
) -> None:
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
        "workloads": [
            {
                "name": "chat",
                "model": "llama-3.1-8b",
                "prompt_tokens": {"mean": 800, "p99": 3000},
                "output_tokens": {"mean": 200, "p99": 700},
                "slo": {"ttft_ms": 1000, "tpot_ms": 60},
                "demand_rps": [4, 8],
            }
        ],
        "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
        "search": {"tp_degrees": [1], "batch_limits": [64], "chunk_budgets": [None]},
    }
    headers = {**admin, "Idempotency-Key": "fleet-1"}
    first = seeded.post("/v1/fleet-plans", json=body, headers=headers)
    assert first.status_code == 201, first.text
    retry = seeded.post("/v1/fleet-plans", json=body, headers=headers)
    assert retry.status_code == 201 and retry.json()["id"] == first.json()["id"]
    assert retry.headers["location"] == first.headers["location"]


def _idempotency(session: Session, key: str = KEY, *, scope: str = "key:0123456789abcdef", wait_s: float = 0.0) -> Idempotency:
    return Idempotency(session, key, "POST", "/v1/plans", scope=scope, window_s=86_400.0, wait_s=wait_s, lease_s=60.0)


def test_two_requests_racing_with_one_key_store_one_plan(
    seeded: ApiClient, admin: dict[str, str], migrated_database_url: str
) -> None:
    """The race, step by step on two sessions: the first claims the key (committed at once) before
    planning; the second finds the claim unanswered and, past its wait, is told to retry (409
    in_progress, Retry-After); once the first has stored its plan and answer in one commit, the
    second gets that answer and plans nothing."""
    engine = make_engine(migrated_database_url)
    sessions = make_session_factory(engine)
    body = {"request": 1}
    try:
        with sessions() as winner_session, sessions() as loser_session:
            winner, loser = _idempotency(winner_session), _idempotency(loser_session)
            assert winner.replay(body) is None
            with pytest.raises(IdempotencyConflictError) as waiting:
                loser.replay(body)
            assert waiting.value.extensions["reason"] == "in_progress" and waiting.value.headers == {"Retry-After": "1"}
            plan_id = new_plan_id()
            Plans(winner_session).save(
                plan_id=plan_id,
                name=None,
                request=body,
                response={"id": plan_id},
                catalog_version=1,
                created_at=datetime.now(UTC),
            )
            first = winner.respond(
                body, JSONResponse({"id": plan_id}, status_code=201, headers={"Location": f"/v1/plans/{plan_id}"})
            )
            winner_session.commit()
            answer = loser.replay(body)
        assert answer is not None and first.status_code == answer.status_code == 201
        assert json.loads(bytes(answer.body)) == {"id": plan_id}
        assert answer.headers["location"] == f"/v1/plans/{plan_id}" and answer.headers["idempotent-replayed"] == "true"
    finally:
        engine.dispose()
    assert count(migrated_database_url, PlanRow) == 1
    assert count(migrated_database_url, IdempotencyKeyRow) == 1


def test_a_claim_left_by_a_dead_process_is_taken_over_after_its_lease(migrated_database_url: str) -> None:
    engine = make_engine(migrated_database_url)
    sessions = make_session_factory(engine)
    try:
        with sessions() as dead, sessions() as retry:
            assert _idempotency(dead).replay({"request": 1}) is None  # claimed, then the process "dies"
            dead.execute(update(IdempotencyKeyRow).values(created_at=datetime.now(UTC) - timedelta(seconds=61)))
            dead.commit()
            assert _idempotency(retry).replay({"request": 1}) is None
    finally:
        engine.dispose()


def _key_for(url: str, role: str) -> dict[str, str]:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            key = ApiKeys(session).create(role)
            session.commit()
    finally:
        engine.dispose()
    return {"Authorization": f"Bearer {key}"}


def test_keys_are_scoped_per_api_key_and_a_conflict_reveals_no_request(seeded: ApiClient, migrated_database_url: str) -> None:
    """Two callers choosing the same key (the README's key pattern makes that likely) each get
    their own plan; the same caller reusing it for another body gets a 409 that describes no request."""
    alice, bob = _key_for(migrated_database_url, "planner"), _key_for(migrated_database_url, "planner")
    first = seeded.post("/v1/plans", json=chat(15), headers={**alice, "Idempotency-Key": "chat-hourly-12"})
    second = seeded.post("/v1/plans", json=chat(20), headers={**bob, "Idempotency-Key": "chat-hourly-12"})
    assert first.status_code == second.status_code == 201, second.text
    assert first.json()["id"] != second.json()["id"] and "idempotent-replayed" not in second.headers
    again = seeded.post("/v1/plans", json=chat(20), headers={**bob, "Idempotency-Key": "chat-hourly-12"})
    assert again.headers["idempotent-replayed"] == "true" and again.json()["id"] == second.json()["id"]

    problem = assert_problem(
        seeded.post("/v1/plans", json=chat(30), headers={**alice, "Idempotency-Key": "chat-hourly-12"}),
        409,
        "idempotency-conflict",
    )
    assert problem["reason"] == "different_request"
    assert not any(text in problem["detail"] for text in ("/v1/plans", "POST", str(datetime.now(UTC).year)))
    assert count(migrated_database_url, PlanRow) == 2


def test_the_caller_scope_is_the_key_id_or_anonymous() -> None:
    settings = Settings(database_url="sqlite://", admin_key="bootstrap-admin-key-0123")
    assert caller_scope("Bearer hr_0123456789abcdef_secretsecretsecretsecret", settings) == "key:0123456789abcdef"
    assert caller_scope("Bearer bootstrap-admin-key-0123", settings) == "bootstrap-admin"
    assert caller_scope(None, settings) == caller_scope("Basic abc", settings) == "anonymous"


def test_a_key_expires_after_the_window(
    make_client: Callable[..., ApiClient], admin: dict[str, str], migrated_database_url: str
) -> None:
    """Past `idempotency_window_s` a key is free: the same body plans again, another body is no conflict."""
    seeded = make_client(idempotency_window_s=3600.0)
    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
        headers = {**admin, "Idempotency-Key": KEY}
        first = seeded.post("/v1/plans", json=chat(15), headers=headers)
        assert seeded.post("/v1/plans", json=chat(15), headers=headers).json()["id"] == first.json()["id"]
        with engine.begin() as connection:
            connection.execute(update(IdempotencyKeyRow).values(created_at=datetime.now(UTC) - timedelta(seconds=3601)))
        again = seeded.post("/v1/plans", json=chat(15), headers=headers)
        assert (
            again.status_code == 201 and again.json()["id"] != first.json()["id"] and "idempotent-replayed" not in again.headers
        )
        assert seeded.post("/v1/plans", json=chat(16), headers={**admin, "Idempotency-Key": "other"}).status_code == 201
        assert count(migrated_database_url, IdempotencyKeyRow) == 2  # the expired claim was replaced, not kept
    finally:
        engine.dispose()


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


def test_a_retried_catalog_create_answers_the_first_201_not_409(
    client: ApiClient, admin: dict[str, str], gpu_record: dict
) -> None:
    headers = {**admin, "Idempotency-Key": "gpu-1"}
    first = client.post("/v1/gpus", json=gpu_record, headers=headers)
    retry = client.post("/v1/gpus", json=gpu_record, headers=headers)
    assert first.status_code == retry.status_code == 201, first.text
    assert retry.json() == first.json()
    assert retry.headers["location"] == first.headers["location"] == "/v1/gpus/h100-sxm"
    assert retry.headers["etag"] == first.headers["etag"]
    assert_problem(client.post("/v1/gpus", json=gpu_record, headers=admin), 409, "already-exists")  # no key: a plain retry
