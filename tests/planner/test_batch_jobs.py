"""Batch jobs (planner/batch_jobs.py): hand-computed throughput and sizing vectors, the finish
formula against the simulator, and the plan's promises (deadline met, cost = GPU-hours × price, a
tighter deadline never cheaper, a refusal's relaxation works)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from planner.batch_jobs import (
    BatchJob,
    offline_throughput_rps,
    plan_batch_job,
    simulate_offline,
    size_job,
)
from planner.candidates import Group, Option
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.step_model import StepModel
from planner.workload import FixedLength, LognormalLength
from tests.planner.performance_specs import FP8_PRECISION, FP16_PRECISION, H100_SXM, LLAMA_2_70B

HOUR = 3600.0

# A toy replica whose step is purely memory-bound: reading 1 GB of weights at 1 TB/s is 1 ms, each KV
# token read 1 kB (1 ns), and compute (1 kFLOP per token at 1 PFLOP/s) never exceeds the memory time,
# so with full overlap a step lasts (1e9 + KV tokens · 1e3) / 1e12 s whatever the prefill it carries.
TOY = StepModel(
    dense_weight_bytes=1e9,
    kv_bytes_per_token=1e3,
    flops_per_token=1e3,
    attention_flops_per_context_token=1.0,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e15,
)
TOY_GPU = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=2.0)
TOY_GROUP = Group(
    gpu=TOY_GPU,
    precision=FP16_PRECISION,
    tp=1,
    step_model=TOY,
    kv_capacity_tokens=10_000_000,
    kv_slots=10_000_000 // 110,
    price_usd_per_hour=2.0,
    batch1_decode_s=TOY.step_s(1, 1, 1),
    prefill_quantile_s=1e-3,
)
TOY_OPTION = Option("toy/b8/nochunk", TOY_GROUP, 8, None, 8, 1e9)
# Prompts of 100 tokens, outputs of 10: a decode reads on average d = 100 + E[o(o−1)/2]/E[o−1] = 100 + 45/9 = 105
# tokens of context, so a full batch of 8 steps in (1e9 + 8·105·1e3)/1e12 = 1.00084 ms and each request holds its
# slot for E[o] = 10 steps: X = 8 / (10 · 1.00084e-3) = 799.3286 requests/s.
TOY_X = 8 / (10 * 1.00084e-3)


def _toy_job(requests: int, deadline_s: float | None = None, max_gpus: int | None = None) -> BatchJob:
    return BatchJob(
        requests=requests,
        prompt_tokens=FixedLength(tokens=100),
        output_tokens=FixedLength(tokens=10),
        deadline_s=deadline_s,
        max_gpus=max_gpus,
    )


def test_offline_throughput_is_the_full_batch_rate_by_hand() -> None:
    assert offline_throughput_rps(TOY_OPTION, _toy_job(1000, deadline_s=HOUR)) == pytest.approx(TOY_X, rel=1e-9)
    assert TOY_X == pytest.approx(799.3286, abs=1e-4)


def test_sizing_by_hand() -> None:
    # 1,000,000 requests in 360 s: one replica finishes X·D − c = 287,750.3 → 287,750 requests, so
    # ⌈1e6 / 287,750⌉ = 4 replicas of 250,000; finish (250,000 + 8)/X = 312.7725 s, billed 313 s each:
    # 4 · 313 / 3600 = 0.347778 GPU-hours at $2 = $0.695556 (5 replicas would bill 5 · 251 = 1,255 s > 1,252).
    sizing = size_job(_toy_job(1_000_000, deadline_s=360.0), TOY_X, slots=8, tp=1, price_usd_per_gpu_hour=2.0)
    assert sizing is not None
    assert (sizing.replicas, sizing.gpus, sizing.requests_per_replica) == (4, 4, 250_000)
    assert sizing.finish_s == pytest.approx(250_008 / TOY_X, rel=1e-12)
    assert sizing.finish_s == pytest.approx(312.7725, abs=1e-4)
    assert sizing.billed_s == 313
    assert sizing.gpu_hours == pytest.approx(4 * 313 / 3600, rel=1e-12)
    assert sizing.cost_usd == pytest.approx(0.695556, abs=1e-6)


def test_the_fewest_replicas_are_not_always_the_cheapest() -> None:
    # 10 requests, c = 1, X = 0.01/s: r replicas finish in 100·(⌈10/r⌉ + 1) s. A 400 s deadline needs r ≥ 4
    # (r = 3: 500 s); r = 4 bills 4 · 400 = 1,600 replica-seconds, r = 5 only 5 · 300 = 1,500; r = 6 bills 1,800.
    sizing = size_job(_toy_job(10, deadline_s=400.0), 0.01, slots=1, tp=1, price_usd_per_gpu_hour=3.6)
    assert sizing is not None
    assert (sizing.replicas, sizing.finish_s, sizing.billed_s) == (5, pytest.approx(300.0), 300)
    assert sizing.cost_usd == pytest.approx(5 * 300 / 3600 * 3.6)


def test_sixty_second_minimum_and_gpu_budget() -> None:
    # A GPU budget alone takes the most replicas that fit: 3 GPUs of tp 1 → 3 replicas of ⌈100/3⌉ = 34 requests,
    # (34 + 8)/X = 0.0525 s, billed the 60-second minimum: 3 · 60 / 3600 GPU-hours.
    sizing = size_job(_toy_job(100, max_gpus=3), TOY_X, slots=8, tp=1, price_usd_per_gpu_hour=2.0)
    assert sizing is not None
    assert (sizing.replicas, sizing.requests_per_replica, sizing.billed_s) == (3, 34, 60)
    assert sizing.gpu_hours == pytest.approx(3 * 60 / 3600)
    assert size_job(_toy_job(100, max_gpus=1), TOY_X, slots=8, tp=2, price_usd_per_gpu_hour=2.0) is None  # tp 2 > 1 GPU
    # a deadline shorter than one request plus the drain allowance: (1 + 8)/X = 11.3 ms
    assert size_job(_toy_job(1, deadline_s=0.01), TOY_X, slots=8, tp=1, price_usd_per_gpu_hour=2.0) is None


def test_a_job_needs_a_deadline_or_a_budget() -> None:
    with pytest.raises(PlannerInputError):
        _toy_job(10)
    with pytest.raises(PlannerInputError):
        _toy_job(0, deadline_s=1.0)


def test_simulated_rate_matches_the_hand_rate_and_the_finish_formula_bounds_the_run() -> None:
    simulated = simulate_offline(TOY_OPTION, _toy_job(4000, deadline_s=HOUR), requests=4000, predicted_rps=TOY_X)
    assert simulated.completion_rate_rps == pytest.approx(TOY_X, rel=0.01)
    assert simulated.ci_low_rps is not None and simulated.ci_high_rps is not None
    assert simulated.ci_low_rps <= TOY_X <= simulated.ci_high_rps
    # the whole sample: 500 waves of 8 requests, 10 steps each, finish by (4000 + 8)/X
    assert simulated.makespan_s <= simulated.predicted_makespan_s
    assert simulated.predicted_makespan_s == pytest.approx(4008 / min(TOY_X, simulated.trusted_rps))
    assert simulated.makespan_rate_rps == pytest.approx(4008 / simulated.makespan_s)


def _summaries(requests: int = 2_000_000) -> BatchJob:
    # summarisation: long documents in, short summaries out
    return BatchJob(
        requests=requests,
        prompt_tokens=LognormalLength(mean_tokens=2000, p99_tokens=8000),
        output_tokens=LognormalLength(mean_tokens=300, p99_tokens=1200),
        deadline_s=72 * HOUR,
    )


H100 = dataclasses.replace(H100_SXM, price_usd_per_hour_on_demand=2.69)


def _plan(job: BatchJob, **kwargs: object):  # type: ignore[no-untyped-def]
    return plan_batch_job(job, model=LLAMA_2_70B, gpus=[H100], precisions=[FP16_PRECISION, FP8_PRECISION], **kwargs)


def test_plan_meets_its_deadline_and_costs_its_gpu_hours() -> None:
    plan = _plan(_summaries())
    sizing = plan.sizing
    assert sizing.finish_s <= 72 * HOUR
    assert sizing.cost_usd == pytest.approx(sizing.gpu_hours * 2.69, rel=1e-12)
    assert sizing.gpus == sizing.replicas * plan.option.group.tp
    assert plan.simulated is not None and plan.verifications >= 1
    assert plan.throughput_rps == min(
        plan.analytic_throughput_rps, plan.simulated.completion_rate_rps, plan.simulated.makespan_rate_rps
    )
    # the simulated sample finishes within the finish formula
    assert plan.simulated.makespan_s <= plan.simulated.predicted_makespan_s
    assert plan.usd_per_million_output_tokens == pytest.approx(sizing.cost_usd / (2_000_000 * 300) * 1e6)
    # the search skipped most candidates on their cost floors
    assert plan.candidates_evaluated < plan.candidates_total


def test_a_tighter_deadline_never_costs_less() -> None:
    costs = []
    for hours in (72.0, 24.0, 6.0, 1.0):
        plan = _plan(dataclasses.replace(_summaries(), deadline_s=hours * HOUR))
        assert plan.sizing.finish_s <= hours * HOUR
        costs.append(plan.sizing.cost_usd)
    assert costs == sorted(costs)
    assert costs[-1] > costs[0]  # one hour needs many replicas, each billing its drain


def test_gpu_budget_infeasible_deadline_names_working_relaxations() -> None:
    job = dataclasses.replace(_summaries(), deadline_s=1 * HOUR, max_gpus=8)
    with pytest.raises(InfeasiblePlanError) as caught:
        _plan(job, verify=False)
    extensions = caught.value.extensions
    assert extensions["constraint"] == "deadline_h"
    by_name = {r["constraint"]: r for r in extensions["relaxations"]}
    later, more = by_name["workload.deadline_h"], by_name["constraints.max_gpus"]
    assert later["value"] > 1.0 and more["value"] > 8
    # each relaxation, applied, plans
    assert _plan(dataclasses.replace(job, deadline_s=later["value"] * HOUR * (1 + 1e-9)), verify=False).sizing.gpus <= 8
    assert _plan(dataclasses.replace(job, max_gpus=int(more["value"])), verify=False).sizing.finish_s <= HOUR


def test_budget_alone_uses_the_budget() -> None:
    plan = _plan(dataclasses.replace(_summaries(), deadline_s=None, max_gpus=16))
    assert plan.sizing.gpus <= 16
    assert plan.sizing.replicas == 16 // plan.option.group.tp
    assert plan.binding == "max_gpus"
    assert math.isfinite(plan.sizing.finish_s)
