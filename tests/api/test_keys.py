"""`GET /v1/keys` and `DELETE /v1/keys/{key_id}` (admin only), `last_used_at`, and a revoked key
answering 401 from its next request; `headroom keys list|revoke` on the same database."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine

from api.cli import main
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_auth_health import issue_key


def test_list_and_revoke_over_the_api(client: ApiClient, engine: Engine) -> None:
    reader = issue_key(engine, "reader")
    key_id = reader["Authorization"].split("_", 2)[1]
    assert_problem(client.get("/v1/keys", headers=reader), 403)
    before = client.get("/v1/keys", headers=ADMIN_HEADERS).json()
    assert before["total"] == 1 and before["items"][0]["last_used_at"] is not None  # the 403 above used it
    [item] = before["items"]
    assert (item["id"], item["prefix"], item["role"], item["revoked"], item["revoked_at"]) == (
        key_id,
        f"hr_{key_id}_",
        "reader",
        False,
        None,
    )
    assert "secret" not in json.dumps(before)

    assert client.get("/v1/models", headers=reader).status_code == 200
    assert client.delete(f"/v1/keys/{key_id}", headers=ADMIN_HEADERS).status_code == 204
    assert_problem(client.get("/v1/models", headers=reader), 401)  # at once
    assert client.delete(f"/v1/keys/hr_{key_id}", headers=ADMIN_HEADERS).status_code == 204  # again: still revoked
    [after] = client.get("/v1/keys", headers=ADMIN_HEADERS).json()["items"]
    assert after["revoked"] is True and after["revoked_at"] is not None
    assert_problem(client.delete("/v1/keys/0000000000000000", headers=ADMIN_HEADERS), 404)


def test_keys_list_and_revoke_on_the_command_line(
    client: ApiClient, engine: Engine, migrated_database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    planner = issue_key(engine, "planner")
    key = planner["Authorization"].removeprefix("Bearer ")
    assert main(["--database-url", migrated_database_url, "keys", "list", "--format", "json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["role"] == "planner" and key.startswith(listed["prefix"]) and listed["revoked_at"] is None
    assert main(["--database-url", migrated_database_url, "keys", "revoke", key]) == 0
    assert "revoked hr_" in capsys.readouterr().out
    assert_problem(client.post("/v1/plans", json={}, headers=planner), 401)
    assert main(["--database-url", migrated_database_url, "keys", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["id", "role", "created_at", "last_used_at", "revoked_at"] and listed["id"] in table[1]
    assert main(["--database-url", migrated_database_url, "keys", "revoke", "0" * 16]) == 2
