"""Plans as CSV through the real app: `?format=csv` and `Accept: text/csv` on GET and POST
/v1/plans, the same numbers as the JSON, RFC 4180 framing, and the OpenAPI declaration."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from typing import Any

import pytest

from api.csv_export import PLAN_CSV_COLUMNS, plan_csv_rows, rows_to_csv
from api.schemas.plan_response import plan_response
from planner.planning import FleetRow, plan_capacity
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.planner.test_planning import INPUTS as PLANNING_INPUTS
from tests.planner.test_planning import request as planning_request

#: Chat on an 8B model over one GPU type, unverified, so each plan takes well under a second.
CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 12, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "verify": False,
    "name": "chat, 8b",
}


def parse(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def assert_csv(response: Any, status: int = 200) -> list[dict[str, str]]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"].startswith('attachment; filename="plan-')
    text = response.content.decode("utf-8")
    assert text.startswith(",".join(PLAN_CSV_COLUMNS) + "\r\n")
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", "")
    return parse(text)


def test_a_stored_plan_reads_back_as_one_csv_row_matching_its_json(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/plans", json=CHAT, headers=admin)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert plan["cost"]["currency"] == "USD"

    by_query = seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"})
    by_accept = seeded.get(f"/v1/plans/{plan['id']}", headers={"Accept": "text/csv"})
    [row] = assert_csv(by_query)
    assert by_accept.content == by_query.content
    assert by_query.headers["content-disposition"] == f'attachment; filename="plan-{plan["id"]}.csv"'

    assert row["plan_id"] == plan["id"]
    assert row["deployment"] == "chat, 8b"  # the comma survives: the field is quoted
    assert row["created_at"] == plan["provenance"]["created_at"]
    assert (row["model"], row["gpu"], row["currency"], row["verified"]) == ("llama-3.1-8b", "h100-sxm", "USD", "false")
    assert int(row["tp"]) == plan["plan"]["tp"]
    assert int(row["replicas"]) == plan["plan"]["replicas"]
    assert int(row["gpus_total"]) == plan["plan"]["gpus_total"]
    assert row["weights_precision"] == plan["plan"]["precision"]["weights"]
    assert row["kv_cache_precision"] == plan["plan"]["precision"]["kv_cache"]
    assert int(row["batch_limit"]) == plan["plan"]["batch_limit"]
    assert row["chunk_tokens"] == ("" if plan["plan"]["chunk_tokens"] is None else str(plan["plan"]["chunk_tokens"]))
    assert float(row["target_rho"]) == plan["plan"]["target_rho"]
    assert float(row["arrival_rate_rps"]) == 12.0 == float(row["offered_rps"])
    assert (float(row["slo_ttft_ms"]), float(row["slo_tpot_ms"]), row["slo_e2e_s"], float(row["slo_percentile"])) == (
        1000,
        60,
        "",
        99,
    )
    assert float(row["cost_usd_per_hour"]) == plan["cost"]["usd_per_hour"]  # exact: floats are written round-trip
    assert float(row["cost_usd_per_month"]) == pytest.approx(730 * float(row["cost_usd_per_hour"]))
    assert float(row["cost_usd_per_million_output_tokens"]) == plan["cost"]["usd_per_million_output_tokens"]
    assert float(row["ttft_p99_ms"]) == plan["predicted"]["ttft_ms"]["p99"] <= 1000
    assert float(row["tpot_p99_ms"]) == plan["predicted"]["tpot_ms"]["p99"] <= 60
    assert float(row["e2e_p99_s"]) == plan["predicted"]["e2e_s"]["p99"]

    json_again = seeded.get(f"/v1/plans/{plan['id']}", params={"format": "json"}, headers={"Accept": "text/csv"})
    assert json_again.headers["content-type"] == "application/json"
    assert json_again.json() == plan
    assert seeded.get(f"/v1/plans/{plan['id']}", headers={"Accept": "application/json, text/csv"}).json() == plan


def test_post_answers_csv_when_asked_and_still_stores_the_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/plans", json=CHAT, params={"format": "csv"}, headers=admin)
    [row] = assert_csv(created, 201)
    assert created.headers["location"] == f"/v1/plans/{row['plan_id']}"
    stored = seeded.get(created.headers["location"])
    assert stored.status_code == 200
    assert stored.json()["cost"]["usd_per_hour"] == float(row["cost_usd_per_hour"])


def _fleet_row(gpu: str, replicas: int, offered_rps: float, usd_per_hour: float) -> FleetRow:
    return FleetRow(
        gpu=gpu,
        tp=1,
        replicas=replicas,
        gpus=replicas,
        weights_precision="bf16",
        kv_precision="bf16",
        batch_limit=64,
        chunk_tokens=None,
        max_rps_at_slo=2.0,
        saturation_rps=4.0,
        offered_rps=offered_rps,
        target_rho=0.5,
        cost_usd_per_hour=usd_per_hour,
    )


def test_a_mixed_fleet_answer_prices_each_row_and_its_csv_sums_to_the_plan() -> None:
    """A mixed fleet in the JSON answer and its CSV, from a planner result (a mixed plan through the
    API takes the planner seconds). H100 rows serve 6 of 10 req/s for $6/h and A100 rows 4 req/s for
    $2/h; the plan is $8/h at $1/Mtok, so the H100 row is $1 × (6/8)/(6/10) = $1.25/Mtok and the
    A100 row $1 × (2/8)/(4/10) = $0.625/Mtok."""
    planned = plan_capacity(replace(planning_request(), verify=False), PLANNING_INPUTS)  # its sections; the rows are this test's
    result = replace(
        planned, rows=(_fleet_row("h100-sxm", 3, 6.0, 6.0), _fleet_row("a100-80gb-sxm", 2, 4.0, 2.0)), replicas=5, gpus_total=5,
        target_rho=0.5, cost_usd_per_hour=8.0, cost_usd_per_month=5840.0, cost_usd_per_million_output_tokens=1.0,
    )  # fmt: skip
    answer = plan_response("p" * 32, "mixed", result, "2026-11-29T00:00:00+00:00")
    fleet = answer["plan"]["fleet"]
    assert answer["cost"]["currency"] == "USD"
    assert [f["cost_usd_per_month"] for f in fleet] == pytest.approx([6.0 * 730, 2.0 * 730])
    assert [f["cost_usd_per_million_output_tokens"] for f in fleet] == pytest.approx(
        [1.25, 0.625], abs=0.0051
    )  # money in cents, half-even

    rows = parse(
        rows_to_csv(plan_csv_rows({**CHAT, "workload": {**CHAT["workload"], "arrival_rate_rps": 10}}, answer), PLAN_CSV_COLUMNS)
    )
    assert [(r["fleet_row"], r["fleet_rows"], r["gpu"]) for r in rows] == [("1", "2", "h100-sxm"), ("2", "2", "a100-80gb-sxm")]
    assert sum(float(r["cost_usd_per_hour"]) for r in rows) == pytest.approx(answer["cost"]["usd_per_hour"])
    assert sum(float(r["cost_usd_per_month"]) for r in rows) == pytest.approx(answer["cost"]["usd_per_month"])
    assert sum(int(r["gpus_total"]) for r in rows) == answer["plan"]["gpus_total"]
    assert [float(r["cost_usd_per_million_output_tokens"]) for r in rows] == pytest.approx(
        [1.25, 0.625], abs=0.0051
    )  # money in cents, half-even


def test_an_unknown_plan_is_a_problem_even_when_csv_is_asked_for(seeded: ApiClient) -> None:
    assert_problem(seeded.get("/v1/plans/" + "0" * 32, params={"format": "csv"}), 404, "not-found")
    assert_problem(seeded.get("/v1/plans/" + "0" * 32, params={"format": "xml"}), 422, "invalid-request")


def test_the_openapi_document_declares_text_csv_for_plans(client: ApiClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, method, status in (("/v1/plans", "post", "201"), ("/v1/plans/{plan_id}", "get", "200")):
        content = paths[path][method]["responses"][status]["content"]
        schema = content["application/json"]["schema"]
        # a plan is one workload's PlanResponse or, for a `classes` request, a ClassesPlanResponse
        assert {"$ref": "#/components/schemas/PlanResponse"} in schema.get("anyOf", [schema])
        assert {"$ref": "#/components/schemas/ClassesPlanResponse"} in schema.get("anyOf", [])
        assert content["text/csv"]["example"].startswith("plan_id,deployment,created_at,")
        assert "format" in {p["name"] for p in paths[path][method]["parameters"]}
