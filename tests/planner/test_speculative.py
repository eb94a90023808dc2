"""Speculative decoding's physics, worked by hand under the ideal profile.

Llama-2-70B in fp16 on four H100 SXM (docs/design.md's test vectors): per replica
BW = 13.4e12 B/s, F = 3.956e15 FLOP/s, weights 140e9 B, KV 327,680 B per token,
2·70e9 = 1.4e11 FLOPs per token and 4·80·64·128 = 2,621,440 attention FLOPs per context token.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.arrivals import Trace
from planner.errors import PlannerInputError
from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.queueing import predict
from planner.simulator import simulate, simulate_requests
from planner.specs import IDEAL, ModelSpec
from planner.speculative import (
    accepted_length_pmf,
    available_methods,
    crossover_batch,
    draft_model_speculation,
    draw_emitted_tokens,
    head_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
    tokens_per_step,
    tpot_ratio,
)
from planner.step_model import Speculation
from planner.workload import LognormalLength, Serving, Workload
from tests.planner.performance_specs import DEEPSEEK_V3, FP16_PRECISION, H100_SXM, LLAMA_2_70B

#: A 7B draft of Llama-2-70B's family (Llama-2-7B's published shape: 32 layers, 32 KV heads of 128).
LLAMA_2_7B = ModelSpec(
    slug="llama-2-7b",
    params_total=7e9,
    params_active=7e9,
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=32,
    head_dim=128,
    intermediate_size=11008,
    vocab_size=32000,
)


def _verify_only(draft_tokens: int, acceptance_rate: float) -> Speculation:
    """A draft that costs nothing: the verify step alone."""
    return Speculation(
        method="eagle",
        draft_tokens=draft_tokens,
        acceptance_rate=acceptance_rate,
        draft_weight_bytes=0.0,
        draft_flops_per_token=0.0,
    )


@pytest.fixture(scope="module")
def target():
    return build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)


def test_tokens_per_step_for_two_rates_and_lengths():
    """E = (1 − α^(k+1))/(1 − α): α 0.8, k 4 → (1 − 0.32768)/0.2 = 3.3616; α 0.6, k 2 → (1 − 0.216)/0.4 = 1.96.
    It is also the mean of n + 1 under the truncated geometric pmf."""
    assert tokens_per_step(0.8, 4) == pytest.approx(3.3616)
    assert tokens_per_step(0.6, 2) == pytest.approx(1.96)
    for alpha, k in ((0.8, 4), (0.6, 2)):
        pmf = accepted_length_pmf(alpha, k)
        assert pmf.sum() == pytest.approx(1.0)
        assert float(np.dot(pmf, np.arange(k + 1) + 1)) == pytest.approx(tokens_per_step(alpha, k))


def test_without_speculation_the_verify_step_is_the_decode_step(target):
    """k = 0 is today's step: verify_step_s(B, kv) = step_s(B, kv, kv), and one token per step."""
    assert target.speculation is None
    assert target.tokens_per_step == 1.0
    assert target.verify_step_s(32, 32 * 4096) == target.step_s(32, 32 * 4096, 32 * 4096)


def test_verify_step_at_batch_1_is_memory_bound(target):
    """k = 3, α = 0.8 (E = 2.952), context 512, batch 1. Memory: (140e9 + 512·327,680)/13.4e12 = 10.4603 ms.
    Compute: (4·1.4e11 + (4·512 + 3·4/2)·2,621,440)/3.956e15 = 5.6538e11/3.956e15 = 0.1429 ms. The step is the
    weight read, as a plain decode step is, so TPOT = 10.4603/2.952 = 3.5435 ms: a third of the plain 10.4603 ms."""
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    assert spec.tokens_per_step == pytest.approx(2.952)
    assert spec.verify_step_s(1, 512) == pytest.approx(10.4603e-3, rel=1e-4)
    assert target.step_s(1, 512, 512) == pytest.approx(10.4603e-3, rel=1e-4)
    assert spec.verify_step_s(1, 512) / spec.tokens_per_step == pytest.approx(3.5435e-3, rel=1e-4)
    assert tpot_ratio(spec, batch=1, context_tokens=512) == pytest.approx(1 / 2.952, rel=1e-6)


def test_verify_step_at_batch_512_is_compute_bound_and_slower(target):
    """Batch 512, context 512: verify compute (512·4·1.4e11 + 512·2,054·2,621,440)/3.956e15 = 2.89477e14/3.956e15
    = 73.174 ms against memory (140e9 + 512·512·327,680)/13.4e12 = 16.858 ms. The plain decode step is compute-bound
    too: (512·1.4e11 + 512·512·2,621,440)/3.956e15 = 18.293 ms. TPOT 73.174/2.952 = 24.788 ms > 18.293 ms."""
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    kv = 512 * 512
    assert spec.verify_step_s(512, kv) == pytest.approx(73.174e-3, rel=1e-4)
    assert target.step_s(512, kv, kv) == pytest.approx(18.293e-3, rel=1e-4)
    assert tpot_ratio(spec, batch=512, context_tokens=512) == pytest.approx(73.174 / 2.952 / 18.293, rel=1e-3)


def test_crossover_batch_where_the_verify_step_turns_compute_bound(target):
    """While the plain step is memory-bound, speculation stops paying when the verify compute over E reaches
    the memory time: B·0.142917 ms / 2.952 ≥ 10.4478 ms + B·0.012520 ms (weights, then 512 KV tokens per
    sequence), i.e. B ≥ 10.4478/(0.048414 − 0.012520) = 291.07: the crossover is batch 292."""
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    assert crossover_batch(spec, context_tokens=512) == 292
    assert tpot_ratio(spec, batch=291, context_tokens=512) < 1.0 <= tpot_ratio(spec, batch=292, context_tokens=512)


def test_draft_cost_lowers_the_crossover(target):
    """An EAGLE head (one decoder layer of (70e9 − 2·32,000·8,192)/80 = 868.4e6 params, a 2h×h FC, the
    32,000 × 8,192 LM head: 1.2648e9 params, 2.5296 GB in fp16) adds k passes per step, so speculation
    stops paying at a smaller batch than the verify step alone."""
    head = head_speculation(LLAMA_2_70B, FP16_PRECISION, 4, method="eagle", draft_tokens=3, acceptance_rate=0.8)
    layer = (70e9 - 2 * 32_000 * 8_192) / 80
    assert head.draft_weight_bytes == pytest.approx((layer + 2 * 8192**2 + 32_000 * 8_192) * 2)
    assert head.draft_kv_bytes_per_token == pytest.approx(327_680 / 80)
    spec = speculative_step_model(target, head)
    crossover = crossover_batch(spec, context_tokens=512)
    assert crossover is not None and crossover < 292
    assert tpot_ratio(spec, batch=1, context_tokens=512) < 0.4


def test_draft_model_memory_is_taken_from_the_kv_cache():
    """Llama-2-7B drafting for Llama-2-70B on 4 × 80 GB (ideal: no reserve): the draft's weights 7e9 × 2 = 14e9 B
    and its cache 2·32·32·128·2 = 524,288 B per token come out of the same memory. Without it
    (320e9 − 140e9)/327,680 = 549,316 tokens; with it (320e9 − 140e9 − 14e9)/(327,680 + 524,288) = 194,842."""
    draft = draft_model_speculation(LLAMA_2_7B, FP16_PRECISION, 4, draft_tokens=4, acceptance_rate=0.6)
    assert draft.draft_weight_bytes == 14e9
    assert draft.draft_kv_bytes_per_token == 524_288
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL) == 549_316
    assert speculative_kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, draft) == math.floor(166e9 / 851_968)


def test_emitted_tokens_average_e_over_many_steps():
    """The mean of 200,000 draws of n + 1 is E within 4 standard errors. For α 0.8, k 4 the emitted count's
    variance is E[(n+1)²] − E² (≈ 2.0), so the standard error is ≈ √2/√200,000 ≈ 0.0032; 4 of them is 0.013."""
    rng = np.random.default_rng(7)
    for alpha, k in ((0.8, 4), (0.6, 2)):
        pmf = accepted_length_pmf(alpha, k)
        emitted = np.arange(k + 1) + 1
        variance = float(np.dot(pmf, emitted**2)) - tokens_per_step(alpha, k) ** 2
        draws = draw_emitted_tokens(rng, alpha, k, 200_000)
        assert draws.min() >= 1 and draws.max() <= k + 1
        assert abs(draws.mean() - tokens_per_step(alpha, k)) < 4 * math.sqrt(variance / 200_000)
        frequencies = np.bincount(draws - 1, minlength=k + 1) / draws.size
        assert frequencies == pytest.approx(pmf, abs=0.005)


def test_methods_offered_per_model():
    """MTP only for models that ship MTP modules; every head needs the vocabulary for its LM head."""
    assert available_methods(DEEPSEEK_V3) == ("mtp", "eagle", "medusa")
    assert available_methods(LLAMA_2_70B) == ("eagle", "medusa")


def test_invalid_speculation_is_refused():
    with pytest.raises(PlannerInputError):
        _verify_only(0, 0.8)
    with pytest.raises(PlannerInputError):
        _verify_only(3, 1.0)


# --- the simulator ---------------------------------------------------------------------------------------


def _trace(requests: int, *, spacing_s: float, prompt: int, output: int) -> Trace:
    return Trace(
        arrival_s=np.arange(requests) * spacing_s,
        prompt_tokens=np.full(requests, prompt),
        output_tokens=np.full(requests, output),
    )


def test_simulator_emits_e_tokens_per_decode_step_on_average(target):
    """One sequence at a time (batch limit 1, no chunking): every step is one prompt's prefill or one
    sequence's verify step, so steps = requests + decode steps and the decode steps emitted Σ(o − 1)
    tokens. 300 requests of 1,000 outputs take ≈ 300 · 999/2.952 ≈ 101,500 decode steps; the standard
    error of the mean emitted per step is ≈ √1.42/√101,500 ≈ 0.0037 (0.13 % of E), and the last step of
    each request wastes at most k tokens (≈ 0.3 % of E at 999 tokens). Tolerance: 1 %."""
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    trace = _trace(300, spacing_s=100.0, prompt=64, output=1000)
    times = simulate_requests(spec, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000, seed=3)
    decode_steps = times.steps - 300
    assert 300 * 999 / decode_steps == pytest.approx(spec.tokens_per_step, rel=0.01)


def test_simulated_tpot_falls_by_e_when_the_step_is_a_weight_read(target):
    """At batch 1 both steps are the weight read (≈ 10.5 ms at these contexts), so the measured TPOT
    with speculation is the plain one over E = 2.952, within the 1 % of the test above."""
    trace = _trace(50, spacing_s=100.0, prompt=64, output=1000)
    plain = simulate_requests(target, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000)
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    fast = simulate_requests(spec, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000, seed=5)
    ratio = np.nanmean(fast.tpot_s) / np.nanmean(plain.tpot_s)
    assert ratio == pytest.approx(1 / 2.952, rel=0.01)
    np.testing.assert_array_equal(fast.first_token_s - fast.arrival_s, plain.first_token_s - plain.arrival_s)


def test_speculative_simulation_is_seeded_and_conserves_requests(target):
    """Same seed, same times; every request finishes, with chunked prefill and several in the batch."""
    spec = speculative_step_model(
        target, head_speculation(LLAMA_2_70B, FP16_PRECISION, 4, method="eagle", draft_tokens=2, acceptance_rate=0.7)
    )
    trace = _trace(400, spacing_s=0.05, prompt=700, output=120)
    serving = Serving(batch_limit=16, chunk_tokens=512)
    first = simulate_requests(spec, trace, serving, kv_capacity_tokens=500_000, seed=11)
    again = simulate_requests(spec, trace, serving, kv_capacity_tokens=500_000, seed=11)
    np.testing.assert_array_equal(first.finish_s, again.finish_s)
    assert np.all(np.isfinite(first.finish_s))
    assert np.all(first.finish_s > first.first_token_s)


def test_a_speculating_replica_prefills_only_what_its_prefix_cache_lacks(target):
    """A prompt of 2,000 tokens that finds 1,984 cached (planner/simulator_prefix.py's `cached`) prefills 16
    on the speculating replica exactly as on the plain one: the same first-token times, far below the
    uncached prompt's; and the cached tokens are not reserved again (every request still finishes)."""
    trace = _trace(50, spacing_s=100.0, prompt=2000, output=200)
    cached = [1984] * 50
    spec = speculative_step_model(target, _verify_only(3, 0.8))
    plain = simulate_requests(target, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000, cached=cached)
    fast = simulate_requests(spec, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000, seed=5, cached=cached)
    uncached = simulate_requests(spec, trace, Serving(batch_limit=1), kv_capacity_tokens=500_000, seed=5)
    np.testing.assert_array_equal(fast.first_token_s - fast.arrival_s, plain.first_token_s - plain.arrival_s)
    assert np.all(fast.first_token_s - fast.arrival_s < 0.5 * (uncached.first_token_s - uncached.arrival_s))
    # a KV capacity of one uncached request (2,200 tokens) admits a cached one beside it only when cached tokens are not reserved
    tight = simulate_requests(
        spec,
        _trace(2, spacing_s=0.0, prompt=2000, output=200),
        Serving(batch_limit=2),
        kv_capacity_tokens=2_300,
        seed=5,
        cached=[1984, 1984],
    )
    assert tight.admission_s[1] == tight.admission_s[0]
    assert np.all(np.isfinite(tight.finish_s))


# --- the queueing model -----------------------------------------------------------------------------------


def test_queueing_model_sees_decode_as_o_over_e_verify_steps_and_agrees_with_the_simulator(target):
    """At 0.5 requests/s (≈ 0.6 sequences running with speculation) both models see the weight read
    dominate: TPOT with an EAGLE head (k 3, α 0.8, E 2.952) is ≈ 1/E of the plain one plus the head's
    passes (≈ 0.36 of it at batch 1, `tpot_ratio`). The queueing model's p50 TPOT is within 10 % of the
    simulator's (3,000 requests) with speculation, as it is without."""
    workload = Workload(
        arrival_rate_rps=0.5,
        prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
        output_tokens=LognormalLength(mean_tokens=300, p99_tokens=1200),
    )
    serving = Serving(batch_limit=256, chunk_tokens=2048)
    head = head_speculation(LLAMA_2_70B, FP16_PRECISION, 4, method="eagle", draft_tokens=3, acceptance_rate=0.8)
    spec = speculative_step_model(target, head)
    plain_q = predict(target, workload, serving, kv_capacity_tokens=400_000)
    spec_q = predict(spec, workload, serving, kv_capacity_tokens=400_000)
    spec_s = simulate(spec, workload, serving, kv_capacity_tokens=400_000, requests=3000, seed=1)
    assert spec_q.tpot is not None and plain_q.tpot is not None
    assert spec_q.tpot.p50_s / plain_q.tpot.p50_s == pytest.approx(tpot_ratio(spec, batch=1, context_tokens=1150), rel=0.05)
    assert spec_q.tpot.p50_s == pytest.approx(spec_s.tpot_s.p50, rel=0.10)
    assert spec_q.e2e is not None and spec_q.e2e.p99_s < plain_q.e2e.p99_s / 2  # type: ignore[union-attr]


def test_heads_hold_what_they_add_and_read_what_they_use():
    """EAGLE holds one layer and its 2h×h FC (868.4e6 + 134.2e6 params, 2.005 GB in fp16) but reads the
    shared 32,000 × 8,192 LM head too each pass; Medusa's k = 3 heads (h² + V·h = 329.3e6 params each) are all
    resident, one read per pass."""
    eagle = head_speculation(LLAMA_2_70B, FP16_PRECISION, 4, method="eagle", draft_tokens=3, acceptance_rate=0.8)
    layer = (70e9 - 2 * 32_000 * 8_192) / 80
    assert eagle.resident_bytes == pytest.approx((layer + 2 * 8192**2) * 2)
    assert eagle.draft_weight_bytes - eagle.resident_bytes == pytest.approx(32_000 * 8_192 * 2)
    medusa = head_speculation(LLAMA_2_70B, FP16_PRECISION, 4, method="medusa", draft_tokens=3, acceptance_rate=0.6)
    assert medusa.draft_weight_bytes == pytest.approx((8192**2 + 32_000 * 8192) * 2)
    assert medusa.resident_bytes == pytest.approx(3 * medusa.draft_weight_bytes)
    assert (medusa.draft_kv_bytes_per_token, medusa.draft_attention_flops_per_context_token) == (0.0, 0.0)
