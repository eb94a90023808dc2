"""A JSON string may spell a UTF-16 surrogate escape on its own ("\\ud982") or NUL ("\\u0000");
Python's decoder takes both, and PostgreSQL refuses either at the first query (UTF-8 cannot encode the
first, text cannot hold the second) — the schemathesis run found `POST /v1/deployments:replan`
answering 500 that way. The body guard refuses such a body as invalid JSON (422) before any route or
database sees it, on every database; a proper pair (an emoji) is one character and goes through."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem, bad_fields

JSON = {**ADMIN_HEADERS, "Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/deployments:replan", b'{"deployments": ["\\ud982\\udcc1\\udbf4x", "~"]}'),
        ("/v1/deployments:replan", b'{"deployments": ["ok", "\\uDFFF"]}'),
        ("/v1/plans", b'{"model": "llama-3.1-8b", "name": "chat-\\ud83d", "workload": {}, "slo": {}}'),
        ("/v1/gpus", b'{"slug": "x", "name": "\\udc00 lone low half"}'),
        ("/v1/deployments:replan", b'{"deployments": ["\\ud982\\udcc1,B\\u0000f", "~"]}'),  # the fuzz case: a pair, then NUL
        ("/v1/plans", b'{"model": "llama-3.1-8b", "name": "a\\u0000b", "workload": {}, "slo": {}}'),
    ],
)
def test_a_body_with_an_unpaired_surrogate_is_invalid_json_not_a_500(client: ApiClient, path: str, body: bytes) -> None:
    problem = assert_problem(client.post(path, content=body, headers=JSON), 422, "invalid-request")
    message = bad_fields(problem)["(body)"]
    assert ("NUL" if b"\\u0000" in body else "surrogate") in message


def test_a_surrogate_pair_is_one_character_and_reaches_the_route(client: ApiClient) -> None:
    """ "\\ud83d\\ude00" is 😀: the route answers as it would for any unknown deployment name."""
    response = client.post("/v1/deployments:replan", content=b'{"deployments": ["chat-\\ud83d\\ude00"]}', headers=JSON)
    body: dict[str, Any] = assert_problem(response, 404)
    assert "chat-\N{GRINNING FACE}" in body["detail"]


def test_a_bulk_replan_name_follows_the_deployment_name_rule(client: ApiClient) -> None:
    """Names with a control character or '/' can never name a deployment (the path refuses them):
    422 naming the item, not a lookup."""
    response = client.post("/v1/deployments:replan", json={"deployments": ["ok", "tab\there"]}, headers=ADMIN_HEADERS)
    problem = assert_problem(response, 422, "invalid-request")
    assert "deployments.1" in bad_fields(problem)
