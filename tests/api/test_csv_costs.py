"""Fleet plans for spreadsheets: costs per hour, per month (730 h) and per million output tokens
next to the horizon total, with the currency, worked from the plan's own numbers; the schedule
CSV through the shared negotiation and response (api/csv_export.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient

#: One 8B chat workload over two 2-hour periods on one GPU type and a small search grid (quick).
FLEET: dict[str, Any] = {
    "workloads": [{
        "name": "chat", "model": "llama-3.1-8b", "prompt_tokens": 1000, "output_tokens": 250,
        "slo": {"ttft_ms": 2000, "tpot_ms": 60}, "demand_rps": [4, 10],
    }],
    "period_hours": 2,
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
    "search": {"tp_degrees": [1], "batch_limits": [64], "chunk_budgets": [None]},
}  # fmt: skip


def test_a_fleet_plan_states_its_cost_per_hour_month_and_million_output_tokens(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Demand is 4 req/s for 2 h then 10 req/s for 2 h, 250 output tokens each:
    (4 + 10) req/s × 7,200 s × 250 = 25.2 million output tokens over the 4-hour horizon."""
    created = seeded.post("/v1/fleet-plans", json=FLEET, headers=admin)
    assert created.status_code == 201, created.text
    cost = created.json()["cost"]
    assert cost["horizon_hours"] == 4
    assert cost["currency"] == "USD"
    # Each figure is computed unrounded and served in cents, so a figure derived from usd_total
    # agrees with it to half a cent plus usd_total's half cent scaled by the derivation.
    cent = 0.005
    assert cost["usd_per_hour"] == pytest.approx(cost["usd_total"] / 4, abs=cent + cent / 4)
    assert cost["usd_per_month"] == pytest.approx(cost["usd_total"] / 4 * 730, abs=cent + cent / 4 * 730)
    assert cost["usd_per_million_output_tokens"] == pytest.approx(cost["usd_total"] / 25.2, abs=cent + cent / 25.2)
    assert cost["usd_total"] > 0

    stored = seeded.get(created.headers["location"]).json()
    assert stored["cost"] == cost

    schedule = seeded.get(created.headers["location"], headers={"Accept": "text/csv;q=0.9, application/json;q=0.5"})
    assert schedule.headers["content-type"] == "text/csv; charset=utf-8"
    assert schedule.headers["content-disposition"] == f'attachment; filename="fleet-plan-{stored["id"]}.csv"'
    lines = schedule.text.split("\r\n")
    assert lines[0].startswith("period,start_hour,workload,gpu,") and lines[-1] == ""  # CRLF line ends (RFC 4180)
    assert seeded.get(created.headers["location"], headers={"Accept": "application/json, text/csv"}).json() == stored


def test_fleet_plans_take_the_shared_format_parameter(client: ApiClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    for path, method in (("/v1/fleet-plans", "post"), ("/v1/fleet-plans/{plan_id}", "get")):
        [format_parameter] = [p for p in paths[path][method]["parameters"] if p["name"] == "format"]
        assert {"$ref": "#/components/schemas/ResponseFormat"} in format_parameter["schema"]["anyOf"]


def test_deployment_summaries_and_history_carry_every_cost_unit(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = {
        "model": "llama-3.1-8b", "workload": {"arrival_rate_rps": 8, "prompt_tokens": 800, "output_tokens": 200},
        "slo": {"tpot_ms": 60}, "constraints": {"gpus": ["h100-sxm"]}, "verify": False, "name": "finance-costs",
    }  # fmt: skip
    created = seeded.post("/v1/plans", json=request, headers=admin)
    assert created.status_code == 201, created.text
    cost = created.json()["cost"]
    [summary] = [d for d in seeded.get("/v1/deployments").json()["items"] if d["name"] == "finance-costs"]
    [item] = seeded.get("/v1/deployments/finance-costs/plans").json()["items"]
    for listed in (summary, item):
        assert (listed["cost_usd_per_hour"], listed["cost_usd_per_month"], listed["currency"]) == (
            cost["usd_per_hour"],
            cost["usd_per_month"],
            "USD",
        )
        assert listed["cost_usd_per_million_output_tokens"] == cost["usd_per_million_output_tokens"]
