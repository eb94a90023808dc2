"""POST /v1/plans with separate prefill and decode pools for a model no node holds: Llama-3.1-405B in BF16 on H100
is disaggregated in pipeline stages (tp 8 × pp 2 pools, 16 GPUs a replica) where it was refused on memory."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.test_deploy import commands, flags
from tests.api.test_pipeline_plans import REQUEST_405B

DISAGG_405B: dict[str, Any] = {
    **REQUEST_405B,
    "constraints": {**REQUEST_405B["constraints"], "topology": "disaggregated"},
}


def test_405b_bf16_on_h100_disaggregates_in_pp_2_pools(seeded: ApiClient, admin: dict[str, str]) -> None:
    """810 GB of BF16 weights exceed one 8 × 80 GB node, so no in-node tp can be a pool; 16 GPUs in stages can.
    The decode pool is tp 8 × pp 2 (memory-bound steps read the weights once per micro-batch over one stage's
    bandwidth, so the widest stage wins). The prefill pool is 16 GPUs in stages too: a prompt goes through them one
    after the other, so a tp 4 × pp 4 replica prefills 4 prompts at once each at a quarter of the replica's FLOP/s,
    the same throughput as tp 8 × pp 2's 2 at a half, and its all-reduces cross 4 GPUs instead of 8. The plan
    counts (prefill + decode replicas) × 16 GPUs, and the KV moves from each of a prefill replica's 16 GPUs to a
    decode replica's 16 (the stages split the layers' KV)."""
    response = seeded.post("/v1/plans", json=DISAGG_405B, headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    plan = body["plan"]
    assert plan["topology"] == "disaggregated"
    pools = {pool["role"]: pool for pool in plan["pools"]}
    assert set(pools) == {"prefill", "decode"}
    assert (pools["decode"]["gpu"], pools["decode"]["tp"], pools["decode"]["pp"]) == ("h100-sxm", 8, 2), pools
    prefill = pools["prefill"]
    assert prefill["gpu"] == "h100-sxm" and prefill["pp"] >= 2 and prefill["tp"] * prefill["pp"] == 16, pools
    assert plan["pp"] == 2  # the decision names the decode pool's layout, as its tp
    assert plan["gpus_total"] == 16 * (pools["prefill"]["replicas"] + pools["decode"]["replicas"])
    assert body["disaggregation"]["transfer"]["links"] == 16


def test_without_stages_the_405b_pools_are_refused(seeded: ApiClient, admin: dict[str, str]) -> None:
    """pin.pp 1 keeps the pools to in-node tp, where 405B BF16 does not fit: a 422, as before stages were offered."""
    pinned = {**DISAGG_405B, "constraints": {**DISAGG_405B["constraints"], "pin": {"pp": 1}}}
    response = seeded.post("/v1/plans", json=pinned, headers=admin)
    assert response.status_code == 422, response.text


def test_the_405b_pools_are_simulated_and_deploy_in_stages(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Verified: the simulator runs the pools as planned (a prefill replica of pp stages serves pp prompts at once) and
    the plan holds; each pool's vLLM command carries its stages, over Ray across the two nodes."""
    response = seeded.post("/v1/plans", json={**DISAGG_405B, "verify": True}, headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    section = body["disaggregation"]
    assert section["simulated_ttft_ms"] is not None and section["simulated_ttft_ms"] <= 5000
    assert section["simulated_tpot_ms"] <= 60
    pools = {pool["role"]: pool for pool in body["plan"]["pools"]}
    script = seeded.get(f"/v1/plans/{body['id']}/deploy", params={"target": "vllm"})
    assert script.status_code == 200, script.text
    layouts = sorted((f["--tensor-parallel-size"], f["--pipeline-parallel-size"]) for f in map(flags, commands(script.text)))
    assert layouts == sorted((str(pool["tp"]), str(pool["pp"])) for pool in pools.values())
    for pool in pools.values():
        assert (
            f"{pool['role']} pool: {pool['replicas']} replica(s) of 16x h100-sxm (tp {pool['tp']} x pp {pool['pp']})"
            in script.text
        )
    assert "--distributed-executor-backend ray" in script.text
