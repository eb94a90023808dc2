"""Record validation without a database: every bad field is named, canonical form is stable."""

from __future__ import annotations

import pytest

from catalog.errors import InvalidRecordError
from catalog.records import (
    canonical_efficiency_profile,
    canonical_gpu,
    canonical_model,
    canonical_quantization,
    merged,
)
from tests.catalog.records import deepseek_v3, h100, llama_70b, profile, quantization


def fields_of(error: pytest.ExceptionInfo[InvalidRecordError]) -> set[str]:
    return {item["field"] for item in error.value.extensions["errors"]}


def test_valid_fixture_records_pass_and_canonical_form_is_a_fixed_point() -> None:
    for canonical, record in (
        (canonical_gpu, h100()),
        (canonical_model, deepseek_v3()),
        (canonical_quantization, quantization("int4-awq")),
        (canonical_efficiency_profile, profile()),
    ):
        once = canonical(record)
        assert canonical(once) == once


def test_gpu_lists_every_bad_field_at_once() -> None:
    record = h100()
    record["memory_gb"] = -80
    record["memory_bandwidth_gb_per_s"] = "fast"
    record["peak_tflops"] = {"bf16": 989, "fp6": 100, "fp8": 0}
    record["gpus_per_node"] = 0
    record["efficiency"] = {"memory": 1.5, "compute": 0.5}
    record["price_usd_per_hour"] = {"on_demand": 1.0, "as_of": "2026-13-01"}
    record["colour"] = "green"
    del record["source"]
    with pytest.raises(InvalidRecordError) as error:
        canonical_gpu(record)
    assert fields_of(error) == {
        "memory_gb",
        "memory_bandwidth_gb_per_s",
        "peak_tflops.fp6",
        "peak_tflops.fp8",
        "gpus_per_node",
        "efficiency.memory",
        "price_usd_per_hour.as_of",
        "colour",
        "source",
    }
    assert error.value.detail.startswith("invalid GPU record")


def test_gpu_needs_some_peak_and_an_architecture_of_its_vendor() -> None:
    record = h100()
    record["peak_tflops"] = {"fp32": None}
    record["architecture"] = "cdna3"
    with pytest.raises(InvalidRecordError) as error:
        canonical_gpu(record)
    assert fields_of(error) == {"peak_tflops", "architecture"}


def test_gpu_optional_blocks_default_to_null_and_read_only_members_are_ignored() -> None:
    record = h100()
    for key in ("price_usd_per_hour", "efficiency", "interconnect_latency_us"):
        del record[key]
    record["peak_tflops"] = {"bf16": 989}
    canonical = canonical_gpu({**record, "version": 7, "created_at": "x", "updated_at": "y"})
    assert canonical["price_usd_per_hour"] is None
    assert canonical["efficiency"] is None
    assert canonical["interconnect_latency_us"] is None
    assert canonical["peak_tflops"] == {
        "fp32": None,
        "tf32": None,
        "bf16": 989,
        "fp16": None,
        "fp8": None,
        "int8": None,
        "fp4": None,
    }
    assert "version" not in canonical


def test_efficiency_block_fills_physical_defaults() -> None:
    record = h100()
    record["efficiency"] = {"memory": 0.9, "compute": 0.8}
    assert canonical_gpu(record)["efficiency"] == {
        "memory": 0.9,
        "compute": 0.8,
        "step_overhead_ms": 0.0,
        "memory_reserve_fraction": 0.0,
        "memory_compute_overlap": 1.0,
        "source": None,
        "confidence": None,
    }


@pytest.mark.parametrize("overlap", [-0.1, 1.5, "half"])
def test_efficiency_overlap_outside_zero_one_is_refused(overlap: object) -> None:
    record = h100()
    record["efficiency"] = {"memory": 0.9, "compute": 0.8, "memory_compute_overlap": overlap}
    with pytest.raises(InvalidRecordError) as error:
        canonical_gpu(record)
    assert "efficiency.memory_compute_overlap" in {item["field"] for item in error.value.extensions["errors"]}


def test_efficiency_overlap_is_kept() -> None:
    record = h100()
    record["efficiency"] = {"memory": 0.9, "compute": 0.8, "memory_compute_overlap": 0.25}
    assert canonical_gpu(record)["efficiency"]["memory_compute_overlap"] == 0.25


def test_model_invariants_are_checked() -> None:
    record = deepseek_v3()
    record["kv_heads"] = 48  # 128 heads are not a multiple of 48
    record["params_active"] = record["params_total"] + 1
    record["moe"] = {**record["moe"], "experts_per_token": 300, "moe_layers": 70}
    record["mla"] = {"kv_lora_rank": 0, "rope_head_dim": 64}
    with pytest.raises(InvalidRecordError) as error:
        canonical_model(record)
    # 70 MoE layers of 61 also make the routed experts 256 × 70 × 44,040,192 ≈ 789e9 > 671e9 params.
    assert fields_of(error) == {
        "kv_heads",
        "params_active",
        "moe.experts_per_token",
        "moe.moe_layers",
        "moe.expert_params",
        "mla.kv_lora_rank",
    }


def test_model_routed_experts_must_fit_in_total_params() -> None:
    record = deepseek_v3()
    record["moe"] = {**record["moe"], "expert_params": 50_000_000}  # 256 × 58 × 5e7 = 742.4e9 > 671e9
    with pytest.raises(InvalidRecordError) as error:
        canonical_model(record)
    assert fields_of(error) == {"moe.expert_params"}


def test_model_integers_reject_fractions_and_booleans_but_accept_integral_floats() -> None:
    record = llama_70b()
    record["layers"] = 80.5
    record["head_dim"] = True
    with pytest.raises(InvalidRecordError) as error:
        canonical_model(record)
    assert fields_of(error) == {"layers", "head_dim"}
    assert canonical_model({**llama_70b(), "params_total": 7e10})["params_total"] == 70_000_000_000


def test_quantization_checks_dtypes_scales_and_architecture() -> None:
    record = quantization("int4-awq")
    record["compute_dtype"] = "fp6"
    record["weight_bytes_per_param"] = 0.25  # below the 0.5-byte element: negative scale overhead
    record["kv_cache_dtypes"] = ["fp16", "fp16"]
    record["min_architecture"] = "pascal-ish"
    with pytest.raises(InvalidRecordError) as error:
        canonical_quantization(record)
    assert fields_of(error) == {"compute_dtype", "weight_bytes_per_param", "kv_cache_dtypes", "min_architecture"}


def test_profile_names_ideal_and_calibrated_are_reserved() -> None:
    with pytest.raises(InvalidRecordError) as error:
        canonical_efficiency_profile(profile(name="calibrated", memory=0, include_comm="yes"))
    assert fields_of(error) == {"name", "memory", "include_comm"}


def test_non_object_record_is_one_clear_error() -> None:
    with pytest.raises(InvalidRecordError) as error:
        canonical_gpu(["not", "a", "record"])
    assert {"field": "(record)", "message": "must be an object"} in error.value.errors


def test_merge_replaces_top_level_members_and_keeps_the_rest() -> None:
    stored = canonical_gpu(h100())
    changed = merged(stored, {"memory_gb": 94, "efficiency": None, "version": 3})
    assert changed["memory_gb"] == 94
    assert changed["efficiency"] is None
    assert changed["peak_tflops"] == stored["peak_tflops"]
    assert "version" not in changed
