"""Class-aware plans for POST /v1/plans: translate the request, run planner/plan_classes.py, translate back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, cast

from api.inputs import planning_inputs
from api.schemas.classes import (
    Arrangement,
    ArrangementRead,
    ClassesPlanRequest,
    ClassesPlanResponse,
    ClassesVerification,
    ClassPoolRead,
    ClassRead,
    ClassVerificationRead,
)
from api.schemas.plans import PlanRequest
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.repository import Catalog
from planner.plan_classes import ClassesPlan, plan_classes
from planner.planning import PlanningRequest
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


def _response(model: str, plan: ClassesPlan) -> dict[str, Any]:
    v = plan.verification
    return ClassesPlanResponse(
        model=model,
        arrangement=Arrangement(
            chosen=plan.chosen,
            compared=[
                ArrangementRead(name=c.name, cost_usd_per_hour=c.cost_usd_per_hour, reason=c.reason) for c in plan.compared
            ],
        ),
        cost_usd_per_hour=sum(p.cost_usd_per_hour for p in plan.pools),
        pools=[
            ClassPoolRead(
                name=p.name,
                classes=list(p.classes),
                gpu=p.gpu,
                tp=p.tp,
                replicas=p.replicas,
                batch_limit=p.batch_limit,
                chunk_tokens=p.chunk_tokens,
                cost_usd_per_hour=p.cost_usd_per_hour,
                utilisation=p.utilisation,
            )
            for p in plan.pools
        ],
        classes=[
            ClassRead(
                name=k.name,
                pool=k.arrangement_pool,
                percentile=k.percentile,
                ttft_ms=k.ttft_s * MS_PER_S,
                tpot_ms=k.tpot_s * MS_PER_S,
                e2e_s=k.e2e_s,
                deadline_h=k.deadline_h,
                meets_target=k.meets_target,
                shed_fraction=k.shed_fraction,
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
                )
                for c in v.classes
            ],
            refuted=list(v.refuted),
        ),
    ).model_dump(mode="json")


def create_classes_plan(
    body: ClassesPlanRequest,
    catalog: Catalog,
    *,
    run: Callable[..., Any],
    solver_time_limit_s: float,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The arrangement and per-class figures for `body` on today's catalog (not stored)."""
    # planning_inputs reads model, constraints, efficiency_profile, provider and prices, which both requests carry
    inputs, _pricing = planning_inputs(cast(PlanRequest, body), catalog, default_provider=default_provider)
    classes = [k.to_class() for k in body.classes]
    base = PlanningRequest(
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
    plan = run(plan_classes, classes, inputs, base)
    return _response(body.model, plan)


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
