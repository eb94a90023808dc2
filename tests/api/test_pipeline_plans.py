"""POST /v1/plans for a model no node holds: Llama-3.1-405B in BF16 on H100 plans in pipeline stages."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient

REQUEST_405B: dict[str, Any] = {
    "model": "llama-3.1-405b",
    "workload": {"arrival_rate_rps": 1, "prompt_tokens": {"mean": 1000, "p99": 4000}, "output_tokens": {"mean": 200, "p99": 800}},
    "slo": {"ttft_ms": 5000, "tpot_ms": 200},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


def test_405b_bf16_on_h100_plans_over_two_nodes(seeded: ApiClient, admin: dict[str, str]) -> None:
    """405e9 × 2 B = 810 GB of weights exceed one 8 × 80 GB node (576 GB after a 10 % reserve); tp 8 × pp 2
    offers 1,152 GB: the plan is two-node replicas with pipeline stages."""
    response = seeded.post("/v1/plans", json=REQUEST_405B, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()["plan"]
    assert plan["gpu"] == "h100-sxm"
    assert plan["pp"] >= 2 and plan["tp"] * plan["pp"] >= 16
    assert plan["gpus_total"] == plan["replicas"] * plan["tp"] * plan["pp"]
    assert all(pool["pp"] == plan["pp"] for pool in plan["pools"])
