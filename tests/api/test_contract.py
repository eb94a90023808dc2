"""The HTTP contract around the bodies (issue 22 §5): a body that is not JSON is 415, a body over
HEADROOM_MAX_BODY_BYTES is 413 before anything parses it, a wrong method is 405 naming every
method the path answers in `Allow`, declared numbers and booleans take no strings, and the OpenAPI
document lists each of these answers and the headers' formats."""

from __future__ import annotations

import asyncio
from typing import Any

from api.app import create_app
from api.settings import Settings
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_KEY, assert_problem, bad_fields


def test_a_body_that_is_not_json_is_415(client: ApiClient, admin: dict[str, str]) -> None:
    answer = client.post("/v1/gpus", content=b'{"slug": "x"}', headers=admin | {"Content-Type": "text/plain"})
    body = assert_problem(answer, 415, "unsupported-media-type")
    assert "text/plain" in body["detail"]
    no_type = client.post("/v1/evaluate", content=b'{"model": "llama-2-70b"}')
    assert_problem(no_type, 415, "unsupported-media-type")
    # JSON with parameters, and structured +json types, are JSON
    charset = client.post("/v1/gpus", content=b"{}", headers=admin | {"Content-Type": "application/json; charset=utf-8"})
    assert charset.status_code == 422


def test_a_body_over_the_limit_is_413_before_it_is_parsed(
    make_client: Any, migrated_database_url: str, admin: dict[str, str]
) -> None:
    app = create_app(Settings(database_url=migrated_database_url, admin_key=ADMIN_KEY, max_body_bytes=1000))
    client = make_client(app=app)
    answer = client.post("/v1/gpus", content=b"[" + b" " * 2000 + b"]", headers=admin | {"Content-Type": "application/json"})
    body = assert_problem(answer, 413, "payload-too-large")
    assert body["max_body_bytes"] == 1000

    # no Content-Length: the guard counts what arrives, and answers before the body has all come
    messages = [{"type": "http.request", "body": b" " * 400, "more_body": True} for _ in range(5)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/gpus",
        "raw_path": b"/v1/gpus",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1",
        "scheme": "http",
        "server": ("test", 80),
        "client": ("test", 1),
        "root_path": "",
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 413
    assert len(messages) == 2  # three chunks read (1,200 bytes > 1,000), two never asked for


def test_405_names_every_method_of_the_path(client: ApiClient) -> None:
    answer = client.post("/v1/gpus/h100-sxm")
    assert_problem(answer, 405)
    assert answer.headers["allow"] == "DELETE, GET, PATCH, PUT"
    assert client.delete("/v1/gpus").headers["allow"] == "GET, POST"


def test_strings_are_not_numbers_or_booleans(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    answer = client.post("/v1/gpus", json=gpu_record | {"memory_gb": "80"}, headers=admin)
    assert "memory_gb" in bad_fields(assert_problem(answer, 422, "invalid-request"))
    plan = {
        "model": "llama-3.1-8b",
        "store": "yes",
        "workload": {
            "arrival_rate_rps": 20,
            "prompt_tokens": {"mean": 1000, "p99": 4000},
            "output_tokens": {"mean": 250, "p99": 1000},
        },
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
    }
    assert "store" in bad_fields(assert_problem(client.post("/v1/plans", json=plan, headers=admin), 422))
    # a JSON integer is still a number where a float is declared, and dates are still ISO strings
    assert client.post("/v1/gpus", json=gpu_record | {"memory_gb": 80}, headers=admin).status_code == 201


def test_the_document_lists_these_answers_and_the_header_formats(client: ApiClient) -> None:
    document = client.get("/openapi.json").json()
    create = document["paths"]["/v1/gpus"]["post"]
    assert {"400", "409", "413", "415", "422", "503"} <= create["responses"].keys()
    assert create["responses"]["201"]["headers"]["Location"]["schema"]["type"] == "string"
    key = next(p for p in create["parameters"] if p["name"] == "Idempotency-Key")
    assert key["schema"]["pattern"] and key["schema"]["maxLength"] == 200
    replace = document["paths"]["/v1/gpus/{slug}"]["put"]
    if_match = next(p for p in replace["parameters"] if p["name"] == "If-Match")
    assert if_match["schema"]["pattern"]
    assert {"400", "412", "413", "415"} <= replace["responses"].keys()
    assert "ETag" in replace["responses"]["200"]["headers"]
    assert "503" in document["paths"]["/v1/simulate"]["post"]["responses"]
    assert "Retry-After" in create["responses"]["409"]["headers"]
