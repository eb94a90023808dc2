"""The plan service: POST /v1/plans' work, and the plan a deployment's PUT or re-plan makes.
Its shape is every planning endpoint's: resolve the specs from the catalog (api/inputs.py), run
the pure planner function under the request's deadline, store the answer, build the response.
Deployments (adopting, re-planning with hysteresis, re-checking) are api/deployment_service.py.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from api.batch_jobs import create_batch_plan
from api.disagg_plans import topology_plan
from api.inputs import planning_inputs
from api.schemas.plans import PlanRequest, plan_response
from api.schemas.workload import BatchWorkloadSpec
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.deployments import Deployments
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from planner.planning import PlanningRequest, plan_capacity

#: Runs pure planning work: `run(fn, *args)` → fn(*args), e.g. bounded by a request's deadline.
Runner = Callable[..., Any]
#: The planner's own default solver limit (planner.planning.PlanningRequest), for callers without settings.
DEFAULT_SOLVER_TIME_LIMIT_S = cast(float, PlanningRequest.__dataclass_fields__["solver_time_limit_s"].default)


def template_of(body: PlanRequest) -> dict[str, Any]:
    """The plan request a deployment is re-planned from (its name is the deployment's)."""
    return body.model_dump(mode="json", exclude={"name"})


def run_directly(fn: Callable[..., Any], /, *args: Any) -> Any:
    return fn(*args)


def create_plan(
    body: PlanRequest,
    catalog: Catalog,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Plan `body` on today's catalog and store it (as POST /v1/plans does); the response JSON.
    `run(plan_capacity, request, inputs)` does the pure planning work (a route passes its deadline's `run`)."""
    inputs, pricing = planning_inputs(body, catalog, default_provider=default_provider)
    if checkpoint is None:  # a route's `run` is its deadline's: the planner stops at its steps when that passes
        checkpoint = getattr(getattr(run, "__self__", None), "checkpoint", None)
    if isinstance(body.workload, BatchWorkloadSpec):  # a job of fixed size, no SLO: planned for throughput
        return create_batch_plan(body, inputs, pricing, catalog.session, run=run, checkpoint=checkpoint)
    request = PlanningRequest(
        workload=body.traffic(),
        slo=body.targets(),
        constraints=body.constraints.to_constraints(),
        verify=body.verify,
        solver_time_limit_s=solver_time_limit_s,
        checkpoint=checkpoint,
    )
    plan_id = new_plan_id()
    created_at = datetime.now(UTC)

    def aggregated() -> dict[str, Any]:
        result = run(plan_capacity, request, inputs)
        return plan_response(
            plan_id,
            body.name,
            result,
            created_at.isoformat(),
            prices=[price.read() for price in pricing.prices.values()],
            price_notes=pricing.notes,
            calibration_grades={gpu.slug: gpu.calibration_grade for gpu in inputs.gpus},
            engine=None if body.constraints.pin is None else body.constraints.pin.engine,
        )

    if body.constraints.topology == "aggregated":
        content = aggregated()
    else:  # the one dispatch point for separate prefill and decode pools (api/disagg_plans.py)
        content = topology_plan(
            body, request, inputs, pricing, plan_id=plan_id, created_at=created_at.isoformat(), run=run, aggregated=aggregated
        )
    if body.store:  # a dry run (store false) writes nothing
        Plans(catalog.session).save(
            plan_id=plan_id,
            name=body.name,
            request=body.model_dump(mode="json"),
            response=content,
            catalog_version=inputs.catalog_version,
            created_at=created_at,
        )
    return content


def create_named_plan(
    body: PlanRequest,
    catalog: Catalog,
    *,
    run: Runner = run_directly,
    solver_time_limit_s: float = DEFAULT_SOLVER_TIME_LIMIT_S,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    checkpoint: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """POST /v1/plans' whole work (the route and `headroom plan` alike): `create_plan`, and a stored
    plan with a deployment `name` becomes that deployment's current plan (the first creates it). A
    re-plan calls `create_plan` alone, since hysteresis decides whether its plan is adopted."""
    content = create_plan(
        body, catalog, run=run, solver_time_limit_s=solver_time_limit_s, default_provider=default_provider, checkpoint=checkpoint
    )
    if body.store:
        Deployments(catalog.session).record_named_plan(body.name, content["id"], body.model_dump(mode="json"))
    return content
