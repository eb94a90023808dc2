"""Records → planner specs: SI units, efficiency selection, precision pairs."""

from __future__ import annotations

import pytest

from catalog.errors import NotFoundError
from catalog.repository import Catalog
from planner.errors import UnsupportedConfigurationError
from planner.specs import IDEAL, MlaSpec, MoeSpec
from tests.catalog.records import profile


def test_gpu_spec_converts_datasheet_units_to_si(loaded: Catalog) -> None:
    """H100 SXM: 80 GB → 8e10 B, 3,350 GB/s → 3.35e12 B/s, 989 TFLOP/s → 9.89e14 FLOP/s,
    450 GB/s NVLink → 4.5e11 B/s, 5 µs → 5e-6 s; a datatype the chip lacks stays None."""
    spec = loaded.gpu_spec("h100-sxm", efficiency="ideal")
    assert spec.memory_bytes == pytest.approx(80e9)
    assert spec.hbm_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert spec.peak_flops("bf16") == pytest.approx(989e12)
    assert spec.peak_flops("tf32") == pytest.approx(494.7e12)
    assert spec.peak_flops("fp8") == pytest.approx(1979e12)
    assert spec.peak_flops("fp4") is None
    assert spec.interconnect_bytes_per_s == pytest.approx(450e9)
    assert spec.interconnect_latency_s == pytest.approx(5e-6)
    assert spec.gpus_per_node == 8
    assert spec.price_usd_per_hour_on_demand == pytest.approx(3.5)
    assert spec.price_usd_per_hour_reserved_1y == pytest.approx(2.6)
    assert spec.efficiency is IDEAL


def test_calibrated_efficiency_comes_from_the_gpu_row_with_communication_on(loaded: Catalog) -> None:
    efficiency = loaded.gpu_spec("h100-sxm").efficiency  # "calibrated" is the default
    assert efficiency.name == "calibrated"
    assert efficiency.memory == pytest.approx(0.8)
    assert efficiency.compute == pytest.approx(0.6)
    assert efficiency.step_overhead_s == pytest.approx(2.5e-3)  # 2.5 ms
    assert efficiency.memory_reserve_fraction == pytest.approx(0.1)
    assert efficiency.include_comm is True
    assert efficiency.memory_compute_overlap == 1.0  # block without the field: max(memory, compute)
    assert efficiency.source == "test fixture calibration"


def test_the_gpu_efficiency_overlap_is_carried_into_the_calibrated_spec(loaded: Catalog) -> None:
    record = loaded.get_gpu("h100-sxm")
    record["efficiency"] = {**record["efficiency"], "memory_compute_overlap": 0.3}
    loaded.update_gpu("h100-sxm", record)
    assert loaded.get_gpu("h100-sxm")["efficiency"]["memory_compute_overlap"] == pytest.approx(0.3)
    assert loaded.gpu_spec("h100-sxm", "calibrated").efficiency.memory_compute_overlap == pytest.approx(0.3)
    assert loaded.gpu_spec("h100-sxm", "ideal").efficiency.memory_compute_overlap == 1.0


def test_a_gpu_without_calibration_falls_back_to_the_roofline_with_communication(loaded: Catalog) -> None:
    spec = loaded.gpu_spec("mi300x")
    assert (spec.efficiency.memory, spec.efficiency.compute, spec.efficiency.step_overhead_s) == (1.0, 1.0, 0.0)
    assert spec.efficiency.include_comm is True
    assert "no calibrated efficiency" in spec.efficiency.source
    assert spec.interconnect_latency_s == 0.0  # not in the catalog: the planner's documented default applies
    assert spec.price_usd_per_hour_on_demand == 0.0
    assert spec.price_usd_per_hour_reserved_1y is None


def test_a_named_profile_is_used_when_asked_for(loaded: Catalog) -> None:
    loaded.save_efficiency_profile(profile(step_overhead_ms=4.0, include_comm=False, memory_compute_overlap=0.5))
    efficiency = loaded.gpu_spec("h100-sxm", efficiency="vllm-fit").efficiency
    assert efficiency.name == "vllm-fit"
    assert efficiency.memory == pytest.approx(0.85)
    assert efficiency.step_overhead_s == pytest.approx(4e-3)
    assert efficiency.include_comm is False
    assert efficiency.memory_compute_overlap == pytest.approx(0.5)
    assert loaded.efficiency_profile("vllm-fit", "h100-sxm") == efficiency
    assert loaded.efficiency_profile("ideal", "h100-sxm") is IDEAL
    with pytest.raises(NotFoundError) as error:
        loaded.gpu_spec("mi300x", efficiency="vllm-fit")  # a profile belongs to one GPU
    assert error.value.extensions == {"kind": "efficiency_profile", "name": "vllm-fit", "gpu_slug": "mi300x"}
    with pytest.raises(NotFoundError):
        loaded.gpu_spec("b200")


def test_model_spec_carries_moe_and_mla(loaded: Catalog) -> None:
    spec = loaded.model_spec("deepseek-v3")
    assert spec.params_total == pytest.approx(671e9)
    assert spec.params_active == pytest.approx(37e9)
    assert spec.moe == MoeSpec(experts=256, experts_per_token=8, shared_experts=1, expert_params=44_040_192, moe_layers=58)
    assert spec.mla == MlaSpec(kv_lora_rank=512, rope_head_dim=64)
    dense = loaded.model_spec("llama-2-70b")
    assert (dense.layers, dense.kv_heads, dense.head_dim, dense.moe, dense.mla) == (80, 8, 128, None, None)


def test_quant_spec_and_precision(loaded: Catalog) -> None:
    awq = loaded.quant_spec("int4-awq")
    assert (awq.weight_bytes_per_param, awq.element_bytes, awq.compute_dtype) == (0.53125, 0.5, "fp16")
    assert awq.kv_cache_dtypes == ("fp16", "fp8")
    precision = loaded.precision("int4-awq", "fp8")
    assert precision.weights == awq
    assert precision.kv_cache == loaded.quant_spec("fp8")
    with pytest.raises(UnsupportedConfigurationError) as error:
        loaded.precision("fp16", "int4-awq")
    assert error.value.extensions["allowed_kv_cache"] == ["fp16", "fp8"]
    with pytest.raises(NotFoundError):
        loaded.precision("fp16", "int3")
