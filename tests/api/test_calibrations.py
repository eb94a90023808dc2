"""POST /v1/calibrations through the real app and database: fit, store, residuals, and the 4xx answers."""

from __future__ import annotations

from typing import Any

import pytest

from catalog.repository import Catalog
from planner.calibration import MeasuredPoint, predict
from planner.performance import build_step_model
from planner.specs import Efficiency
from tests.api.client import ApiClient
from tests.api.conftest import GPU_RECORD, MODEL_RECORD, assert_problem
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B

FP16_RECORD: dict[str, Any] = {
    "slug": "fp16",
    "name": "FP16 (IEEE half precision)",
    "weight_bytes_per_param": 2.0,
    "element_bytes": 2.0,
    "compute_dtype": "fp16",
    "kv_cache_dtypes": ["fp16", "fp8"],
    "min_architecture": "ampere",
    "source": "IEEE 754 binary16",
}

#: The GPU record's calibrated block is ideal with communication on (catalog `calibrated`), so
#: synthetic points made with these efficiencies and communication on must fit back to them.
TRUTH = Efficiency(memory=0.7, compute=0.5, step_overhead_s=0.001, include_comm=True)
TP = 4


def _measured(point: dict[str, Any], truth: Efficiency = TRUTH) -> dict[str, Any]:
    """`point` with the value the step model gives at `truth`, in the API's units."""
    shape = MeasuredPoint(
        kind=point["kind"],
        value=1.0,
        batch=point.get("batch", 1),
        context_tokens=point.get("context_tokens", 0),
        prompt_tokens=point.get("prompt_tokens", 0),
        output_tokens=point.get("output_tokens", 0),
    )
    value = predict(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, TP, truth), shape)
    key = "output_tokens_per_s" if point["kind"] == "throughput" else "value_ms"
    return {**point, key: value if key == "output_tokens_per_s" else value * 1e3}


POINTS = [
    _measured({"kind": "tpot", "batch": 1, "context_tokens": 4096, "label": "tpot b1"}),
    _measured({"kind": "tpot", "batch": 32, "context_tokens": 1024}),
    _measured({"kind": "ttft", "prompt_tokens": 2000}),
    _measured({"kind": "throughput", "batch": 256, "prompt_tokens": 128, "output_tokens": 128}),
]


def _body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "lab-h100",
        "gpu": "h100-sxm",
        "model": "llama-2-70b",
        "precision": {"weights": "fp16", "kv_cache": "fp16"},
        "tp": TP,
        "points": POINTS,
        **changes,
    }


@pytest.fixture
def seeded(client: ApiClient, admin: dict[str, str]) -> ApiClient:
    for plural, record in (("gpus", GPU_RECORD), ("models", MODEL_RECORD), ("quantizations", FP16_RECORD)):
        response = client.post(f"/v1/{plural}", json=record, headers=admin)
        assert response.status_code == 201, response.text
    return client


def test_calibration_recovers_the_efficiencies_and_stores_the_profile(
    seeded: ApiClient, admin: dict[str, str], catalog: Catalog
) -> None:
    response = seeded.post("/v1/calibrations", json=_body(), headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["fitted"] == ["memory", "compute", "overhead"] and body["held"] == []
    assert body["memory"] == pytest.approx(0.7, abs=1e-6)
    assert body["compute"] == pytest.approx(0.5, abs=1e-6)
    assert body["step_overhead_ms"] == pytest.approx(1.0, abs=1e-6)
    assert body["include_comm"] is True and body["version"] == 1
    assert body["residuals"][0]["label"] == "tpot b1"
    assert body["residuals"][0]["unit"] == "ms"
    assert body["residuals"][0]["measured"] == pytest.approx(POINTS[0]["value_ms"])
    assert max(abs(r["relative_error"]) for r in body["residuals"]) < 1e-6

    stored = catalog.efficiency_profile("lab-h100", "h100-sxm")
    assert (stored.memory, stored.compute, stored.step_overhead_s) == pytest.approx((0.7, 0.5, 0.001), abs=1e-6)

    again = seeded.post("/v1/calibrations", json=_body(), headers=admin)
    assert again.status_code == 201 and again.json()["version"] == 2


def test_calibration_from_a_vllm_benchmark_result(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A vLLM serving result at concurrency 1 (1,024-token prompts, 256 outputs) made with η_mem = 0.7 and
    no overhead: fitting memory alone (overhead held at the GPU's calibrated 0) gives back 0.7."""
    no_overhead = Efficiency(memory=0.7, compute=0.5, include_comm=True)
    tpot_ms = _measured({"kind": "tpot", "batch": 1, "prompt_tokens": 1024, "output_tokens": 256}, no_overhead)["value_ms"]
    result = {
        "completed": 100,
        "total_input_tokens": 102400,
        "total_output_tokens": 25600,
        "max_concurrency": 1,
        "request_rate": "inf",
        "median_tpot_ms": tpot_ms,
        "model_id": "meta-llama/Llama-2-70b-hf",
    }
    response = seeded.post("/v1/calibrations", json=_body(points=None, vllm_benchmark=result, fit=["memory"]), headers=admin)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["memory"] == pytest.approx(0.7, abs=1e-6)
    assert body["held"] == ["compute", "overhead"]
    assert body["compute"] == 1.0  # the GPU's calibrated value


def test_points_that_cannot_determine_compute_are_a_422_naming_what_is_missing(seeded: ApiClient, admin: dict[str, str]) -> None:
    decode_only = [POINTS[0], _measured({"kind": "tpot", "batch": 1, "context_tokens": 512})]
    response = seeded.post("/v1/calibrations", json=_body(points=decode_only, fit=["memory", "compute"]), headers=admin)
    problem = assert_problem(response, 422, "calibration-failed")
    assert "need at least one compute-bound point" in problem["detail"]
    assert problem["missing"] == ["compute"]


def test_too_few_points_and_malformed_bodies_are_422(seeded: ApiClient, admin: dict[str, str]) -> None:
    problem = assert_problem(
        seeded.post("/v1/calibrations", json=_body(points=[POINTS[0], POINTS[2]]), headers=admin), 422, "calibration-failed"
    )
    assert "cannot determine" in problem["detail"]
    assert_problem(
        seeded.post("/v1/calibrations", json=_body(vllm_benchmark={"completed": 1}), headers=admin), 422, "invalid-request"
    )
    missing_value = [{"kind": "ttft", "prompt_tokens": 100}]
    problem = assert_problem(
        seeded.post("/v1/calibrations", json=_body(points=missing_value), headers=admin), 422, "calibration-failed"
    )
    assert "needs value_ms" in problem["detail"]
    assert_problem(seeded.post("/v1/calibrations", json=_body(name="calibrated"), headers=admin), 422)


def test_unknown_gpu_or_model_is_404_and_writes_need_a_key(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert_problem(seeded.post("/v1/calibrations", json=_body(gpu="tpu-v9"), headers=admin), 404, "not-found")
    assert_problem(seeded.post("/v1/calibrations", json=_body(model="llama-9-1t"), headers=admin), 404, "not-found")
    assert_problem(seeded.post("/v1/calibrations", json=_body()), 401)
