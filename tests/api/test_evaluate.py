"""POST /v1/evaluate through the real app on a migrated database seeded with the reference catalog:
docs/design.md's test vectors under `ideal`, calibrated and overridden efficiencies, the 4xx answers,
and the queueing extension (analytic percentiles, Little's law, unstable load, simulator fallback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from api.cli import openapi_document
from api.evaluation import FALLBACK_SIMULATED_REQUESTS
from planner.simulator import simulate
from planner.step_model import StepModel
from planner.workload import FixedLength, LognormalLength, Serving, Workload
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem, bad_fields
from tests.api.reference_catalog import seed_reference_catalog

#: docs/design.md: step times and tokens/s within 0.5 %.
STEP_TOLERANCE = 0.005

VECTOR_BODY: dict[str, Any] = {
    "model": "llama-2-70b",
    "gpu": "h100-sxm",
    "tp": 4,
    "precision": {"weights": "fp16", "kv_cache": "fp16"},
    "efficiency_profile": "ideal",
    "context_tokens": 4096,
    "batch_sizes": [1, 32, 134],
    "prompt_tokens": 2000,
}

WORKLOAD: dict[str, Any] = {
    "serving": {"replicas": 1, "batch_limit": 64},
    "workload": {"arrival_rate_rps": 1.0, "prompt_tokens": {"mean": 1000, "p99": 3000}, "output_tokens": 200},
}


@pytest.fixture
def seeded(make_client: Callable[..., ApiClient], migrated_database_url: str) -> ApiClient:
    seed_reference_catalog(migrated_database_url)
    return make_client()


def _evaluate(client: ApiClient, **changes: Any) -> Any:
    return client.post("/v1/evaluate", json={**VECTOR_BODY, **changes})


def _ok(client: ApiClient, **changes: Any) -> dict[str, Any]:
    response = _evaluate(client, **changes)
    assert response.status_code == 200, response.text
    return response.json()


def _recomputed_step_s(sm: dict[str, Any], *, new_tokens: float, kv_tokens_read: float, attended_tokens: float) -> float:
    """The step-time formula the OpenAPI description writes out, from the response's coefficients (dense model)."""
    t_mem = (sm["dense_weight_bytes"] + kv_tokens_read * sm["kv_bytes_per_token"]) / sm["memory_bandwidth_bytes_per_s"]
    t_compute = (new_tokens * sm["flops_per_token"] + attended_tokens * sm["attention_flops_per_context_token"]) / sm[
        "compute_flops_per_s"
    ]
    t_comm = new_tokens * sm["comm_s_per_token"] + sm["comm_latency_s"]
    overlap = sm["memory_compute_overlap"]
    return max(t_mem, t_compute) + (1 - overlap) * min(t_mem, t_compute) + t_comm + sm["step_overhead_s"]


def test_ideal_h100_reproduces_the_design_test_vectors(seeded: ApiClient) -> None:
    """docs/design.md test vectors: Llama-2-70B fp16 on 4 × H100 SXM (80 GB, 3.35 TB/s, 989 TFLOP/s), η = 1.
    W = 70e9 × 2 = 140 GB; KV/token = 2 × 80 × 8 × 128 × 2 = 327,680 B, × 4,096 = 1.342 GB.
    Step(B) = (140e9 + B × 1.342e9) / 13.4e12: 10.55 / 13.65 / 23.87 ms at B = 1 / 32 / 134, so
    B / step = 94.8 / 2,343.7 / 5,613.8 tokens/s. Capacity (320e9 − 140e9) / 327,680 = 549,316
    tokens // 4,096 = 134. Break-even 4 × 989e12 / 13.4e12 = 295.2; at 134:
    134 × 140e9 / (140e9 + 179.85e9) = 58.65 FLOP/byte. Prefill of 2,000 tokens: 280 TFLOP / 3.956
    PFLOP/s = 70.8 ms of linear FLOPs; one weight read 140e9 / 13.4e12 = 10.4 ms."""
    body = _ok(seeded)
    assert body["weights_bytes"] == 140e9
    assert body["kv_bytes_per_token"] == 327_680
    assert body["kv_bytes_per_request"] == 327_680 * 4096
    assert body["kv_bytes_per_request"] / 1e9 == pytest.approx(1.34, abs=0.005)
    assert body["max_batch_by_memory"] == 134
    assert body["break_even_flops_per_byte"] == pytest.approx(295.22, rel=1e-4)
    rows = {row["batch"]: row for row in body["decode"]}
    for batch, step_ms, tokens_per_s in ((1, 10.55, 94.8), (32, 13.65, 2343.7), (134, 23.87, 5613.8)):
        assert rows[batch]["step_ms"] == pytest.approx(step_ms, rel=STEP_TOLERANCE)
        assert rows[batch]["output_tokens_per_s"] == pytest.approx(tokens_per_s, rel=STEP_TOLERANCE)
        assert rows[batch]["output_tokens_per_s_per_request"] == pytest.approx(tokens_per_s / batch, rel=STEP_TOLERANCE)
        assert rows[batch]["kv_bytes"] == batch * 4096 * 327_680
        assert rows[batch]["bound"] == "memory"
    assert rows[134]["kv_bytes"] / 1e9 == pytest.approx(179.85, abs=0.01)
    assert rows[134]["flops_per_byte"] == pytest.approx(59, abs=0.5)
    assert body["prefill"]["tokens"] == 2000
    assert body["prefill"]["linear_flops"] == 280e12
    assert body["prefill"]["linear_time_ms"] == pytest.approx(70.8, rel=STEP_TOLERANCE)
    assert body["prefill"]["weight_read_ms"] == pytest.approx(10.4, rel=STEP_TOLERANCE)
    assert body["prefill"]["bound"] == "compute"
    assert body["efficiency"] == {
        "profile": "ideal",
        "memory": 1.0,
        "compute": 1.0,
        "step_overhead_ms": 0.0,
        "memory_reserve_fraction": 0.0,
        "include_comm": False,
        "memory_compute_overlap": 1.0,
        "source": body["efficiency"]["source"],
        "overridden": [],
    }
    assert body["catalog_version"] >= 1
    assert body["predicted"] is None and body["queueing"] is None


def test_eight_bit_weights_halve_the_batch_1_step_and_fit_186(seeded: ApiClient) -> None:
    """int8 weights (W8A8): W = 70 GB. Batch 1: (70e9 + 1.342e9) / 13.4e12 = 5.32 ms; capacity
    (320e9 − 70e9) / 327,680 = 762,939 tokens // 4,096 = 186 requests."""
    body = _ok(seeded, precision={"weights": "int8", "kv_cache": "fp16"}, batch_sizes=[1])
    assert body["weights_bytes"] == 70e9
    assert body["decode"][0]["step_ms"] == pytest.approx(5.32, rel=STEP_TOLERANCE)
    assert body["max_batch_by_memory"] == 186


def test_step_model_lets_a_client_recompute_every_step(seeded: ApiClient) -> None:
    """The coefficients are the ones used: 4 × 3.35e12 B/s, 4 × 989e12 FLOP/s, 2 × 70e9 FLOPs per
    token, 4 × 80 × 64 × 128 attention FLOPs per context token; the written-out formula gives back
    each decode row and the prefill, under ideal and calibrated (comm and overhead on) profiles."""
    for profile in ("ideal", "calibrated"):
        body = _ok(seeded, efficiency_profile=profile)
        sm = body["step_model"]
        if profile == "ideal":
            assert sm["memory_bandwidth_bytes_per_s"] == pytest.approx(4 * 3.35e12)
            assert sm["compute_flops_per_s"] == pytest.approx(4 * 989e12)
            assert sm["flops_per_token"] == 140e9
            assert sm["attention_flops_per_context_token"] == 4 * 80 * 64 * 128
            assert sm["weight_bytes"] == sm["dense_weight_bytes"] == 140e9
            assert (sm["comm_s_per_token"], sm["comm_latency_s"], sm["step_overhead_s"]) == (0.0, 0.0, 0.0)
        else:
            assert sm["comm_s_per_token"] > 0 and sm["step_overhead_s"] > 0
        assert sm["experts"] == sm["moe_layers"] == 0
        for row in body["decode"]:
            kv_tokens = row["batch"] * row["context_tokens"]
            recomputed = _recomputed_step_s(sm, new_tokens=row["batch"], kv_tokens_read=kv_tokens, attended_tokens=kv_tokens)
            assert row["step_ms"] == pytest.approx(recomputed * 1e3, rel=1e-12)
        p = body["prefill"]["tokens"]
        recomputed = _recomputed_step_s(sm, new_tokens=p, kv_tokens_read=0, attended_tokens=p * (p + 1) / 2)
        assert body["prefill"]["time_ms"] == pytest.approx(recomputed * 1e3, rel=1e-12)


def test_throughput_curve_runs_to_the_memory_limit_and_rises(seeded: ApiClient) -> None:
    curve = _ok(seeded)["throughput_curve"]
    batches = [point["batch"] for point in curve["points"]]
    assert batches[0] == 1 and batches[-1] == curve["memory_limit_batch"] == 134
    assert batches == sorted(set(batches))
    throughput = [point["output_tokens_per_s"] for point in curve["points"]]
    assert throughput == sorted(throughput)
    assert all(point["output_tokens_per_s"] < curve["ceiling_tokens_per_s"] for point in curve["points"])


def test_calibrated_predictions_are_slower_than_ideal(seeded: ApiClient) -> None:
    """The calibrated profile (η < 1, per-step overhead, all-reduce time, 10 % reserve) can only add time and take memory."""
    ideal = _ok(seeded)
    calibrated = _ok(seeded, efficiency_profile="calibrated", batch_sizes=[1, 32, 100])
    assert calibrated["efficiency"]["profile"] == "calibrated"
    assert calibrated["efficiency"]["memory"] < 1 and calibrated["efficiency"]["include_comm"] is True
    assert "calibrated" in calibrated["efficiency"]["source"]
    ideal_steps = {row["batch"]: row["step_ms"] for row in ideal["decode"]}
    for row in calibrated["decode"][:2]:
        assert row["step_ms"] > ideal_steps[row["batch"]]
    assert calibrated["prefill"]["time_ms"] > ideal["prefill"]["time_ms"]
    assert calibrated["max_batch_by_memory"] < ideal["max_batch_by_memory"]
    assert calibrated["usable_memory_bytes"] == pytest.approx(0.9 * 320e9)


def test_the_catalog_overlap_reaches_the_calibrated_step_model(seeded: ApiClient) -> None:
    """The GPU efficiency block's memory_compute_overlap is the `calibrated` step model's, and the steps use it."""
    gpu = seeded.get("/v1/gpus/h100-sxm").json()
    shipped = gpu["efficiency"]["memory_compute_overlap"]
    assert 0.0 <= shipped <= 1.0
    before = _ok(seeded, efficiency_profile="calibrated")
    assert before["step_model"]["memory_compute_overlap"] == pytest.approx(shipped)
    patched = seeded.patch(
        "/v1/gpus/h100-sxm", json={"efficiency": {**gpu["efficiency"], "memory_compute_overlap": 1.0}}, headers=ADMIN_HEADERS
    )
    assert patched.status_code == 200, patched.text
    after = _ok(seeded, efficiency_profile="calibrated")
    assert after["step_model"]["memory_compute_overlap"] == 1.0
    # Full overlap (max of the two) is never slower than the shipped partial overlap, and faster wherever
    # both memory and compute take time (every decode row here).
    assert all(a["step_ms"] < b["step_ms"] for a, b in zip(after["decode"], before["decode"], strict=True))


def test_overrides_replace_the_profiles_values(seeded: ApiClient) -> None:
    """Ideal with η_mem = 0.5: a memory-bound batch-1 step reads the same bytes at half the bandwidth,
    (140e9 + 1.342e9) / 6.7e12 = 21.10 ms; a 1 ms overhead adds 1 ms; a 20 % reserve cuts capacity to
    (256e9 − 140e9) / 327,680 = 353,997 tokens, 86 requests of 4,096."""
    body = _ok(
        seeded,
        batch_sizes=[1],
        overrides={"memory_efficiency": 0.5, "step_overhead_ms": 1.0, "memory_reserve_fraction": 0.2},
    )
    assert body["decode"][0]["step_ms"] == pytest.approx((140e9 + 1_342_177_280) / 6.7e12 * 1e3 + 1.0, rel=1e-9)
    assert body["max_batch_by_memory"] == 86
    assert body["efficiency"]["overridden"] == ["memory_efficiency", "memory_reserve_fraction", "step_overhead_ms"]
    assert body["efficiency"]["memory"] == 0.5 and body["efficiency"]["step_overhead_ms"] == pytest.approx(1.0)
    assert "overridden by the request" in body["efficiency"]["source"]
    assert body["step_model"]["memory_bandwidth_bytes_per_s"] == pytest.approx(4 * 3.35e12 * 0.5)


def test_a_model_that_does_not_fit_names_the_shortfall_and_what_would_fit(seeded: ApiClient) -> None:
    """Llama-2-70B fp16 on one H100 (calibrated: 72 GB after the 10 % reserve) needs 140 + 1.34 GB:
    69.3 GB short; tp = 2 fits, and so do 8-bit weights (70 + 1.34 ≤ 72) at tp = 1."""
    problem = assert_problem(_evaluate(seeded, tp=1, efficiency_profile="calibrated"), 422, "model-does-not-fit")
    assert problem["shortfall_gb"] == pytest.approx(69.34, abs=0.01)
    assert problem["smallest_fitting_tp"] == 2
    assert problem["fitting_precisions"][0] == {"weights": "fp8", "kv_cache": "fp16"}
    assert {"weights": "int8", "kv_cache": "fp16"} in problem["fitting_precisions"]
    assert "69.3 GB short" in problem["detail"] and "tp=2 would fit" in problem["detail"]


def test_405b_on_one_l4_does_not_fit_at_any_tp_or_precision(seeded: ApiClient) -> None:
    """405e9 × 2 B = 810 GB against 24 GB × 0.9 = 21.6 GB; even 8 L4s at 4-bit (405e9 × 0.53 = 215 GB
    vs 172.8 GB) fall short, so the problem says no tp and no precision would do."""
    problem = assert_problem(
        _evaluate(seeded, model="llama-3.1-405b", gpu="l4", tp=1, efficiency_profile="calibrated"), 422, "model-does-not-fit"
    )
    assert problem["shortfall_gb"] == pytest.approx(812.11 - 21.6, abs=0.01)
    assert problem["smallest_fitting_tp"] is None
    assert problem["fitting_precisions"] == []
    assert "no tp up to 8, no pp up to 8 and no candidate precision fits" in problem["detail"]


UNSUPPORTED: list[tuple[dict[str, Any], str]] = [
    ({"gpu": "a100-80gb-sxm", "precision": {"weights": "fp8", "kv_cache": "fp8"}}, "fp8 (weights) needs ada or newer"),
    ({"precision": {"weights": "nvfp4", "kv_cache": "fp8"}}, "nvfp4 (weights) needs blackwell or newer"),
    ({"precision": {"weights": "fp16", "kv_cache": "bf16"}}, "fp16 weights allow a KV cache in fp16, fp8, int8, not bf16"),
    ({"tp": 3}, "tp=3"),
    ({"context_tokens": 8192}, "context window"),
]


def test_unsupported_combinations_are_422_with_the_reason(seeded: ApiClient) -> None:
    """fp8 needs Ada/Hopper (A100 is Ampere), fp4 needs Blackwell, the KV format must be one the
    weights scheme allows, tp must divide the heads, the context must fit the model's window."""
    for changes, needle in UNSUPPORTED:
        problem = assert_problem(_evaluate(seeded, **changes), 422, "unsupported-configuration")
        assert needle in problem["detail"], (changes, problem["detail"])


UNKNOWN: list[tuple[dict[str, Any], str]] = [
    ({"gpu": "h100-nonexistent"}, "gpu"),
    ({"model": "llama-9-1t"}, "model"),
    ({"precision": {"weights": "fp3", "kv_cache": "fp16"}}, "quantization"),
    ({"efficiency_profile": "lab-nobody-made"}, "efficiency_profile"),
]


def test_unknown_slugs_are_404(seeded: ApiClient) -> None:
    for changes, kind in UNKNOWN:
        problem = assert_problem(_evaluate(seeded, **changes), 404, "not-found")
        assert problem["kind"] == kind, changes


def test_invalid_bodies_list_every_bad_field(seeded: ApiClient) -> None:
    body = {
        **VECTOR_BODY,
        "tp": 0,
        "batch_sizes": [],
        "overrides": {"memory_efficiency": 1.5, "bogus": 1},
        "serving": {"batch_limit": 64, "chunk_tokens": 32, "router": "least-loaded"},
        "workload": {
            "arrival_rate_rps": -1,
            "prompt_tokens": {"mean": 1000, "p99": 800},
            "output_tokens": {"tokens": [1, 2], "weights": [1]},
        },
    }
    fields = bad_fields(assert_problem(seeded.post("/v1/evaluate", json=body), 422, "invalid-request"))
    assert set(fields) == {
        "tp",
        "batch_sizes",
        "overrides.memory_efficiency",
        "overrides.bogus",
        "serving.chunk_tokens",
        "serving.router",
        "workload.arrival_rate_rps",
        "workload.prompt_tokens.p99",
        "workload.output_tokens.weights",
    }
    assert "must exceed batch_limit" in fields["serving.chunk_tokens"]
    assert "p99 (800) must exceed mean (1000)" in fields["workload.prompt_tokens.p99"]


def test_serving_without_workload_is_refused(seeded: ApiClient) -> None:
    problem = assert_problem(_evaluate(seeded, serving={"batch_limit": 8}), 422, "invalid-request")
    assert "serving is given without workload" in problem["detail"]


def test_workload_adds_analytic_percentiles_and_the_queueing_numbers(seeded: ApiClient) -> None:
    """At 1 request/s on one replica the load is light: percentiles rise p50 ≤ p90 ≤ p99, TPOT is at
    least the batch-1 decode step, ρ = λ / saturation, and Little's law holds: L = λ · W."""
    body = _ok(seeded, **WORKLOAD)
    predicted, q = body["predicted"], body["queueing"]
    assert predicted["method"] == "analytic" and predicted["unstable"] is False
    for metric in ("ttft_ms", "tpot_ms", "e2e_s"):
        values = predicted[metric]
        assert 0 < values["p50"] <= values["p90"] <= values["p99"]
    batch_1_step_ms = body["decode"][0]["step_ms"]
    assert predicted["tpot_ms"]["p50"] >= batch_1_step_ms * 0.999
    assert predicted["arrival_rate_rps_per_replica"] == 1.0
    assert predicted["utilisation"] == pytest.approx(1.0 / predicted["saturation_rps"])
    assert 0 < predicted["utilisation"] < 1
    assert q["arrival_rate_rps"] == 1.0 and q["saturation_rps"] == predicted["saturation_rps"]
    law = q["littles_law"]
    assert law["occupancy"] == pytest.approx(law["arrival_rate_rps"] * law["time_in_service_s"])
    assert law["arrival_rate_rps"] == 1.0
    assert q["slots"] == 64 and q["slots_limited_by"] == "batch_limit"
    assert 0 <= q["wait_probability"] <= 1 and q["formula"]
    curve = q["rho_curve"]
    rhos = [point["utilisation"] for point in curve]
    assert rhos == sorted(rhos) and rhos[-1] < 1
    p99s = [point["ttft_p99_ms"] for point in curve]
    assert p99s == sorted(p99s)


def test_replicas_split_the_rate(seeded: ApiClient) -> None:
    """A random split over 4 replicas: each sees a quarter of the rate, and the deployment sustains 4 × saturation."""
    body = _ok(seeded, serving={**WORKLOAD["serving"], "replicas": 4}, workload={**WORKLOAD["workload"], "arrival_rate_rps": 4.0})
    predicted = body["predicted"]
    assert predicted["arrival_rate_rps_per_replica"] == pytest.approx(1.0)
    assert predicted["max_deployment_rps"] == pytest.approx(4 * predicted["saturation_rps"])


def test_load_above_saturation_is_an_answer_not_an_error(seeded: ApiClient) -> None:
    saturation = _ok(seeded, **WORKLOAD)["predicted"]["saturation_rps"]
    body = _ok(seeded, serving=WORKLOAD["serving"], workload={**WORKLOAD["workload"], "arrival_rate_rps": 2 * saturation})
    predicted = body["predicted"]
    assert predicted["unstable"] is True
    assert predicted["saturation_rps"] == pytest.approx(saturation)
    assert predicted["utilisation"] == pytest.approx(2.0)
    for metric in ("ttft_ms", "tpot_ms", "e2e_s"):
        assert predicted[metric] == {"p50": None, "p90": None, "p99": None}
    assert body["queueing"]["littles_law"] is None
    assert body["queueing"]["rho_curve"], "the ρ-vs-p99 curve is still drawn below saturation"

    # A request longer than the whole KV cache (549,316 tokens here) can never run: no rate is sustainable.
    body = _ok(
        seeded,
        efficiency_profile="ideal",
        serving={"batch_limit": 8},
        workload={"arrival_rate_rps": 1, "prompt_tokens": 600_000, "output_tokens": 10},
    )
    assert body["predicted"]["unstable"] is True
    assert body["predicted"]["saturation_rps"] == 0 and body["predicted"]["utilisation"] is None
    assert any("cannot hold one request" in note for note in body["notes"])


def test_lognormal_and_histogram_lengths_are_accepted(seeded: ApiClient) -> None:
    """The three length shapes reach the planner as the distributions they describe: a histogram
    that puts all weight on 200 tokens predicts what the fixed length 200 predicts."""
    fixed = _ok(seeded, **WORKLOAD)["predicted"]
    histogram = _ok(
        seeded,
        serving=WORKLOAD["serving"],
        workload={**WORKLOAD["workload"], "output_tokens": {"tokens": [200, 4000], "weights": [1.0, 0.0]}},
    )["predicted"]
    assert histogram["e2e_s"] == pytest.approx(fixed["e2e_s"])


def test_past_the_validated_utilisation_the_simulator_answers(seeded: ApiClient) -> None:
    """The fidelity study validated the analytic p99s up to ρ = 0.85; at ρ = 0.9 the service runs the
    simulator and says so, rather than return an analytic p99 known to be off."""
    saturation = _ok(seeded, **WORKLOAD)["predicted"]["saturation_rps"]
    body = _ok(seeded, serving=WORKLOAD["serving"], workload={**WORKLOAD["workload"], "arrival_rate_rps": 0.9 * saturation})
    predicted = body["predicted"]
    assert predicted["method"] == "simulated"
    assert predicted["utilisation"] == pytest.approx(0.9)
    assert "utilisation 0.90 > 0.85" in predicted["fidelity_note"]
    assert predicted["simulated_requests"] == FALLBACK_SIMULATED_REQUESTS
    assert body["queueing"]["reliable"] is False
    assert predicted["unstable"] is False
    assert 0 < predicted["ttft_ms"]["p50"] <= predicted["ttft_ms"]["p99"]
    # The same numbers the simulator gives for the response's own step model, capacity and seed 0.
    coefficients = {
        name: value for name, value in body["step_model"].items() if name not in ("weight_bytes", "break_even_flops_per_byte")
    }
    direct = simulate(
        StepModel(**coefficients),
        Workload(
            arrival_rate_rps=0.9 * saturation,
            prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=3000),
            output_tokens=FixedLength(tokens=200),
        ),
        Serving(batch_limit=64),
        kv_capacity_tokens=body["kv_capacity_tokens"],
        requests=FALLBACK_SIMULATED_REQUESTS,
        seed=0,
    )
    assert predicted["ttft_ms"]["p99"] == pytest.approx(direct.ttft_s.p99 * 1e3)
    assert predicted["tpot_ms"]["p50"] == pytest.approx(direct.tpot_s.p50 * 1e3)
    assert predicted["e2e_s"]["p90"] == pytest.approx(direct.e2e_s.p90)


def test_openapi_names_the_operations_and_writes_out_the_step_formula() -> None:
    document = json.loads(openapi_document())
    evaluate_op = document["paths"]["/v1/evaluate"]["post"]
    assert evaluate_op["operationId"] == "evaluate_configuration"
    assert document["paths"]["/v1/simulate"]["post"]["operationId"] == "simulate_configuration"
    for text in (evaluate_op["description"], document["components"]["schemas"]["StepModelRead"]["description"]):
        assert "t_mem     = (weight_bytes_read(n) + kv_tokens_read · kv_bytes_per_token) / memory_bandwidth_bytes_per_s" in text
    decode = document["components"]["schemas"]["DecodeRow"]["properties"]
    assert "ms" in decode["step_ms"]["description"] and "bytes" in decode["kv_bytes"]["description"].lower()
    assert {"422", "404"} <= evaluate_op["responses"].keys()
