"""POST /v1/simulate through the real app on a migrated database seeded with the reference catalog:
percentiles with confidence intervals, determinism, Little's law, overload, and the request bound."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.simulator import simulate
from planner.workload import FixedLength, LognormalLength, Serving, Workload
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.reference_catalog import seed_reference_catalog

BODY: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "tp": 1,
    "precision": {"weights": "fp16", "kv_cache": "fp16"},
    "serving": {"replicas": 2, "batch_limit": 64},
    "workload": {"arrival_rate_rps": 8.0, "prompt_tokens": {"mean": 500, "p99": 2000}, "output_tokens": 100},
    "requests": 4000,
    "seed": 7,
}


@pytest.fixture
def database(migrated_database_url: str) -> str:
    seed_reference_catalog(migrated_database_url)
    return migrated_database_url


@pytest.fixture
def seeded(make_client: Callable[..., ApiClient], database: str) -> ApiClient:
    return make_client()


def _simulate(client: ApiClient, **changes: Any) -> Any:
    return client.post("/v1/simulate", json={**BODY, **changes})


def test_simulation_reports_percentiles_with_confidence_intervals(seeded: ApiClient, database: str) -> None:
    """4,000 arrivals at 8 rps over 2 replicas, 10 % warm-up: 3,600 measured requests, each p99 inside
    its 95 % batch-means interval, p50 ≤ p90 ≤ p99, L = λ·W over the window (within the window's edge
    effects), and the same numbers the simulator gives for the same seed."""
    response = _simulate(seeded)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["requests"] == 4000 and body["measured_requests"] == 3600 and body["seed"] == 7
    assert body["unstable"] is False
    for metric in ("ttft_ms", "tpot_ms", "e2e_s", "queue_wait_ms"):
        p = body[metric]
        assert p["p50"] <= p["p90"] <= p["p99"], metric
        assert p["p99_ci_low"] <= p["p99"] <= p["p99_ci_high"], metric
    assert body["ttft_ms"]["samples"] == 3600
    law = body["littles_law"]
    assert law["occupancy"] == pytest.approx(law["arrival_rate_rps"] * law["time_in_service_s"], rel=0.05)
    assert law["arrival_rate_rps"] == pytest.approx(8.0, rel=0.1)
    assert 0 < body["utilisation"] < 1
    assert body["utilisation"] == pytest.approx(4.0 / body["saturation_rps"])
    assert 0 < body["occupancy_fraction"] == pytest.approx(body["mean_occupancy"] / 64)
    assert body["throughput_rps"] == pytest.approx(8.0, rel=0.1)
    assert body["wall_time_ms"] > 0 and body["steps"] > 0
    assert body["efficiency"]["profile"] == "calibrated"

    engine = make_engine(database)
    try:
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            gpu = catalog.gpu_spec("h100-sxm", "calibrated")
            model = catalog.model_spec("llama-3.1-8b")
            precision = catalog.precision("fp16", "fp16")
    finally:
        engine.dispose()
    direct = simulate(
        build_step_model(gpu, model, precision, 1, gpu.efficiency),
        Workload(
            arrival_rate_rps=8.0,
            prompt_tokens=LognormalLength(mean_tokens=500, p99_tokens=2000),
            output_tokens=FixedLength(tokens=100),
        ),
        Serving(replicas=2, batch_limit=64),
        kv_capacity_tokens=kv_capacity_tokens(gpu, model, precision, 1, gpu.efficiency),
        requests=4000,
        seed=7,
    )
    assert body["ttft_ms"]["p99"] == pytest.approx(direct.ttft_s.p99 * 1e3)
    assert body["e2e_s"]["p50"] == pytest.approx(direct.e2e_s.p50)
    assert body["kv_capacity_tokens"] == kv_capacity_tokens(gpu, model, precision, 1, gpu.efficiency)


def test_same_seed_same_answer_other_seed_other_sample(seeded: ApiClient) -> None:
    first, again, other = (_simulate(seeded, **changes).json() for changes in ({}, {}, {"seed": 8}))
    for body in (again, other):
        body.pop("wall_time_ms")
    first.pop("wall_time_ms")
    assert again == first
    assert other["ttft_ms"] != first["ttft_ms"]


def test_overload_is_reported_as_unstable_with_null_percentiles(seeded: ApiClient) -> None:
    saturation = _simulate(seeded, requests=1000).json()["saturation_rps"]
    body = _simulate(seeded, requests=3000, workload={**BODY["workload"], "arrival_rate_rps": 3 * 2 * saturation}).json()
    assert body["unstable"] is True
    assert body["utilisation"] == pytest.approx(3.0)
    assert body["backlog_at_end"] > 0
    for metric in ("ttft_ms", "tpot_ms", "e2e_s", "queue_wait_ms"):
        assert (body[metric]["p50"], body[metric]["p99"], body[metric]["p99_ci_high"]) == (None, None, None)


def test_a_request_over_the_limit_is_refused_with_the_limit(make_client: Callable[..., ApiClient], database: str) -> None:
    client = make_client(max_simulated_requests=5000)
    problem = assert_problem(_simulate(client, requests=5001), 422, "simulation-too-large")
    assert problem["max_simulated_requests"] == 5000 and problem["requests"] == 5001
    assert "limit of 5,000" in problem["detail"]
    assert _simulate(client, requests=5000).status_code == 200


def test_a_chunk_budget_too_tight_for_the_time_budget_is_refused(make_client: Callable[..., ApiClient], database: str) -> None:
    """chunk_tokens 65 with up to 64 decodes per step leaves 1 prefill token a step: 4,000 prompts of
    mean 500 tokens could take 2,000,000 prefill steps, over the 1 s × 100,000 steps/s budget."""
    client = make_client(request_timeout_s=1.0)
    problem = assert_problem(_simulate(client, serving={"batch_limit": 64, "chunk_tokens": 65}), 422, "simulation-too-large")
    assert problem["estimated_prefill_steps"] == 4000 * 500 and problem["max_prefill_steps"] == 100_000
    assert "raise chunk_tokens" in problem["detail"]


def test_invalid_bodies_and_unknown_slugs(seeded: ApiClient) -> None:
    body = {
        **BODY,
        "requests": 10,
        "warmup_fraction": 1.0,
        "serving": {"batch_limit": 64, "chunk_tokens": 64, "router": "least-loaded", "replicas": 0},
        "workload": {"arrival_rate_rps": -2, "prompt_tokens": {"mean": 500, "p99": 500}, "output_tokens": "long"},
    }
    fields = bad_fields(assert_problem(seeded.post("/v1/simulate", json=body), 422, "invalid-request"))
    assert set(fields) == {
        "requests",
        "warmup_fraction",
        "serving.chunk_tokens",
        "serving.router",
        "serving.replicas",
        "workload.arrival_rate_rps",
        "workload.prompt_tokens.p99",
        "workload.output_tokens",
    }
    missing = {key: value for key, value in BODY.items() if key != "workload"}
    assert "workload" in bad_fields(assert_problem(seeded.post("/v1/simulate", json=missing), 422, "invalid-request"))
    assert assert_problem(_simulate(seeded, gpu="h300"), 404, "not-found")["kind"] == "gpu"
    too_big = _simulate(seeded, model="llama-3.1-405b", gpu="l4")
    assert assert_problem(too_big, 422, "model-does-not-fit")["shortfall_gb"] > 700


def test_simulations_are_timed_in_the_metrics(seeded: ApiClient) -> None:
    """Each simulation run by the route adds one observation to `headroom_simulation_seconds`."""
    from tests.api.test_observability import sample, scrape

    before = sample(scrape(seeded), "headroom_simulation_seconds_count")
    assert _simulate(seeded, requests=1000).status_code == 200
    after = scrape(seeded)
    assert sample(after, "headroom_simulation_seconds_count") == before + 1
    assert sample(after, "headroom_simulation_seconds_sum") > 0
