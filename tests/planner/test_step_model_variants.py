"""bench/step_variants.py: a step variant swaps the issue-14 terms in for a bench run and restores the shipped form."""

from __future__ import annotations

import pytest

import bench.fidelity
import planner.performance
from bench.step_variants import step_variant
from planner.parallel import all_reduce_line, tp_link
from planner.performance import build_step_model, flops_per_token
from planner.specs import Efficiency
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B, MIXTRAL_8X7B

COMM = Efficiency(name="comm", include_comm=True)


def test_collectives_price_each_all_reduce_on_the_message_size_line_and_moe_the_experts_rate():
    """Llama-2-70B tp 4 × pp 2 (40 layers a stage): 80 all-reduces per stage of the line a + b·n through the fitted
    all-reduce; per token 80·b, per step pp · 80 · a (every micro-batch pays α). Mixtral's FLOPs per token
    become `flops_per_token`. Outside the context both are the shipped ring line and 2 · params_active."""
    a, b = all_reduce_line(tp_link(H100_SXM, 4), 4, 8192 * 2)
    shipped = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, COMM, pp=2)
    with step_variant("collectives+moe"):
        pipeline = planner.performance.build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, COMM, pp=2)
        mixtral = bench.fidelity.build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    hops = shipped.comm_s_per_token - 80 * 1.5 * 8192 * 2 / 450e9  # the stage hop's share, unchanged
    assert pipeline.comm_s_per_token == pytest.approx(80 * b + hops)
    assert pipeline.comm_latency_s - shipped.comm_latency_s == pytest.approx(2 * 80 * (a - 5e-6))
    assert mixtral.flops_per_token == pytest.approx(flops_per_token(H100_SXM, MIXTRAL_8X7B, "fp16", 8, 1))
    assert mixtral.flops_per_token > 2 * MIXTRAL_8X7B.params_active
    after = bench.fidelity.build_step_model(H100_SXM, MIXTRAL_8X7B, FP16_PRECISION, 8, COMM)
    assert after.flops_per_token == 2 * MIXTRAL_8X7B.params_active
    assert planner.performance.build_step_model is build_step_model


def test_an_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown step variant"), step_variant("fused"):
        pass
