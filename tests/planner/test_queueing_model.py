"""The analytic replica model: Little's law, saturation, monotonicity, SLO search, and agreement with the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.queueing import max_rps_at_slo, predict, rho_curve, saturation_rps, step_seconds
from planner.simulator import simulate
from planner.step_model import StepModel
from planner.workload import FixedLength, LognormalLength, Serving, Slo, Workload

#: Llama-2-70B fp16 on four H100 SXM, ideal roofline (docs/design.md test vectors):
#: 140 GB of weights, 327,680 B of KV per token, 13.4 TB/s, 3.956 PFLOP/s.
LLAMA70B_4XH100 = StepModel(
    dense_weight_bytes=140e9,
    kv_bytes_per_token=327_680.0,
    flops_per_token=2 * 70e9,
    attention_flops_per_context_token=4 * 80 * 64 * 128,
    memory_bandwidth_bytes_per_s=4 * 3.35e12,
    compute_flops_per_s=4 * 989e12,
)
#: (320 GB − 140 GB) / 327,680 B per token.
KV_TOKENS = 180e9 / 327_680.0

CHAT = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1000), output_tokens=FixedLength(tokens=200))
LONG_TAILED = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
    output_tokens=LognormalLength(mean_tokens=200, p99_tokens=800),
)
BATCH64 = Serving(batch_limit=64)


def at_utilisation(workload: Workload, serving: Serving, rho: float) -> Workload:
    return workload.at_rate(
        rho * saturation_rps(LLAMA70B_4XH100, workload, serving, kv_capacity_tokens=KV_TOKENS) * serving.replicas
    )


def test_vectorised_step_time_matches_step_model() -> None:
    cases = [(1, 4096, 4096), (32, 32 * 4096, 32 * 4096), (2000, 0, 2000 * 2001 // 2), (0, 0, 0)]
    new, kv, att = (np.array(col, dtype=float) for col in zip(*cases, strict=True))
    expected = [LLAMA70B_4XH100.step_s(*case) for case in cases]
    assert step_seconds(LLAMA70B_4XH100, new, kv, att) == pytest.approx(expected, rel=1e-12)
    # The docs/design.md test vectors: batch 1 and 32 at 4,096 context.
    assert expected[0] == pytest.approx(10.55e-3, rel=1e-3)
    assert expected[1] == pytest.approx(13.65e-3, rel=1e-3)


def test_vanishing_load_is_one_prefill_and_batch_one_decodes() -> None:
    """At λ → 0 nothing waits and nothing interferes: TTFT is the 1,000-token prefill step alone,
    TPOT the batch-1 decode step at the mean context (1,000 + 100 tokens, one step of the two reads)."""
    p = predict(LLAMA70B_4XH100, CHAT.at_rate(0.0), BATCH64, kv_capacity_tokens=KV_TOKENS)
    prefill_s = LLAMA70B_4XH100.step_s(1000, 0, 1000 * 1001 / 2)  # 140 TFLOP / 3.956 PFLOP/s + attention ≈ 35.5 ms
    assert p.ttft is not None and p.tpot is not None
    assert p.ttft.p99_s == pytest.approx(prefill_s, rel=1e-9)
    assert p.tpot.p50_s == pytest.approx(LLAMA70B_4XH100.step_s(1, 1100, 1100), rel=1e-3)
    assert p.utilisation == 0.0 and not p.unstable


@pytest.mark.parametrize("rho", [0.2, 0.6, 0.9])
def test_littles_law_holds_inside_the_model(rho: float) -> None:
    p = predict(LLAMA70B_4XH100, at_utilisation(CHAT, BATCH64, rho), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert p.queueing is not None
    occupancy, rate, time_in_service = p.queueing.littles_law
    assert occupancy == pytest.approx(rate * time_in_service, rel=1e-12)
    assert rate == pytest.approx(rho * p.saturation_rps, rel=1e-9)
    assert p.utilisation == pytest.approx(rho, rel=1e-9)
    assert 0.0 < occupancy < p.queueing.slots
    # Time in service is at least the output's decode steps at batch 1.
    assert time_in_service > 199 * LLAMA70B_4XH100.step_s(1, 1100, 1100)


def test_saturation_fills_the_slots_and_kv_can_bind() -> None:
    """Batch 64 × 1,200 tokens fits the 549,316-token cache; batch 512 does not: ⌊549,316 / 1,200⌋ = 457 slots."""
    small = predict(LLAMA70B_4XH100, at_utilisation(CHAT, BATCH64, 0.5), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert small.queueing is not None and small.queueing.slots == 64 and small.queueing.slots_limited_by == "batch_limit"
    big = Serving(batch_limit=512)
    p = predict(LLAMA70B_4XH100, at_utilisation(CHAT, big, 0.5), big, kv_capacity_tokens=KV_TOKENS)
    assert p.queueing is not None
    assert p.queueing.slots == math.floor(KV_TOKENS / 1200) and p.queueing.slots_limited_by == "kv_cache"
    # More slots sustain more traffic (decode is memory-bound: the weight read is shared).
    assert p.saturation_rps > small.saturation_rps


def test_random_split_divides_the_rate() -> None:
    two = Serving(replicas=2, batch_limit=64)
    one = predict(LLAMA70B_4XH100, CHAT.at_rate(3.0), BATCH64, kv_capacity_tokens=KV_TOKENS)
    split = predict(LLAMA70B_4XH100, CHAT.at_rate(6.0), two, kv_capacity_tokens=KV_TOKENS)
    assert split.arrival_rate_rps == pytest.approx(3.0)
    assert split.ttft == one.ttft and split.tpot == one.tpot


def test_unstable_load_is_an_answer() -> None:
    saturation = saturation_rps(LLAMA70B_4XH100, CHAT, BATCH64, kv_capacity_tokens=KV_TOKENS)
    for rate in (saturation, 1.5 * saturation):
        p = predict(LLAMA70B_4XH100, CHAT.at_rate(rate), BATCH64, kv_capacity_tokens=KV_TOKENS)
        assert p.unstable
        assert p.ttft is None and p.tpot is None and p.e2e is None
        assert p.saturation_rps == pytest.approx(saturation)
        assert p.utilisation >= 1.0


# Derandomized: hypothesis found TTFT p99 falling by ≈ 0.5 % with chunked prefill at low ρ (the
# regression below), so a random draw could fail CI on that known defect rather than a new one.
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    rho_low=st.floats(min_value=0.02, max_value=0.93),
    step=st.floats(min_value=0.005, max_value=0.05),
    long_tailed=st.booleans(),
    chunked=st.booleans(),
)
def test_p99_never_falls_as_rate_rises(rho_low: float, step: float, long_tailed: bool, chunked: bool) -> None:
    workload = LONG_TAILED if long_tailed else CHAT
    serving = Serving(batch_limit=64, chunk_tokens=1024 if chunked else None)
    low = predict(LLAMA70B_4XH100, at_utilisation(workload, serving, rho_low), serving, kv_capacity_tokens=KV_TOKENS)
    high = predict(LLAMA70B_4XH100, at_utilisation(workload, serving, rho_low + step), serving, kv_capacity_tokens=KV_TOKENS)
    for metric in ("ttft", "tpot", "e2e"):
        a, b = getattr(low, metric), getattr(high, metric)
        assert b.p99_s >= a.p99_s * (1 - 1e-9), metric


# Regression: with chunked prefill TTFT p99 fell by ≈ 0.5 % here (nearest-grid-row step in progress;
# a sample turning budget-queued got the budget wait alone, shorter than the step it waited out).
def test_chunked_ttft_p99_does_not_fall_at_low_utilisation() -> None:
    serving = Serving(batch_limit=64, chunk_tokens=1024)
    low = predict(LLAMA70B_4XH100, at_utilisation(CHAT, serving, 0.040), serving, kv_capacity_tokens=KV_TOKENS)
    high = predict(LLAMA70B_4XH100, at_utilisation(CHAT, serving, 0.045), serving, kv_capacity_tokens=KV_TOKENS)
    assert low.ttft is not None and high.ttft is not None
    assert high.ttft.p99_s >= low.ttft.p99_s * (1 - 1e-9)


def test_max_rps_at_slo_is_the_edge_of_the_slo() -> None:
    slo = Slo(ttft_s=0.5, tpot_s=0.025)
    rate = max_rps_at_slo(LLAMA70B_4XH100, CHAT, BATCH64, slo, kv_capacity_tokens=KV_TOKENS)
    saturation = saturation_rps(LLAMA70B_4XH100, CHAT, BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert 0.0 < rate < saturation
    meets = predict(LLAMA70B_4XH100, CHAT.at_rate(rate), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert meets.ttft is not None and meets.tpot is not None
    assert meets.ttft.p99_s <= 0.5 and meets.tpot.p99_s <= 0.025
    over = predict(LLAMA70B_4XH100, CHAT.at_rate(rate * 1.01), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert over.ttft is not None and over.tpot is not None
    assert over.ttft.p99_s > 0.5 or over.tpot.p99_s > 0.025


def test_max_rps_at_slo_tighter_slo_means_less_rate() -> None:
    loose = max_rps_at_slo(LLAMA70B_4XH100, CHAT, BATCH64, Slo(e2e_s=8.0), kv_capacity_tokens=KV_TOKENS)
    tight = max_rps_at_slo(LLAMA70B_4XH100, CHAT, BATCH64, Slo(e2e_s=5.0), kv_capacity_tokens=KV_TOKENS)
    assert 0.0 < tight < loose


def test_tpot_below_the_batch_one_decode_step_is_infeasible() -> None:
    """The batch-1 decode step at 1,100 tokens of context is ≈ 10.47 ms: a 10 ms TPOT target can never be met."""
    batch_one_s = LLAMA70B_4XH100.step_s(1, 1100, 1100)
    assert batch_one_s > 0.010
    with pytest.raises(InfeasiblePlanError) as caught:
        max_rps_at_slo(LLAMA70B_4XH100, CHAT, BATCH64, Slo(tpot_s=0.010), kv_capacity_tokens=KV_TOKENS)
    assert caught.value.extensions["constraint"] == "tpot"
    assert caught.value.extensions["predicted_s"] == pytest.approx(batch_one_s, rel=1e-2)


def test_a_request_larger_than_the_cache_is_infeasible() -> None:
    with pytest.raises(InfeasiblePlanError) as caught:
        max_rps_at_slo(LLAMA70B_4XH100, CHAT, BATCH64, Slo(ttft_s=1.0), kv_capacity_tokens=1000)
    assert caught.value.extensions["constraint"] == "kv_cache"


def test_chunked_prefill_lowers_tpot_p99_when_prefill_heavy() -> None:
    """4,000-token prompts, 50-token outputs: without chunking a whole prompt (≈ 145 ms of compute) lands
    in one step that every running sequence waits for; a 1,024-token budget spreads it."""
    heavy = Workload(arrival_rate_rps=6.0, prompt_tokens=FixedLength(tokens=4000), output_tokens=FixedLength(tokens=50))
    whole = predict(LLAMA70B_4XH100, heavy, Serving(batch_limit=32), kv_capacity_tokens=KV_TOKENS)
    chunked = predict(LLAMA70B_4XH100, heavy, Serving(batch_limit=32, chunk_tokens=1024), kv_capacity_tokens=KV_TOKENS)
    assert whole.tpot is not None and chunked.tpot is not None
    assert chunked.tpot.p99_s < 0.8 * whole.tpot.p99_s


def test_rho_curve_rises_and_includes_the_operating_point() -> None:
    workload = at_utilisation(CHAT, BATCH64, 0.63)
    points = rho_curve(LLAMA70B_4XH100, workload, BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert any(p.utilisation == pytest.approx(0.63, abs=1e-6) for p in points)
    ttft = [p.ttft_s for p in points]
    assert all(t is not None for t in ttft)
    assert ttft == sorted(ttft)
    with_curve = predict(LLAMA70B_4XH100, workload, BATCH64, kv_capacity_tokens=KV_TOKENS, curve=True)
    assert with_curve.queueing is not None and with_curve.queueing.rho_curve == points


def test_invalid_percentile_and_capacity_raise() -> None:
    with pytest.raises(PlannerInputError):
        predict(LLAMA70B_4XH100, CHAT, BATCH64, kv_capacity_tokens=KV_TOKENS, percentile=100.0)
    with pytest.raises(PlannerInputError):
        predict(LLAMA70B_4XH100, CHAT, BATCH64, kv_capacity_tokens=0.0)


@pytest.mark.parametrize(
    ("workload", "serving", "rho"),
    [
        (CHAT, BATCH64, 0.3),
        (CHAT, Serving(batch_limit=64, chunk_tokens=2048), 0.3),
        (LONG_TAILED, Serving(batch_limit=32), 0.5),
    ],
)
def test_agrees_with_the_simulator_at_moderate_load(workload: Workload, serving: Serving, rho: float) -> None:
    """Points inside the validated region; short simulations (6,000 requests, CI a few per cent): within 12 %."""
    load = at_utilisation(workload, serving, rho)
    p = predict(LLAMA70B_4XH100, load, serving, kv_capacity_tokens=KV_TOKENS)
    sim = simulate(LLAMA70B_4XH100, load, serving, kv_capacity_tokens=int(KV_TOKENS), requests=6000, seed=1)
    assert p.reliable
    for metric in ("ttft", "tpot", "e2e"):
        analytic = getattr(p, metric).p99_s
        simulated = getattr(sim, f"{metric}_s").p99
        assert analytic == pytest.approx(simulated, rel=0.12), metric
    assert p.queueing is not None
    assert p.queueing.mean_occupancy == pytest.approx(sim.mean_occupancy, rel=0.1)


def test_predictions_outside_the_validated_region_are_flagged() -> None:
    """At ρ = 0.8 the 64-slot batch is full for a few per cent of arrivals and prefill stalls make the
    occupancy bursty: the prediction says so and names the reason (the service simulates there)."""
    p = predict(LLAMA70B_4XH100, at_utilisation(CHAT, BATCH64, 0.8), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert not p.reliable
    assert p.fidelity_note is not None and "simulator" in p.fidelity_note
    assert p.queueing is not None and p.queueing.wait_probability > 1e-3
    low = predict(LLAMA70B_4XH100, at_utilisation(CHAT, BATCH64, 0.2), BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert low.reliable and low.fidelity_note is None
    beyond = predict(
        LLAMA70B_4XH100,
        at_utilisation(LONG_TAILED, Serving(batch_limit=32), 0.9),
        Serving(batch_limit=32),
        kv_capacity_tokens=KV_TOKENS,
    )
    assert not beyond.reliable and beyond.fidelity_note is not None and "utilisation" in beyond.fidelity_note


def test_non_poisson_arrivals_are_outside_the_validated_region() -> None:
    """Burstier arrivals (c_a = 2) or round-robin's smoother per-replica stream (c_a² = 1/r) were not in the
    fidelity grid: the prediction is returned but flagged."""
    bursty = at_utilisation(CHAT, BATCH64, 0.2)
    bursty = Workload(
        arrival_rate_rps=bursty.arrival_rate_rps,
        prompt_tokens=CHAT.prompt_tokens,
        output_tokens=CHAT.output_tokens,
        arrival_cv=2.0,
    )
    p = predict(LLAMA70B_4XH100, bursty, BATCH64, kv_capacity_tokens=KV_TOKENS)
    assert not p.reliable and p.fidelity_note is not None and "Poisson" in p.fidelity_note
    round_robin = Serving(replicas=2, batch_limit=64, router="round_robin")
    q = predict(LLAMA70B_4XH100, CHAT.at_rate(2 * bursty.arrival_rate_rps), round_robin, kv_capacity_tokens=KV_TOKENS)
    assert q.queueing is not None and q.queueing.arrival_cv == pytest.approx(math.sqrt(0.5))
    assert not q.reliable
