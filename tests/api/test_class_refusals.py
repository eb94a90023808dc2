"""A class plan refuses what its arrangements cannot honour, the same way on every route that plans
classes (planner/plan_refusals.py): POST /v1/plans with `classes` and a what-if class-mix sweep."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.plan_records import Pin, PlanConstraints
from planner.plan_refusals import class_plan_refusals
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_classes_plans import WORKED
from tests.api.test_what_if_classes import MIX

#: Each constraint a class plan refuses, and the words of its refusal.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"topology": "disaggregated"}, "class plans arrange aggregated pools only"),
    ({"speculative": "on"}, "class plans do not speculate yet (the priority pool's class simulator has no verify step)"),
    ({"speculative": "auto", "pin": {"draft_model": "llama-3.2-1b"}}, "leave out constraints.pin.draft_model"),
]


def _with(body: dict[str, Any], constraints: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(body)
    changed["constraints"] = {**changed["constraints"], **constraints}
    return changed


@pytest.mark.parametrize(("constraints", "words"), REFUSED)
def test_both_class_routes_refuse_alike(
    constraints: dict[str, Any], words: str, seeded: ApiClient, admin: dict[str, str]
) -> None:
    plan = assert_problem(seeded.post("/v1/plans", json=_with({**WORKED, "store": False}, constraints), headers=admin), 422)
    sweep = assert_problem(seeded.post("/v1/what-if", json=_with(MIX, constraints), headers=admin), 422)
    assert words in plan["detail"] or any(words in e["message"] for e in plan.get("errors", [])), plan
    assert words in sweep["detail"] or any(words in e["message"] for e in sweep.get("errors", [])), sweep


def test_the_refusals_name_each_constraint_once() -> None:
    everything = PlanConstraints(speculative="on", pin=Pin(draft_model="llama-3.2-1b"))
    refusals = class_plan_refusals(everything, topology="disaggregated")
    assert len(refusals) == 3
    assert [words in refusal for (_, words), refusal in zip(REFUSED, refusals, strict=True)] == [True, True, True]
    assert class_plan_refusals(PlanConstraints(speculative="auto"), topology="any") == []
