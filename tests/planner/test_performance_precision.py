"""Which precisions a GPU runs, at which peak, and the refusals a person can act on."""

from __future__ import annotations

import dataclasses

import pytest

from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.performance import build_step_model
from planner.precision import (
    activation_bytes,
    check_precision,
    compute_peak_flops_per_s,
    is_architecture_at_least,
    supports_precision,
)
from planner.specs import IDEAL, Precision, QuantSpec
from tests.planner.performance_specs import (
    A100_SXM,
    B200,
    BF16,
    FP8,
    FP8_PRECISION,
    FP16,
    FP16_PRECISION,
    H100_SXM,
    INT4_AWQ,
    INT8_W8A8,
    LLAMA_2_70B,
    MI300X,
    NVFP4,
)

FP8_KV = QuantSpec(slug="fp8", weight_bytes_per_param=1.0, element_bytes=1.0, compute_dtype="fp8")
INT8_KV = QuantSpec(slug="int8", weight_bytes_per_param=1.0, element_bytes=1.0, compute_dtype="int8")


def test_fp8_is_refused_on_ampere_with_the_reason():
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(A100_SXM, FP8_PRECISION)
    assert "ada" in caught.value.detail
    assert "a100-80gb-sxm" in caught.value.detail
    assert caught.value.extensions["min_architecture"] == "ada"


def test_nvfp4_is_refused_on_hopper():
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(H100_SXM, Precision(weights=NVFP4, kv_cache=FP16))
    assert "blackwell" in caught.value.detail


def test_nvfp4_runs_on_blackwell_at_the_fp4_peak():
    """B200: 9,000 TFLOP/s dense FP4; a 4-way replica at η = 1 computes at 36e15 FLOP/s."""
    check_precision(B200, Precision(weights=NVFP4, kv_cache=FP8_KV))
    assert build_step_model(
        B200, LLAMA_2_70B, Precision(weights=NVFP4, kv_cache=FP16), 4, IDEAL
    ).compute_flops_per_s == pytest.approx(36e15)


@pytest.mark.parametrize(
    ("weights", "peak_tflops"),
    [(FP16, 989), (BF16, 989), (FP8, 1979), (INT8_W8A8, 1979), (INT4_AWQ, 989)],
)
def test_each_scheme_computes_at_its_dtype_peak(weights, peak_tflops):
    """W8A8 int8 and FP8 use the 8-bit peak; W4A16 (AWQ) dequantises and computes in fp16."""
    assert compute_peak_flops_per_s(H100_SXM, weights) == pytest.approx(peak_tflops * 1e12)


def test_fp8_kv_cache_needs_fp8_hardware_but_is_independent_of_weights():
    """fp16 weights with an fp8 cache run on Hopper, not on Ampere; an int8 cache runs on Ampere."""
    check_precision(H100_SXM, Precision(weights=FP16, kv_cache=FP8_KV))
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(A100_SXM, Precision(weights=FP16, kv_cache=FP8_KV))
    assert "KV cache" in caught.value.detail
    check_precision(A100_SXM, Precision(weights=FP16, kv_cache=INT8_KV))


def test_kv_cache_must_be_one_the_weight_scheme_lists():
    """The int8 W8A8 scheme lists fp16/bf16/int8 caches, so an fp8 cache is refused even on Hopper."""
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(H100_SXM, Precision(weights=INT8_W8A8, kv_cache=FP8_KV))
    assert caught.value.extensions["allowed_kv_cache_dtypes"] == ["fp16", "bf16", "int8"]


def test_a_missing_peak_is_refused_even_on_a_new_enough_generation():
    """An Ada-or-later chip whose datasheet lists no fp8 peak cannot run fp8."""
    no_fp8 = dataclasses.replace(H100_SXM, slug="h100-no-fp8", peak_flops_per_s={"fp16": 989e12, "fp8": None})
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(no_fp8, FP8_PRECISION)
    assert "lists no fp8 peak" in caught.value.detail


def test_amd_lines_use_their_own_generations():
    """FP8 runs on CDNA3 (MI300X); a scheme described as "ampere or newer" does not bind AMD;
    FP4 needs CDNA4, so MI300X refuses nvfp4."""
    assert compute_peak_flops_per_s(MI300X, FP8) == pytest.approx(2614.9e12)
    check_precision(MI300X, Precision(weights=INT8_W8A8, kv_cache=FP16))
    cdna2 = dataclasses.replace(MI300X, slug="mi250x", architecture="cdna2", peak_flops_per_s={"fp16": 383e12, "bf16": 383e12})
    assert not supports_precision(cdna2, FP8_PRECISION)
    with pytest.raises(UnsupportedConfigurationError) as caught:
        check_precision(MI300X, Precision(weights=NVFP4, kv_cache=FP16))
    assert "cdna4" in caught.value.detail


def test_architecture_ordering():
    assert is_architecture_at_least(H100_SXM, "ada")
    assert is_architecture_at_least(H100_SXM, "hopper")
    assert not is_architecture_at_least(H100_SXM, "blackwell")
    assert not is_architecture_at_least(A100_SXM, "ada")
    assert is_architecture_at_least(MI300X, "ampere")  # another vendor's line: not a constraint here
    with pytest.raises(PlannerInputError):
        is_architecture_at_least(H100_SXM, "kepler-9000")
    with pytest.raises(PlannerInputError):
        check_precision(dataclasses.replace(H100_SXM, architecture="rubin"), FP16_PRECISION)


def test_quantised_schemes_all_reduce_16_bit_activations():
    assert activation_bytes(FP8) == 2.0
    assert activation_bytes(INT4_AWQ) == 2.0
    assert activation_bytes(QuantSpec(slug="fp32", weight_bytes_per_param=4, element_bytes=4, compute_dtype="fp32")) == 4.0


def test_build_step_model_refuses_what_the_gpu_cannot_run():
    with pytest.raises(UnsupportedConfigurationError):
        build_step_model(A100_SXM, LLAMA_2_70B, FP8_PRECISION, 4, IDEAL)
