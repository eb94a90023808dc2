"""POST /v1/capacity for a model no node holds: Llama-3.1-405B in BF16 on 32 H100 is sized in pipeline stages
(it was a 422 before: the capacity search had no stages)."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.test_capacity import body


def _405b(**changes: Any) -> dict[str, Any]:
    return body(
        model="llama-3.1-405b",
        gpus=32,
        workload={"prompt_tokens": {"mean": 1000, "p99": 4000}, "output_tokens": {"mean": 200, "p99": 800}},
        slo={"ttft_ms": 5000, "tpot_ms": 60},
        precision={"weights": "bf16", "kv_cache": "bf16"},
        constraints=changes,
    )


def test_405b_capacity_on_32_h100_is_sized_in_pipeline_stages(seeded: ApiClient, admin: dict[str, str]) -> None:
    """810 GB of BF16 weights exceed a node (8 × 80 GB). Pinned to pp 2, tp 8 × pp 2 holds them in 16 GPUs and 32
    GPUs run two replicas (the layout tests/api/test_pipeline_plans.py plans). Free, the search may take tp 8 × pp 4:
    each step reads the weights in W / (tp · BW) whatever pp (planner/pipeline.py's fold) while pp 4 spreads the KV
    and FLOPs of a batch twice as large over 32 GPUs, so it serves at least as much; the cross-node tp 16 and 32
    offered beside them pay their all-reduce on the NIC and lose (tests/planner/test_pipeline_search.py)."""
    pinned = seeded.post("/v1/capacity", json=_405b(pin={"pp": 2}), headers=admin)
    assert pinned.status_code == 200, pinned.text
    config = pinned.json()["configuration"]
    assert (config["tp"], config["pp"], config["replicas"], config["gpus_used"]) == (8, 2, 2, 32)
    free = seeded.post("/v1/capacity", json=_405b(), headers=admin)
    assert free.status_code == 200, free.text
    chosen = free.json()["configuration"]
    assert chosen["pp"] > 1 and chosen["tp"] <= 8 and chosen["gpus_used"] == chosen["replicas"] * chosen["tp"] * chosen["pp"]
    assert free.json()["max_arrival_rate_rps"] >= pinned.json()["max_arrival_rate_rps"] * 0.99 > 0


def test_a_pipeline_wider_than_the_hardware_is_refused(seeded: ApiClient, admin: dict[str, str]) -> None:
    """tp 8 × pp 8 = 64 GPUs pinned on 32: no replica fits the hardware."""
    too_wide = seeded.post("/v1/capacity", json=_405b(pin={"pp": 8, "tp": 8}), headers=admin)
    assert too_wide.status_code == 422, too_wide.text
