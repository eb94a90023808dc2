"""The CSV-only routes through the real app: `GET /v1/plans/{plan_id}/csv` (get_plan_csv),
`GET /v1/fleet-plans/{plan_id}/csv` (get_fleet_plan_csv) and `POST /v1/what-if/csv`
(what_if_sweep_csv) answer the same text as `?format=csv` on their JSON routes, 404 as a problem
document for an unknown id, and declare nothing but `text/csv` for success in the OpenAPI
document, which is what lets a generated client return the CSV as text."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from api.csv_export import PLAN_CSV_COLUMNS
from api.schemas.fleet_plan_csv import CSV_COLUMNS as FLEET_CSV_COLUMNS
from api.schemas.what_if import WHAT_IF_CSV_COLUMNS
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_csv_plans import CHAT
from tests.api.test_fleet_plans import body as fleet_body

CSV_ONLY = {
    ("/v1/plans/{plan_id}/csv", "get"): ("get_plan_csv", PLAN_CSV_COLUMNS),
    ("/v1/fleet-plans/{plan_id}/csv", "get"): ("get_fleet_plan_csv", FLEET_CSV_COLUMNS),
    ("/v1/what-if/csv", "post"): ("what_if_sweep_csv", WHAT_IF_CSV_COLUMNS),
}


def test_the_csv_routes_declare_only_text_csv_for_success(client: ApiClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for (path, method), (operation_id, columns) in CSV_ONLY.items():
        operation = paths[path][method]
        assert operation["operationId"] == operation_id
        success = operation["responses"]["200"]
        assert list(success["content"]) == ["text/csv"], (path, success["content"].keys())
        assert success["content"]["text/csv"]["example"] == ",".join(columns) + "\r\n"
        assert all(not status.startswith("2") or status == "200" for status in operation["responses"])
    json_get = paths["/v1/plans/{plan_id}"]["get"]["responses"]["200"]["content"]
    assert next(iter(json_get)) == "application/json" and "text/csv" in json_get, "?format=csv stays declared on the JSON route"


def test_a_plans_csv_route_answers_the_format_csv_text(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/plans", json=CHAT, headers=admin)
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    only = seeded.get(f"/v1/plans/{plan_id}/csv")
    assert only.status_code == 200 and only.headers["content-type"] == "text/csv; charset=utf-8"
    assert only.headers["content-disposition"] == f'attachment; filename="plan-{plan_id}.csv"'
    assert only.text == seeded.get(f"/v1/plans/{plan_id}", params={"format": "csv"}).text
    assert only.text.startswith(",".join(PLAN_CSV_COLUMNS) + "\r\n") and len(only.text.splitlines()) == 2
    assert_problem(seeded.get("/v1/plans/" + "0" * 32 + "/csv"), 404, "not-found")


@pytest.mark.slow
def test_a_fleet_plans_csv_route_answers_the_format_csv_text(seeded: ApiClient) -> None:
    created = seeded.post("/v1/fleet-plans", json=fleet_body(), headers=ADMIN_HEADERS)
    assert created.status_code == 201, created.text
    plan_id = created.json()["id"]
    only = seeded.get(f"/v1/fleet-plans/{plan_id}/csv")
    assert only.status_code == 200 and only.headers["content-type"] == "text/csv; charset=utf-8"
    assert only.text == seeded.get(f"/v1/fleet-plans/{plan_id}", params={"format": "csv"}).text
    assert only.text.startswith(",".join(FLEET_CSV_COLUMNS) + "\r\n")
    assert_problem(seeded.get("/v1/fleet-plans/" + "0" * 32 + "/csv"), 404, "not-found")


def test_a_what_if_csv_route_answers_the_format_csv_text(seeded: ApiClient) -> None:
    sweep: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "workload": {"prompt_tokens": 800, "output_tokens": 200},
        "slo": {"tpot_ms": 60},
        "constraints": {"gpus": ["h100-sxm"]},
        "sweep": {"arrival_rates_rps": [5, 20]},
    }
    only = seeded.post("/v1/what-if/csv", json=sweep, headers=ADMIN_HEADERS)
    assert only.status_code == 200 and only.headers["content-type"] == "text/csv; charset=utf-8", only.text
    negotiated = seeded.post("/v1/what-if", json=sweep, params={"format": "csv"}, headers=ADMIN_HEADERS).text
    assert only.text.startswith(",".join(WHAT_IF_CSV_COLUMNS) + "\r\n") and len(only.text.splitlines()) == 3
    assert _without_timing(only.text) == _without_timing(negotiated), "the same points (each run times its own plans)"
    assert_problem(seeded.post("/v1/what-if/csv", json={**sweep, "model": "no-such-model"}, headers=ADMIN_HEADERS), 404)


def _without_timing(text: str) -> list[dict[str, str]]:
    """The CSV's rows less `plan_ms`, the wall time each run measures for itself."""
    return [{k: v for k, v in row.items() if k != "plan_ms"} for row in csv.DictReader(io.StringIO(text, newline=""))]
