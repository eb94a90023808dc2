"""Per-task default acceptance rates (planner/speculative.py `PUBLISHED_ACCEPTANCE`, `default_acceptance`):
a paper's mean accepted length τ at draft length k made a chain's per-token α by inverting
τ = (1 − α^(k+1)) / (1 − α), and `workload.task` choosing among them."""

from __future__ import annotations

import pytest

from planner.errors import PlannerInputError
from planner.speculative import (
    METHOD_DEFAULTS,
    PUBLISHED_ACCEPTANCE,
    acceptance_rate_from_length,
    default_acceptance,
    tokens_per_step,
)
from planner.workload import TASKS


def test_the_conversion_by_hand():
    """k 1: τ = 1 + α, so τ 1.85 → α 0.85 (DeepSeek-V3's MTP). k 2: τ = 1 + α + α², so τ 1.75 → α 0.5.
    k 8, τ 6.13 (EAGLE-3, MT-bench): at α 0.9, (1 − 0.9⁹)/0.1 = (1 − 0.387420489)/0.1 = 6.1258 < 6.13,
    at 0.901, (1 − 0.901⁹)/0.099 = 6.1482 > 6.13, so 0.9 < α < 0.901 (0.90019)."""
    assert acceptance_rate_from_length(1.85, 1) == pytest.approx(0.85, abs=1e-9)
    assert acceptance_rate_from_length(1.75, 2) == pytest.approx(0.5, abs=1e-9)
    alpha = acceptance_rate_from_length(6.13, 8)
    assert 0.9 < alpha < 0.901 and alpha == pytest.approx(0.90019, abs=1e-5)
    assert tokens_per_step(alpha, 8) == pytest.approx(6.13, rel=1e-9)  # the round trip
    assert acceptance_rate_from_length(1.0, 5) == pytest.approx(0.0, abs=1e-9)
    for tau, k in ((0.9, 3), (4.0, 3), (2.0, 0)):
        with pytest.raises(PlannerInputError):
            acceptance_rate_from_length(tau, k)


def test_a_task_changes_the_default_and_says_where_it_comes_from():
    """EAGLE: code (HumanEval τ 6.74) > chat (MT-bench 6.13) > summarisation (CNN/DM 5.34), each above
    the chat default 0.8 it replaces (a tree's τ read as a chain's: optimistic, docs/speculative-decoding.md);
    no task keeps 0.8. MTP: 0.85 whatever the task. Medusa has no per-task figure: its default stands."""
    eagle = {task: default_acceptance("eagle", task).acceptance_rate for task in TASKS}
    assert eagle["code"] > eagle["instruction"] > eagle["math"] > eagle["chat"] > eagle["summarization"] > 0.8
    assert eagle["code"] == pytest.approx(0.92566, abs=1e-5) and eagle["summarization"] == pytest.approx(0.86188, abs=1e-5)
    assert default_acceptance("eagle", None) == METHOD_DEFAULTS["eagle"]
    assert "HumanEval τ 6.74 at k 8" in default_acceptance("eagle", "code").source
    assert all(default_acceptance("mtp", task).acceptance_rate == pytest.approx(0.85) for task in TASKS)
    assert default_acceptance("medusa", "code") == METHOD_DEFAULTS["medusa"]
    assert {(p.method, p.task) for p in PUBLISHED_ACCEPTANCE} >= {("eagle", t) for t in TASKS}


def test_the_task_reaches_the_speculative_variants():
    """speculative_groups builds each variant's step model with the task's α."""
    from dataclasses import replace

    from planner.candidates import enumerate_groups, speculative_groups
    from tests.planner.test_planning import CHAT, INPUTS, SLO

    groups, _ = enumerate_groups(
        model=INPUTS.model, gpus=INPUTS.gpus, precisions=INPUTS.precisions, workload=CHAT, slo=SLO, tp_degrees=(1,)
    )
    for task, alpha in ((None, 0.8), ("code", default_acceptance("eagle", "code").acceptance_rate)):
        variants = speculative_groups(groups, INPUTS.model, replace(CHAT, task=task), draft_tokens=(2,))
        assert variants and all(v.step_model.speculation.acceptance_rate == pytest.approx(alpha) for v in variants)
