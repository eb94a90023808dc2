"""Hostile numbers never reach the physics (issue 22 §2).

The schemas bound every physical quantity (planner/specs.py, docs/reliability.md "Bounds"), so an
absurd number is a 422 naming its field; a catalog row stored before those bounds (written here
straight into the database, where the API now refuses it) is left out of plans with a note in
`cost.notes` instead of failing every plan; and what the planner receives never overflows.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy import select, update

from catalog.db import make_engine, make_session_factory
from catalog.models import GpuPriceRow, GpuRow
from planner import specs
from planner.workload import MAX_ARRIVAL_CV, MIN_ARRIVAL_CV
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, GPU_RECORD, assert_problem, bad_fields
from tests.api.reference_catalog import seed_reference_catalog

SHAPE: dict[str, Any] = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 5, **SHAPE},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "verify": False,
}
ONE_GPU: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "tp": 1,
    "precision": {"weights": "bf16", "kv_cache": "bf16"},
}


def _write(url: str, table: Any, gpu: str, **values: Any) -> None:
    """Write `values` into the rows of `table` for `gpu` directly, as a row stored before the bounds would be."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            gpu_id = session.scalar(select(GpuRow.id).where(GpuRow.slug == gpu))
            key = GpuRow.id if table is GpuRow else GpuPriceRow.gpu_id
            session.execute(update(table).where(key == gpu_id).values(**values))
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture
def seeded(make_client: Callable[..., ApiClient], migrated_database_url: str) -> ApiClient:
    seed_reference_catalog(migrated_database_url)
    return make_client(raise_app_exceptions=False)


@pytest.mark.parametrize(
    ("column", "value"),
    [("memory_gb", 1e308), ("memory_bandwidth_gb_per_s", 1e308), ("peak_tflops_bf16", 1e300), ("interconnect_gb_per_s", 1e-300)],
)
def test_an_unusable_gpu_row_is_left_out_of_every_plan_with_a_note(
    seeded: ApiClient, migrated_database_url: str, column: str, value: float
) -> None:
    """Once reported as a 500 for every unconstrained plan: 1e308 GB × 1e9 B/GB is inf bytes, and
    the KV capacity floor(inf / bytes per token) overflowed. Now h200 is left out, with why."""
    _write(migrated_database_url, GpuRow, "h200", **{column: value})
    response = seeded.post("/v1/plans", json=CHAT, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["plan"]["gpu"] != "h200"
    notes = [note for note in plan["cost"]["notes"] if note.startswith("h200 left out")]
    assert len(notes) == 1 and "PUT /v1/gpus/h200" in notes[0]
    # naming the unusable GPU is the caller's choice: a 422 that says why, never a 500
    for path, body in (
        ("/v1/plans", {**CHAT, "constraints": {"gpus": ["h200"]}}),
        ("/v1/evaluate", {**ONE_GPU, "gpu": "h200", "context_tokens": 2048}),
        (
            "/v1/simulate",
            {
                **ONE_GPU,
                "gpu": "h200",
                "serving": {"batch_limit": 64},
                "workload": {"arrival_rate_rps": 2, **SHAPE},
                "requests": 200,
            },
        ),
        ("/v1/what-if", {**CHAT, "workload": SHAPE, "constraints": {"gpus": ["h200"]}, "sweep": {"arrival_rates_rps": [2]}}),
        ("/v1/capacity", {**ONE_GPU, "gpu": "h200", "precision": None, "gpus": 8, "workload": SHAPE, "slo": CHAT["slo"]}),
    ):
        answer = seeded.post(path, json=body, headers=ADMIN_HEADERS)
        assert answer.status_code == 422, (path, answer.status_code, answer.text)
        assert "h200" in answer.json()["detail"]


@pytest.mark.parametrize("price", [1e15, 1e308])
def test_an_unusable_stored_price_is_left_out_with_a_note(seeded: ApiClient, migrated_database_url: str, price: float) -> None:
    """Once a 500 inside the solver library (1e15) or a misleading 503 solver-failed (1e308)."""
    _write(migrated_database_url, GpuPriceRow, "l40s", on_demand_usd_per_hour=price)
    response = seeded.post("/v1/plans", json=CHAT, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["plan"]["gpu"] != "l40s"
    assert any(
        note.startswith("l40s's price at") and "outside what the planner can use" in note for note in plan["cost"]["notes"]
    )


def test_the_schemas_refuse_numbers_outside_their_physical_bounds(seeded: ApiClient) -> None:
    gpu = {
        **copy.deepcopy(GPU_RECORD),
        "slug": "hostile",
        "memory_gb": 1e308,
        "memory_bandwidth_gb_per_s": 0.5,
        "interconnect_gb_per_s": 1e6,
        "gpus_per_node": 100_000,
        "interconnect_latency_us": 1e9,
        "peak_tflops": {"bf16": 1e12},
        "source": "x" * 4_001,
    }
    fields = bad_fields(assert_problem(seeded.post("/v1/gpus", json=gpu, headers=ADMIN_HEADERS), 422, "invalid-request"))
    assert {
        "memory_gb",
        "memory_bandwidth_gb_per_s",
        "interconnect_gb_per_s",
        "gpus_per_node",
        "interconnect_latency_us",
        "peak_tflops.bf16",
        "source",
    } <= set(fields)
    price = {
        "provider": "runpod",
        "gpu": "h100-sxm",
        "region": "hostile",
        "on_demand": 1e15,
        "as_of": "2025-01-01",
        "source": "x",
    }
    assert "on_demand" in bad_fields(assert_problem(seeded.post("/v1/prices", json=price, headers=ADMIN_HEADERS), 422))
    over = {**CHAT, "prices": {"h100-sxm": {"on_demand": 1001}}}
    assert_problem(seeded.post("/v1/plans", json=over, headers=ADMIN_HEADERS), 422, "invalid-request")


@pytest.mark.parametrize(
    "workload",
    [
        {"arrival_rate_rps": 5, "prompt_tokens": {"tokens": [100, 200], "weights": [1e308, 1e308]}, "output_tokens": 50},
        {"arrival_rate_rps": 5, **SHAPE, "arrival_cv": 1e-200},
    ],
)
def test_hostile_workloads_are_refused_by_name(seeded: ApiClient, workload: dict[str, Any]) -> None:
    """Once a 500 (ZeroDivisionError): weights of 1e308 sum to inf, and a CV of 1e-200 squares to 0."""
    problem = assert_problem(seeded.post("/v1/plans", json={**CHAT, "workload": workload}, headers=ADMIN_HEADERS), 422)
    assert set(bad_fields(problem)) & {"workload.prompt_tokens.weights.0", "workload.arrival_cv"}


def test_a_short_timeout_refuses_a_large_simulation_without_chunking_by_name(
    make_client: Callable[..., ApiClient], migrated_database_url: str
) -> None:
    """Once a 500 while formatting its own message: there is no chunk budget to print."""
    seed_reference_catalog(migrated_database_url)
    client = make_client(request_timeout_s=0.01, raise_app_exceptions=False)
    body = {**ONE_GPU, "serving": {"batch_limit": 64}, "workload": {"arrival_rate_rps": 2, **SHAPE}, "requests": 5000}
    problem = assert_problem(client.post("/v1/simulate", json=body), 422, "simulation-too-large")
    assert "whole-prompt prefill" in problem["detail"] and "raise chunk_tokens" not in problem["detail"]


# ---- property: extreme but valid inputs never answer 500 ------------------------------------------------

GB, TFLOPS = 1e9, 1e12
EXTREME_GPU = st.fixed_dictionaries(
    {
        "memory_gb": st.sampled_from([specs.MIN_MEMORY_BYTES / GB, 80.0, specs.MAX_MEMORY_BYTES / GB]),
        "memory_bandwidth_gb_per_s": st.sampled_from(
            [specs.MIN_BANDWIDTH_BYTES_PER_S / GB, 3350.0, specs.MAX_BANDWIDTH_BYTES_PER_S / GB]
        ),
        "interconnect_gb_per_s": st.sampled_from(
            [specs.MIN_INTERCONNECT_BYTES_PER_S / GB, 450.0, specs.MAX_INTERCONNECT_BYTES_PER_S / GB]
        ),
        "interconnect_latency_us": st.sampled_from([0.0, specs.MAX_INTERCONNECT_LATENCY_S * 1e6]),
        "gpus_per_node": st.sampled_from([1, 8, specs.MAX_GPUS_PER_NODE]),
        "peak_tflops": st.sampled_from([specs.MIN_PEAK_FLOPS_PER_S / TFLOPS, 989.0, specs.MAX_PEAK_FLOPS_PER_S / TFLOPS]).map(
            lambda tflops: {"bf16": tflops, "fp16": tflops, "fp8": tflops}
        ),
    }
)
EXTREME_PRICE = st.sampled_from([0.0, 2.0, specs.MAX_PRICE_USD_PER_HOUR])
LENGTH = st.sampled_from(
    [
        1,
        10_000_000,
        {"mean": 1, "p99": 10},
        {"tokens": [1, 10_000_000], "weights": [0, 1e15]},
        {"tokens": [1, 2], "weights": [1e15, 1e15]},
    ]
)
EXTREME_WORKLOAD = st.fixed_dictionaries(
    {
        "arrival_rate_rps": st.sampled_from([0.001, 5.0, 1e7]),
        "prompt_tokens": LENGTH,
        "output_tokens": LENGTH,
        "arrival_cv": st.sampled_from([MIN_ARRIVAL_CV, 1.0, MAX_ARRIVAL_CV]),
    }
)
SLO = st.sampled_from(
    [{"ttft_ms": 1000, "tpot_ms": 60}, {"ttft_ms": 3.6e6, "tpot_ms": 3.6e6}, {"e2e_s": 86_400}, {"tpot_ms": 0.001}]
)


def _gpu_record(gpu: dict[str, Any]) -> dict[str, Any]:
    return {
        **copy.deepcopy(GPU_RECORD),
        **gpu,
        "vendor": "nvidia",
        "architecture": "hopper",
        "efficiency": None,
        "price_usd_per_hour": None,
    }


def _set_catalog(client: ApiClient, gpu: dict[str, Any], price: float) -> None:
    """The GPU `extreme` and its runpod price replaced with the drawn values."""
    record = _gpu_record(gpu)
    record.pop("slug")
    answer = client.put("/v1/gpus/extreme", json=record, headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text
    answer = client.put(
        "/v1/prices/runpod/extreme", json={"on_demand": price, "as_of": "2025-01-01", "source": "extreme"}, headers=ADMIN_HEADERS
    )
    assert answer.status_code == 200, answer.text


def _bodies(workload: dict[str, Any], slo: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    shape = {k: v for k, v in workload.items() if k != "arrival_rate_rps"}
    gpu = {"model": "llama-3.1-8b", "gpu": "extreme", "tp": 1, "precision": {"weights": "bf16", "kv_cache": "bf16"}}
    demand = [workload["arrival_rate_rps"]] * 2
    return [
        ("/v1/plans", {"model": "llama-3.1-8b", "workload": workload, "slo": slo, "verify": False, "store": False}),
        (
            "/v1/evaluate",
            {**gpu, "context_tokens": 4096, "batch_sizes": [1, 1_000_000], "serving": {"batch_limit": 64}, "workload": workload},
        ),
        ("/v1/simulate", {**gpu, "serving": {"batch_limit": 64}, "workload": workload, "requests": 200}),
        (
            "/v1/what-if",
            {
                "model": "llama-3.1-8b",
                "workload": shape,
                "slo": slo,
                "constraints": {"gpus": ["extreme", "h100-sxm"]},
                "sweep": {"arrival_rates_rps": [workload["arrival_rate_rps"]]},
            },
        ),
        (
            "/v1/fleet-plans",
            {
                "workloads": [{"name": "w", "model": "llama-3.1-8b", **shape, "slo": slo, "demand_rps": demand}],
                "constraints": {"gpus": ["extreme", "h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
                "search": {"tp_degrees": [1], "batch_limits": [64], "chunk_budgets": [None]},
            },
        ),
        (
            "/v1/capacity",
            {
                "model": "llama-3.1-8b",
                "gpu": "extreme",
                "gpus": 8,
                "workload": shape,
                "slo": slo,
                "precision": {"weights": "bf16", "kv_cache": "bf16"},
            },
        ),
    ]


def test_extreme_but_valid_catalog_rows_and_workloads_never_answer_500(
    make_client: Callable[..., ApiClient], migrated_database_url: str
) -> None:
    """Every numeric field at a documented bound (or an ordinary value), drawn in combination, on
    every planning endpoint: an answer or a 4xx problem, never a 500 (nor a 503 solver failure)."""
    seed_reference_catalog(migrated_database_url)
    # a request past its deadline is a bounded answer (503 request-timeout, the work stopped at its
    # next checkpoint), not a failure: 5 s keeps the slowest extreme combinations from dominating
    client = make_client(raise_app_exceptions=False, request_timeout_s=5.0, max_simulated_requests=5000)
    assert client.post("/v1/gpus", json={**_gpu_record({}), "slug": "extreme"}, headers=ADMIN_HEADERS).status_code == 201
    price = {"provider": "runpod", "gpu": "extreme", "on_demand": 2.0, "as_of": "2025-01-01", "source": "extreme"}
    assert client.post("/v1/prices", json=price, headers=ADMIN_HEADERS).status_code == 201

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(gpu=EXTREME_GPU, price=EXTREME_PRICE, workload=EXTREME_WORKLOAD, slo=SLO)
    def never_500(gpu: dict[str, Any], price: float, workload: dict[str, Any], slo: dict[str, Any]) -> None:
        _set_catalog(client, gpu, price)
        for path, body in _bodies(workload, slo):
            answer = client.post(path, json=body, headers=ADMIN_HEADERS)
            timed_out = answer.status_code == 503 and answer.json().get("type", "").endswith(":request-timeout")
            assert answer.status_code < 500 or timed_out, (path, body, gpu, price, answer.status_code, answer.text[:500])

    never_500()
