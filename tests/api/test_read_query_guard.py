"""Reads refuse query parameters their operation does not declare, as writes do (api/app.py BodyGuard):
422 naming the parameter, where FastAPI alone would answer the default as if it were asked for. The
parameters the OpenAPI document declares, and those the explorer page and the CLI send, all pass."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from api.cli import openapi_document
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_KEY, assert_problem, bad_fields

ROOT = Path(__file__).resolve().parents[2]
#: Where a client of this service writes a query string by hand (the rest go through the OpenAPI document).
HAND_WRITTEN_CLIENTS = (ROOT / "api" / "static" / "explorer" / "explorer.js", ROOT / "api" / "client_cli.py")
UNKNOWN = "unknown field '{}'"


@pytest.mark.parametrize(
    ("url", "unknown"),
    [
        ("/v1/gpus?limt=5", ["limt"]),  # a misspelt page size would answer the default page
        ("/v1/gpus?limit=5&dry_run=1&x=", ["dry_run", "x"]),  # every unknown one named, the known one not
        ("/v1/models/llama-2-70b?fields=name", ["fields"]),
        ("/v1/plans?format=csv&limit=2", ["format"]),  # the list has no CSV view: it would answer JSON
    ],
)
def test_a_read_with_an_unknown_query_parameter_is_422_naming_it(client: ApiClient, url: str, unknown: list[str]) -> None:
    refused = assert_problem(client.get(url), 422)
    assert bad_fields(refused) == {name: UNKNOWN.format(name) for name in unknown}


def test_a_read_with_only_declared_parameters_still_answers(client: ApiClient) -> None:
    """The guard takes nothing away: declared parameters, a dependency's (`format`) and none at all pass, and
    what is not an operation of the API (the Prometheus scrape) is left as it was."""
    page = client.get("/v1/gpus?limit=1&offset=0")
    assert page.status_code == 200, page.text
    assert len(page.json()["items"]) <= 1
    assert client.get("/v1/plans/no-such-plan?format=csv").status_code == 404  # past the guard: the route answers
    assert client.get("/v1/gpus/no-such-gpu").status_code == 404
    assert client.get("/healthz").status_code == 200
    assert client.get("/metrics?name[]=x").status_code == 200


def _operations() -> list[tuple[str, str, list[str]]]:
    """(method, path with its path parameters filled in, query parameter names) of every read in the document."""
    document: dict[str, Any] = json.loads(openapi_document())
    out = []
    for path, operations in document["paths"].items():
        get = operations.get("get")
        if get is None:
            continue
        names = [p["name"] for p in get.get("parameters", []) if p.get("in") == "query"]
        out.append(("GET", re.sub(r"\{[^}]+\}", "x", path), names))
    return out


def test_every_query_parameter_the_openapi_document_declares_passes_the_guard(client: ApiClient) -> None:
    """Each read is sent every query parameter its document declares: whatever it answers (404 for the
    made-up ids, 422 for a value out of range), no parameter is refused as unknown, and an extra one is on
    every /v1 read."""
    operations = _operations()
    assert len(operations) >= 20  # the document's reads were found
    with_query = 0
    for _, path, names in operations:
        declared = "&".join(f"{name}=1" for name in names)
        answer = client.get(f"{path}?{declared}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        if answer.status_code == 422:
            fields = bad_fields(answer.json())
            assert not [n for n in names if fields.get(n) == UNKNOWN.format(n)], (path, fields)
        with_query += bool(names)
        if not path.startswith("/v1/"):
            continue
        extra = client.get(f"{path}?{declared}{'&' if declared else ''}not_a_parameter=1")
        assert extra.status_code == 422, (path, extra.text)
        assert bad_fields(extra.json()) == {"not_a_parameter": UNKNOWN.format("not_a_parameter")}
    assert with_query >= 5


def _hand_written_queries() -> list[tuple[str, list[str]]]:
    """(path with its ${…} / {…} parts filled in, query parameter names) of each `/v1/…?…` URL the explorer
    page and the CLI write."""
    found = []
    for source in HAND_WRITTEN_CLIENTS:
        text = source.read_text(encoding="utf-8")
        for path, query in re.findall(r"(/v1/[^\"'`?\s]*)\?([^\"'`\s]*)", text):
            path = re.sub(r"\$?\{[^}]*\}", "x", path)
            found.append((path, re.findall(r"(?:^|&)([A-Za-z_]+)=", query)))
    return found


def test_the_explorer_and_the_cli_send_only_declared_query_parameters(client: ApiClient) -> None:
    """Every query string the explorer page and the CLI build by hand names parameters its read declares:
    none of them is refused as unknown (the answer itself may be 404 for the made-up ids)."""
    queries = _hand_written_queries()
    assert len(queries) >= 6  # /v1/models, /v1/gpus, /v1/plans, /v1/deployments (twice), deploy, the CLI's deploy
    for path, names in queries:
        assert names, path
        answer = client.get(f"{path}?{'&'.join(f'{n}=1' for n in names)}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        fields = bad_fields(answer.json()) if answer.status_code == 422 else {}
        assert not [n for n in names if fields.get(n) == UNKNOWN.format(n)], (path, fields)
