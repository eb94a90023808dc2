"""POST /v1/plans with `classes`: the worked example of docs/traffic-classes.md on the shipped
reference catalog (its models and prices as they are), the arrangement comparison, a CSV row per
class, the 422s for a request with both or neither of `workload` and `classes`, and the class plan
stored like a one-workload plan: 201 and Location, read back by GET /v1/plans/{id} (JSON and CSV),
listed by GET /v1/plans, a dry run that stores nothing, its charts and recheck: tests/api/test_charts_classes.py, tests/api/test_classes_recheck.py."""

from __future__ import annotations

import csv
import io
from typing import Any

from sqlalchemy import Engine

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_auth_health import issue_key

CHAT = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
SUMMARISE = {"prompt_tokens": {"mean": 3000, "p99": 8000}, "output_tokens": {"mean": 300, "p99": 800}}
WORKED: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "classes": [
        {"name": "chat", "arrival_rate_rps": 60, **CHAT, "slo": {"ttft_ms": 500}, "priority": 0},
        {"name": "summarise", "arrival_rate_rps": 20, **SUMMARISE, "deadline_h": 6, "priority": 1},
    ],
    "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
    "verify": False,
}


def test_the_worked_example_compares_arrangements_and_answers_per_class(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json={**WORKED, "store": False}, headers=admin)
    assert response.status_code == 200, response.text
    plan = response.json()
    compared = {c["name"]: c["cost_usd_per_hour"] for c in plan["arrangement"]["compared"]}
    assert set(compared) == {"shared_fcfs", "shared_priority", "shared_priority_shedding", "segregated", "deferred"}
    assert compared["deferred"] is None  # no day profile
    assert compared["shared_priority_shedding"] is None  # no class may be shed
    chosen = plan["arrangement"]["chosen"]
    assert compared[chosen] == min(v for v in compared.values() if v is not None)
    assert compared[chosen] <= compared["shared_fcfs"]
    assert plan["cost_usd_per_hour"] == compared[chosen]
    by_name = {k["name"]: k for k in plan["classes"]}
    assert by_name["chat"]["ttft_ms"] <= 500
    assert by_name["summarise"]["e2e_s"] <= 6 * 3600
    assert all(k["meets_target"] for k in plan["classes"])
    assert {k["name"]: k["priority"] for k in plan["classes"]} == {"chat": 0, "summarise": 1}
    assert "location" not in response.headers  # a dry run is not stored
    assert_problem(seeded.get(f"/v1/plans/{plan['id']}"), 404)


def test_a_class_plan_as_csv_has_a_row_per_class(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=WORKED, headers={**admin, "accept": "text/csv"})
    assert response.status_code == 201, response.text
    assert response.headers["location"].startswith("/v1/plans/")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [r["class"] for r in rows] == ["chat", "summarise"]


def test_workload_and_classes_together_or_neither_are_422(seeded: ApiClient, admin: dict[str, str]) -> None:
    both = {**WORKED, "workload": {"arrival_rate_rps": 1, **CHAT}, "slo": {"ttft_ms": 500}}
    assert_problem(seeded.post("/v1/plans", json=both, headers=admin), 422)
    neither = {k: v for k, v in WORKED.items() if k != "classes"}
    assert_problem(seeded.post("/v1/plans", json=neither, headers=admin), 422)
    assert_problem(seeded.post("/v1/plans", json={**WORKED, "name": "a/b"}, headers=admin), 422)  # an unaddressable name
    no_target = {**WORKED, "classes": [{"name": "x", "arrival_rate_rps": 1, **CHAT}]}
    assert_problem(seeded.post("/v1/plans", json=no_target, headers=admin), 422)


def test_class_plans_refuse_pools_of_another_topology_and_speculation_on(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Class pools are aggregated and do not speculate (the priority pool's simulator has no verify
    step): topology disaggregated and speculative on are 422s naming the constraint; the default
    speculative auto plans the pools without speculation."""
    for constraint, value in (("topology", "disaggregated"), ("speculative", "on")):
        body = {**WORKED, "constraints": {**WORKED["constraints"], constraint: value}}
        problem = assert_problem(seeded.post("/v1/plans", json=body, headers=admin), 422)
        assert f"constraints.{constraint}" in problem["detail"] + str(problem.get("errors"))
    plan = seeded.post("/v1/plans", json=WORKED, headers=admin).json()
    assert all(pool.get("speculative") is None for pool in plan["pools"])


def test_a_day_profile_prices_the_deferred_arrangement(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Chat at its peak for eight office hours and at a quarter of it otherwise, summarisation due
    within 12 h, any GPU of the reference catalog: deferral (the chat pool at its peak plus
    off-peak capacity) is chosen, cheaper than segregation, with summarisation done within its
    deadline. Due within 2 h it is infeasible. Profiles of different lengths, or above the
    class's peak rate, are 422."""
    office = [60 if 9 <= hour < 17 else 15 for hour in range(24)]
    chat, summarise = WORKED["classes"]
    body = {**WORKED, "constraints": {}, "classes": [{**chat, "demand_rps": office}, {**summarise, "deadline_h": 12}]}
    response = seeded.post("/v1/plans", json={**body, "store": False}, headers=admin)
    assert response.status_code == 200, response.text
    plan = response.json()
    compared = {c["name"]: c["cost_usd_per_hour"] for c in plan["arrangement"]["compared"]}
    assert plan["arrangement"]["chosen"] == "deferred"
    assert compared["deferred"] < compared["segregated"]
    assert plan["cost_usd_per_hour"] == compared["deferred"]
    by_name = {k["name"]: k for k in plan["classes"]}
    assert by_name["summarise"]["e2e_s"] <= 12 * 3600
    assert plan["pools"][0]["name"] == "interactive"
    short = {**body, "classes": [{**chat, "demand_rps": office}, {**summarise, "deadline_h": 2}]}
    refused = {
        c["name"]: c
        for c in seeded.post("/v1/plans", json={**short, "store": False}, headers=admin).json()["arrangement"]["compared"]
    }
    assert refused["deferred"]["cost_usd_per_hour"] is None
    assert "deadline" in refused["deferred"]["reason"]
    uneven = {**body, "classes": [{**chat, "demand_rps": office}, {**summarise, "demand_rps": [20] * 12}]}
    assert_problem(seeded.post("/v1/plans", json=uneven, headers=admin), 422)
    above = {**body, "classes": [{**chat, "demand_rps": [61] * 24}, summarise]}
    assert_problem(seeded.post("/v1/plans", json=above, headers=admin), 422)


def test_a_class_plan_is_stored_read_back_and_listed(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Stored by default as a one-workload plan is: 201 with Location, the same JSON from GET, a row per
    class from its CSV, and a summary in GET /v1/plans (workload `classes`, the classes' summed rate, the
    pools' replicas and GPUs, the arrangement's cost), found by its model too."""
    response = seeded.post("/v1/plans", json=WORKED, headers=admin)
    assert response.status_code == 201, response.text
    posted = response.json()
    assert response.headers["location"] == f"/v1/plans/{posted['id']}"
    read = seeded.get(response.headers["location"])
    assert read.status_code == 200, read.text
    assert read.json() == posted
    assert posted["provenance"]["catalog_version"] >= 1
    assert set(posted["provenance"]["efficiencies"]) == {p["gpu"] for p in posted["pools"]}
    assert all(p["precision"]["weights"] and p["precision"]["kv_cache"] for p in posted["pools"])
    rows = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{posted['id']}/csv").text)))
    assert [r["class"] for r in rows] == ["chat", "summarise"]
    assert {r["arrangement"] for r in rows} == {posted["arrangement"]["chosen"]}
    as_csv = seeded.get(f"/v1/plans/{posted['id']}", params={"format": "csv"})
    assert as_csv.status_code == 200 and as_csv.text.replace("\r\n", "\n").splitlines()[0].startswith("class,")
    page = seeded.get("/v1/plans", params={"model": "llama-3.1-8b"})
    assert page.status_code == 200, page.text
    (item,) = [i for i in page.json()["items"] if i["id"] == posted["id"]]
    assert item["workload"] == "classes"
    assert item["arrival_rate_rps"] == 80
    assert item["replicas"] == sum(p["replicas"] for p in posted["pools"])
    assert item["gpus_total"] == sum(p["tp"] * p["replicas"] for p in posted["pools"])
    assert item["gpu"] == posted["pools"][0]["gpu"]
    assert item["cost_usd_per_hour"] == posted["cost_usd_per_hour"]
    assert item["cost_usd_per_month"] == posted["cost_usd_per_hour"] * 730
    assert item["name"] is None


def test_a_class_plan_retried_with_its_idempotency_key_is_answered_again(seeded: ApiClient, admin: dict[str, str]) -> None:
    headers = {**admin, "Idempotency-Key": "classes-once"}
    first = seeded.post("/v1/plans", json=WORKED, headers=headers)
    again = seeded.post("/v1/plans", json=WORKED, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert seeded.get("/v1/plans").json()["total"] == 1


def test_storing_a_class_plan_needs_the_planner_role(seeded: ApiClient, engine: Engine) -> None:
    """As a one-workload plan: a reader key may dry-run a class plan (200) but not store it (403)."""
    reader = issue_key(engine, "reader")
    assert_problem(seeded.post("/v1/plans", json=WORKED, headers=reader), 403)
    assert seeded.post("/v1/plans", json={**WORKED, "store": False}, headers=reader).status_code == 200
    assert seeded.get("/v1/plans", headers=reader).json()["total"] == 0
