"""A class plan as a deployment, through the real app and database: POST /v1/plans with `classes`
and a `name` makes the stored class plan that deployment's current plan (GET /v1/deployments/{name},
the list, the history and its CSV read it), and POST /v1/deployments/{name}/replan plans its
classes again and answers a per-class and per-pool diff with the adoption rule of
docs/traffic-classes.md ("Re-planning a class deployment").

The worked example of tests/api/test_classes_plans.py (verify false) on the shipped reference
catalog: two segregated pools, a chat pool and a summarise pool."""

from __future__ import annotations

import copy
import csv
import io
from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_classes_plans import WORKED
from tests.api.test_deployments import CHAT


def named(name: str, **members: Any) -> dict[str, Any]:
    body = copy.deepcopy(WORKED)
    body.update(members, name=name)
    return body


def post_plan(client: ApiClient, admin: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    plan: dict[str, Any] = response.json()
    return plan


def test_a_named_class_plan_becomes_the_deployments_current_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, named("assistant"))
    assert plan["name"] == "assistant"
    deployment = seeded.get("/v1/deployments/assistant").json()
    assert deployment["current_plan_id"] == plan["id"]
    assert deployment["current_plan"] == plan  # read back as the class plan it is
    assert "classes" in deployment["settings"] and "name" not in deployment["settings"]

    [summary] = seeded.get("/v1/deployments").json()["items"]
    pools = plan["pools"]
    assert summary["arrangement"] == plan["arrangement"]["chosen"]
    assert summary["replicas"] == sum(p["replicas"] for p in pools)
    assert summary["gpus_total"] == sum(p["replicas"] * p["tp"] for p in pools)
    assert summary["gpu"] in {p["gpu"] for p in pools}
    assert summary["cost_usd_per_hour"] == plan["cost_usd_per_hour"]
    assert summary["cost_usd_per_month"] == plan["cost_usd_per_hour"] * 730

    [item] = seeded.get("/v1/deployments/assistant/plans").json()["items"]
    assert item["id"] == plan["id"] and item["current"]
    assert item["arrival_rate_rps"] == sum(k["arrival_rate_rps"] for k in WORKED["classes"])
    assert [(p["gpu"], p["replicas"]) for p in item["pools"]] == [(p["gpu"], p["replicas"]) for p in pools]
    assert item["arrangement"] == plan["arrangement"]["chosen"]

    # the history CSV holds plan rows; a class plan's own rows are its CSV
    text = seeded.get("/v1/deployments/assistant/plans", params={"format": "csv"}).text
    assert list(csv.DictReader(io.StringIO(text))) == []
    rows = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"}).text)))
    assert [r["class"] for r in rows] == ["chat", "summarise"]
    assert [p["id"] for p in seeded.get("/v1/plans", params={"name": "assistant"}).json()["items"]] == [plan["id"]]


def test_a_dry_run_with_a_name_makes_no_deployment(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=named("assistant", store=False), headers=admin)
    assert response.status_code == 200, response.text
    assert_problem(seeded.get("/v1/deployments/assistant"), 404)


def test_a_one_workload_plan_and_a_class_plan_take_turns_as_current(seeded: ApiClient, admin: dict[str, str]) -> None:
    first = post_plan(seeded, admin, {**CHAT, "name": "assistant"})
    second = post_plan(seeded, admin, named("assistant"))
    deployment = seeded.get("/v1/deployments/assistant").json()
    assert deployment["current_plan_id"] == second["id"] and deployment["plans_total"] == 2
    items = seeded.get("/v1/deployments/assistant/plans").json()["items"]
    assert [(i["id"], i["current"], i["arrangement"]) for i in items] == [
        (second["id"], True, second["arrangement"]["chosen"]),
        (first["id"], False, None),
    ]
    text = seeded.get("/v1/deployments/assistant/plans", params={"format": "csv"}).text
    assert [r["plan_id"] for r in csv.DictReader(io.StringIO(text))] == [first["id"]]
