"""Separate prefill and decode pools in pipeline stages, where no node holds the model (Llama-3.1-405B BF16 on H100):
which settings are offered, how a prefill replica of pp stages queues, and the plan the pools make."""

from __future__ import annotations

import math

import pytest

from planner.disagg import SCALE_OUT_LINKS, PrefillPool, prefill_queue, prefill_s, prefill_service_moments
from planner.errors import InfeasiblePlanError
from planner.pipeline import PP_DEGREES, lone_prefill_s
from planner.plan_disagg import plan_disaggregated
from planner.plan_disagg_candidates import pool_settings, prefill_candidate
from tests.planner.performance_specs import LLAMA_2_70B
from tests.planner.test_pipeline_search import H100, LLAMA_405B, PAIR, SLO, WORKLOAD

LINK = SCALE_OUT_LINKS["connectx7_400g"]


def test_stages_are_offered_only_where_no_node_holds_the_model():
    """405B BF16 (810 GB) fits no in-node tp of 80 GB H100s (8 × 72 GB = 576 GB after the 10 % reserve), so the pools
    get tp × pp settings: every pipeline of 16 GPUs or more (1,152 GB) holds it — tp 8 × pp 2, 4, 8, tp 4 × pp 4, 8 and
    tp 2 × pp 8 — and none of 8 GPUs does. Llama-2-70B fits tp 2 and up in a node: no stages are offered for it."""
    staged = {(s.tp, s.pp) for s in pool_settings([H100], LLAMA_405B, [PAIR], [1, 2, 4, 8], PP_DEGREES)}
    assert all(pp > 1 for _, pp in staged)
    assert {(8, 2), (8, 4), (8, 8), (4, 4), (4, 8), (2, 8)} == staged
    assert pool_settings([H100], LLAMA_405B, [PAIR], [1, 2, 4, 8]) == []  # the default (1,): none, as before
    dense = pool_settings([H100], LLAMA_2_70B, [PAIR], [1, 2, 4, 8], PP_DEGREES)
    assert dense and all(s.pp == 1 for s in dense)


def test_a_prefill_replica_of_pp_stages_serves_pp_prompts_at_once():
    """tp 8 × pp 2: each prompt takes `lone_prefill_s` (both stages one after the other) and the replica keeps 2 in
    flight, so c replicas are an M/G/(2c) queue of those service times. At 8 req/s the prefill candidate's ρ is
    λ·E[S]/(2c), and one replica fewer would leave the queue unstable or past the budget."""
    [setting] = [s for s in pool_settings([H100], LLAMA_405B, [PAIR], [8], PP_DEGREES) if s.pp == 2]
    p_q = WORKLOAD.prompt_tokens.quantile(0.99)
    assert prefill_s(setting.prefill_model, p_q) == pytest.approx(lone_prefill_s(setting.step_model, 2, p_q), rel=1e-12)
    budget = 0.7 * SLO.ttft_s
    candidate = prefill_candidate(setting, WORKLOAD, budget, 0.99)
    assert candidate is not None and candidate.pp == 2 and candidate.gpus == 16 * candidate.replicas
    mean_s, _ = prefill_service_moments(setting.prefill_model, WORKLOAD.prompt_tokens)
    assert candidate.rho == pytest.approx(WORKLOAD.arrival_rate_rps * mean_s / (2 * candidate.replicas))
    assert candidate.cost_usd_per_hour == pytest.approx(4.0 * 16 * candidate.replicas)  # $4/GPU-h × 16 GPUs × c
    fewer = candidate.replicas - 1
    if fewer >= 1 and WORKLOAD.arrival_rate_rps * mean_s < 2 * fewer:
        queue = prefill_queue(PrefillPool(step_model=setting.prefill_model, replicas=2 * fewer, tp=16), WORKLOAD, 0.99)
        assert queue.wait_q_s + prefill_s(setting.prefill_model, p_q) > budget
    else:
        assert math.floor(WORKLOAD.arrival_rate_rps * mean_s) + 1 > 2 * fewer


def test_405b_pools_plan_in_stages_and_meet_the_slo_simulated():
    """The pools of 405B at 8 req/s: both 16-GPU pipelines, the KV over min(16, 16) links, the predicted and simulated
    p99s within the SLO; without stages (pp 1 only) there is no pool at all."""
    plan = plan_disaggregated(
        gpus=[H100], model=LLAMA_405B, precisions=[PAIR], tps=[1, 2, 4, 8], workload=WORKLOAD, slo=SLO, link=LINK,
        pp_degrees=PP_DEGREES,
    )  # fmt: skip
    assert plan.prefill.pp > 1 and plan.decode.pp > 1
    assert plan.prefill.gpus_per_replica == plan.decode.gpus_per_replica == 16
    assert plan.gpus == 16 * (plan.prefill.replicas + plan.decode.replicas)
    assert plan.prediction.ttft_s <= SLO.ttft_s and plan.prediction.tpot_s <= SLO.tpot_s
    assert plan.simulated_s is not None
    ttft, tpot, _ = plan.simulated_s
    assert ttft <= SLO.ttft_s and tpot <= SLO.tpot_s
    with pytest.raises(InfeasiblePlanError):
        plan_disaggregated(
            gpus=[H100], model=LLAMA_405B, precisions=[PAIR], tps=[1, 2, 4, 8], workload=WORKLOAD, slo=SLO, link=LINK
        )
