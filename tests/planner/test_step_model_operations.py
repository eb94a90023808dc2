"""The step model's operation-level terms (issue 14 §1): the GEMM efficiency curve η(M) = M / (M + M½)
and the per-sequence cost c_seq, worked by hand, and c_seq recovered by the calibration."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.calibration import MeasuredPoint, PointSet, decode_step_s, fit_step_models, mixed_step_s, predict, prefill_s
from planner.errors import PlannerInputError
from planner.performance import build_step_model
from planner.specs import Efficiency
from planner.step_model import COEFFICIENTS, StepModel
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B

#: 1 GB of weights at 1 TB/s (1 ms to read), 2 GFLOP per token at 1 PFLOP/s (2 µs per token),
#: 1 kB of KV and 1 kFLOP of attention per context token.
PLAIN = StepModel(
    dense_weight_bytes=1e9,
    kv_bytes_per_token=1e3,
    flops_per_token=2e9,
    attention_flops_per_context_token=1e3,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e15,
)


def test_defaults_are_the_one_eta_roofline():
    """M½ = c_seq = 0: a 4,000-token prefill is 4,000 × 2 µs + 8e6 × 1 kFLOP / 1 PFLOP/s = 8.008 ms."""
    assert not PLAIN.has_operation_terms
    assert PLAIN.step_s(4000, 0.0, 8e6) == pytest.approx(8e-3 + 8e-6, rel=1e-12)
    assert PLAIN.step_s(4000, 0.0, 8e6, 17) == PLAIN.step_s(4000, 0.0, 8e6)


def test_gemm_half_tokens_is_the_saturating_efficiency_curve():
    """M½ = 500: a 500-token GEMM runs at half the peak (compute (500 + 500) × 2 µs = 2 ms, so the step
    is compute-bound over the 1 ms weight read), a 4,500-token one at 90 % (9 ms + 0 attention)."""
    curve = replace(PLAIN, gemm_half_tokens=500.0)
    assert curve.has_operation_terms
    assert curve.compute_s(500, 0.0) == pytest.approx(2e-3, rel=1e-12)
    assert curve.step_s(500, 0.0, 0.0) == pytest.approx(2e-3, rel=1e-12)
    realised = 4500 * PLAIN.flops_per_token / curve.compute_s(4500, 0.0)  # FLOP/s the GEMM achieves
    assert realised / PLAIN.compute_flops_per_s == pytest.approx(0.9, rel=1e-12)


def test_small_m_gemm_stays_memory_bound_and_an_empty_step_pays_no_gemm():
    """At 8 tokens the curve's compute (508 × 2 µs = 1.016 ms) barely exceeds the 1 ms weight read; with no
    new tokens there is no GEMM, only attention (1e6 × 1 kFLOP / 1 PFLOP/s = 1 µs)."""
    curve = replace(PLAIN, gemm_half_tokens=500.0)
    assert curve.compute_s(8, 0.0) == pytest.approx(508 * 2e-6, rel=1e-12)
    assert curve.compute_s(0, 1e6) == pytest.approx(1e-6, rel=1e-12)
    assert replace(PLAIN, gemm_half_tokens=10.0).step_s(8, 0.0, 0.0) == pytest.approx(1e-3, rel=1e-12)  # memory binds


def test_sequence_overhead_adds_c_seq_per_sequence():
    """c_seq = 20 µs: a decode step of 256 sequences pays 5.12 ms beyond the one-η step."""
    seq = replace(PLAIN, sequence_overhead_s=20e-6)
    assert seq.step_s(256, 256 * 1000, 256 * 1000, 256) - PLAIN.step_s(256, 256 * 1000, 256 * 1000) == pytest.approx(
        5.12e-3, rel=1e-9
    )


def test_calibration_forms_count_every_sequence_in_the_step():
    """Decode of B, prefill of B prompts and the continuous-batching mixed step all hold B sequences."""
    seq = replace(PLAIN, sequence_overhead_s=10e-6)
    assert decode_step_s(seq, 64, 1000) - decode_step_s(PLAIN, 64, 1000) == pytest.approx(64e-5, rel=1e-9)
    assert prefill_s(seq, 4, 512) - prefill_s(PLAIN, 4, 512) == pytest.approx(4e-5, rel=1e-9)
    mixed = mixed_step_s(seq, 100, 1000, 100) - mixed_step_s(PLAIN, 100, 1000, 100)
    assert mixed == pytest.approx(100e-5, rel=1e-9)


def test_negative_terms_are_refused_and_the_kernels_coefficients_are_unchanged():
    with pytest.raises(PlannerInputError):
        replace(PLAIN, gemm_half_tokens=-1.0)
    with pytest.raises(PlannerInputError):
        replace(PLAIN, sequence_overhead_s=-1e-6)
    # the vectorised kernels index COEFFICIENTS: the two terms are not in it (they are not carried yet)
    assert "gemm_half_tokens" not in COEFFICIENTS and "sequence_overhead_s" not in COEFFICIENTS


TRUE = Efficiency(name="truth", memory=0.72, compute=0.55, step_overhead_s=0.002, include_comm=True)
SHAPES = [
    MeasuredPoint(kind="tpot", value=1.0, batch=1, context_tokens=4096),
    MeasuredPoint(kind="decode_step", value=1.0, batch=32, context_tokens=1000),
    MeasuredPoint(kind="decode_step", value=1.0, batch=512, context_tokens=1500),
    MeasuredPoint(kind="ttft", value=1.0, prompt_tokens=2000),
    MeasuredPoint(kind="throughput", value=1.0, batch=256, prompt_tokens=1000, output_tokens=200, batching="continuous"),
    MeasuredPoint(kind="throughput", value=1.0, batch=1024, prompt_tokens=128, output_tokens=128, batching="continuous"),
]


def _point_set(points: list[MeasuredPoint]) -> PointSet:
    return PointSet(
        points=tuple(points), step_model_for=lambda eff: build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, eff)
    )


def test_the_fit_recovers_a_known_per_sequence_cost():
    """Points made with c_seq = 30 µs: fitting "sequence" recovers it and the efficiencies; without the
    term the same points cannot be reproduced (the fit's worst error is material)."""
    truth = replace(build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, TRUE), sequence_overhead_s=30e-6)
    points = [replace(p, value=predict(truth, p)) for p in SHAPES]
    base = Efficiency(name="base", include_comm=True)
    fit = fit_step_models([_point_set(points)], fit=("memory", "compute", "overhead", "sequence"), base=base)
    assert fit.sequence_overhead_s == pytest.approx(30e-6, rel=1e-4)
    assert fit.efficiency.memory == pytest.approx(0.72, rel=1e-4)
    assert fit.efficiency.compute == pytest.approx(0.55, rel=1e-4)
    assert fit.max_abs_relative_error < 1e-6
    without = fit_step_models([_point_set(points)], fit=("memory", "compute", "overhead"), base=base)
    assert without.sequence_overhead_s is None
    assert without.max_abs_relative_error > 0.01


def test_per_sequence_cost_is_blind_without_a_batch():
    """Batch-1 points cannot tell c_seq from the per-step overhead: the fit holds it and says so."""
    points = [MeasuredPoint(kind="tpot", value=0.012, batch=1, context_tokens=c) for c in (500, 4000)]
    points.append(MeasuredPoint(kind="ttft", value=0.3, prompt_tokens=2000))
    fit = fit_step_models([_point_set(points)], fit=("memory", "compute", "sequence"))
    assert fit.sequence_overhead_s is None
    assert any("sequence held at base value" in note for note in fit.notes)
