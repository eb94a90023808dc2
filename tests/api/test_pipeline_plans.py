"""POST /v1/plans for a model no node holds: Llama-3.1-405B in BF16 on H100 plans in pipeline stages."""

from __future__ import annotations

import csv as csv_module
import io
from typing import Any

import pytest

from tests.api.client import ApiClient

REQUEST_405B: dict[str, Any] = {
    "model": "llama-3.1-405b",
    "workload": {"arrival_rate_rps": 1, "prompt_tokens": {"mean": 1000, "p99": 4000}, "output_tokens": {"mean": 200, "p99": 800}},
    "slo": {"ttft_ms": 5000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


def test_405b_bf16_on_h100_plans_over_two_nodes(seeded: ApiClient, admin: dict[str, str]) -> None:
    """405e9 × 2 B = 810 GB of weights exceed one 8 × 80 GB node (576 GB after a 10 % reserve); tp 8 × pp 2
    offers 1,152 GB. A 60 ms TPOT leaves tp 8 × pp 2: each step reads the 810 GB once per micro-batch over one
    stage's bandwidth, 810e9 / (8 × 3.35e12) = 30 ms before efficiency, where tp 2 × pp 8 would take 121 ms."""
    response = seeded.post("/v1/plans", json=REQUEST_405B, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()["plan"]
    assert plan["gpu"] == "h100-sxm"
    assert (plan["tp"], plan["pp"]) == (8, 2)
    assert plan["gpus_total"] == plan["replicas"] * plan["tp"] * plan["pp"]
    assert all(pool["pp"] == plan["pp"] for pool in plan["pools"])


def test_405b_pipeline_plan_deploys_with_pp_flags_and_csv_columns(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The plan's pp reaches each engine's pipeline flag (vLLM --pipeline-parallel-size over Ray, SGLang --pp-size,
    TensorRT-LLM --pp_size with --gpus_per_node), the k8s target refuses a replica spanning nodes with a 422, and
    the CSV row carries pp."""
    plan = seeded.post("/v1/plans", json=REQUEST_405B, headers=admin).json()
    tp, pp = plan["plan"]["tp"], plan["plan"]["pp"]
    vllm = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "vllm"})
    assert vllm.status_code == 200, vllm.text
    assert f"--tensor-parallel-size {tp}" in vllm.text and f"--pipeline-parallel-size {pp}" in vllm.text
    assert "--distributed-executor-backend ray" in vllm.text
    assert f"tp {tp} x pp {pp} = {tp * pp} GPUs over {tp * pp // 8} nodes" in vllm.text
    sglang = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "sglang"})
    assert f"--tp-size {tp}" in sglang.text and f"--pp-size {pp}" in sglang.text
    trt = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "trt-llm"})
    assert f"--tp_size {tp}" in trt.text and f"--pp_size {pp}" in trt.text and "--gpus_per_node 8" in trt.text
    k8s = seeded.get(f"/v1/plans/{plan['id']}/deploy", params={"target": "k8s"})
    assert k8s.status_code == 422 and "LeaderWorkerSet" in k8s.json()["detail"]
    csv = seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"})
    [columns] = list(csv_module.DictReader(io.StringIO(csv.text)))
    assert (columns["tp"], columns["pp"], columns["gpus_total"]) == (str(tp), str(pp), str(plan["plan"]["gpus_total"]))


def test_405b_pipeline_plan_justifies_its_stages(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The justification's parallel section: 16 GPUs over 2 nodes, 126 layers in stages of 63, one NIC hop; the
    decode step at the plan's occupancy is pp stage times plus the hops, and a lone prompt leaves half the
    stages idle; the memory section counts all 16 GPUs."""
    plan = seeded.post("/v1/plans", json=REQUEST_405B, headers=admin).json()
    section = plan["justification"]["parallel"]
    assert (section["tp"], section["pp"], section["gpus_per_replica"], section["nodes_per_replica"]) == (8, 2, 16, 2)
    assert section["stage_layers"] == 63 and section["stage_imbalance"] == 1.0
    assert len(section["hop_links"]) == 1 and "scale-out" in section["hop_links"][0]
    assert section["decode_step_s"] == pytest.approx(
        2 * section["stage_s"] + section["hops_s"], rel=1e-3
    )  # the response rounds to 4 significant digits
    assert section["lone_bubble_fraction"] == 0.5
    assert section["lone_prefill_s"] > 0 and section["tp_comm_s_per_token"] > 0
    usable = plan["justification"]["memory"]["usable_bytes"]
    assert usable == pytest.approx(16 * 80e9 * 0.9, rel=0.01)
