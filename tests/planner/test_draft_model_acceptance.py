"""The cited default α of a separate draft model (planner/speculative.py `draft_model_acceptance`): the published
(target, draft) pair nearest in size ratio at temperature 1, CNN/DM for summarization and WMT EnDe otherwise, and a
plan drafting without a given α says where its rate comes from."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.speculative import PUBLISHED_PAIR_ACCEPTANCE, SPEC_BENCH_PAIR_ACCEPTANCE, draft_model_acceptance, tokens_per_step
from tests.planner.performance_specs import LLAMA_2_70B
from tests.planner.test_speculative import LLAMA_2_7B


def test_the_table_holds_the_papers_pairs_and_their_ratios() -> None:
    """Twelve T5-XXL rows (3 drafts × 2 tasks × 2 temperatures) and three LaMDA rows; α rises with the draft's size
    at each task and temperature, and falls from temperature 0 to 1 (the paper's two trends)."""
    assert len(PUBLISHED_PAIR_ACCEPTANCE) == 15
    for benchmark in ("WMT EnDe", "CNN/DM"):
        for temperature in (0.0, 1.0):
            rows = sorted(
                (p for p in PUBLISHED_PAIR_ACCEPTANCE if p.benchmark == benchmark and p.temperature == temperature),
                key=lambda p: p.draft_params,
            )
            assert [p.draft for p in rows] == ["T5-small", "T5-base", "T5-large"]
            assert [p.acceptance_rate for p in rows] == sorted(p.acceptance_rate for p in rows)
    greedy = {(p.benchmark, p.draft): p.acceptance_rate for p in PUBLISHED_PAIR_ACCEPTANCE if p.temperature == 0.0}
    sampled = {(p.benchmark, p.draft): p.acceptance_rate for p in PUBLISHED_PAIR_ACCEPTANCE if p.temperature == 1.0}
    assert all(sampled[key] < greedy[key] for key in sampled)
    assert next(p for p in PUBLISHED_PAIR_ACCEPTANCE if p.draft == "T5-small").size_ratio == pytest.approx(11e9 / 77e6)


def test_the_nearest_pair_in_log_size_ratio_at_temperature_1() -> None:
    """Llama-2-7B drafting for Llama-2-70B: a size ratio of ≈10 (by the specs' totals), nearest T5-large's 13.75 in
    log ratio (|ln(13.75/10)| ≈ 0.3 against |ln(44/10)| ≈ 1.5 for T5-base): α 0.71 on WMT EnDe, 0.56 on CNN/DM for
    summarization. A draft 60 times smaller lands on T5-base (44; 143 for T5-small is farther in log ratio): 0.68."""
    ratio = LLAMA_2_70B.params_total / LLAMA_2_7B.params_total
    assert 8 < ratio < 12
    chat = draft_model_acceptance(LLAMA_2_70B, LLAMA_2_7B, "chat")
    assert chat.method == "draft_model" and chat.acceptance_rate == 0.71
    assert "arXiv 2211.17192" in chat.source and "T5-large" in chat.source and "measure" in chat.source
    assert draft_model_acceptance(LLAMA_2_70B, LLAMA_2_7B, None).acceptance_rate == 0.71
    assert draft_model_acceptance(LLAMA_2_70B, LLAMA_2_7B, "summarization").acceptance_rate == 0.56
    tiny = replace(LLAMA_2_7B, params_total=LLAMA_2_70B.params_total / 60, params_active=LLAMA_2_70B.params_total / 60)
    found = draft_model_acceptance(LLAMA_2_70B, tiny, "code")
    assert found.acceptance_rate == 0.68 and "T5-base" in found.source


def test_spec_bench_per_task_pairs_join_where_their_size_ratio_is_nearest() -> None:
    """Spec-Bench's SpS pair (Vicuna-7B by Vicuna-68M, ratio 7e9 / 68e6 = 103) per task: τ 2.54 on conversation,
    2.25 on math, 2.48 on summarization, each α at k 5 ((1 − α⁶)/(1 − α) = τ). A draft ≈100 times smaller than
    its target takes the row for chat, math and summarization (103 is nearer than T5-small's 143); for code it keeps
    Leviathan et al.'s WMT T5-small 0.62. A 10-times smaller draft keeps T5-large's 0.71 on chat (13.75 is nearer)."""
    by_task = {p.task: p for p in SPEC_BENCH_PAIR_ACCEPTANCE}
    assert set(by_task) == {"chat", "math", "summarization"}
    for task, tau in (("chat", 2.54), ("math", 2.25), ("summarization", 2.48)):
        # α kept to 3 places: ±0.0005 moves τ by at most dτ/dα · 0.0005 = (1 + 2α + 3α² + 4α³ + 5α⁴) · 0.0005 ≈ 5.2 · 0.0005 = 0.0026
        assert tokens_per_step(by_task[task].acceptance_rate, 5) == pytest.approx(tau, abs=3e-3)
        assert by_task[task].size_ratio == pytest.approx(102.94, abs=0.01) and by_task[task].temperature == 0.0
    assert by_task["chat"].acceptance_rate == 0.631 and by_task["math"].acceptance_rate == 0.571
    small = replace(LLAMA_2_7B, params_total=LLAMA_2_70B.params_total / 100, params_active=LLAMA_2_70B.params_total / 100)
    chat = draft_model_acceptance(LLAMA_2_70B, small, "chat")
    assert chat.acceptance_rate == 0.631 and "Spec-Bench" in chat.source and "Vicuna-68M" in chat.source
    assert "measure" in chat.source
    assert draft_model_acceptance(LLAMA_2_70B, small, "math").acceptance_rate == 0.571
    assert draft_model_acceptance(LLAMA_2_70B, small, "summarization").acceptance_rate == by_task["summarization"].acceptance_rate
    code = draft_model_acceptance(LLAMA_2_70B, small, "code")
    assert code.acceptance_rate == 0.62 and "T5-small" in code.source
    assert draft_model_acceptance(LLAMA_2_70B, small, None).acceptance_rate == 0.62  # no task: no task's row
    assert draft_model_acceptance(LLAMA_2_70B, LLAMA_2_7B, "math").acceptance_rate == 0.71
