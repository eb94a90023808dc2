"""Prefix caching and speculative decoding in POST /v1/fleet-plans (planner/fleet_levers.py), against what
POST /v1/plans decides for the same workload alone."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS
from tests.api.test_fleet_plans import (  # noqa: F401  (api and seeded_sqlite_template are fixtures)
    api,
    post,
    seeded_sqlite_template,
)
from tests.api.test_operations import ASYNC, wait_for, without_fleet_timings, working  # noqa: F401  (working is a fixture)

#: tests/api/test_speculative.py's LOW_LOAD: Llama 3.1 8B on H100 at 0.2 req/s, where an EAGLE head cuts TPOT.
GPUS = ["h100-sxm"]
PRECISIONS = [{"weights": "bf16", "kv_cache": "bf16"}]
PROMPT = {"mean": 800, "p99": 3000}
OUTPUT = {"mean": 200, "p99": 700}
SLO = {"ttft_ms": 1000, "tpot_ms": 60}
SEARCH = {"tp_degrees": [1, 2], "batch_limits": [32, 128], "chunk_budgets": [None, 2048]}


def fleet_workload(name: str, demand: list[float], **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "llama-3.1-8b",
        "prompt_tokens": PROMPT,
        "output_tokens": OUTPUT,
        "slo": SLO,
        "demand_rps": demand,
        **changes,
    }


def fleet(*workloads: dict[str, Any], **constraints: Any) -> dict[str, Any]:
    return {
        "workloads": list(workloads),
        "constraints": {"gpus": GPUS, "precisions": PRECISIONS, **constraints},
        "search": SEARCH,
    }


def single_plan(api: ApiClient, rate: float, **changes: Any) -> dict[str, Any]:  # noqa: F811
    workload = {"arrival_rate_rps": rate, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, **changes.pop("workload", {})}
    payload = {
        "model": "llama-3.1-8b",
        "workload": workload,
        "slo": SLO,
        "constraints": {"gpus": GPUS, "precisions": PRECISIONS, **changes},
    }
    response = api.post("/v1/plans", json=payload, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    return response.json()


def planned(api: ApiClient, payload: dict[str, Any]) -> dict[str, Any]:  # noqa: F811
    response = post(api, payload)
    assert response.status_code == 201, response.text
    return response.json()


def test_speculative_auto_at_low_load_turns_on_where_the_single_plan_does(api: ApiClient) -> None:  # noqa: F811
    single = single_plan(api, 0.2, speculative="auto")
    chosen = single["plan"]["speculative"]
    assert chosen is not None, "the single plan speculates at this load (tests/api/test_speculative.py)"
    plan = planned(api, fleet(fleet_workload("chat", [0.2, 0.2]), speculative="auto"))
    levers = plan["levers"]["chat"]
    assert levers["speculative_mode"] == "auto"
    assert levers["speculative"] is not None and levers["speculative"]["method"] == chosen["method"]
    for period in plan["periods"]:
        assert all(row["speculative"]["method"] == chosen["method"] for row in period["workloads"])
    off = planned(api, fleet(fleet_workload("chat", [0.2, 0.2])))
    assert off["levers"]["chat"]["speculative"] is None
    assert plan["cost"]["usd_total"] <= off["cost"]["usd_total"]
    rows = list(csv.DictReader(io.StringIO(api.get(f"/v1/fleet-plans/{plan['id']}/csv").text)))
    assert rows and all(row["speculative_method"] == chosen["method"] and row["class_name"] == "" for row in rows)


def test_a_workload_own_speculative_mode_overrides_the_constraint(api: ApiClient) -> None:  # noqa: F811
    plan = planned(api, fleet(fleet_workload("chat", [0.2]), fleet_workload("plain", [0.2], speculative="off"), speculative="on"))
    assert plan["levers"]["chat"]["speculative"] is not None
    assert plan["levers"]["plain"]["speculative"] is None and plan["levers"]["plain"]["speculative_mode"] == "off"


def test_prefix_reuse_costs_no_more_than_without_and_reports_the_hit_rate(api: ApiClient) -> None:  # noqa: F811
    reuse = {"system_prompt_tokens": 600, "system_prompt_fraction": 0.9}
    demand = [20.0, 40.0, 30.0]
    with_reuse = planned(api, fleet(fleet_workload("rag", demand, prefix_reuse=reuse)))
    without = planned(api, fleet(fleet_workload("rag", demand)))
    assert with_reuse["cost"]["usd_total"] <= without["cost"]["usd_total"]
    levers = with_reuse["levers"]["rag"]
    assert levers["prefix_reuse"] is True
    caching = levers["prefix_caching"]
    if with_reuse["cost"]["usd_total"] < without["cost"]["usd_total"]:
        assert caching is not None  # only a cache makes it cheaper
    assert caching is not None and 0 < caching["hit_rate"] <= 1 and caching["routing"] == "random"
    assert without["levers"]["rag"]["prefix_caching"] is None and without["levers"]["rag"]["prefix_reuse"] is False
    rows = list(csv.DictReader(io.StringIO(api.get(f"/v1/fleet-plans/{with_reuse['id']}/csv").text)))
    assert any(
        row["prefix_cache_hit_rate"] and float(row["prefix_cache_hit_rate"]) == pytest.approx(caching["hit_rate"], rel=1e-3)
        for row in rows
    )


def test_a_measured_hit_rate_is_reported_as_given(api: ApiClient) -> None:  # noqa: F811
    plan = planned(api, fleet(fleet_workload("rag", [20.0], prefix_reuse={"hit_rate": 0.6})))
    caching = plan["levers"]["rag"]["prefix_caching"]
    assert caching is not None and caching["hit_rate"] == 0.6 and caching["routing"] == "as_measured"


def test_an_operation_plans_levers_and_classes_as_the_synchronous_route(working: ApiClient) -> None:  # noqa: F811
    """Fleet plans run as operations (api/fleet_operation.py): a table's levers travel through the unit's JSON,
    and a workload with classes (no table unit) gets its arrangements in the last unit."""
    classes = [
        {"name": "chat", "arrival_rate_rps": 2, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "slo": SLO},
        {"name": "bulk", "arrival_rate_rps": 1, "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "deadline_h": 1},
    ]
    request = fleet(
        fleet_workload("rag", [4.0, 8.0], prefix_reuse={"hit_rate": 0.5}, speculative="auto"),
        {"name": "mixed", "model": "llama-3.1-8b", "classes": classes},
    )
    accepted = working.post("/v1/fleet-plans", json=request, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    synchronous = working.post("/v1/fleet-plans", json=request, headers=ADMIN_HEADERS)
    assert synchronous.status_code == 201, synchronous.text
    assert without_fleet_timings(done["result"]) == without_fleet_timings(synchronous.json())
    assert done["result"]["levers"]["rag"]["prefix_caching"] is not None
    assert set(done["result"]["classes"]) == {"mixed"}


@pytest.mark.parametrize(
    ("changes", "constraints", "reason"),
    [
        ({"prefix_reuse": {"hit_rate": 0.5}}, {}, "separate pools do not plan a prefix cache"),
        ({"speculative": "on"}, {}, "the decode pool's step model has no draft head"),
        ({}, {"speculative": "on"}, "constraints.speculative is on"),
    ],
)
def test_levers_separate_pools_cannot_take_are_422(
    api: ApiClient,  # noqa: F811
    changes: dict[str, Any],
    constraints: dict[str, Any],
    reason: str,
) -> None:
    workload = fleet_workload("pd", [1.0], topology="disaggregated", **changes)
    response = post(api, fleet(workload, **constraints))
    assert response.status_code == 422, response.text
    assert reason in response.text
