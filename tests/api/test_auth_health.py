"""API keys and roles (401/403, HEADROOM_REQUIRE_AUTH), and the health probes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from api.app import create_app
from api.settings import Settings
from catalog import migrate
from catalog.api_keys import ApiKeys
from catalog.db import make_session_factory
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem


def issue_key(engine: Engine, role: str) -> dict[str, str]:
    with make_session_factory(engine)() as session, session.begin():
        return {"Authorization": f"Bearer {ApiKeys(session).create(role)}"}


def test_roles(client: ApiClient, engine: Engine, gpu_record: dict[str, Any]) -> None:
    reader, planner, admin = (issue_key(engine, role) for role in ("reader", "planner", "admin"))
    for headers in (reader, planner):
        body = assert_problem(client.post("/v1/gpus", json=gpu_record, headers=headers), 403, "forbidden")
        assert "admin" in body["detail"]
    assert client.post("/v1/gpus", json=gpu_record, headers=admin).status_code == 201
    assert_problem(client.delete("/v1/gpus/h100-sxm", headers=reader), 403)
    assert client.get("/v1/gpus/h100-sxm", headers=reader).status_code == 200
    assert client.delete("/v1/gpus/h100-sxm", headers=admin).status_code == 204


def test_require_auth_needs_a_valid_key_for_reads(make_client: Any, engine: Engine) -> None:
    client = make_client(require_auth=True)
    assert_problem(client.get("/v1/models"), 401)
    assert_problem(client.get("/v1/models/llama-2-70b"), 401)
    assert client.get("/v1/models", headers=issue_key(engine, "reader")).status_code == 200
    assert client.get("/healthz").status_code == 200  # probes stay open


def test_a_bad_key_is_refused_even_where_none_is_needed(client: ApiClient) -> None:
    assert_problem(client.get("/v1/gpus", headers={"Authorization": "Bearer wrong"}), 401)
    assert client.get("/v1/gpus").status_code == 200


def test_without_bootstrap_key_only_issued_keys_write(make_client: Any, engine: Engine, gpu_record: dict[str, Any]) -> None:
    client = make_client(admin_key=None)
    assert_problem(client.post("/v1/gpus", json=gpu_record, headers={"Authorization": "Bearer test-admin-key-0123456789"}), 401)
    assert client.post("/v1/gpus", json=gpu_record, headers=issue_key(engine, "admin")).status_code == 201


def test_healthz_and_readyz(client: ApiClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_readyz_is_503_before_migration_and_after_downgrade(database_url: str, open_client: Any) -> None:
    client = open_client(create_app(Settings(database_url=database_url)))
    assert client.get("/healthz").status_code == 200
    body = assert_problem(client.get("/readyz"), 503, "not-ready")
    assert "headroom db upgrade" in body["detail"]
    migrate.upgrade(database_url)
    assert client.get("/readyz").status_code == 200
    migrate.downgrade(database_url, "base")
    assert_problem(client.get("/readyz"), 503, "not-ready")


def test_readyz_is_503_when_the_database_is_unreachable(tmp_path: Path, open_client: Any) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'headroom.db'}"
    client = open_client(create_app(Settings(database_url=url)))
    body = assert_problem(client.get("/readyz"), 503, "not-ready")
    assert "not reachable" in body["detail"]
    assert str(tmp_path) not in body["detail"]
