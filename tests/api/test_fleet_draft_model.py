"""A fleet workload's draft model (`workloads[].draft_model`, `acceptance_rate`) through POST /v1/fleet-plans, as
POST /v1/plans takes constraints.pin.draft_model (tests/api/test_speculative_draft_model.py): the draft's variants
are the workload's speculating candidates, what runs is reported, and a draft that cannot serve is refused as a
plan refuses it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem, bad_fields
from tests.api.test_fleet_plans import (  # noqa: F401  (api and seeded_sqlite_template are fixtures)
    api,
    post,
    seeded_sqlite_template,
)
from tests.api.test_operations import ASYNC, wait_for, without_fleet_timings, working  # noqa: F401  (working is a fixture)
from tests.api.test_speculative_draft_model import BODY as PLAN_BODY

#: test_speculative_draft_model.py's workload (Llama 3.1 70B on H100s at 2 req/s, 60 ms TPOT) as one fleet workload,
#: drafted by Llama 3.1 8B (the same 128,256-token vocabulary), over two periods.
WORKLOAD: dict[str, Any] = {
    "name": "chat",
    "model": "llama-3.1-70b",
    "prompt_tokens": PLAN_BODY["workload"]["prompt_tokens"],
    "output_tokens": PLAN_BODY["workload"]["output_tokens"],
    "slo": PLAN_BODY["slo"],
    "demand_rps": [2.0, 2.0],
    "speculative": "on",
    "draft_model": "llama-3.1-8b",
    "acceptance_rate": 0.7,
}
SEARCH = {"tp_degrees": [2, 4], "batch_limits": [32, 128], "chunk_budgets": [None, 2048]}


def fleet(**changes: Any) -> dict[str, Any]:
    workload = {key: value for key, value in {**copy.deepcopy(WORKLOAD), **changes}.items() if value is not None}
    return {
        "workloads": [workload],
        "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
        "search": SEARCH,
    }


def test_a_fleet_workload_drafts_with_the_catalog_model(api: ApiClient) -> None:  # noqa: F811
    """speculative on with the draft model: every row runs the draft model at the given α, E = (1 − α^(k+1))/(1 − α),
    and `levers` names the catalog model drafting; the same workload with speculative off costs no less (the
    draft's variants are offered because they pay at this TPOT target, tests/api/test_speculative_draft_model.py)."""
    response = post(api, fleet())
    assert response.status_code == 201, response.text
    plan = response.json()
    levers = plan["levers"]["chat"]
    chosen = levers["speculative"]
    assert levers["speculative_mode"] == "on" and levers["draft_model"] == "llama-3.1-8b"
    assert chosen["method"] == "draft_model" and chosen["acceptance_rate"] == 0.7
    assert "given" in chosen["acceptance_source"]
    k = chosen["draft_tokens"]
    assert chosen["tokens_per_step"] == pytest.approx((1 - 0.7 ** (k + 1)) / 0.3, rel=1e-4)
    rows = [row for period in plan["periods"] for row in period["workloads"]]
    assert rows and all(row["speculative"]["method"] == "draft_model" for row in rows)
    stored = api.get(f"/v1/fleet-plans/{plan['id']}")
    assert stored.status_code == 200 and stored.json()["levers"]["chat"] == levers


def test_without_an_acceptance_rate_the_published_pair_is_assumed(api: ApiClient) -> None:  # noqa: F811
    """As a plan's pin.draft_model alone: α is the published (target, draft) pair's nearest in size ratio
    (planner/speculative.py `draft_model_acceptance`), and its source says so."""
    response = post(api, fleet(acceptance_rate=None))
    assert response.status_code == 201, response.text
    chosen = response.json()["levers"]["chat"]["speculative"]
    assert chosen["method"] == "draft_model" and 0.0 < chosen["acceptance_rate"] < 1.0
    assert "Leviathan" in chosen["acceptance_source"] and "given" not in chosen["acceptance_source"]


def test_the_draft_model_is_part_of_the_table_shape(api: ApiClient) -> None:  # noqa: F811
    """Two workloads alike but for the draft (one drafting with Llama 3.1 8B, one with the model's head) are two
    tables: each runs its own draft."""
    body = fleet()
    head = {key: value for key, value in copy.deepcopy(WORKLOAD).items() if key not in {"draft_model", "acceptance_rate"}}
    body["workloads"].append({**head, "name": "headed", "speculative": "auto"})
    response = post(api, body)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["candidate_search"]["distinct_tables"] == 2
    assert plan["levers"]["chat"]["speculative"]["method"] == "draft_model"
    headed = plan["levers"]["headed"]
    assert headed["draft_model"] is None
    assert headed["speculative"] is None or headed["speculative"]["method"] != "draft_model"


def test_an_operation_drafts_as_the_synchronous_route(working: ApiClient) -> None:  # noqa: F811
    """As an operation (api/fleet_operation.py: a table unit per GPU type) the draft travels with the shape's levers
    and the plan is the synchronous route's."""
    accepted = working.post("/v1/fleet-plans", json=fleet(), headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    synchronous = working.post("/v1/fleet-plans", json=fleet(), headers=ADMIN_HEADERS)
    assert synchronous.status_code == 201, synchronous.text
    assert without_fleet_timings(done["result"]) == without_fleet_timings(synchronous.json())
    assert done["result"]["levers"]["chat"]["speculative"]["method"] == "draft_model"


def _text(problem: dict[str, Any]) -> str:
    return problem["detail"] + (str(bad_fields(problem)) if "errors" in problem else "")


@pytest.mark.parametrize(
    ("draft", "status", "needle"),
    [
        ("mistral-7b-v0.3", 422, "tokenizer"),  # another vocabulary
        ("llama-3.1-405b", 422, "not smaller"),
        ("llama-3.1-70b", 422, "cannot draft for itself"),
        ("no-such-model", 404, ""),
    ],
)
def test_a_draft_that_cannot_serve_is_refused_as_a_plan_refuses_it(
    api: ApiClient,  # noqa: F811
    draft: str,
    status: int,
    needle: str,
) -> None:
    problem = assert_problem(post(api, fleet(draft_model=draft)), status)
    assert needle in _text(problem)
    if status == 422:
        assert problem["field"] == "workloads[0].draft_model" and problem["workload"] == "chat"
    single = api.post(
        "/v1/plans",
        json={**PLAN_BODY, "constraints": {**PLAN_BODY["constraints"], "pin": {"draft_model": draft}}},
        headers=ADMIN_HEADERS,
    )
    assert single.status_code == status  # the same answer a plan gives


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"speculative": "off"}, "workloads.0.draft_model"),
        ({"speculative": None}, "workloads.0.draft_model"),  # constraints.speculative defaults to off
        ({"speculative": "off", "draft_model": None}, "workloads.0.acceptance_rate"),
        ({"acceptance_rate": 1.0}, "workloads.0.acceptance_rate"),
        ({"topology": "disaggregated"}, "workloads.0"),
    ],
)
def test_a_draft_the_workload_cannot_speculate_with_is_a_422(
    api: ApiClient,  # noqa: F811
    changes: dict[str, Any],
    field: str,
) -> None:
    problem = assert_problem(post(api, fleet(**changes)), 422, "invalid-request")
    assert any(name.startswith(field) for name in bad_fields(problem)), bad_fields(problem)


def test_a_workload_with_classes_takes_no_draft_model(api: ApiClient) -> None:  # noqa: F811
    body = fleet()
    workload = body["workloads"][0]
    for key in ("prompt_tokens", "output_tokens", "slo", "demand_rps", "speculative", "acceptance_rate"):
        del workload[key]
    workload["classes"] = [
        {
            "name": "chat",
            "arrival_rate_rps": 1.0,
            "prompt_tokens": WORKLOAD["prompt_tokens"],
            "output_tokens": WORKLOAD["output_tokens"],
            "slo": WORKLOAD["slo"],
        }
    ]
    problem = assert_problem(post(api, body), 422, "invalid-request")
    assert "draft_model" in _text(problem)
