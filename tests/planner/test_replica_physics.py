"""The memo of a replica's workload-free physics (planner/replica_physics.py) that enumeration reads."""

from __future__ import annotations

import copy
from dataclasses import fields, replace

from planner import replica_physics
from planner.candidates import Group, Option, enumerate_all_options, enumerate_groups, speculative_groups
from planner.performance import build_step_model
from planner.plan_prefix import reduced_prompts
from planner.replica_physics import IdentityMemo
from planner.workload import Slo
from tests.planner.test_planning import CHAT, INPUTS, LLAMA_8B


def test_the_memo_computes_once_per_identity_and_never_for_an_equal_copy():
    """Keyed by identity: the same specs answer the first result without computing again; an equal
    copy (another identity, which could be another catalog's spec) is computed anew; cleared, it forgets."""
    memo = IdentityMemo()
    gpu = INPUTS.gpus[0]
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert memo.value((gpu, LLAMA_8B), (1,), compute) == 1
    assert memo.value((gpu, LLAMA_8B), (1,), compute) == 1
    assert memo.value((gpu, LLAMA_8B), (2,), compute) == 2  # another value beside the specs
    assert memo.value((copy.deepcopy(gpu), LLAMA_8B), (1,), compute) == 3
    memo.cache_clear()
    assert memo.value((gpu, LLAMA_8B), (1,), compute) == 4


def _as_values(option: Option) -> tuple:
    """An option with its group's fields in place of the group (a Group compares by identity)."""
    return (option.id, *option[2:], *(getattr(option.group, f.name) for f in fields(Group)))


def test_enumerating_twice_shares_the_physics_and_gives_the_same_options():
    """A prefix plan enumerates once per cache size: the second enumeration (another prompt mixture)
    reads each replica's step model from the memo (the same object) and its options are those a cold
    enumeration gives, field for field."""
    slo = Slo(ttft_s=1.0, tpot_s=0.06)
    mixture = replace(CHAT, prompt_tokens=reduced_prompts(CHAT.prompt_tokens, ((0.5, 512),)))

    def options(workload):
        groups, _ = enumerate_groups(
            model=LLAMA_8B, gpus=INPUTS.gpus, precisions=INPUTS.precisions, workload=workload, slo=slo, tp_degrees=(1, 2)
        )
        groups = [*groups, *speculative_groups(groups, LLAMA_8B, workload, draft_tokens=(3,))]
        return groups, enumerate_all_options(groups, workload, batch_limits=(16, 64), chunk_budgets=(None, 2048))

    replica_physics.REPLICAS.cache_clear()
    replica_physics.VARIANTS.cache_clear()
    first_groups, _ = options(CHAT)
    shared_groups, shared = options(mixture)
    assert [g.step_model for g in shared_groups] == [g.step_model for g in first_groups]
    assert all(a.step_model is b.step_model for a, b in zip(shared_groups, first_groups, strict=True))
    assert build_step_model(INPUTS.gpus[0], LLAMA_8B, INPUTS.precisions[0], 1, INPUTS.gpus[0].efficiency) == (
        first_groups[0].step_model
    )
    replica_physics.REPLICAS.cache_clear()
    replica_physics.VARIANTS.cache_clear()
    cold_groups, cold = options(mixture)
    assert [_as_values(o) for o in shared] == [_as_values(o) for o in cold]
    assert any(g.step_model.speculation is not None for g in cold_groups)
