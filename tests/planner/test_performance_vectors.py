"""docs/design.md's test-vector table, reproduced under the ideal profile.

Llama-2-70B (70e9 params, 80 layers, 8 KV heads, head dim 128) in fp16 on four H100 SXM
(80 GB, 3.35 TB/s, 989 TFLOP/s each): per replica BW = 4 × 3.35e12 = 13.4e12 B/s,
F = 4 × 989e12 = 3.956e15 FLOP/s, M = 4 × 80e9 = 320e9 B.
"""

from __future__ import annotations

import pytest

from planner.memory import kv_bytes_per_token, weight_bytes
from planner.performance import build_step_model, decode_step, evaluate
from planner.specs import IDEAL
from tests.planner.performance_specs import FP16, FP16_PRECISION, H100_SXM, INT8_PRECISION, LLAMA_2_70B

STEP_TOLERANCE = 0.005  # the 0.5 %


@pytest.fixture(scope="module")
def seed_evaluation():
    return evaluate(
        H100_SXM,
        LLAMA_2_70B,
        FP16_PRECISION,
        4,
        IDEAL,
        context_tokens=4096,
        batch_sizes=[1, 32, 134],
        prompt_tokens=2000,
    )


def test_weights_are_140_gb(seed_evaluation):
    """W = 70e9 params × 2 bytes = 140e9 bytes."""
    assert weight_bytes(LLAMA_2_70B, FP16) == 140e9
    assert seed_evaluation.weights_bytes == 140e9


def test_kv_bytes_per_token_and_per_request_are_exact(seed_evaluation):
    """2 (K and V) × 80 layers × 8 KV heads × 128 dims × 2 bytes = 327,680 B per token;
    × 4,096 tokens = 1,342,177,280 B ≈ 1.34 GB per request. tp = 4 divides the 8 KV heads: one copy."""
    assert kv_bytes_per_token(LLAMA_2_70B, FP16) == 327_680
    assert seed_evaluation.kv_bytes_per_token == 327_680
    assert seed_evaluation.kv_copies == 1
    assert seed_evaluation.kv_bytes_per_request == 1_342_177_280
    assert seed_evaluation.kv_bytes_per_request / 1e9 == pytest.approx(1.34, abs=0.005)


def test_prefill_of_2000_tokens(seed_evaluation):
    """Linear FLOPs 2 × 70e9 × 2,000 = 280e12; at 3.956e15 FLOP/s that is 70.78 ms.
    One weight read 140e9 / 13.4e12 = 10.45 ms. Attention adds 4·80·64·128 × 2000·2001/2 =
    5.2455e12 FLOPs = 1.33 ms, so the whole step is 72.10 ms and compute binds."""
    prefill = seed_evaluation.prefill
    assert prefill.linear_flops == pytest.approx(280e12)
    assert prefill.linear_time_s == pytest.approx(0.0708, rel=STEP_TOLERANCE)
    assert prefill.weight_read_s == pytest.approx(0.0104, rel=STEP_TOLERANCE)
    assert prefill.attention_flops == pytest.approx(4 * 80 * 64 * 128 * 2000 * 2001 / 2)
    assert prefill.time_s == pytest.approx(0.0708 + 5.2455e12 / 3.956e15, rel=STEP_TOLERANCE)
    assert prefill.bound == "compute"


@pytest.mark.parametrize(
    ("batch", "step_ms", "tokens_per_s"),
    [(1, 10.55, 94.8), (32, 13.65, 2343.7), (134, 23.87, 5613.8)],
)
def test_decode_steps_at_4096_context(seed_evaluation, batch, step_ms, tokens_per_s):
    """Memory-bound: t = (140e9 + B × 4,096 × 327,680) / 13.4e12.
    B = 1: 141.34e9 / 13.4e12 = 10.55 ms → 94.8 tok/s; B = 32: 182.95e9 → 13.65 ms → 2,343.7 tok/s;
    B = 134: 319.85e9 → 23.87 ms → 5,613.8 tok/s."""
    row = next(row for row in seed_evaluation.decode if row.batch == batch)
    assert row.step_s * 1e3 == pytest.approx(step_ms, rel=STEP_TOLERANCE)
    assert row.output_tokens_per_s == pytest.approx(tokens_per_s, rel=STEP_TOLERANCE)
    assert row.output_tokens_per_s_per_request == pytest.approx(tokens_per_s / batch, rel=STEP_TOLERANCE)
    assert row.bound == "memory"
    assert row.fits_in_memory


def test_max_batch_is_134_with_179_85_gb_of_kv(seed_evaluation):
    """(320e9 − 140e9) / 327,680 = 549,316 tokens; // 4,096 = 134 requests (134.1);
    their KV: 134 × 1,342,177,280 = 179.85e9 B."""
    assert seed_evaluation.kv_capacity_tokens == 549_316
    assert seed_evaluation.max_batch_by_memory == 134
    row = next(row for row in seed_evaluation.decode if row.batch == 134)
    assert row.kv_bytes == 134 * 1_342_177_280
    assert row.kv_bytes / 1e9 == pytest.approx(179.85, abs=0.005)


def test_break_even_and_intensity_counting_kv(seed_evaluation):
    """Break-even F / BW = 3.956e15 / 13.4e12 = 295.2 FLOP/B. At batch 134 the linear FLOPs
    134 × 2 × 70e9 = 18.76e12 over 140e9 + 179.85e9 bytes read give 58.65 FLOP/B (DESIGN's ≈ 59);
    counting attention FLOPs too (+1.44e12) gives 63.15 — still far below break-even."""
    assert seed_evaluation.break_even_flops_per_byte == pytest.approx(295.22, rel=1e-4)
    row = next(row for row in seed_evaluation.decode if row.batch == 134)
    assert row.flops_per_byte == pytest.approx(18.76e12 / 319.851755520e9, rel=1e-9)
    assert round(row.flops_per_byte) == 59
    assert row.flops_per_byte_with_attention == pytest.approx((18.76e12 + 134 * 4096 * 2_621_440) / 319.851755520e9)
    assert row.flops_per_byte_with_attention < seed_evaluation.break_even_flops_per_byte


def test_eight_bit_weights_halve_the_batch_1_step_and_fit_186():
    """W8A8 int8: W = 70e9 B. Batch 1: (70e9 + 1.342e9) / 13.4e12 = 5.32 ms.
    Capacity (320e9 − 70e9) / 327,680 = 762,939 tokens // 4,096 = 186 requests."""
    evaluation = evaluate(
        H100_SXM, LLAMA_2_70B, INT8_PRECISION, 4, IDEAL, context_tokens=4096, batch_sizes=[1], prompt_tokens=2000
    )
    assert evaluation.weights_bytes == 70e9
    assert evaluation.decode[0].step_s * 1e3 == pytest.approx(5.32, rel=STEP_TOLERANCE)
    assert evaluation.max_batch_by_memory == 186
    assert evaluation.step_model.compute_flops_per_s == pytest.approx(4 * 1979e12)


def test_step_model_coefficients_are_the_papers():
    """Every coefficient of the seed's step model, by hand."""
    model = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    assert model.dense_weight_bytes == 140e9
    assert model.weight_bytes == 140e9
    assert not model.is_moe
    assert model.kv_bytes_per_token == 327_680
    assert model.flops_per_token == 140e9
    assert model.attention_flops_per_context_token == 4 * 80 * 64 * 128
    assert model.memory_bandwidth_bytes_per_s == pytest.approx(13.4e12)
    assert model.compute_flops_per_s == pytest.approx(3.956e15)
    assert (model.comm_s_per_token, model.comm_latency_s, model.step_overhead_s) == (0.0, 0.0, 0.0)
    assert model.memory_compute_overlap == 1.0
    assert decode_step(model, batch=1, context_tokens=4096).step_s == pytest.approx(141.342177280e9 / 13.4e12)
