"""Class-aware plans for POST /v1/plans: translate the request, run planner/plan_classes.py, translate
back, and store the answer with its request as a one-workload plan is (catalog/plans.py), so that
GET /v1/plans/{id}, the list and the deploy targets read it back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from api.inputs import planning_inputs
from api.schemas.classes import (
    Arrangement,
    ArrangementRead,
    ClassesPlanRequest,
    ClassesPlanResponse,
    ClassesProvenance,
    ClassesVerification,
    ClassPoolRead,
    ClassRead,
    ClassVerificationRead,
    InteractivePeriodRead,
    PeriodVerificationRead,
)
from api.schemas.plan_response import PrecisionRead
from api.schemas.plan_result import EfficiencyRead, ParallelSectionRead
from api.schemas.plans import PlanRequest
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.deployments import Deployments
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from planner.pipeline import parallel_summary
from planner.plan_classes import ClassesPlan, plan_classes
from planner.planning import PlanningInputs, PlanningRequest
from planner.units import MS_PER_S
from planner.workload import FixedLength, Slo, Workload

#: Columns of a class plan's CSV: one row per class.
CLASSES_CSV_COLUMNS = (
    "class",
    "arrangement",
    "pool",
    "percentile",
    "ttft_ms",
    "tpot_ms",
    "e2e_s",
    "deadline_h",
    "meets_target",
    "shed_fraction",
    "arrangement_cost_usd_per_hour",
)


def _reason(reason: str, plan: ClassesPlan) -> str:
    """The chosen arrangement's reason, naming its pools' stages as an aggregated plan's justification.parallel does."""
    staged = [f"{p.name} pool {parallel_summary(p.parallel)}" for p in plan.pools if p.parallel is not None]
    return f"{reason}; in pipeline stages (pools[].parallel): " + "; ".join(staged) if staged else reason


def _response(
    body: ClassesPlanRequest, plan: ClassesPlan, inputs: PlanningInputs, *, plan_id: str, created_at: str
) -> dict[str, Any]:
    v = plan.verification
    priority = {k.name: k.priority for k in body.classes}
    used = {p.gpu for p in plan.pools}
    return ClassesPlanResponse(
        id=plan_id,
        name=body.name,
        model=body.model,
        arrangement=Arrangement(
            chosen=plan.chosen,
            compared=[
                ArrangementRead(
                    name=c.name,
                    cost_usd_per_hour=c.cost_usd_per_hour,
                    reason=_reason(c.reason, plan) if c.name == plan.chosen else c.reason,
                    saving_vs_no_shedding_usd_per_hour=c.saving_vs_no_shedding_usd_per_hour,
                )
                for c in plan.compared
            ],
        ),
        cost_usd_per_hour=sum(p.cost_usd_per_hour for p in plan.pools),
        pools=[
            ClassPoolRead(
                name=p.name,
                classes=list(p.classes),
                gpu=p.gpu,
                tp=p.tp,
                pp=p.pp,
                ep=p.ep,
                replicas=p.replicas,
                batch_limit=p.batch_limit,
                chunk_tokens=p.chunk_tokens,
                cost_usd_per_hour=p.cost_usd_per_hour,
                utilisation=p.utilisation,
                precision=PrecisionRead(weights=p.weights_precision, kv_cache=p.kv_precision),
                scheduling="priority" if p.scheduling == "priority" else "fcfs",
                parallel=None if p.parallel is None else ParallelSectionRead.model_validate(p.parallel),
            )
            for p in plan.pools
        ],
        classes=[
            ClassRead(
                name=k.name,
                pool=k.arrangement_pool,
                priority=priority[k.name],
                percentile=k.percentile,
                ttft_ms=k.ttft_s * MS_PER_S,
                tpot_ms=k.tpot_s * MS_PER_S,
                e2e_s=k.e2e_s,
                deadline_h=k.deadline_h,
                meets_target=k.meets_target,
                shed_fraction=k.shed_fraction,
                admission_limit=k.admission_limit,
                deferred_fraction=k.deferred_fraction,
            )
            for k in plan.classes
        ],
        verification=None
        if v is None
        else ClassesVerification(
            method=v.method,
            interactive_wait_model_ms=v.interactive_p99_wait_model_s * MS_PER_S,
            interactive_wait_simulated_ms=v.interactive_p99_wait_simulated_s * MS_PER_S,
            classes=[
                ClassVerificationRead(
                    name=c.name,
                    wait_model_ms=c.wait_model_s * MS_PER_S,
                    wait_simulated_ms=c.wait_simulated_s * MS_PER_S,
                    ttft_simulated_ms=c.ttft_simulated_s * MS_PER_S,
                    e2e_simulated_s=c.e2e_simulated_s,
                    shed_fraction_simulated=c.shed_fraction_simulated,
                    meets_target=c.meets_target,
                    tpot_simulated_ms=c.tpot_simulated_s * MS_PER_S,
                )
                for c in v.classes
            ],
            refuted=list(v.refuted),
            periods=[
                PeriodVerificationRead(
                    period=p.period,
                    interactive_rps=p.interactive_rps,
                    background_in_pool_rps=p.background_in_pool_rps,
                    extra_replicas=p.extra_replicas,
                    interactive=[
                        InteractivePeriodRead(name=name, ttft_ms=ttft * MS_PER_S, tpot_ms=tpot * MS_PER_S, e2e_s=e2e)
                        for name, ttft, tpot, e2e in p.interactive
                    ],
                    background_completion_h=p.background_completion_h,
                    meets_target=p.meets_target,
                )
                for p in v.periods
            ],
        ),
        provenance=ClassesProvenance(
            catalog_version=inputs.catalog_version,
            efficiency_profile=inputs.efficiency_profile,
            efficiencies={
                g.slug: EfficiencyRead.model_validate(g.efficiency, from_attributes=True) for g in inputs.gpus if g.slug in used
            },
            created_at=created_at,
        ),
    ).model_dump(mode="json")


def classes_base_request(
    body: ClassesPlanRequest, *, solver_time_limit_s: float, checkpoint: Callable[[], None] | None = None
) -> PlanningRequest:
    """The single-class request `plan_classes` plans each pool from (workload and SLO replaced per pool):
    the body's constraints, pools planned without speculation, and its `verify`. Also the what-if class
    mix sweep's (api/what_if.py), so a point is the plan POST /v1/plans makes."""
    return PlanningRequest(
        workload=Workload(
            arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1), output_tokens=FixedLength(tokens=1)
        ),  # replaced per pool
        slo=Slo(e2e_s=1.0),  # replaced per pool
        # the pools are planned without speculation (auto, the default, means off here; on is refused)
        constraints=dataclasses.replace(body.constraints.to_constraints(), speculative="off"),
        verify=body.verify,
        solver_time_limit_s=solver_time_limit_s,
        checkpoint=checkpoint,
    )


def create_classes_plan(
    body: ClassesPlanRequest,
    catalog: Catalog,
    *,
    run: Callable[..., Any],
    solver_time_limit_s: float,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
    adopt: bool = True,
) -> dict[str, Any]:
    """The arrangement and per-class figures for `body` on today's catalog, stored unless `body.store` is false;
    with a `name`, the stored plan becomes that deployment's current plan (unless `adopt` is false: a
    re-plan stores it in the deployment's history and lets its adoption rule decide)."""
    # planning_inputs reads model, constraints, efficiency_profile, provider and prices, which both requests carry
    inputs, _pricing = planning_inputs(cast(PlanRequest, body), catalog, default_provider=default_provider)
    classes = [k.to_class() for k in body.classes]
    base = classes_base_request(body, solver_time_limit_s=solver_time_limit_s, checkpoint=checkpoint)
    plan = run(plan_classes, classes, inputs, base)
    plan_id = new_plan_id()
    created_at = datetime.now(UTC)
    content = _response(body, plan, inputs, plan_id=plan_id, created_at=created_at.isoformat())
    if body.store:  # a dry run (store false) writes nothing
        Plans(catalog.session).save(
            plan_id=plan_id,
            name=body.name,
            request=body.model_dump(mode="json"),
            response=content,
            catalog_version=inputs.catalog_version,
            created_at=created_at,
        )
        # a named class plan becomes that deployment's current plan (the first creates it), as a one-workload plan does
        if adopt:
            Deployments(catalog.session).record_named_plan(body.name, plan_id, body.model_dump(mode="json"))
    return content


def classes_csv_rows(content: dict[str, Any]) -> list[dict[str, Any]]:
    """One CSV row per class of a class plan's response."""
    chosen = content["arrangement"]["chosen"]
    return [
        {
            "class": k["name"],
            "arrangement": chosen,
            "pool": k["pool"],
            "percentile": k["percentile"],
            "ttft_ms": k["ttft_ms"],
            "tpot_ms": k["tpot_ms"],
            "e2e_s": k["e2e_s"],
            "deadline_h": k["deadline_h"],
            "meets_target": k["meets_target"],
            "shed_fraction": k["shed_fraction"],
            "arrangement_cost_usd_per_hour": content["cost_usd_per_hour"],
        }
        for k in content["classes"]
    ]
