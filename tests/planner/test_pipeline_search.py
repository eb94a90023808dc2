"""The search over replicas wider than a node: tensor parallelism across whole nodes is offered beside
pipeline stages, priced on the NIC, and loses to tp in a node × pp across nodes where it should."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.candidates import enumerate_groups
from planner.optimizer import PlanConstraints
from planner.pipeline import PP_DEGREES
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity
from planner.queueing import max_rps_at_slo
from planner.specs import Efficiency, ModelSpec
from planner.workload import LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import BF16, H100_SXM, Precision

EFF = Efficiency(
    name="test",
    memory=0.8,
    compute=0.6,
    step_overhead_s=0.002,
    memory_reserve_fraction=0.1,
    include_comm=True,
    source="test input",
)
H100 = replace(H100_SXM, price_usd_per_hour_on_demand=4.0, efficiency=EFF)  # NIC: the default 400 Gb/s = 50e9 B/s, 10 µs
# Llama 3.1 405B config.json: 126 layers, hidden 16384, 128 heads, 8 KV heads of 128.
LLAMA_405B = ModelSpec(
    slug="llama-3.1-405b",
    params_total=405e9,
    params_active=405e9,
    layers=126,
    hidden_size=16384,
    attention_heads=128,
    kv_heads=8,
    head_dim=128,
    intermediate_size=53248,
    vocab_size=128256,
    max_context_tokens=131072,
)
PAIR = Precision(weights=BF16, kv_cache=BF16)
WORKLOAD = Workload(
    arrival_rate_rps=8.0,
    prompt_tokens=LognormalLength(mean_tokens=1000, p99_tokens=4000),
    output_tokens=LognormalLength(mean_tokens=200, p99_tokens=800),
)
SLO = Slo(ttft_s=5.0, tpot_s=0.06)


def _groups():
    groups, _ = enumerate_groups(
        model=LLAMA_405B, gpus=(H100,), precisions=(PAIR,), workload=WORKLOAD, slo=SLO, pp_degrees=PP_DEGREES
    )
    return {(g.tp, g.pp): g for g in groups}


def test_cross_node_tp_is_offered_where_no_node_holds_the_model():
    """810 GB of weights exceed a node: pp 2, 4, 8 of tp 8, and tp 16, 32, 64 over 2, 4, 8 whole nodes (pp 1), are
    searched; the cross-node all-reduce is 252 × 2·15/16·32,768 B over the 50e9 B/s NIC = 3.0966e-4 s per token
    at tp 16 (against 5e-6 s at tp 8 × pp 2 on NVLink)."""
    groups = _groups()
    assert {(16, 1), (32, 1), (64, 1), (8, 2)} <= set(groups)
    assert groups[(16, 1)].step_model.comm_s_per_token == pytest.approx(252 * 2 * 15 / 16 * 32_768 / 50e9)
    assert groups[(16, 1)].step_model.comm_latency_s == pytest.approx(252 * 15e-6)  # in-node α + NIC α per all-reduce


def test_cross_node_tp_loses_to_pipeline_stages_on_the_same_sixteen_gpus():
    """At 8 req/s: a 2,048-token chunk on tp 16 pays 2,048 × 3.0966e-4 s = 0.634 s of NIC all-reduce, and 64 decodes
    46 ms against 43 ms at tp 8 × pp 2 (whose KV cache is twice as large: tp 16 replicates the 8 KV heads), so at
    batch 64, chunk 2,048 tp 16 serves 0.57 req/s per replica and tp 8 × pp 2 2.44: the plan is tp 8 × pp 2."""
    groups = _groups()
    serving = Serving(batch_limit=64, chunk_tokens=2048)
    mu = {
        key: max_rps_at_slo(g.step_model, WORKLOAD, serving, SLO, kv_capacity_tokens=g.kv_capacity_tokens)
        for key, g in groups.items()
        if key in ((16, 1), (8, 2))
    }
    assert mu[(16, 1)] < mu[(8, 2)] / 4
    assert groups[(16, 1)].kv_capacity_tokens < groups[(8, 2)].kv_capacity_tokens
    inputs = PlanningInputs(model=LLAMA_405B, gpus=(H100,), precisions=(PAIR,), efficiency_profile="test")
    result = plan_capacity(PlanningRequest(workload=WORKLOAD, slo=SLO, constraints=PlanConstraints(), verify=False), inputs)
    assert {(row.tp, row.pp) for row in result.rows} == {(8, 2)}
