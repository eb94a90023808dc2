"""workload.prefix_reuse through POST /v1/simulate and POST /v1/evaluate, held against a plan's own
figures for the same deployment: the plan's verification simulated replica 0 with its LRU (the same
seed and request count give the same run), and its prediction planned the same prompt mixture on the
same KV left beside the cache."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.planning import VERIFY_REQUESTS
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_prefix_caching import REUSE, _body


def _cached_plan(seeded: ApiClient, admin: dict[str, str]) -> dict[str, Any]:
    """A verified plan that deploys a cache, without speculation (simulate and evaluate take no draft head)."""
    body = _body(REUSE, verify=True)
    body["constraints"]["speculative"] = "off"
    response = seeded.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["plan"]["prefix_caching"] is not None and plan["plan"]["speculative"] is None
    return plan


def _deployment(plan: dict[str, Any], **top: Any) -> dict[str, Any]:
    """The plan's deployment as a simulate/evaluate body: its configuration, serving shape, cache and workload."""
    chosen, shape = plan["plan"]["prefix_caching"], plan["plan"]
    body = _body(REUSE)
    return {
        "model": body["model"],
        "gpu": shape["gpu"],
        "tp": shape["tp"],
        "precision": shape["precision"],
        "serving": {"replicas": shape["replicas"], "batch_limit": shape["batch_limit"], "chunk_tokens": shape["chunk_tokens"]},
        "workload": body["workload"],
        "prefix_cache": {"cache_tokens": chosen["cache_tokens"], "routing": chosen["routing"]},
        **top,
    }


def test_simulate_reproduces_the_plans_verification(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _cached_plan(seeded, admin)
    response = seeded.post("/v1/simulate", json=_deployment(plan, requests=VERIFY_REQUESTS, seed=0))
    assert response.status_code == 200, response.text
    answer = response.json()
    cache, chosen, section = answer["prefix_cache"], plan["plan"]["prefix_caching"], plan["justification"]["prefix_caching"]
    simulated = plan["verification"]["simulated"]
    assert cache["replica"] == 0 and cache["routing"] == chosen["routing"] and cache["cache_tokens"] == chosen["cache_tokens"]
    assert cache["kv_capacity_tokens"] == answer["kv_capacity_tokens"] - chosen["cache_tokens"]
    assert cache["arrival_rate_rps"] == pytest.approx(plan["verification"]["per_replica_rate_rps"], rel=1e-6)
    # the same replica, stream, LRU and seed as the plan's verification: the same run
    assert cache["hit_rate"] == pytest.approx(section["simulated_hit_rate"], abs=1e-6)
    assert cache["predicted_hit_rate"] == pytest.approx(chosen["hit_rate"], abs=1e-6)
    assert answer["ttft_ms"]["p99"] == pytest.approx(simulated["ttft_s"]["p99"] * 1e3, rel=1e-3)
    assert answer["tpot_ms"]["p99"] == pytest.approx(simulated["tpot_s"]["p99"] * 1e3, rel=1e-3)
    assert answer["e2e_s"]["p50"] == pytest.approx(simulated["e2e_s"]["p50"], rel=1e-3)
    assert 0 < cache["prefill_tokens_saved_fraction"] < 1
    assert cache["prefill_tokens_saved_fraction"] == pytest.approx(chosen["prefill_tokens_saved_fraction"], abs=0.05)


def test_evaluate_reproduces_the_plans_prediction(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _cached_plan(seeded, admin)
    response = seeded.post("/v1/evaluate", json=_deployment(plan, context_tokens=1000, prompt_tokens=3000))
    assert response.status_code == 200, response.text
    answer = response.json()
    cache, chosen = answer["prefix_cache"], plan["plan"]["prefix_caching"]
    assert cache["hit_rate"] == pytest.approx(chosen["hit_rate"], abs=1e-6)
    assert cache["prefill_tokens_saved_fraction"] == pytest.approx(chosen["prefill_tokens_saved_fraction"], abs=1e-6)
    assert cache["kv_capacity_tokens"] == answer["kv_capacity_tokens"] - chosen["cache_tokens"]
    # the queueing model on the plan's mixture and KV: the plan's utilisation and its predicted p99 TTFT at its load
    queueing = answer["queueing"]
    assert queueing["utilisation"] == pytest.approx(plan["plan"]["target_rho"], rel=1e-4)
    point = min(queueing["rho_curve"], key=lambda p: abs(p["arrival_rate_rps"] - queueing["arrival_rate_rps"]))
    assert point["arrival_rate_rps"] == pytest.approx(plan["predicted"]["per_replica_rate_rps"], rel=1e-5)
    assert point["ttft_p99_ms"] == pytest.approx(plan["predicted"]["ttft_ms"]["p99"], rel=1e-3)
    # each class that finds a prefix: the evaluated 3,000-token prompt prefills only what is not cached
    assert cache["cached_prefill"], cache
    for row in cache["cached_prefill"]:
        assert 0 < row["cached_tokens"] < row["prompt_tokens"] == 3000 and row["cached_tokens"] % 16 == 0
        assert row["uncached_time_ms"] == pytest.approx(answer["prefill"]["time_ms"], rel=1e-9)
        assert row["time_ms"] < row["uncached_time_ms"]


def _single(**changes: Any) -> dict[str, Any]:
    body = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "tp": 1,
        "precision": {"weights": "bf16", "kv_cache": "bf16"},
        "serving": {"replicas": 1, "batch_limit": 64},
        "workload": {**_body(REUSE)["workload"], "arrival_rate_rps": 8},
    }
    body.update(changes)
    return body


def _simulate(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "requests": 2000}


def _evaluate(body: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {**body, "context_tokens": 1000, **top}


def test_the_cache_defaults_to_the_plans_and_cuts_ttft(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/simulate", json=_simulate(_single())).json()
    cache = answer["prefix_cache"]
    # one replica: random routing, the whole working set (the system prompt and every document, whole blocks)
    assert cache["routing"] == "random" and cache["cache_tokens"] == cache["working_set_tokens"] == 992 + 100 * 1488
    assert cache["hit_rate"] > 0.9 and cache["arrival_share"] == pytest.approx(1.0)
    plain = copy.deepcopy(_single())
    del plain["workload"]["prefix_reuse"]
    without = seeded.post("/v1/simulate", json=_simulate(plain)).json()
    assert without["prefix_cache"] is None
    assert answer["ttft_ms"]["p50"] < 0.8 * without["ttft_ms"]["p50"]
    evaluated = seeded.post("/v1/evaluate", json=_evaluate(_single())).json()
    assert evaluated["prefix_cache"]["cache_tokens"] == cache["cache_tokens"]
    # Che's rate for a cache holding the whole working set is 1; the LRU still misses each document's first reference
    assert evaluated["prefix_cache"]["hit_rate"] == pytest.approx(1.0) and 0.9 < cache["hit_rate"] < 1.0


def test_prefix_aware_routing_simulates_the_busiest_replica(seeded: ApiClient) -> None:
    body = _single(serving={"replicas": 4, "batch_limit": 64}, prefix_cache={"routing": "prefix_aware", "cache_tokens": 16000})
    body["workload"]["arrival_rate_rps"] = 24
    cache = seeded.post("/v1/simulate", json=_simulate(body)).json()["prefix_cache"]
    assert cache["routing"] == "prefix_aware" and cache["cache_tokens"] == 16000
    assert cache["arrival_share"] > 0.25  # replica 0 owns the most popular document
    assert cache["arrival_rate_rps"] == pytest.approx(24 * cache["arrival_share"], rel=1e-9)


def test_a_measured_hit_rate_is_simulated_as_given(seeded: ApiClient) -> None:
    body = _single()
    body["workload"]["prefix_reuse"] = {"hit_rate": 0.6}
    cache = seeded.post("/v1/simulate", json=_simulate(body)).json()["prefix_cache"]
    assert cache["routing"] == "as_measured" and cache["cache_tokens"] == 0
    assert cache["prefill_tokens_saved_fraction"] == pytest.approx(0.6, abs=0.03)  # whole blocks of ⌊0.6·p⌋
    evaluated = seeded.post("/v1/evaluate", json=_evaluate(body, prompt_tokens=2000)).json()["prefix_cache"]
    assert evaluated["hit_rate"] == 0.6 and evaluated["cached_prefill"][0]["cached_tokens"] == 2000 - 800


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"prefix_cache": {"cache_tokens": 100}}, "multiple of 16"),
        ({"prefix_cache": {"routing": "sticky"}}, "routing"),
        ({"serving": {"replicas": 2, "batch_limit": 64, "router": "jsq"}}, "router 'jsq'"),
    ],
)
def test_bad_cache_requests_are_a_422_with_the_reason(seeded: ApiClient, changes: dict[str, Any], says: str) -> None:
    body = _single(**changes)
    for route, sent in (("/v1/simulate", _simulate(body)), ("/v1/evaluate", _evaluate(body))):
        problem = assert_problem(seeded.post(route, json=sent), 422, "invalid-request")
        assert says in str(bad_fields(problem)), problem


def test_a_cache_without_reuse_or_with_a_measured_rate_is_refused(seeded: ApiClient) -> None:
    plain = _single(prefix_cache={"cache_tokens": 1600})
    del plain["workload"]["prefix_reuse"]
    problem = assert_problem(seeded.post("/v1/simulate", json=_simulate(plain)), 422, "invalid-request")
    assert "prefix_cache is given without workload.prefix_reuse" in str(bad_fields(problem))
    measured = _single(prefix_cache={"cache_tokens": 1600})
    measured["workload"]["prefix_reuse"] = {"hit_rate": 0.5}
    problem = assert_problem(seeded.post("/v1/evaluate", json=_evaluate(measured)), 422, "invalid-request")
    assert "measured prefix_reuse.hit_rate" in str(bad_fields(problem))


def test_a_cache_leaving_too_little_kv_is_a_422(seeded: ApiClient) -> None:
    body = _single(prefix_cache={"cache_tokens": 9_999_984})
    for route, sent in (("/v1/simulate", _simulate(body)), ("/v1/evaluate", _evaluate(body))):
        problem = assert_problem(seeded.post(route, json=sent), 422, "unsupported-configuration")
        assert "leaves" in problem["detail"] and "p99 request" in problem["detail"]
