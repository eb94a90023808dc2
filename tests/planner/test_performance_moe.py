"""Mixture-of-experts and MLA: compute on active params, reads on the experts a step touches."""

from __future__ import annotations

import pytest

from planner.performance import attention_flops_per_context_token, build_step_model, decode_step, evaluate, prefill
from planner.specs import IDEAL, Precision, QuantSpec
from tests.planner.performance_specs import B200, DEEPSEEK_V3, FP8, FP16_PRECISION, H100_SXM, MIXTRAL_8X7B, MIXTRAL_EXPERT_PARAMS

EXPERT_BYTES = 2 * MIXTRAL_EXPERT_PARAMS  # fp16, one expert in one layer: 352,321,536 B
ROUTED_BYTES = 8 * 32 * EXPERT_BYTES  # 90.19e9 B
DENSE_BYTES = 2 * 46.7e9 - ROUTED_BYTES  # 3.206e9 B: attention, embeddings, norms, routers


@pytest.fixture(scope="module")
def mixtral():
    return build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 2, IDEAL)


def test_mixtral_batch_1_reads_a_quarter_of_the_experts(mixtral):
    """One token touches k = 2 of E = 8 experts per layer: E·(1 − (1 − k/E)^1) = 2, so a step reads
    dense 3.206e9 + 32 × 2 × 352.3e6 = 25.75e9 B — the shared weights plus 2/8 of the 90.19e9 of experts."""
    read = mixtral.weight_bytes_read(1)
    assert read == pytest.approx(DENSE_BYTES + ROUTED_BYTES * 2 / 8)
    assert (read - mixtral.dense_weight_bytes) / ROUTED_BYTES == pytest.approx(0.25)


def test_mixtral_large_batch_reads_nearly_all_experts(mixtral):
    """At n = 64 tokens, 1 − 0.75^64 = 1 − 1.0e-8 of the experts are touched: all 93.4e9 B, within 1e-6.
    At n = 4: 8·(1 − 0.75^4) = 5.47 experts per layer, 68 % of them."""
    assert mixtral.weight_bytes_read(64) == pytest.approx(mixtral.weight_bytes, rel=1e-6)
    assert (mixtral.weight_bytes_read(4) - DENSE_BYTES) / ROUTED_BYTES == pytest.approx(1 - 0.75**4)


def test_mixtral_computes_on_active_params(mixtral):
    """flops_per_token = 2 × 12.9e9 active (not 46.7e9 total)."""
    assert mixtral.flops_per_token == pytest.approx(25.8e9)
    assert mixtral.weight_bytes == pytest.approx(2 * 46.7e9)


def test_mixtral_decode_step_grows_with_the_experts_touched(mixtral):
    """Batch 1 at 1,024 context on 2 H100s (6.7e12 B/s): (25.75e9 + 1,024 × 131,072) / 6.7e12 = 3.86 ms;
    batch 8 touches 8·(1 − 0.75^8) = 7.20 experts per layer: (84.42e9 + 8 × 134.2e6) / 6.7e12 = 12.76 ms."""
    kv = 2 * 32 * 8 * 128 * 2  # 131,072 B per token
    one = decode_step(mixtral, batch=1, context_tokens=1024)
    eight = decode_step(mixtral, batch=8, context_tokens=1024)
    assert one.step_s == pytest.approx((DENSE_BYTES + ROUTED_BYTES / 4 + 1024 * kv) / 6.7e12)
    touched = 1 - 0.75**8
    assert eight.step_s == pytest.approx((DENSE_BYTES + ROUTED_BYTES * touched + 8 * 1024 * kv) / 6.7e12)
    assert eight.weight_bytes_read > one.weight_bytes_read


def test_mixtral_prefill_reads_every_expert(mixtral):
    assert prefill(mixtral, 512).weight_read_s == pytest.approx(mixtral.weight_bytes / 6.7e12, rel=1e-9)


def test_deepseek_v3_on_b200_with_mla():
    """fp8 weights 671e9 B; fp8 latent 61 × 576 = 35,136 B, replicated on 8 GPUs: 281,088 B per token.
    Memory 8 × 180e9 = 1,440e9: (1,440e9 − 671e9) / 281,088 = 2,735,798 tokens → 333 requests of 8,192.
    Attention in the latent: 2 × 61 × 128 heads × (2 × 512 + 64) = 16,990,208 FLOPs per context token."""
    fp8_kv = QuantSpec(slug="fp8", weight_bytes_per_param=1.0, element_bytes=1.0, compute_dtype="fp8")
    evaluation = evaluate(
        B200,
        DEEPSEEK_V3,
        Precision(weights=FP8, kv_cache=fp8_kv),
        8,
        IDEAL,
        context_tokens=8192,
        batch_sizes=[1, 64],
        prompt_tokens=4096,
    )
    assert evaluation.weights_bytes == pytest.approx(671e9)
    assert evaluation.kv_bytes_per_token_one_copy == 35_136
    assert evaluation.kv_copies == 8
    assert evaluation.kv_bytes_per_token == 281_088
    assert evaluation.kv_capacity_tokens == 2_735_798
    assert evaluation.max_batch_by_memory == 333
    assert any("MLA latent" in note for note in evaluation.notes)
    assert attention_flops_per_context_token(DEEPSEEK_V3) == 16_990_208
    assert evaluation.step_model.flops_per_token == pytest.approx(74e9)
    assert evaluation.step_model.experts == 256 and evaluation.step_model.moe_layers == 58
    # batch 1 touches 8 of 256 experts per layer: shared weights + 58 × 8 × 44.04e6 B of experts
    expert_bytes = 3 * 7168 * 2048
    dense = 671e9 - 256 * 58 * expert_bytes
    assert evaluation.decode[0].weight_bytes_read == pytest.approx(dense + 58 * 8 * expert_bytes)
