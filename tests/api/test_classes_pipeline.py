"""POST /v1/plans with `classes` for a model no node holds: Llama-3.1-405B in BF16 on H100 arranges its traffic
classes on pools in pipeline stages (tp 8 × pp 2, 16 GPUs a replica), every arrangement compared, where the shared
priority pool found no configuration before."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient

CLASSES_405B: dict[str, Any] = {
    "model": "llama-3.1-405b",
    "classes": [
        {
            "name": "chat",
            "arrival_rate_rps": 1,
            "prompt_tokens": {"mean": 1000, "p99": 4000},
            "output_tokens": {"mean": 200, "p99": 800},
            "slo": {"ttft_ms": 5000, "tpot_ms": 60},
            "priority": 0,
        },
        {
            "name": "summarise",
            "arrival_rate_rps": 0.5,
            "prompt_tokens": {"mean": 3000, "p99": 8000},
            "output_tokens": {"mean": 300, "p99": 800},
            "deadline_h": 6,
            "priority": 1,
        },
    ],
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


def test_405b_classes_arrange_pools_in_stages(seeded: ApiClient, admin: dict[str, str]) -> None:
    """810 GB of BF16 weights exceed one 8 × 80 GB node: every pool of every arrangement is a pipeline of 16 or more
    GPUs, and the chosen pools say so (pp, and a deploy command with --pipeline-parallel-size)."""
    response = seeded.post("/v1/plans", json=CLASSES_405B, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    compared = {c["name"]: c["cost_usd_per_hour"] for c in plan["arrangement"]["compared"]}
    assert compared["shared_priority"] is not None and compared["segregated"] is not None, plan["arrangement"]
    assert plan["pools"] and all(pool["pp"] >= 2 and pool["tp"] * pool["pp"] >= 16 for pool in plan["pools"]), plan["pools"]
    assert all(k["meets_target"] for k in plan["classes"])
    script = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "vllm"})
    assert script.status_code == 200, script.text
    for pool in plan["pools"]:
        assert f"--pipeline-parallel-size {pool['pp']}" in script.text.replace(" \\\n  ", " ")


def test_the_405b_class_plan_rechecks_its_staged_pools(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The recheck rebuilds each pool's step model at its stages (at tp alone 405B has no KV room on 8 GPUs) and
    prices a pool's tp × pp GPUs: the verified plan holds against its own classes at the price it was planned at."""
    plan = seeded.post("/v1/plans", json={**CLASSES_405B, "verify": True}, headers=admin).json()
    response = seeded.get(f"/v1/plans/{plan['id']}/recheck")
    assert response.status_code == 200, response.text
    recheck = response.json()
    assert recheck["holds"] is True, recheck
    assert all(k["checked"] for k in recheck["check"]["classes"]), recheck["check"]
    assert "when planned" not in recheck["summary"], recheck["summary"]  # same prices: no change of cost to report
