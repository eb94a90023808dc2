"""A speculating replica's prefix cache sits beside its draft (planner/planning.py _search_space):
the speculating variants of a group give the cache its tokens too, so the planner predicts them on
the KV the recheck rebuilds (planner/diff.py `Levers`, issue 18)."""

from __future__ import annotations

from planner.memory import kv_capacity_tokens
from planner.optimizer import PlanConstraints
from planner.planning import PlanningRequest, _search_space
from planner.speculative import head_speculation, speculative_kv_capacity_tokens
from tests.planner.test_plan_prefix import SLO
from tests.planner.test_planning import CHAT, GRID, INPUTS

CACHE_TOKENS = 37_440  # a quarter of the chat traffic's working set (tests/planner/test_plan_prefix.py), in 16-token blocks


def test_every_group_gives_the_cache_its_tokens_with_or_without_a_draft() -> None:
    request = PlanningRequest(
        workload=CHAT, slo=SLO, constraints=PlanConstraints(speculative="auto"), prefix_cache_tokens=CACHE_TOKENS, **GRID
    )
    groups = _search_space(request, INPUTS).groups
    drafting = [g for g in groups if g.step_model.speculation is not None]
    plain = [g for g in groups if g.step_model.speculation is None]
    assert drafting and plain
    for group in plain:
        full = kv_capacity_tokens(group.gpu, INPUTS.model, group.precision, group.tp, group.gpu.efficiency)
        assert group.kv_capacity_tokens == full - CACHE_TOKENS
    for group in drafting:
        spec = group.step_model.speculation
        assert spec is not None
        rebuilt = head_speculation(
            INPUTS.model, group.precision, group.tp, method=spec.method, draft_tokens=spec.draft_tokens,
            acceptance_rate=spec.acceptance_rate,
        )  # fmt: skip
        beside = speculative_kv_capacity_tokens(group.gpu, INPUTS.model, group.precision, group.tp, group.gpu.efficiency, rebuilt)
        assert group.kv_capacity_tokens == beside - CACHE_TOKENS
