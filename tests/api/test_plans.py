"""POST /v1/plans and GET /v1/plans/{id} through the real app and database, on the shipped
reference catalog: created and stored plans, read-back, and every refusal as a problem document."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from catalog.db import make_engine, make_session_factory
from catalog.plans import Plans
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields

#: Chat on an 8B model, planned over two GPU types so each request stays quick.
CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
    "verify": False,
    "name": "chat-8b",
}


def body(**changes: Any) -> dict[str, Any]:
    request = copy.deepcopy(CHAT)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = request
        for key in parents:
            node = node[key]
        node[leaf] = value
    return request


def test_a_plan_is_created_stored_and_read_back(seeded: ApiClient, admin: dict[str, str], migrated_database_url: str) -> None:
    response = seeded.post("/v1/plans", json=body(), headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert response.headers["location"] == f"/v1/plans/{plan['id']}"
    assert plan["plan"]["gpu"] in {"h100-sxm", "a100-80gb-sxm"}
    assert plan["plan"]["replicas"] >= 1 and 0 < plan["plan"]["target_rho"] < 1
    assert plan["cost"]["usd_per_month"] == pytest.approx(plan["cost"]["usd_per_hour"] * 730)
    assert plan["predicted"]["ttft_ms"]["p99"] <= 1000 and plan["predicted"]["tpot_ms"]["p99"] <= 60
    assert {"step_model", "memory", "roofline", "queueing", "binding", "alternatives", "sensitivity"} <= plan[
        "justification"
    ].keys()
    assert plan["verification"] is None
    assert plan["provenance"]["catalog_version"] >= 1

    again = seeded.get(response.headers["location"])
    assert again.status_code == 200
    assert again.json() == plan

    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            stored = Plans(session).list_by_name("chat-8b")
    finally:
        engine.dispose()
    assert [p.id for p in stored] == [plan["id"]]
    assert stored[0].request["workload"]["arrival_rate_rps"] == 15
    assert stored[0].catalog_version == plan["provenance"]["catalog_version"]


def test_a_verified_plan_carries_simulated_percentiles_that_meet_the_slo(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=body(verify=True, constraints__gpus=["h100-sxm"]), headers=admin)
    assert response.status_code == 201, response.text
    verification = response.json()["verification"]
    assert verification["meets_slo"] is True
    assert verification["requests_simulated"] >= 1000
    assert verification["simulated"]["ttft_s"]["at_percentile"] <= 1.0


def test_an_unknown_plan_is_404(seeded: ApiClient) -> None:
    assert_problem(seeded.get("/v1/plans/" + "0" * 32), 404, "not-found")
    assert_problem(seeded.get("/v1/plans/not-an-id"), 404, "not-found")


def test_unknown_model_gpu_quantization_or_profile_is_404(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert_problem(seeded.post("/v1/plans", json=body(model="no-such-model"), headers=admin), 404, "not-found")
    assert_problem(seeded.post("/v1/plans", json=body(constraints__gpus=["no-such-gpu"]), headers=admin), 404, "not-found")
    assert_problem(
        seeded.post("/v1/plans", json=body(constraints__inventory={"no-such-gpu": 2}), headers=admin), 404, "not-found"
    )
    precisions = [{"weights": "no-such-scheme", "kv_cache": "fp8"}]
    assert_problem(seeded.post("/v1/plans", json=body(constraints__precisions=precisions), headers=admin), 404, "not-found")
    without_gpus = body(efficiency_profile="no-such-profile")
    del without_gpus["constraints"]
    problem = assert_problem(seeded.post("/v1/plans", json=without_gpus, headers=admin), 404, "not-found")
    assert problem["kind"] == "efficiency_profile"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"constraints__gpus": []}, "constraints.gpus"),
        ({"workload__arrival_rate_rps": -1}, "workload.arrival_rate_rps"),
        ({"workload__arrival_rate_rps": 0}, ""),
        ({"slo": {}}, "slo"),
        ({"constraints__precisions": []}, "constraints.precisions"),
    ],
)
def test_malformed_requests_are_422_naming_the_field(
    seeded: ApiClient, admin: dict[str, str], changes: dict[str, Any], field: str
) -> None:
    problem = assert_problem(seeded.post("/v1/plans", json=body(**changes), headers=admin), 422, "invalid-request")
    if field:
        assert field in bad_fields(problem)


def test_an_impossible_slo_is_422_with_the_constraint_and_the_smallest_relaxation(
    seeded: ApiClient, admin: dict[str, str]
) -> None:
    problem = assert_problem(seeded.post("/v1/plans", json=body(slo={"tpot_ms": 0.5}), headers=admin), 422, "infeasible-plan")
    assert problem["constraint"] == "tpot"
    relaxation = problem["relaxations"][0]
    assert relaxation["constraint"] == "slo.tpot_ms" and relaxation["unit"] == "ms"
    assert relaxation["current"] == 0.5 and relaxation["value"] > 0.5
    # the advice works: re-posted with it, the request is planned
    again = seeded.post("/v1/plans", json=body(slo={"tpot_ms": relaxation["value"]}), headers=admin)
    assert again.status_code == 201, again.text
    assert "tpot_ms 0.5 is below" in problem["detail"]


def test_a_gpu_budget_too_small_is_422_naming_the_budget(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body(workload__arrival_rate_rps=200, constraints__budget_usd_per_hour=1.0)
    problem = assert_problem(seeded.post("/v1/plans", json=request, headers=admin), 422, "infeasible-plan")
    assert problem["constraint"] == "budget"


def test_planning_needs_a_key(seeded: ApiClient) -> None:
    assert_problem(seeded.post("/v1/plans", json=body()), 401, "unauthenticated")


def test_openapi_names_the_operations(seeded: ApiClient) -> None:
    paths = seeded.get("/openapi.json").json()["paths"]
    assert paths["/v1/plans"]["post"]["operationId"] == "create_plan"
    assert paths["/v1/plans/{plan_id}"]["get"]["operationId"] == "get_plan"


def test_plans_are_counted_and_solver_time_recorded_in_the_metrics(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A plan computed by POST /v1/plans adds one to `headroom_plans_computed_total` and one solver
    observation; a retried request with the same Idempotency-Key plans nothing and adds nothing."""
    from tests.api.test_observability import sample, scrape

    headers = {**admin, "Idempotency-Key": "metrics-test-1"}
    assert seeded.post("/v1/plans", json=body(), headers=headers).status_code == 201
    assert seeded.post("/v1/plans", json=body(), headers=headers).status_code == 201
    samples = scrape(seeded)
    assert sample(samples, "headroom_plans_computed_total") == 1
    assert sample(samples, "headroom_solver_seconds_count") == 1


def test_an_impossible_request_on_restricted_gpus_suggests_allowing_another_that_works(
    seeded: ApiClient, admin: dict[str, str]
) -> None:
    """Only l4 allowed for a 70B model: nothing holds it; the advice names GPU types the catalog has
    that plan the request, each re-planned to check, and one of them, allowed, does plan."""
    request = body(
        model="llama-3.1-70b",
        constraints__gpus=["l4"],
        constraints__precisions=[{"weights": "bf16", "kv_cache": "bf16"}],
        workload__arrival_rate_rps=2,
    )
    problem = assert_problem(seeded.post("/v1/plans", json=request, headers=admin), 422, "infeasible-plan")
    allowed = [r for r in problem["relaxations"] if r["constraint"] == "constraints.gpus"]
    assert allowed and all(r["value"] != "l4" for r in allowed)
    assert all(r["constraint"] in ("constraints.gpus", "constraints.precisions") for r in problem["relaxations"])
    again = seeded.post(
        "/v1/plans",
        json=body(
            **{
                k: v
                for k, v in {
                    "model": "llama-3.1-70b",
                    "constraints__gpus": ["l4", allowed[0]["value"]],
                    "constraints__precisions": [{"weights": "bf16", "kv_cache": "bf16"}],
                    "workload__arrival_rate_rps": 2,
                }.items()
            }
        ),
        headers=admin,
    )
    assert again.status_code == 201, again.text
