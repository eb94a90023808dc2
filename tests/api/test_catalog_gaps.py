"""A plan that cannot start because the catalog lacks what it needs says what is missing and how
to add it, rather than blaming a constraint the caller never set (issue 22 §8)."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.reference_catalog import seed_reference_catalog

CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 5, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "verify": False,
}


def test_a_catalog_without_the_default_precisions_is_named_as_the_cause(
    client: ApiClient, admin: dict[str, str], migrated_database_url: str
) -> None:
    seed_reference_catalog(migrated_database_url)
    for slug in ("bf16", "fp8"):
        assert client.delete(f"/v1/quantizations/{slug}", headers=admin).status_code == 204

    problem = assert_problem(client.post("/v1/plans", json=CHAT, headers=admin), 422, "invalid-planner-input")
    assert "the catalog has none of the default precisions bf16/bf16, fp8/fp8" in problem["detail"]
    assert "POST /v1/quantizations" in problem["detail"] and "constraints.precisions" in problem["detail"]
    assert "allow at least one" not in problem["detail"]
    assert (problem["constraint"], problem["default_precisions"]) == ("precisions", ["bf16/bf16", "fp8/fp8"])

    named = {**CHAT, "constraints": {**CHAT["constraints"], "precisions": [{"weights": "fp16", "kv_cache": "fp16"}]}}
    assert client.post("/v1/plans", json=named, headers=admin).status_code == 201


def test_a_fleet_plan_on_a_catalog_without_the_default_precisions_says_what_the_catalog_lacks(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any], model_record: dict[str, Any]
) -> None:
    """As for plans: nothing constrained, so the message names what the catalog lacks, not an empty allow-list."""
    assert client.post("/v1/gpus", json=gpu_record, headers=admin).status_code == 201
    assert client.post("/v1/models", json=model_record, headers=admin).status_code == 201
    price = {"provider": "runpod", "gpu": gpu_record["slug"], "on_demand": 3.0, "as_of": "2026-10-01", "source": "test"}
    assert client.post("/v1/prices", json=price, headers=admin).status_code == 201
    fleet = {
        "workloads": [
            {
                "name": "chat",
                "model": model_record["slug"],
                "prompt_tokens": 512,
                "output_tokens": 128,
                "slo": {"ttft_ms": 2000, "tpot_ms": 100},
                "demand_rps": [1.0],
            }
        ],
        "period_hours": 1,
    }
    answer = client.post("/v1/fleet-plans", json=fleet, headers=admin)
    assert answer.status_code == 422, answer.text
    assert "the catalog has none of the default precisions" in answer.json()["detail"]
