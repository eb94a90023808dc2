"""Separate prefill and decode pools plan no prefix cache: every route that plans them refuses a
workload's prefix_reuse with the same words (planner/plan_refusals.py), where each once spelled its own."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.plan_refusals import POOLS_REFUSE_PREFIX_REUSE
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_capacity_pools import body as capacity_body
from tests.api.test_fleet_levers import fleet, fleet_workload
from tests.api.test_plan_pools import rag
from tests.api.test_what_if import SWEEP

REUSE = {"system_prompt_tokens": 1000, "system_prompt_fraction": 0.5}


def _plan() -> dict[str, Any]:
    body = rag("disaggregated")
    body["workload"]["prefix_reuse"] = REUSE
    return {**body, "store": False}


def _capacity() -> dict[str, Any]:
    body = capacity_body()
    body["workload"]["prefix_reuse"] = REUSE
    return body


def _what_if() -> dict[str, Any]:
    body = copy.deepcopy(SWEEP)
    body["workload"]["prefix_reuse"] = REUSE
    body["constraints"]["topology"] = "disaggregated"
    return body


def _fleet() -> dict[str, Any]:
    return fleet(fleet_workload("pd", [1.0], topology="disaggregated", prefix_reuse=REUSE))


@pytest.mark.parametrize(
    ("path", "request_body"),
    [("/v1/plans", _plan), ("/v1/capacity", _capacity), ("/v1/what-if", _what_if), ("/v1/fleet-plans", _fleet)],
)
def test_every_route_refuses_prefix_reuse_on_separate_pools_alike(
    path: str, request_body: Any, seeded: ApiClient, admin: dict[str, str]
) -> None:
    problem = assert_problem(seeded.post(path, json=request_body(), headers=admin), 422)
    said = problem["detail"] + " ".join(e.get("message", "") for e in problem.get("errors", []))
    assert POOLS_REFUSE_PREFIX_REUSE in said, problem
