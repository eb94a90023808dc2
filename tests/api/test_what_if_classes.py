"""POST /v1/what-if with `classes` and `sweep.class_rates_rps`: each point of a class mix sweep is the
class plan POST /v1/plans makes for the classes at that mix (arrangement, cost, per-class figures),
its cost grows with the background share, the CSV carries each point's arrangement and classes in
cells, and a bad mix is a 422 naming why."""

from __future__ import annotations

import copy
import csv
import io
import itertools
from typing import Any

import pytest

from api.schemas.what_if import WHAT_IF_CSV_COLUMNS
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_classes_plans import WORKED
from tests.api.test_operations import ADMIN_HEADERS, ASYNC, wait_for, working  # noqa: F401 (working: the fixture)

#: The worked example's chat at 60 req/s and its summarisation stream swept from a trickle to twice chat.
SUMMARISE_RPS = [2.0, 20.0, 60.0, 120.0]
MIX: dict[str, Any] = {
    "model": WORKED["model"],
    "classes": WORKED["classes"],
    "constraints": WORKED["constraints"],
    "sweep": {"class_rates_rps": {"summarise": SUMMARISE_RPS}},
}


def mix(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(MIX)
    body.update(changes)
    return body


def test_each_mix_point_is_the_class_plan_post_plans_makes(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/what-if", json=MIX, headers=admin)
    assert response.status_code == 200, response.text
    table = response.json()
    assert "class plan" in table["method"]
    assert (table["points_total"], table["points_feasible"]) == (4, 4)
    costs = []
    for point, rate in zip(table["points"], SUMMARISE_RPS, strict=True):
        assert point["arrival_rate_rps"] == pytest.approx(60 + rate)
        classes = [{**WORKED["classes"][0]}, {**WORKED["classes"][1], "arrival_rate_rps": rate}]
        plan = seeded.post("/v1/plans", json={**WORKED, "classes": classes, "store": False}, headers=admin).json()
        assert point["arrangement"] == plan["arrangement"]["chosen"]
        assert point["cost_usd_per_hour"] == pytest.approx(plan["cost_usd_per_hour"], abs=0.005)  # cents
        assert point["cost_usd_per_month"] == pytest.approx(730 * plan["cost_usd_per_hour"], abs=0.005)
        assert point["gpus_total"] == sum(p["replicas"] * p["tp"] for p in plan["pools"])
        assert point["fleet_rows"] == len(plan["pools"])
        for compared in plan["arrangement"]["compared"]:
            cost = compared["cost_usd_per_hour"]
            assert f"{compared['name']} " + ("n/a" if cost is None else f"${cost:.2f}/h") in point["arrangements_compared"]
        by_name = {k["name"]: k for k in point["classes"]}
        assert {k: v["arrival_rate_rps"] for k, v in by_name.items()} == {"chat": 60, "summarise": rate}
        for k in plan["classes"]:
            mine = by_name[k["name"]]
            assert (mine["pool"], mine["meets_target"]) == (k["pool"], k["meets_target"])
            # the sweep is served rounded (api/rounding.py): milliseconds to 0.1 ms, seconds to 4 significant figures
            assert mine["ttft_ms"] == pytest.approx(k["ttft_ms"], abs=0.05)
            assert mine["tpot_ms"] == pytest.approx(k["tpot_ms"], abs=0.05)
            assert mine["e2e_s"] == pytest.approx(k["e2e_s"], rel=1e-3)
        assert all(k["meets_target"] for k in point["classes"])
        costs.append(point["cost_usd_per_hour"])
    # more background work at the same chat load never costs less, and the largest mix costs more than the smallest
    assert costs == sorted(costs) and costs[-1] > costs[0]
    # each point says what changed in its arrangement and pools from the point before
    points = table["points"]
    assert points[0]["pool_changes"] is None and "mix_pools" not in points[0]
    for before, point in itertools.pairwise(points):
        changes = point["pool_changes"]
        if before["arrangement"] != point["arrangement"]:
            assert f"arrangement {before['arrangement']} → {point['arrangement']}" in changes
        elif before["gpus_total"] != point["gpus_total"]:
            assert changes != "same pools" and "replicas" in changes


def test_a_mix_sweep_as_csv_has_the_arrangement_and_classes_in_cells(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = mix(sweep={"class_rates_rps": {"chat": [30, 60], "summarise": [30, 2]}})  # a fixed 60 req/s total
    response = seeded.post("/v1/what-if/csv", json=body, headers=admin)
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert list(rows[0]) == list(WHAT_IF_CSV_COLUMNS) and "classes" not in rows[0]
    assert [float(r["arrival_rate_rps"]) for r in rows] == [60, 62]
    assert rows[0]["class_figures"].startswith("chat 30 req/s on ") and "summarise 30 req/s" in rows[0]["class_figures"]
    assert all(r["arrangement"] and "segregated" in r["arrangements_compared"] for r in rows)


def test_a_bad_mix_is_a_422_naming_why(seeded: ApiClient, admin: dict[str, str]) -> None:
    def refused(body: dict[str, Any]) -> str:
        problem = assert_problem(seeded.post("/v1/what-if", json=body, headers=admin), 422)
        return " ".join(bad_fields(problem).values()) if "errors" in problem else problem["detail"]

    assert "does not have: batch" in refused(mix(sweep={"class_rates_rps": {"batch": [1, 2]}}))
    assert "same length" in refused(mix(sweep={"class_rates_rps": {"chat": [1, 2], "summarise": [1]}}))
    assert "> 0" in refused(mix(sweep={"class_rates_rps": {"chat": [0]}}))
    assert "leave out slo" in refused(mix(slo={"ttft_ms": 500}))
    assert "exactly one of workload and classes" in refused(
        mix(workload={"prompt_tokens": 100, "output_tokens": 100}, slo={"ttft_ms": 500})
    )
    assert "class_rates_rps" in refused(mix(sweep={"arrival_rates_rps": [1, 2]}))
    assert "no other rate" in refused(mix(sweep={"class_rates_rps": {"chat": [1]}, "arrival_rates_rps": [1]}))
    profiled = copy.deepcopy(MIX["classes"])
    profiled[1]["demand_rps"] = [20, 10]
    assert "demand_rps peak" in refused(mix(classes=profiled, sweep={"class_rates_rps": {"summarise": [10, 30]}}))
    assert "aggregated pools only" in refused(mix(constraints={"topology": "disaggregated"}))


def test_a_mix_sweep_asked_async_is_an_operation_with_the_synchronous_answer(working: ApiClient) -> None:  # noqa: F811
    body = mix(sweep={"class_rates_rps": {"summarise": [2, 20]}})
    accepted = working.post("/v1/what-if", json=body, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    assert (accepted.json()["kind"], accepted.json()["progress"]["total"]) == ("what-if", 2)
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    now = working.post("/v1/what-if", json=body, headers=ADMIN_HEADERS).json()
    timing = ("plan_ms",)
    for async_point, point in zip(done["result"]["points"], now["points"], strict=True):
        assert {k: v for k, v in async_point.items() if k not in timing} == {k: v for k, v in point.items() if k not in timing}


def test_a_mix_sweep_over_gpu_types_plans_each_alone(seeded: ApiClient, admin: dict[str, str]) -> None:
    gpus = ["h100-sxm", "a100-80gb-sxm"]
    body = mix(sweep={"class_rates_rps": {"summarise": [20]}, "gpus": gpus})
    table = seeded.post("/v1/what-if", json=body, headers=admin).json()
    assert [p["gpu_allowed"] for p in table["points"]] == gpus
    for point, gpu in zip(table["points"], gpus, strict=True):
        plan = seeded.post("/v1/plans", json={**WORKED, "constraints": {"gpus": [gpu]}, "store": False}, headers=admin).json()
        assert {p["gpu"] for p in plan["pools"]} == {gpu} and point["gpu"] == gpu
        assert (point["arrangement"], point["cost_usd_per_hour"]) == (
            plan["arrangement"]["chosen"],
            pytest.approx(plan["cost_usd_per_hour"], abs=0.005),
        )
