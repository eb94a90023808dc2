"""`replica_parallel_section`: the one builder every plan form's parallel section comes from (an aggregated plan's
justification, each disaggregated pool, each class pool), and `parallel_summary`, the sentence its explanation uses."""

from __future__ import annotations

import pytest

from planner.performance import build_step_model
from planner.pipeline import parallel_section, parallel_summary, parallel_terms, replica_parallel_section
from planner.specs import IDEAL
from planner.workload import FixedLength, Workload
from tests.planner.performance_specs import FP16, FP16_PRECISION, H100_SXM, LLAMA_2_70B

# 2,000-token prompts and 4,192-token outputs: a decoding sequence's mean context is 2,000 + 4,192 / 2 = 4,096
WORKLOAD = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=2000), output_tokens=FixedLength(tokens=4192))


def test_at_pp_1_and_ep_1_there_is_no_section():
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL)
    assert replica_parallel_section(H100_SXM, LLAMA_2_70B, FP16, sm, tp=4, pp=1, ep=1, batch=32, workload=WORKLOAD) is None


def test_tp4_pp2_section_at_a_mean_batch_of_31_6():
    """Llama-2-70B fp16 on tp 4 × pp 2 H100 (ideal profile; tests/planner/test_pipeline.py works the numbers): a mean
    occupancy of 31.6 rounds to a decode step of 32 sequences at the mean context 4,096, which is two stage times of
    (70e9 + 16 · 4,096 · 163,840) / (4 × 3.35e12) = 6.0252 ms, 12.0504 ms (the ideal profile counts no communication:
    no hops); the lone 2,000-token prompt goes through both stages in 72.105 ms, leaving half of them idle."""
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2)
    section = replica_parallel_section(H100_SXM, LLAMA_2_70B, FP16, sm, tp=4, pp=2, ep=1, batch=31.6, workload=WORKLOAD)
    assert section is not None
    assert (section.decode_batch, section.context_tokens, section.prompt_tokens) == (32, 4096, 2000)
    assert section.decode_step_s == pytest.approx(12.0504e-3, rel=1e-5)
    assert section.stage_s == pytest.approx(6.0252e-3, rel=1e-5) and section.hops_s == 0.0
    assert section.lone_prefill_s == pytest.approx(72.105e-3, rel=1e-4)
    assert section.lone_bubble_fraction == 0.5
    built = parallel_section(
        parallel_terms(H100_SXM, LLAMA_2_70B, 4, 2, 1, 2.0), sm, batch=32, context_tokens=4096, prompt_tokens=2000
    )
    assert section == built  # the very builder an aggregated plan uses, no copy


def test_the_summary_names_layout_step_stage_and_lone_prompt():
    sm = build_step_model(H100_SXM, LLAMA_2_70B, FP16_PRECISION, 4, IDEAL, pp=2)
    section = replica_parallel_section(H100_SXM, LLAMA_2_70B, FP16, sm, tp=4, pp=2, ep=1, batch=32, workload=WORKLOAD)
    assert section is not None
    text = parallel_summary(section)
    assert text.startswith("tp 4 × pp 2 = 8 GPUs over 1 node(s): a decode step of 32 sequences takes 12.1 ms")
    assert "(2 × 6.03 ms stage + 0 ms hops)" in text and "a lone 2000-token prompt 72.1 ms" in text
    assert "(bubble 0.50)" in text
    # the terms are the layout's physics even where the profile leaves them out of the step: 80 all-reduces of 8,192 × 2 B
    # over 4 GPUs, 2 · 3/4 · 16,384 / 450e9 each = 4.37e-6 s a token, and 2 micro-batches × 80 × 5 µs = 0.8 ms a step
    assert "all-reduce 4.37e-06 s/token + 0.8 ms/step" in text
