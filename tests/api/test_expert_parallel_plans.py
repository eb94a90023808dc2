"""POST /v1/plans for an MoE model searches expert parallelism: the plan states ep, its justification the
all-to-all term, and each deploy target renders the data-parallel-attention form it priced."""

from __future__ import annotations

from typing import Any

import yaml

from api.deploy import engine_cli
from api.deploy_expert_parallel import vllm_expert_parallel_env
from tests.api.client import ApiClient
from tests.api.test_deploy import commands, deploy, flags

# Long prompts, loose latency: prefill chunks dominate the steps, where ep saves the all-reduces
# (tests/planner/test_expert_parallel.py has the hand numbers).
REQUEST: dict[str, Any] = {
    "model": "mixtral-8x7b",
    "workload": {
        "arrival_rate_rps": 60,
        "prompt_tokens": {"mean": 4000, "p99": 8000},
        "output_tokens": {"mean": 100, "p99": 300},
    },
    "slo": {"ttft_ms": 10000, "tpot_ms": 200},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}], "pin": {"tp": 8}},
    "verify": False,
}


def test_mixtral_long_prompts_plan_ep_and_deploy_it(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=REQUEST, headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    plan = body["plan"]
    assert (plan["tp"], plan["ep"]) == (8, 8)
    parallel = body["justification"]["parallel"]
    assert parallel["ep"] == 8 and parallel["tp_comm_s_per_token"] == 0.0 and parallel["ep_comm_s_per_token"] > 0
    [vllm] = commands(deploy(seeded, body["id"], "vllm"))
    # the documented all-to-all backend for one node (vLLM docs/serving/expert_parallel_deployment.md): the priced
    # all-to-all, not v0.11's default all-gather/reduce-scatter
    assert vllm[:3] == ["VLLM_ALL2ALL_BACKEND=pplx", "vllm", "serve"]
    vllm = vllm[1:]
    got = flags(vllm)
    assert (got["--tensor-parallel-size"], got["--data-parallel-size"]) == ("1", "8") and "--enable-expert-parallel" in got
    assert got["--max-num-seqs"] == str(plan["batch_limit"] // 8)  # each data-parallel rank schedules its own share
    [sglang] = commands(deploy(seeded, body["id"], "sglang"))
    got = flags(sglang)
    assert (got["--tp-size"], got["--dp-size"], got["--ep-size"], got["--moe-a2a-backend"]) == ("8", "8", "8", "deepep")
    assert "--enable-dp-attention" in got
    script = deploy(seeded, body["id"], "trt-llm")
    [trt] = commands(script)
    assert (flags(trt)["--tp_size"], flags(trt)["--ep_size"]) == ("8", "8")
    assert yaml.safe_load(script.split("<<'EOF'\n")[1].split("\nEOF")[0])["enable_attention_dp"] is True
    for target, argv in (("vllm", vllm), ("sglang", sglang), ("trt-llm", trt)):
        assert set(flags(argv)) <= set(engine_cli()[target]["flags"])  # every flag documented (api/data/engine_cli.json)


def test_k8s_runs_the_ep_replica_with_its_all_to_all_backend(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=REQUEST, headers=admin)
    assert response.status_code == 201, response.text
    manifests = list(yaml.safe_load_all(deploy(seeded, response.json()["id"], "k8s")))
    [deployment] = [d for d in manifests if d["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert {"name": "VLLM_ALL2ALL_BACKEND", "value": "pplx"} in container["env"]
    assert "--enable-expert-parallel" in container["args"]


def test_vllm_all_to_all_backend_follows_the_layout() -> None:
    """vLLM's Backend Selection Guide: pplx on one node, DeepEP across nodes (high-throughput for a prefill pool,
    low-latency for decode); nothing without expert parallelism."""
    assert vllm_expert_parallel_env(1, nodes=1, role="mixed") == {}
    assert vllm_expert_parallel_env(8, nodes=1, role="mixed") == {"VLLM_ALL2ALL_BACKEND": "pplx"}
    assert vllm_expert_parallel_env(16, nodes=2, role="mixed") == {"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}
    assert vllm_expert_parallel_env(16, nodes=2, role="decode") == {"VLLM_ALL2ALL_BACKEND": "deepep_low_latency"}
    assert vllm_expert_parallel_env(16, nodes=2, role="prefill") == {"VLLM_ALL2ALL_BACKEND": "deepep_high_throughput"}
