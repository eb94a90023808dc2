"""`any` skips the disaggregated search when a lower bound on its cost already reaches the aggregated plan's."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS


def body(topology: str, model: str, rate: float, prompt: Any, output: Any, ttft_ms: int, tpot_ms: int) -> dict[str, Any]:
    return {
        "model": model,
        "workload": {"arrival_rate_rps": rate, "prompt_tokens": prompt, "output_tokens": output},
        "slo": {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms},
        "constraints": {"topology": topology},
        "verify": False,
        "store": False,
    }


#: bench/plan_latency.py's short-chat request: one small GPU serves it, separate pools need two.
SHORT = ("qwen2.5-7b", 100.0, 256, 64, 200, 30)
#: bench/plan_latency.py's Llama-2-13B request: the bound is below the aggregated cost, so the pools are searched.
SEARCHED = ("llama-2-13b", 8.0, 1500, 300, 800, 50)


def test_a_bounded_search_is_skipped_and_says_so(seeded: ApiClient) -> None:
    """The skipped search changes no winner: the answer is the aggregated topology's plan, and the disaggregated
    topology planned on its own costs at least as much; the section says the pools were not searched and why."""
    answer = seeded.post("/v1/plans", json=body("any", *SHORT), headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    section = plan["disaggregation"]
    assert section["chosen"] == "aggregated" and plan["plan"]["topology"] == "aggregated"
    assert "not searched" in section["why"] and "at least" in section["why"]
    assert section["alternative"]["cost_usd_per_hour"] is None and section["alternative"]["reason"].startswith("not searched")
    assert section["saving_fraction"] is None and section["pools"] == []
    aggregated = seeded.post("/v1/plans", json=body("aggregated", *SHORT), headers=ADMIN_HEADERS).json()
    assert plan["plan"]["pools"] == aggregated["plan"]["pools"]
    assert plan["cost"]["usd_per_hour"] == aggregated["cost"]["usd_per_hour"]
    pools = seeded.post("/v1/plans", json=body("disaggregated", *SHORT), headers=ADMIN_HEADERS).json()
    assert pools["cost"]["usd_per_hour"] >= plan["cost"]["usd_per_hour"]


def test_a_bound_below_the_aggregated_cost_searches_the_pools(seeded: ApiClient) -> None:
    """Where the bound does not reach the aggregated cost the pools are planned and priced as before."""
    plan = seeded.post("/v1/plans", json=body("any", *SEARCHED), headers=ADMIN_HEADERS).json()
    section = plan["disaggregation"]
    assert "not searched" not in section["why"]
    assert section["alternative"]["cost_usd_per_hour"] is not None
