"""What a plan's shape refuses rather than ignores, named once for every route that plans it: the
constraints a class plan's arrangements cannot honour (POST /v1/plans with `classes`, a what-if
class-mix sweep), and the workload lever separate prefill and decode pools cannot (plans, capacity,
what-if and fleet workloads). The pools' constraint refusals are planner/plan_disagg.py's `pool_refusals`."""

from __future__ import annotations

from planner.plan_records import PlanConstraints

#: Separate pools plan no prefix cache (planner/plan_disagg.py prices a pool's prefill without one).
POOLS_REFUSE_PREFIX_REUSE = (
    "topology disaggregated does not take workload.prefix_reuse yet: separate pools do not plan a prefix cache; "
    "use topology aggregated or any (the cache is offered to the aggregated replicas) or leave prefix_reuse out"
)


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
