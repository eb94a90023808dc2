"""constraints.pin.ep on POST /v1/plans: ep 1 keeps an MoE model's experts tensor-split, ep = tp plans only the
expert-parallel replicas, and an ep the planner cannot build is a 422 naming constraints.pin.ep."""

from __future__ import annotations

import copy
from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_capacity import body as capacity_body
from tests.api.test_expert_parallel_plans import REQUEST


def _plan(seeded: ApiClient, admin: dict[str, str], pin: dict[str, Any], model: str = "mixtral-8x7b") -> Any:
    request = copy.deepcopy(REQUEST)
    request["model"] = model
    request["constraints"]["pin"] = pin
    return seeded.post("/v1/plans", json=request, headers=admin)


def test_pinned_ep_decides_the_expert_layout(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The long-prompt Mixtral request at tp 8 plans ep 8 when free (tests/api/test_expert_parallel_plans.py);
    pinned ep 1 it plans the tensor-split replica instead, at no lower cost (the free search had it to choose)."""
    free = _plan(seeded, admin, {"tp": 8})
    assert free.status_code == 201, free.text
    split = _plan(seeded, admin, {"tp": 8, "ep": 1})
    assert split.status_code == 201, split.text
    sharded = _plan(seeded, admin, {"ep": 8})
    assert sharded.status_code == 201, sharded.text
    assert (free.json()["plan"]["ep"], split.json()["plan"]["ep"]) == (8, 1)
    assert (sharded.json()["plan"]["tp"], sharded.json()["plan"]["ep"]) == (8, 8)
    assert split.json()["cost"]["usd_per_hour"] >= free.json()["cost"]["usd_per_hour"]


def test_an_ep_the_planner_cannot_build_is_422_naming_pin_ep(seeded: ApiClient, admin: dict[str, str]) -> None:
    other_than_tp = assert_problem(_plan(seeded, admin, {"tp": 8, "ep": 4}), 422, "invalid-request")
    assert "ep (4) must be 1 or equal tp (8)" in bad_fields(other_than_tp)["constraints.pin"]
    staged = assert_problem(_plan(seeded, admin, {"ep": 8, "pp": 2}), 422, "invalid-request")
    assert "without pipeline stages" in bad_fields(staged)["constraints.pin"]
    dense = assert_problem(_plan(seeded, admin, {"ep": 2}, model="llama-3.1-8b"), 422, "invalid-planner-input")
    assert dense["field"] == "constraints.pin.ep" and "dense" in dense["detail"]
    uneven = assert_problem(_plan(seeded, admin, {"ep": 3}), 422, "invalid-planner-input")
    assert uneven["field"] == "constraints.pin.ep" and "experts" in uneven["detail"]
    zero = assert_problem(_plan(seeded, admin, {"ep": 0}), 422, "invalid-request")
    assert "constraints.pin.ep" in bad_fields(zero)


def test_capacity_and_separate_pools_which_search_no_ep_refuse_a_pinned_ep(seeded: ApiClient, admin: dict[str, str]) -> None:
    """POST /v1/capacity shares the pin but searches no expert-parallel replica: ep 8 is a 422 there, not ignored."""
    capacity = seeded.post(
        "/v1/capacity", json=capacity_body(model="mixtral-8x7b", constraints={"pin": {"ep": 8}}), headers=admin
    )
    problem = assert_problem(capacity, 422, "invalid-request")
    assert "expert parallelism" in str(bad_fields(problem))
    assert (
        seeded.post(
            "/v1/capacity", json=capacity_body(model="mixtral-8x7b", constraints={"pin": {"ep": 1}}), headers=admin
        ).status_code
        == 200
    )
