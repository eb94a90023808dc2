"""What a class plan refuses rather than ignores: the constraints its arrangements cannot honour,
named once for every route that plans classes (POST /v1/plans with `classes`, a what-if class-mix
sweep). Separate prefill and decode pools name theirs in planner/plan_disagg.py (`pool_refusals`)."""

from __future__ import annotations

from planner.plan_records import PlanConstraints


def class_plan_refusals(constraints: PlanConstraints, *, topology: str) -> list[str]:
    """What a class plan cannot honour in `constraints` (and the requested `topology`), one message
    each naming the constraint and what to do instead; empty when all are honoured."""
    out = []
    if topology == "disaggregated":  # `any` arranges the aggregated pools, as `aggregated` does
        out.append("class plans arrange aggregated pools only: leave out constraints.topology or set it to aggregated or any")
    if constraints.speculative == "on":
        out.append(
            "class plans do not speculate yet (the priority pool's class simulator has no verify step): leave out "
            "constraints.speculative; auto plans the pools without it"
        )
    if constraints.pin is not None and constraints.pin.draft_model is not None:
        out.append("class plans do not speculate yet: leave out constraints.pin.draft_model")
    return out
