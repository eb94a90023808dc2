"""The disaggregated simulator against a hand-worked trace and against the analytic model."""

from __future__ import annotations

import numpy as np
import pytest

from bench.disagg_fidelity import KV_CAPACITY_TOKENS, LINK, LLAMA2_70B_4XH100, capacity_rps, workload
from planner.disagg import DecodePool, KvLink, PrefillPool, predict_disagg
from planner.errors import PlannerInputError
from planner.simulator_disagg import simulate_disagg
from planner.workload import FixedLength, Workload
from tests.planner.test_disagg_physics import ONE_MS_PER_TOKEN, TEN_MS_PER_STEP

SLOW_LINK = KvLink(name="test", bytes_per_s_per_gpu=1e4, latency_s=0.0, source="test vector")


def test_a_request_alone_takes_prefill_plus_transfer_then_one_step_per_token() -> None:
    """Arrivals 10 s apart (c_a = 0.05) never meet: prefill 100 tokens × 1 ms = 0.1 s, transfer 100 B at
    10 kB/s = 0.01 s ⇒ TTFT 0.11 s; 100 decode steps of 10 ms (batch of one, its ~150 KV bytes at 1e12 B/s
    add 1.5e-10 s) ⇒ TPOT 0.01 s, E2E 1.11 s."""
    w = Workload(
        arrival_rate_rps=0.1, prompt_tokens=FixedLength(tokens=100), output_tokens=FixedLength(tokens=101), arrival_cv=0.05
    )
    sim = simulate_disagg(
        PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1),
        DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=8, kv_capacity_tokens=1e6),
        w,
        link=SLOW_LINK,
        kv_bytes_per_token=1.0,
        prefill_token_budget=4096,
        requests=50,
        warmup_fraction=0.0,
    )
    assert sim.ttft_s == pytest.approx(np.full(50, 0.11), rel=1e-9)
    assert sim.tpot_s == pytest.approx(np.full(50, 0.01), rel=1e-6)
    assert sim.e2e_s == pytest.approx(np.full(50, 1.11), rel=1e-6)


def test_decode_slots_cap_the_batch_and_queue_admissions() -> None:
    """One decode slot (KV for ⌊201/201⌋ = 1 context): requests decode one at a time, so with arrivals
    every 0.5 s and a 1.01 s hold the E2E grows request after request (admission queues), while each
    request's TPOT stays the batch-of-one 10 ms step."""
    w = Workload(
        arrival_rate_rps=2.0, prompt_tokens=FixedLength(tokens=100), output_tokens=FixedLength(tokens=101), arrival_cv=0.05
    )
    sim = simulate_disagg(
        PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1),
        DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=8, kv_capacity_tokens=201),
        w,
        link=SLOW_LINK,
        kv_bytes_per_token=1.0,
        prefill_token_budget=4096,
        requests=20,
        warmup_fraction=0.0,
    )
    assert sim.tpot_s == pytest.approx(np.full(20, 0.01), rel=1e-6)
    assert np.all(np.diff(sim.e2e_s) > 0.4)  # each waits ≈ 1.01 − 0.5 s longer than the one before


def test_simulation_agrees_with_the_analytic_model_inside_its_reliable_region() -> None:
    """Llama-2-70B 1P2D, 512-token prompts at 0.6 of capacity (prefill ρ 0.6): the fidelity table
    (docs/disaggregation.md) has the analytic p99 TTFT +4 %, TPOT −2 %, E2E −2 % from the simulation;
    the reliable region's bounds are TTFT in [−10 %, +35 %], TPOT and E2E within ±10 %."""
    prefill = PrefillPool(step_model=LLAMA2_70B_4XH100, replicas=1, tp=4)
    decode = DecodePool(step_model=LLAMA2_70B_4XH100, replicas=2, batch_limit=128, kv_capacity_tokens=KV_CAPACITY_TOKENS, tp=4)
    w = workload(0.6 * capacity_rps(prefill, decode, workload(1.0, 512)), 512)
    a = predict_disagg(prefill, decode, w, link=LINK, kv_bytes_per_token=327_680.0)
    ttft, tpot, e2e = simulate_disagg(
        prefill, decode, w, link=LINK, kv_bytes_per_token=327_680.0, prefill_token_budget=8192, requests=6000
    ).percentile(99.0)
    assert -0.10 <= a.ttft_s / ttft - 1.0 <= 0.35
    assert a.tpot_s == pytest.approx(tpot, rel=0.10)
    assert a.e2e_s == pytest.approx(e2e, rel=0.10)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(PlannerInputError):
        simulate_disagg(
            PrefillPool(step_model=ONE_MS_PER_TOKEN, replicas=1),
            DecodePool(step_model=TEN_MS_PER_STEP, replicas=1, batch_limit=8, kv_capacity_tokens=1e6),
            Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1), output_tokens=FixedLength(tokens=1)),
            link=SLOW_LINK,
            kv_bytes_per_token=1.0,
            prefill_token_budget=0,
        )
