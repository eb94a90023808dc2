"""The routed experts' GEMM rate in the step model (planner/performance.py, issue 14 §3): r(i) = i / (i + i½),
i the expert intermediate per GPU, counted as dense-GEMM-equivalent FLOPs."""

from __future__ import annotations

import pytest

from bench.kernel_fit import expert_gemm_half_intermediate
from planner.performance import EXPERT_GEMM_HALF_INTERMEDIATE, build_step_model, expert_gemm_rate, flops_per_token
from planner.specs import Efficiency
from tests.planner.performance_specs import (
    DEEPSEEK_V3,
    FP16_PRECISION,
    H100_SXM,
    LLAMA_2_70B,
    MI300X,
    MIXTRAL_8X7B,
)


def test_mixtral_tp4_on_hopper():
    """Mixtral-8x7B, I = 14,336 split over tp 4: i = 3,584, r = 3,584 / (3,584 + 565) = 0.86382. Routed active
    = 32 layers × 2 experts × 176,160,768 = 11.274e9; FLOPs per token = 2 × (12.9e9 + 11.274e9 × (1/r − 1))
    = 2 × (12.9e9 + 1.7774e9) = 29.355e9 (the one-η form said 25.8e9)."""
    assert expert_gemm_rate(H100_SXM, MIXTRAL_8X7B, "fp16", 4, 1) == pytest.approx(3584 / (3584 + 565))
    routed = 32 * 2 * 3 * 4096 * 14336
    expected = 2 * (12.9e9 + routed * ((3584 + 565) / 3584 - 1))
    assert flops_per_token(H100_SXM, MIXTRAL_8X7B, "fp16", 4, 1) == pytest.approx(expected)
    assert expected == pytest.approx(29.355e9, rel=1e-4)
    shipped = build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 4, Efficiency())
    assert shipped.flops_per_token == pytest.approx(25.8e9)  # not wired yet: bench/step_variants.py "moe"


def test_deepseek_v3_fp8_experts_split_eight_ways_run_far_below_the_dense_rate():
    """DeepSeek-V3 FP8 at tp 8: i = 2,048 / 8 = 256, hopper FP8 i½ 1,646: r = 256 / 1,902 = 0.1346 (the
    measured H100/H200 block-FP8 MoE layers at expert tp 8: 0.14). With expert parallelism the experts stay
    whole: i = 2,048, r = 0.554."""
    assert expert_gemm_rate(H100_SXM, DEEPSEEK_V3, "fp8", 8, 1) == pytest.approx(256 / (256 + 1646))
    assert expert_gemm_rate(H100_SXM, DEEPSEEK_V3, "fp8", 8, 8) == pytest.approx(2048 / (2048 + 1646))
    whole = flops_per_token(H100_SXM, DEEPSEEK_V3, "fp8", 8, 8)
    split = flops_per_token(H100_SXM, DEEPSEEK_V3, "fp8", 8, 1)
    assert split > whole > 2 * 37e9


def test_dense_models_and_unmeasured_architectures():
    """A dense model keeps 2 × active params; an architecture without MoE timings takes the pooled BF16 i½."""
    assert flops_per_token(H100_SXM, LLAMA_2_70B, "fp16", 4, 1) == 2 * LLAMA_2_70B.params_active
    assert expert_gemm_rate(MI300X, MIXTRAL_8X7B, "fp8", 8, 1) == pytest.approx(1792 / (1792 + 648))


def test_the_planner_constants_are_the_kernel_fit():
    fitted = expert_gemm_half_intermediate()
    names = {("hopper", "bf16"): ("hopper", "bfloat16"), ("hopper", "fp8"): ("hopper", "fp8_block")}
    names |= {("blackwell", "bf16"): ("blackwell", "bfloat16"), ("pooled", "bf16"): ("pooled", "bfloat16")}
    for key, half in EXPERT_GEMM_HALF_INTERMEDIATE.items():
        assert half == pytest.approx(fitted[names[key]][0], abs=1.0), key
