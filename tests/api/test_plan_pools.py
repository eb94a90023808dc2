"""POST /v1/plans with constraints.topology: pools on every plan, disaggregated plans and the `any` choice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem

SLO = {"ttft_ms": 3000, "tpot_ms": 80}


def rag(topology: str | None = None, **constraints: Any) -> dict[str, Any]:
    """The rag-70b golden's question: long prompts (mean 6,000, p99 16,000), short answers."""
    body: dict[str, Any] = {
        "model": "llama-3.1-70b",
        "workload": {
            "arrival_rate_rps": 4,
            "prompt_tokens": {"mean": 6000, "p99": 16000},
            "output_tokens": {"mean": 300, "p99": 800},
        },
        "slo": SLO,
        "constraints": dict(constraints),
    }
    if topology is not None:
        body["constraints"]["topology"] = topology
    return body


def test_the_default_topology_is_any(seeded: ApiClient) -> None:
    """Without constraints.topology the optimizer decides: both topologies planned, the section says which won."""
    plan = seeded.post("/v1/plans", json={**rag(), "verify": False}, headers=ADMIN_HEADERS).json()
    assert plan["disaggregation"]["requested"] == "any"
    assert plan["plan"]["topology"] == plan["disaggregation"]["chosen"]


def test_an_aggregated_plan_is_one_mixed_pool(seeded: ApiClient) -> None:
    """Pinned to `aggregated`: this is about the aggregated plan's pool (under the default `any` either may win)."""
    answer = seeded.post("/v1/plans", json=rag("aggregated"), headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["plan"]["topology"] == "aggregated" and plan["disaggregation"] is None
    (pool,) = plan["plan"]["pools"]
    assert pool["role"] == "mixed"
    assert (pool["gpu"], pool["tp"], pool["replicas"], pool["batch_limit"]) == (
        plan["plan"]["gpu"],
        plan["plan"]["tp"],
        plan["plan"]["replicas"],
        plan["plan"]["batch_limit"],
    )


def test_a_disaggregated_plan_has_its_pools_and_justification(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/plans", json=rag("disaggregated"), headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["plan"]["topology"] == "disaggregated"
    prefill, decode = plan["plan"]["pools"]
    assert (prefill["role"], decode["role"]) == ("prefill", "decode")
    assert plan["plan"]["replicas"] == prefill["replicas"] + decode["replicas"]
    section = plan["disaggregation"]
    assert section["chosen"] == "disaggregated"
    assert [p["role"] for p in section["pools"]] == ["prefill", "decode"]
    assert all(0 < p["rho"] < 1 and p["binding"] for p in section["pools"])
    assert plan["cost"]["usd_per_hour"] == pytest.approx(sum(p["cost_usd_per_hour"] for p in section["pools"]), rel=1e-3)
    assert section["transfer"]["p99_ms"] > section["transfer"]["mean_ms"] > 0
    assert section["predicted_ttft_ms"] <= SLO["ttft_ms"] and section["predicted_tpot_ms"] <= SLO["tpot_ms"]
    assert section["simulated_ttft_ms"] <= SLO["ttft_ms"] and section["simulated_tpot_ms"] <= SLO["tpot_ms"]
    assert seeded.get(f"/v1/plans/{plan['id']}").json()["plan"]["pools"] == plan["plan"]["pools"]


def test_any_answers_the_cheaper_topology_and_keeps_the_other(seeded: ApiClient) -> None:
    plan = seeded.post("/v1/plans", json=rag("any"), headers=ADMIN_HEADERS).json()
    section = plan["disaggregation"]
    assert section["requested"] == "any" and plan["plan"]["topology"] == section["chosen"]
    other = section["alternative"]
    assert other["topology"] != section["chosen"] and other["reason"]
    if other["cost_usd_per_hour"] is not None:
        assert plan["cost"]["usd_per_hour"] <= other["cost_usd_per_hour"]
        assert section["saving_fraction"] == pytest.approx(
            1 - plan["cost"]["usd_per_hour"] / other["cost_usd_per_hour"], abs=2e-3
        )


@pytest.fixture
def free_pools(seeded: ApiClient) -> dict[str, Any]:
    """The rag question's disaggregated plan without limits (verify off: the limits act before verification)."""
    answer = seeded.post("/v1/plans", json={**rag("disaggregated"), "verify": False}, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan: dict[str, Any] = answer.json()
    return plan


def test_max_gpus_binds_the_pools(seeded: ApiClient, free_pools: dict[str, Any]) -> None:
    """Lowering max_gpus below the free pools' GPUs: each answer within it and no cheaper, until none fits and the
    422 names max_gpus with the smallest value that plans (the last one that planned)."""
    limit = free_pools["plan"]["gpus_total"]
    smallest = limit
    while True:
        limit -= 1
        body = {**rag("disaggregated", max_gpus=limit), "verify": False}
        answer = seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS)
        if answer.status_code != 201:
            break
        plan = answer.json()
        assert plan["plan"]["gpus_total"] <= limit
        assert plan["cost"]["usd_per_hour"] >= free_pools["cost"]["usd_per_hour"]
        smallest = plan["plan"]["gpus_total"]
        limit = smallest
    problem = assert_problem(answer, 422, "infeasible-plan")
    assert problem["constraint"] == "max_gpus"
    (relaxation,) = problem["relaxations"]
    assert (relaxation["constraint"], relaxation["value"]) == ("constraints.max_gpus", smallest)


def test_a_budget_below_the_cheapest_pools_is_infeasible_with_their_cost(seeded: ApiClient, free_pools: dict[str, Any]) -> None:
    cheapest = free_pools["cost"]["usd_per_hour"]
    body = {**rag("disaggregated", budget_usd_per_hour=cheapest / 2), "verify": False}
    problem = assert_problem(seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS), 422, "infeasible-plan")
    assert problem["constraint"] == "budget"
    (relaxation,) = problem["relaxations"]
    assert relaxation["constraint"] == "constraints.budget_usd_per_hour"
    assert relaxation["value"] == pytest.approx(cheapest, abs=0.01)


def test_n_plus_one_and_min_replicas_size_each_pool(seeded: ApiClient, free_pools: dict[str, Any]) -> None:
    body = {**rag("disaggregated", n_plus_one=True, min_replicas=2), "verify": False}
    answer = seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert all(pool["replicas"] >= 2 for pool in plan["plan"]["pools"])
    assert [p["spare_replicas"] for p in plan["disaggregation"]["pools"]] == [1, 1]
    assert "n_plus_one" in plan["disaggregation"]["why"]
    assert plan["cost"]["usd_per_hour"] > free_pools["cost"]["usd_per_hour"]


def test_pins_apply_to_the_pools_they_mean_something_to(seeded: ApiClient) -> None:
    pin = {"gpu": "h100-sxm", "tp": 8, "batch_limit": 32, "engine": "sglang"}
    answer = seeded.post("/v1/plans", json={**rag("disaggregated", pin=pin), "verify": False}, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()["plan"]
    prefill, decode = plan["pools"]
    assert (prefill["gpu"], prefill["tp"], decode["gpu"], decode["tp"]) == ("h100-sxm", 8, "h100-sxm", 8)
    assert decode["batch_limit"] == 32 and plan["engine"] == "sglang"


@pytest.mark.parametrize(
    ("constraints", "named", "top"),
    [
        ({"pin": {"replicas": 4}}, "constraints.pin.replicas", {}),
        ({"pin": {"chunk_tokens": 4096}}, "constraints.pin.chunk_tokens", {}),
        ({"unit": "instance"}, "constraints.unit", {"provider": "aws"}),  # a provider with instance types
        ({"speculative": "on"}, "constraints.speculative", {"model": "llama-3.1-8b"}),  # a model with a draft head
    ],
)
def test_what_the_pools_cannot_honour_is_422_for_disaggregated_and_aggregated_for_any(
    seeded: ApiClient, constraints: dict[str, Any], named: str, top: dict[str, Any]
) -> None:
    """Explicit pools refuse it naming the member; `any` answers the aggregated plan and says why the pools were not planned."""
    problem = assert_problem(
        seeded.post("/v1/plans", json={**rag("disaggregated", **constraints), **top}, headers=ADMIN_HEADERS), 422
    )
    assert named in problem["detail"]
    answer = seeded.post("/v1/plans", json={**rag("any", **constraints), **top, "verify": False}, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["plan"]["topology"] == "aggregated"
    other = plan["disaggregation"]["alternative"]
    assert other["topology"] == "disaggregated" and other["cost_usd_per_hour"] is None
    assert other["reason"].startswith("separate pools not planned: ") and named in other["reason"]


def test_prefix_reuse_plans_aggregated_under_any_and_is_refused_by_disaggregated(seeded: ApiClient) -> None:
    reuse = {"system_prompt_tokens": 1000, "system_prompt_fraction": 0.5}
    body = rag("any")
    body["workload"]["prefix_reuse"] = reuse
    answer = seeded.post("/v1/plans", json={**body, "verify": False}, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    reason = answer.json()["disaggregation"]["alternative"]["reason"]
    assert reason.startswith("separate pools not planned: ") and "workload.prefix_reuse" in reason
    body["constraints"]["topology"] = "disaggregated"
    assert "prefix_reuse" in assert_problem(seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS), 422)["detail"]


def test_a_batch_job_and_a_classes_request_take_any_and_plan_as_aggregated(seeded: ApiClient) -> None:
    from tests.api.test_batch_jobs import SUMMARIES
    from tests.api.test_classes_plans import WORKED

    for body, created in ((SUMMARIES, 201), (WORKED, 201)):
        aggregated = {**body, "constraints": {**body["constraints"], "topology": "aggregated"}}
        anyway = {**body, "constraints": {**body["constraints"], "topology": "any"}}
        expected = seeded.post("/v1/plans", json=aggregated, headers=ADMIN_HEADERS)
        answer = seeded.post("/v1/plans", json=anyway, headers=ADMIN_HEADERS)
        assert answer.status_code == expected.status_code == created, answer.text
        key = "plan" if "plan" in answer.json() else "pools"
        assert answer.json()[key] == expected.json()[key]
        disaggregated = {**body, "constraints": {**body["constraints"], "topology": "disaggregated"}}
        assert_problem(seeded.post("/v1/plans", json=disaggregated, headers=ADMIN_HEADERS), 422)


def test_a_target_that_cannot_launch_pools_is_refused_not_misleading(seeded: ApiClient) -> None:
    """TensorRT-LLM's P/D launch is not rendered: a 422 naming the targets that are, never one aggregated command
    (the pools' commands and CSV rows: tests/api/test_pool_outputs.py)."""
    plan = seeded.post("/v1/plans", json=rag("disaggregated"), headers=ADMIN_HEADERS).json()
    problem = assert_problem(seeded.get(f"/v1/plans/{plan['id']}/deploy?target=trt-llm", headers=ADMIN_HEADERS), 422)
    assert "vllm, sglang, k8s" in problem["detail"]


def test_any_without_a_ttft_target_answers_aggregated_with_the_reason(seeded: ApiClient) -> None:
    """Separate pools split a TTFT target; with a TPOT target alone `any` answers the aggregated plan."""
    body = {**rag("any"), "slo": {"tpot_ms": 80}}
    plan = seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS).json()
    section = plan["disaggregation"]
    assert section["chosen"] == "aggregated" and plan["plan"]["topology"] == "aggregated"
    assert "TTFT" in section["alternative"]["reason"] and section["alternative"]["cost_usd_per_hour"] is None
    assert_problem(
        seeded.post("/v1/plans", json={**body, "constraints": {"topology": "disaggregated"}}, headers=ADMIN_HEADERS), 422
    )


def test_any_plans_the_pools_within_the_limits_the_aggregated_arm_takes(seeded: ApiClient) -> None:
    """Limits both arms honour no longer keep `any` from planning the pools: either they win (with their spares) or
    they are the costed alternative."""
    body = {**rag("any", n_plus_one=True, min_replicas=2, mixed_fleet=True), "verify": False}
    answer = seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    section = plan["disaggregation"]
    if section["chosen"] == "disaggregated":
        assert [p["spare_replicas"] for p in section["pools"]] == [1, 1]
        assert all(pool["replicas"] >= 2 for pool in plan["plan"]["pools"])
    else:
        assert section["alternative"]["cost_usd_per_hour"] is not None
        assert not section["alternative"]["reason"].startswith("separate pools not planned")


def test_mixed_fleet_is_accepted_by_explicit_pools_as_a_no_op(seeded: ApiClient, free_pools: dict[str, Any]) -> None:
    """mixed_fleet permits several configurations; each pool is one already, so the pools are the free ones."""
    body = {**rag("disaggregated", mixed_fleet=True), "verify": False}
    answer = seeded.post("/v1/plans", json=body, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    assert answer.json()["plan"]["pools"] == free_pools["plan"]["pools"]


@pytest.mark.parametrize("engine", ["vllm", "trt-llm"])
def test_a_disaggregated_plan_names_the_engine_its_pools_were_priced_on(seeded: ApiClient, engine: str) -> None:
    """`plan.engine` is the deploy target: a disaggregated plan priced on the request's engine says which, as an
    aggregated one does (it used to answer null unless the engine was pinned)."""
    answer = seeded.post("/v1/plans", json={**rag("disaggregated"), "engine": engine, "verify": False}, headers=ADMIN_HEADERS)
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["plan"]["topology"] == "disaggregated"
    assert plan["plan"]["engine"] == engine
    aggregated = seeded.post("/v1/plans", json={**rag("aggregated"), "engine": engine, "verify": False}, headers=ADMIN_HEADERS)
    assert aggregated.status_code == 201, aggregated.text
    assert aggregated.json()["plan"]["engine"] == plan["plan"]["engine"]
