"""Weights, KV cache and capacity: MHA/GQA and MLA bytes, replication, the fit check and its advice."""

from __future__ import annotations

import pytest

from planner.errors import ModelDoesNotFitError, UnsupportedConfigurationError
from planner.memory import (
    check_fit,
    dense_weight_bytes,
    expert_weight_bytes,
    kv_bytes_per_token,
    kv_capacity_tokens,
    max_batch_by_memory,
    memory_fit,
    replica_kv_bytes_per_token,
    usable_memory_bytes,
    weight_bytes,
    weight_bytes_per_gpu,
)
from planner.specs import IDEAL, Efficiency, ModelSpec, Precision
from tests.planner.performance_specs import (
    A100_SXM,
    DEEPSEEK_V3,
    FP8,
    FP8_PRECISION,
    FP16,
    FP16_PRECISION,
    H100_SXM,
    INT4_AWQ,
    INT8_PRECISION,
    LLAMA_2_70B,
    MIXTRAL_8X7B,
    MIXTRAL_EXPERT_PARAMS,
    NVFP4,
)


def test_mla_kv_bytes_for_deepseek_v3():
    """MLA caches a latent: 61 layers × (512 + 64) × 2 bytes = 70,272 B per token in fp16,
    35,136 B in fp8 — against 2 × 61 × 128 × 128 × 2 = 3,997,696 B had it cached full K and V."""
    assert kv_bytes_per_token(DEEPSEEK_V3, FP16) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(DEEPSEEK_V3, FP8) == 61 * 576 * 1 == 35_136


def test_mla_latent_is_replicated_on_every_tensor_parallel_gpu():
    """Every rank needs the whole latent (vLLM: MLA decodes as MQA, one KV head per GPU), so an
    8-way replica stores 8 copies: 8 × 35,136 = 281,088 B per token in fp8."""
    assert replica_kv_bytes_per_token(DEEPSEEK_V3, FP8, 8) == 8 * 35_136


def test_gqa_kv_heads_are_replicated_when_tp_exceeds_them():
    """A model with 4 KV heads at tp = 8: each head lives on 2 GPUs, so the replica stores
    2 × (2 × 32 layers × 4 heads × 128 × 2 B) = 2 × 65,536 = 131,072 B per token; at tp = 4, one copy."""
    model = ModelSpec(
        slug="gqa-4",
        params_total=8e9,
        params_active=8e9,
        layers=32,
        hidden_size=4096,
        attention_heads=32,
        kv_heads=4,
        head_dim=128,
    )
    assert kv_bytes_per_token(model, FP16) == 65_536
    assert replica_kv_bytes_per_token(model, FP16, 4) == 65_536
    assert replica_kv_bytes_per_token(model, FP16, 8) == 131_072


def test_moe_weights_split_into_dense_and_routed():
    """Mixtral: one expert 3 × 4096 × 14336 = 176,160,768 params; routed 8 × 32 × that = 45.097e9;
    dense (attention, embeddings, norms, router) 46.7e9 − 45.097e9 = 1.603e9 params."""
    assert expert_weight_bytes(MIXTRAL_8X7B, FP16) == 2 * MIXTRAL_EXPERT_PARAMS
    assert dense_weight_bytes(MIXTRAL_8X7B, FP16) == pytest.approx(2 * (46.7e9 - 8 * 32 * MIXTRAL_EXPERT_PARAMS))
    assert dense_weight_bytes(MIXTRAL_8X7B, FP16) + 8 * 32 * expert_weight_bytes(MIXTRAL_8X7B, FP16) == pytest.approx(
        weight_bytes(MIXTRAL_8X7B, FP16)
    )
    assert expert_weight_bytes(LLAMA_2_70B, FP16) == 0.0
    assert dense_weight_bytes(LLAMA_2_70B, FP16) == weight_bytes(LLAMA_2_70B, FP16)


def test_grouped_int4_counts_its_scales():
    """AWQ int4 with group 128: 0.53125 B/param → 70e9 × 0.53125 = 37.19e9 B; NVFP4 0.5625 → 39.38e9."""
    assert weight_bytes(LLAMA_2_70B, INT4_AWQ) == pytest.approx(37.1875e9)
    assert weight_bytes(LLAMA_2_70B, NVFP4) == pytest.approx(39.375e9)
    assert weight_bytes_per_gpu(LLAMA_2_70B, FP16, 4) == 35e9


def test_reserve_shrinks_capacity():
    """10 % reserve: M = 4 × 80e9 × 0.9 = 288e9; (288e9 − 140e9) / 327,680 = 451,660 tokens // 4,096 = 110."""
    reserved = Efficiency(name="reserved", memory_reserve_fraction=0.1)
    assert usable_memory_bytes(H100_SXM, 4, reserved) == pytest.approx(288e9)
    capacity = kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, reserved)
    assert capacity == 451_660
    assert max_batch_by_memory(capacity, 4096) == 110


def test_capacity_is_zero_when_weights_alone_do_not_fit():
    """Two H100s: (160e9 − 140e9) / 327,680 = 61,035 tokens. One H100 (80e9 < 140e9 of weights): none."""
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 2, IDEAL) == 61_035
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 1, IDEAL) == 0


def test_fit_check_passes_with_the_breakdown():
    """tp = 4: 140e9 of weights + 1.342e9 for one 4,096-token request against 320e9."""
    fit = check_fit(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, context_tokens=4096)
    assert fit.fits
    assert fit.required_bytes == pytest.approx(140e9 + 1_342_177_280)
    assert fit.shortfall_bytes == 0.0


def test_does_not_fit_names_shortfall_smallest_tp_and_fitting_precision():
    """One H100 (80e9) for fp16 Llama-2-70B at 4,096 context needs 141.342e9: 61.342e9 short.
    tp = 2 (160e9) fits; so do 8-bit weights (70e9 + 1.342e9 < 80e9) and int4 AWQ (37.19e9);
    FP8 comes first because it saves the fewest bytes among fitting candidates (tied with int8,
    listed in the given order), and the A100-only check does not apply to an H100."""
    with pytest.raises(ModelDoesNotFitError) as caught:
        check_fit(
            H100_SXM,
            LLAMA_2_70B,
            FP16_PRECISION,
            1,
            IDEAL,
            context_tokens=4096,
            candidate_precisions=[FP8_PRECISION, INT8_PRECISION, Precision(weights=INT4_AWQ, kv_cache=FP16)],
        )
    error = caught.value
    assert error.extensions["shortfall_bytes"] == pytest.approx(61.342177280e9)
    assert error.extensions["shortfall_gb"] == pytest.approx(61.342177280)
    assert error.extensions["smallest_fitting_tp"] == 2
    assert [p["weights"] for p in error.extensions["fitting_precisions"]] == ["fp8", "int8", "int4-awq"]
    assert "61.3 GB short" in error.detail
    assert "tp=2 would fit" in error.detail


def test_does_not_fit_skips_precisions_the_gpu_cannot_run():
    """On one A100 the FP8 candidate would fit by size but Ampere has no FP8: only int8 is offered."""
    with pytest.raises(ModelDoesNotFitError) as caught:
        check_fit(
            A100_SXM,
            LLAMA_2_70B,
            FP16_PRECISION,
            1,
            IDEAL,
            context_tokens=4096,
            candidate_precisions=[FP8_PRECISION, INT8_PRECISION],
        )
    assert [p["weights"] for p in caught.value.extensions["fitting_precisions"]] == ["int8"]


def test_does_not_fit_in_a_node_suggests_pipeline_stages():
    """DeepSeek-V3 in fp16 (1.342e12 B + 2.30e9 B of KV = 1.3443e12) exceeds even 8 × 80e9 = 640e9: no tp in a
    node helps and no candidate precision is given; pp=2 offers 1.28e12 (still short), pp=4 2.56e12 (fits)."""
    with pytest.raises(ModelDoesNotFitError) as caught:
        check_fit(H100_SXM, DEEPSEEK_V3, FP16_PRECISION, 8, IDEAL, context_tokens=4096)
    assert caught.value.extensions["smallest_fitting_tp"] is None
    assert caught.value.extensions["fitting_precisions"] == []
    assert caught.value.extensions["smallest_fitting_pp"] == 4
    assert "tp=8 × pp=4 (32 GPUs in pipeline stages) would fit" in caught.value.detail
    check_fit(H100_SXM, DEEPSEEK_V3, FP16_PRECISION, 8, IDEAL, context_tokens=4096, pp=4)  # and it does


def test_does_not_fit_anywhere_says_so():
    """DeepSeek-V3 in fp16 at tp=1: even pp=8 offers 8 × 80e9 = 640e9 < 1.3443e12 and tp ≤ 8 in a node at
    pp=1 the same, so nothing is suggested."""
    with pytest.raises(ModelDoesNotFitError) as caught:
        check_fit(H100_SXM, DEEPSEEK_V3, FP16_PRECISION, 1, IDEAL, context_tokens=4096)
    assert caught.value.extensions["smallest_fitting_pp"] is None
    assert caught.value.extensions["fitting_precisions"] == []
    assert caught.value.extensions["smallest_fitting_tp"] is None
    assert "no tp up to 8, no pp up to 8 and no candidate precision fits" in caught.value.detail


def test_fit_check_refuses_an_invalid_tp_before_measuring():
    with pytest.raises(UnsupportedConfigurationError):
        check_fit(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 3, IDEAL)


def test_memory_fit_counts_one_request():
    fit = memory_fit(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 2, IDEAL, context_tokens=4096)
    assert fit.kv_bytes_for_requirement == 1_342_177_280
    assert fit.available_bytes == 160e9
