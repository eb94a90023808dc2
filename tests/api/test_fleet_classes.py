"""Fleet workloads with traffic classes (planner/fleet_classes.py through POST /v1/fleet-plans): at a flat day
the fleet takes the arrangement POST /v1/plans chooses for the workload alone, states each class's p99s, writes
a CSV row per class, and refuses a workload that mixes classes with its own shape or with separate pools."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from api import fleet_operation
from api.schemas.fleet_plans import FleetPlanRequest
from planner.candidates import BATCH_LIMITS, CHUNK_BUDGETS, TP_DEGREES
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_charts import _svg
from tests.api.test_classes_plans import WORKED
from tests.api.test_fleet_plans import (  # noqa: F401  (api and seeded_sqlite_template are fixtures)
    api,
    post,
    seeded_sqlite_template,
)

#: The test catalog's prices of tests/planner/test_plan_classes.py (H100 $4/h, A100 $2/h), reserved at the
#: on-demand price: a flat day then ranks arrangements by the same $/h as the single plan.
PRICES = {"h100-sxm": {"on_demand": 4.0, "reserved_1y": 4.0}, "a100-80gb-sxm": {"on_demand": 2.0, "reserved_1y": 2.0}}
#: The single plan's own grid (planner/candidates.py), so both plan each pool on the same configurations.
SEARCH = {"tp_degrees": list(TP_DEGREES), "batch_limits": list(BATCH_LIMITS), "chunk_budgets": list(CHUNK_BUDGETS)}


def classes_workload(name: str = "assist", **changes: Any) -> dict[str, Any]:
    return {"name": name, "model": WORKED["model"], "classes": WORKED["classes"], **changes}


def fleet(*workloads: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "workloads": list(workloads),
        "constraints": WORKED["constraints"],
        "prices": PRICES,
        "search": SEARCH,
        **changes,
    }


@pytest.fixture
def planned(api: ApiClient) -> tuple[dict[str, Any], dict[str, Any]]:  # noqa: F811
    single = api.post("/v1/plans", json={**WORKED, "prices": PRICES, "store": False}, headers=ADMIN_HEADERS)
    assert single.status_code == 200, single.text
    flat_day = [{**k, "demand_rps": [k["arrival_rate_rps"]] * 2} for k in WORKED["classes"]]  # two 12 h periods
    response = post(api, fleet(classes_workload(classes=flat_day), period_hours=12.0))
    assert response.status_code == 201, response.text
    return single.json(), response.json()


def test_a_flat_day_takes_the_single_plans_arrangement_with_its_p99s(planned: tuple[dict[str, Any], dict[str, Any]]) -> None:
    single, plan = planned
    chosen = plan["classes"]["assist"]
    assert chosen["arrangement"] == single["arrangement"]["chosen"]
    assert {"segregated", "shared_fcfs"} <= set(chosen["offered"])
    expected = {k["name"]: k for k in single["classes"]}
    for k in chosen["classes"]:
        assert k["ttft_ms"] == pytest.approx(expected[k["name"]]["ttft_ms"], rel=1e-3)
        assert k["e2e_s"] == pytest.approx(expected[k["name"]]["e2e_s"], rel=1e-3)
        assert k["meets_target"]
    assert plan["cost"]["usd_per_hour"] == pytest.approx(single["cost_usd_per_hour"], rel=1e-3)
    for period in plan["periods"]:
        [arranged] = period["class_pools"]
        assert arranged["arrangement"] == chosen["arrangement"] and arranged["demand_rps"] == 80
        assert sum(arranged["gpus"].values()) == sum(period["gpus_used"].values())


def test_the_csv_has_a_row_per_class_and_period(api: ApiClient, planned: tuple[dict[str, Any], dict[str, Any]]) -> None:  # noqa: F811
    _, plan = planned
    response = api.get(f"/v1/fleet-plans/{plan['id']}/csv")
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert sorted((int(r["period"]), r["class_name"]) for r in rows) == [
        (0, "chat"),
        (0, "summarise"),
        (1, "chat"),
        (1, "summarise"),
    ]
    assert {float(r["demand_rps"]) for r in rows if r["class_name"] == "chat"} == {60.0}
    assert sum(int(r["gpus"]) for r in rows if r["period"] == "0") == sum(plan["periods"][0]["gpus_used"].values())


def test_a_class_workload_beside_a_plain_one(api: ApiClient) -> None:  # noqa: F811
    plain = {
        "name": "chat2",
        "model": "llama-3.1-8b",
        "prompt_tokens": {"mean": 800, "p99": 3000},
        "output_tokens": {"mean": 200, "p99": 700},
        "slo": {"ttft_ms": 1000},
        "demand_rps": [5, 10],
    }
    day = [{**WORKED["classes"][0], "demand_rps": [60, 30]}, WORKED["classes"][1]]
    response = post(api, fleet(classes_workload(classes=day), plain))
    assert response.status_code == 201, response.text
    plan = response.json()
    assert [p["demand_rps"]["assist"] for p in plan["periods"]] == [80, 50]
    assert all(p["class_pools"] and p["workloads"] for p in plan["periods"])
    assert set(plan["classes"]) == {"assist"} and set(plan["levers"]) == {"chat2"}


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"prompt_tokens": 100}, "gives classes and prompt_tokens"),
        ({"demand_rps": [1, 2]}, "gives classes and demand_rps"),
        ({"topology": "disaggregated"}, "aggregated pools only"),
        ({"speculative": "auto"}, "gives classes and speculative"),
        ({"classes": [WORKED["classes"][0], WORKED["classes"][0]]}, "class names must be unique"),
    ],
)
def test_bad_class_workloads_are_422_with_a_reason(api: ApiClient, changes: dict[str, Any], reason: str) -> None:  # noqa: F811
    response = post(api, fleet(classes_workload(**changes)))
    assert_problem(response, 422)
    assert reason in response.text


def test_a_workload_with_neither_shape_nor_classes_is_422(api: ApiClient) -> None:  # noqa: F811
    response = post(api, fleet({"name": "w", "model": "llama-3.1-8b", "demand_rps": [1]}))
    assert_problem(response, 422)
    assert "needs prompt_tokens, output_tokens, slo" in response.text


def test_a_class_profile_of_the_wrong_length_is_422(api: ApiClient) -> None:  # noqa: F811
    plain = {**classes_workload("p"), "classes": None}
    del plain["classes"]
    plain.update(prompt_tokens=100, output_tokens=50, slo={"e2e_s": 10}, demand_rps=[1, 1, 1])
    day = [{**WORKED["classes"][0], "demand_rps": [60, 30]}, WORKED["classes"][1]]
    response = post(api, fleet(plain, classes_workload(classes=day)))
    assert_problem(response, 422)
    assert "a class profile gives one rate per period" in response.text


def test_the_day_chart_labels_each_periods_arrangement(api: ApiClient, planned: tuple[dict[str, Any], dict[str, Any]]) -> None:  # noqa: F811
    _, plan = planned
    _root, drawn, texts = _svg(api.get(f"/v1/fleet-plans/{plan['id']}/charts/day.svg"))
    for i, period in enumerate(plan["periods"]):
        [arranged] = period["class_pools"]
        [label] = drawn["class_pools"][i]
        assert label.startswith(f"assist {arranged['arrangement']} (")
        for pool in arranged["pools"]:
            assert f"{'+'.join(pool['classes'])} {pool['gpus']}" in label
        assert any(label in text for text in texts)


def test_a_class_workload_with_its_own_arrival_cv_is_422(api: ApiClient) -> None:  # noqa: F811
    assert "gives classes and arrival_cv" in post(api, fleet(classes_workload(arrival_cv=2.0))).text


def test_the_async_estimate_counts_each_distinct_rate_vector_of_the_classes() -> None:
    flat = FleetPlanRequest.model_validate(fleet(classes_workload()))
    day = [{**WORKED["classes"][0], "demand_rps": [60, 30, 60]}, {**WORKED["classes"][1], "demand_rps": [20, 20, 20]}]
    varied = FleetPlanRequest.model_validate(fleet(classes_workload(classes=day)))
    assert (fleet_operation.class_rate_vectors(flat), fleet_operation.class_rate_vectors(varied)) == (1, 2)
    extra = fleet_operation.estimated_plan_s(varied, 2) - fleet_operation.estimated_plan_s(flat, 2)
    milp = 2 * fleet_operation.MILP_COST_S  # two more periods of one workload
    assert extra == pytest.approx(1 * 2 * fleet_operation.CLASS_ARRANGE_COST_S + milp)


def test_classes_no_arrangement_serves_are_422_naming_the_workload(api: ApiClient) -> None:  # noqa: F811
    impossible = [{**WORKED["classes"][0], "slo": {"ttft_ms": 1}}, WORKED["classes"][1]]
    response = post(api, fleet(classes_workload(classes=impossible)))
    problem = assert_problem(response, 422)
    assert problem["workload"] == "assist" and problem["constraint"] == "classes"
    assert "no arrangement of the classes" in problem["detail"]


def test_the_cost_per_million_output_tokens_counts_each_class_at_its_rate(planned: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, plan = planned
    # two 12 h periods: chat 60 req/s × 200 tokens (mean) and summarise 20 req/s × 300 tokens, all day
    tokens = (60 * 200 + 20 * 300) * 24 * 3600
    assert plan["cost"]["usd_per_million_output_tokens"] == pytest.approx(
        plan["cost"]["usd_total"] / tokens * 1e6, abs=0.005
    )  # cents
