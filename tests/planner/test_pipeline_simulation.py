"""The simulator and the queueing model on one pipeline step model: the fold (planner/pipeline.py) is the
only place pp enters, so the verification that holds for a tp replica holds for a tp × pp one."""

from __future__ import annotations

import pytest

from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.queueing import predict, saturation_rps
from planner.simulator import simulate
from planner.specs import Efficiency
from planner.workload import LognormalLength, Serving, Workload
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B

COMM = Efficiency(name="comm", include_comm=True)
CHAT = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
    output_tokens=LognormalLength(mean_tokens=250, p99_tokens=1000),
)


def test_simulator_and_queueing_agree_on_a_pp2_replica():
    """Llama-2-70B fp16, tp=4 × pp=2 on H100 with communication, batch 64, chunks of 2,048, at ρ = 0.5:
    the analytic p99 TTFT and TPOT lie within 10 % of the simulator's (docs/queueing-fidelity.md's bar;
    measured 2026-12-04: −7.5 % and −5.5 %). The model does not call itself reliable there: 2,048-token chunks
    split 9 % of these prompts, outside the region docs/queueing-fidelity.md validated (split prompts)."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, COMM, pp=2)
    capacity = kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, COMM, pp=2)
    serving = Serving(batch_limit=64, chunk_tokens=2048)
    workload = CHAT.at_rate(0.5 * saturation_rps(sm, CHAT, serving, kv_capacity_tokens=capacity))
    analytic = predict(sm, workload, serving, kv_capacity_tokens=capacity)
    simulated = simulate(sm, workload, serving, kv_capacity_tokens=capacity, requests=6000, seed=3)
    assert not analytic.reliable and analytic.fidelity_note is not None and "split" in analytic.fidelity_note
    assert analytic.ttft is not None and analytic.tpot is not None
    assert simulated.ttft_s.p99 is not None and simulated.tpot_s.p99 is not None
    assert analytic.ttft.at_percentile_s == pytest.approx(simulated.ttft_s.p99, rel=0.10)
    assert analytic.tpot.at_percentile_s == pytest.approx(simulated.tpot_s.p99, rel=0.10)
    # the pipeline's TPOT floor: one decode step of pp micro-batches is at least the weight read of tp GPUs
    assert simulated.tpot_s.p99 >= 140e9 / (4 * 3.35e12)
