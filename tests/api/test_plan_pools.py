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


def test_an_aggregated_plan_is_one_mixed_pool(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/plans", json=rag(), headers=ADMIN_HEADERS)
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


def test_separate_pools_refuse_the_constraints_they_do_not_honour(seeded: ApiClient) -> None:
    assert_problem(seeded.post("/v1/plans", json=rag("disaggregated", max_gpus=8), headers=ADMIN_HEADERS), 422)


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
