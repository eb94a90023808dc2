"""A catalog model drafting for the target (constraints.pin.draft_model): its cost per pass and memory by
hand, the compatibility check, and a plan that speculates with it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.errors import PlannerInputError
from planner.memory import kv_capacity_tokens
from planner.optimizer import PlanConstraints
from planner.performance import build_step_model
from planner.pins import Pin
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity
from planner.specs import IDEAL, ModelSpec
from planner.speculative import (
    check_draft_model,
    draft_model_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
    tokens_per_step,
)
from planner.workload import LognormalLength, Workload
from tests.planner.performance_specs import FP16_PRECISION, H100_SXM, LLAMA_2_70B
from tests.planner.test_planning import GRID, H100, SLO
from tests.planner.test_speculative import LLAMA_2_7B

TP = 4


def _drafted(batch: int, context: int) -> float:
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, TP, IDEAL)
    spec = draft_model_speculation(LLAMA_2_7B, FP16_PRECISION, TP, draft_tokens=4, acceptance_rate=0.6)
    return speculative_step_model(sm, spec).draft_s(batch, batch * context)


def test_tokens_per_step_by_hand():
    """α 0.6, k 4: E = (1 − 0.6⁵)/(1 − 0.6) = (1 − 0.07776)/0.4 = 2.3056."""
    assert tokens_per_step(0.6, 4) == pytest.approx(2.3056)


def test_the_drafts_cost_at_two_batches_by_hand():
    """Llama-2-7B drafting for Llama-2-70B on 4 × H100 (ideal: 4 × 3.35e12 = 13.4e12 B/s, 4 × 989e12 = 3.956e15
    FLOP/s, full overlap: a pass is the larger of its memory and compute times), k = 4 passes a step, 1,000 tokens
    of context per sequence. Per pass the draft reads W_d = 7e9 × 2 = 14e9 B and its cache, 524,288 B a token
    (2 · 32 layers · 32 heads · 128 · 2 B), and spends 2 × 7e9 FLOPs a sequence plus 4·32·32·128 = 524,288 a context
    token. Batch 1: memory (14e9 + 1,000 × 524,288)/13.4e12 = 1.083902 ms > compute 3.67 µs → 4 × = 4.335608 ms.
    Batch 256: memory (14e9 + 256,000 × 524,288)/13.4e12 = 11.061024 ms > compute (256 × 1.4e10 + 256,000 ×
    524,288)/3.956e15 = 0.939893 ms → 4 × = 44.244098 ms: the draft's own cache, not its weights, dominates there."""
    assert _drafted(1, 1000) == pytest.approx(4 * (14e9 + 1000 * 524_288) / 13.4e12)
    assert _drafted(1, 1000) == pytest.approx(4.335608e-3, rel=1e-6)
    assert _drafted(256, 1000) == pytest.approx(44.244098e-3, rel=1e-6)


def test_the_memory_the_draft_takes_by_hand():
    """Its 14e9 B of weights and 524,288 B a token of cache beside the target's 327,680: (320e9 − 140e9 − 14e9) /
    (327,680 + 524,288) = 194,842 KV tokens instead of (320e9 − 140e9)/327,680 = 549,316."""
    spec = draft_model_speculation(LLAMA_2_7B, FP16_PRECISION, TP, draft_tokens=4, acceptance_rate=0.6)
    assert spec.resident_bytes == 14e9
    assert kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, TP, IDEAL) == 549_316
    assert speculative_kv_capacity_tokens(H100_SXM, LLAMA_2_70B, FP16_PRECISION, TP, IDEAL, spec) == 194_842


def test_a_draft_must_share_the_vocabulary_and_be_smaller():
    check_draft_model(LLAMA_2_70B, LLAMA_2_7B)
    other = replace(LLAMA_2_7B, slug="mistral-like", vocab_size=32_768)
    with pytest.raises(PlannerInputError, match="tokenizer"):
        check_draft_model(LLAMA_2_70B, other)
    with pytest.raises(PlannerInputError, match="not smaller"):
        check_draft_model(LLAMA_2_7B, LLAMA_2_70B)
    with pytest.raises(PlannerInputError, match="itself"):
        check_draft_model(LLAMA_2_70B, LLAMA_2_70B)


def test_a_pinned_draft_model_may_leave_its_acceptance_rate_to_the_published_default():
    assert Pin(draft_model="llama-2-7b").acceptance_rate is None  # tests/planner/test_draft_model_acceptance.py


#: Llama 3.1 70B's shape (config.json: 80 layers, hidden 8192, 64 heads, 8 KV heads, vocabulary 128,256) for a
#: target the test catalog's Llama 3.1 8B can draft for.
LLAMA_70B = ModelSpec(
    slug="llama-3.1-70b",
    params_total=70.6e9,
    params_active=70.6e9,
    layers=80,
    hidden_size=8192,
    attention_heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    vocab_size=128_256,
)


def test_a_plan_speculates_with_the_draft_model_at_the_given_rate():
    """Speculation on with Llama 3.1 8B drafting for Llama 3.1 70B at α 0.7: the plan's draft is the model (its
    method `draft_model`, the rate the request's); without its spec looked up the plan is refused, never a head."""
    from tests.planner.test_planning import BF16_PAIR, LLAMA_8B

    inputs = PlanningInputs(
        model=LLAMA_70B, gpus=(H100,), precisions=(BF16_PAIR,), efficiency_profile="test", draft_model=LLAMA_8B
    )
    workload = Workload(
        arrival_rate_rps=2.0,
        prompt_tokens=LognormalLength(mean_tokens=800, p99_tokens=3000),
        output_tokens=LognormalLength(mean_tokens=200, p99_tokens=700),
    )
    pin = Pin(acceptance_rate=0.7, draft_model="llama-3.1-8b")
    constraints = PlanConstraints(speculative="on", pin=pin)
    grid = {**GRID, "tp_degrees": (4, 8)}  # 141 GB of 70B weights and 16 GB of draft leave no cache at tp 2
    result = plan_capacity(PlanningRequest(workload=workload, slo=SLO, constraints=constraints, verify=False, **grid), inputs)
    chosen = result.speculative
    assert chosen is not None and chosen.method == "draft_model"
    assert chosen.acceptance_rate == 0.7 and "given" in chosen.acceptance_source
    assert chosen.tokens_per_step == pytest.approx(tokens_per_step(0.7, chosen.draft_tokens))
    # without a given α the published pair's (Llama 3.1 8B for 70B: size ratio 8.8, nearest T5-large's 13.75: 0.71)
    default = plan_capacity(
        PlanningRequest(
            workload=workload,
            slo=SLO,
            constraints=PlanConstraints(speculative="on", pin=Pin(draft_model="llama-3.1-8b")),
            verify=False,
            **grid,
        ),
        inputs,
    ).speculative
    assert default is not None and default.method == "draft_model" and default.acceptance_rate == 0.71
    assert "arXiv 2211.17192" in default.acceptance_source and "given" not in default.acceptance_source
    with pytest.raises(PlannerInputError, match="was not looked up"):
        plan_capacity(
            PlanningRequest(workload=workload, slo=SLO, constraints=constraints, **GRID), replace(inputs, draft_model=None)
        )
