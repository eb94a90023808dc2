"""TTFT with a chunk budget: the prompts behind a request share its last step; the budget wait counts one stall once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.queueing import predict, saturation_rps
from planner.queueing_latency import _percentiles
from planner.simulator import simulate
from planner.workload import FixedLength, LognormalLength, Serving, Workload
from tests.planner.test_queueing_model import KV_TOKENS, LLAMA70B_4XH100

LONG_PROMPTS = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
    output_tokens=LognormalLength(mean_tokens=200, p99_tokens=800),
)
BIG_BUDGET = Serving(batch_limit=128, chunk_tokens=4096)


def test_long_prompts_with_a_large_budget_agree_with_the_simulator() -> None:
    """A 4,096-token budget holds several 1,000-token (mean) prompts: the step that finishes a long
    prompt also carries the prompts that arrived behind it, up to the budget, and is that much longer.
    Left out, TTFT p99 came out 18 % below the simulator's here (24 % at ρ = 0.3); with it, within
    the 10 % target plus the simulation's CI (±6 % at 20,000 requests)."""
    saturation = saturation_rps(LLAMA70B_4XH100, LONG_PROMPTS, BIG_BUDGET, kv_capacity_tokens=KV_TOKENS)
    load = LONG_PROMPTS.at_rate(0.2 * saturation)
    p = predict(LLAMA70B_4XH100, load, BIG_BUDGET, kv_capacity_tokens=KV_TOKENS)
    sim = simulate(LLAMA70B_4XH100, load, BIG_BUDGET, kv_capacity_tokens=int(KV_TOKENS), requests=20_000, seed=1)
    assert p.reliable and p.ttft is not None
    assert p.ttft.p99_s == pytest.approx(sim.ttft_s.p99, rel=0.12)
    assert p.ttft.p90_s == pytest.approx(sim.ttft_s.p90, rel=0.05)


def test_the_share_of_arrivals_that_meet_a_prefill_stall_matches_the_simulator() -> None:
    """Fixed 1,000-token prompts, budget 2,048, ρ = 0.15: an arrival waits for the budget when the step
    in progress carries a prompt — a share of at most ρ_budget = λ·(p/(C − n))·t_full ≈ 8 % of
    arrivals. The model draws that wait and the step in progress from one uniform (the budget is busy
    exactly while such a step runs), so the share of TTFTs beyond 1.5 × the lone prefill step, read off
    the model's percentiles, matches the simulator's, and so do p90 (below the stall) and p99 (inside it)."""
    serving = Serving(batch_limit=64, chunk_tokens=2048)
    chat = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1000), output_tokens=FixedLength(tokens=200))
    lam = 0.15 * saturation_rps(LLAMA70B_4XH100, chat, serving, kv_capacity_tokens=KV_TOKENS)
    p = predict(LLAMA70B_4XH100, chat.at_rate(lam), serving, kv_capacity_tokens=KV_TOKENS)
    assert p.ttft is not None and p.queueing is not None
    n = p.queueing.mean_occupancy
    prefill_s = LLAMA70B_4XH100.step_s(n + 1000, n * 1100, n * 1100 + 1000 * 1001 / 2)  # ≈ 36 ms
    full_step_s = LLAMA70B_4XH100.step_s(2048, n * 1100, n * 1100 + (2048 - n) * 1024.5)
    busy = lam * 1000 / (2048 - n) * full_step_s
    sim = simulate(LLAMA70B_4XH100, chat.at_rate(lam), serving, kv_capacity_tokens=int(KV_TOKENS), requests=10_000, seed=2)
    simulated_share = 1.0 - np.searchsorted(np.sort(sim.detail.ttft_s), 1.5 * prefill_s) / sim.detail.ttft_s.size
    percentiles = np.arange(80.0, 99.9, 0.25)
    model_ttft = [
        predict(LLAMA70B_4XH100, chat.at_rate(lam), serving, kv_capacity_tokens=KV_TOKENS, percentile=q).ttft.at_percentile_s  # type: ignore[union-attr]
        for q in percentiles
    ]
    model_share = 1.0 - percentiles[np.searchsorted(model_ttft, 1.5 * prefill_s)] / 100.0
    assert 0.03 < simulated_share <= busy < 0.1
    assert model_share == pytest.approx(simulated_share, rel=0.3)
    assert p.ttft.p90_s == pytest.approx(sim.ttft_s.p90, rel=0.05)
    assert p.ttft.p99_s == pytest.approx(sim.ttft_s.p99, rel=0.10)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e3), min_size=1, max_size=200), st.floats(min_value=0.5, max_value=99.9))
def test_percentiles_match_numpy(values: list[float], q: float) -> None:
    """The model's own percentile helper is `np.percentile`'s default (linear) method without its overhead."""
    samples = np.array(values)
    assert _percentiles(samples, (50.0, 99.0, q)) == pytest.approx(np.percentile(samples, [50.0, 99.0, q]), rel=1e-12, abs=1e-12)
