"""POST /v1/plans with separate pools: `transfer.link` names the link the KV crosses and why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS

CHAT_IN, CHAT_OUT = {"mean": 1000, "p99": 4000}, {"mean": 250, "p99": 1000}
RAG_IN, RAG_OUT = {"mean": 6000, "p99": 16000}, {"mean": 300, "p99": 800}


def body(model: str, rate: float, ttft_ms: int, tpot_ms: int, prompt: Any = CHAT_IN, output: Any = CHAT_OUT) -> dict[str, Any]:
    return {
        "model": model,
        "workload": {"arrival_rate_rps": rate, "prompt_tokens": prompt, "output_tokens": output},
        "slo": {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms},
        "constraints": {"topology": "disaggregated"},
        "verify": False,
        "store": False,
    }


def test_pools_in_one_node_use_its_nvlink(seeded: ApiClient) -> None:
    """Llama-3.1-70B RAG at 4 req/s (the rag-70b golden's question): both pools on H100 SXM within one 8-GPU HGX
    node: the KV crosses NVLink (450 GB/s a GPU each way, catalog), not ConnectX-7 (50 GB/s)."""
    question = body("llama-3.1-70b", 4.0, 3000, 80, RAG_IN, RAG_OUT)
    plan = seeded.post("/v1/plans", json=question, headers=ADMIN_HEADERS).json()
    prefill, decode = plan["plan"]["pools"]
    assert prefill["gpu"] == decode["gpu"] == "h100-sxm"
    assert prefill["tp"] * prefill["replicas"] + decode["tp"] * decode["replicas"] <= 8
    transfer = plan["disaggregation"]["transfer"]
    assert transfer["link"].startswith("h100-sxm scale-up link") and "one 8-GPU node" in transfer["link"]
    assert transfer["bytes_per_s_per_gpu"] == pytest.approx(450e9)
    # p99 transfer = latency + p99 bytes / (links × bandwidth) with the catalog NVLink figures (the API rounds to 2 digits)
    assert transfer["p99_ms"] == pytest.approx(
        (5e-6 + transfer["p99_prompt_bytes"] / (transfer["links"] * 450e9)) * 1e3, rel=0.02
    )


def test_pools_beyond_one_node_use_the_scale_out_network(seeded: ApiClient) -> None:
    """Llama-3.1-8B at 200 req/s: 19 L40S, more than a node holds: the scale-out network, and the section says why.
    The link is the catalog's for L40S (migration 0013: g6e.48xlarge's 400 Gbps over 8 GPUs = 50 Gb/s = 6.25e9 B/s
    per GPU), not a ConnectX-7 per GPU."""
    plan = seeded.post("/v1/plans", json=body("llama-3.1-8b", 200.0, 500, 50), headers=ADMIN_HEADERS).json()
    transfer = plan["disaggregation"]["transfer"]
    assert plan["plan"]["gpus_total"] > 8
    assert transfer["link"].startswith("l40s scale-out network 50 Gb/s") and "scale-out network" in transfer["link"]
    assert transfer["bytes_per_s_per_gpu"] == pytest.approx(6.25e9)
    assert "g6e.48xlarge" in transfer["link_source"]
