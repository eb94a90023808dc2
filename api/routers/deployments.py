"""Named deployments and their plan history, re-planning with a diff and hysteresis, and the
recheck of a stored plan against today's catalog.
operationIds: put_deployment, list_deployments, get_deployment, list_deployment_plans,
replan_deployment, recheck_plan."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from api import deployment_service as service
from api.csv_export import PLAN_CSV_COLUMNS, PLAN_CSV_DESCRIPTION, CsvDep, csv_response, csv_responses, plan_csv_rows, rows_to_csv
from api.deps import CatalogDep, DeploymentsDep, IfMatchDep, PlannerKeyDep, PlansDep, ReaderDep, SettingsDep, etag
from api.idempotency import IdempotencyDep
from api.observability import DeadlineDep, MetricsDep, MetricsRegistry
from api.problems import problem_responses
from api.schemas.classes import is_classes_plan
from api.schemas.deployments import (
    ClassesRecheckResponse,
    ClassesReplanResponse,
    DeploymentPage,
    DeploymentPut,
    DeploymentRead,
    PlanHistoryPage,
    RecheckResponse,
    ReplanRequest,
    ReplanResponse,
)
from planner.units import MS_PER_S

router = APIRouter(tags=["deployments"])

Limit = Annotated[int, Query(ge=1, le=500, description="Page size: at most this many records.")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="Records to skip before the page starts.")]
Name = Annotated[
    str,
    Path(
        min_length=1,
        max_length=200,
        pattern=r"^[^/\x00-\x1f]+$",
        description="The deployment's name (as `name` on POST /v1/plans).",
    ),
]


def _record_plan(metrics: MetricsRegistry, plan: dict[str, Any]) -> None:
    metrics.record_plan_computed()
    metrics.record_solver_time(plan["provenance"]["solve_ms"] / MS_PER_S)


@router.put(
    "/deployments/{name}",
    response_model=DeploymentRead,
    name="put_deployment",
    summary="Create a deployment (planned at once) or replace its settings",
    responses={
        201: {"description": "Created and planned.", "model": DeploymentRead},
        **problem_responses(400, 401, 403, 404, 409, 412, 422, 503),
    },
)
def put_deployment(
    name: Name,
    body: DeploymentPut,
    catalog: CatalogDep,
    if_match: IfMatchDep,
    idempotency: IdempotencyDep,
    settings: SettingsDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
    _planner: PlannerKeyDep,
) -> Response:
    """A new name is created and planned at once (201, `Location`); an existing one gets the new
    settings and hysteresis without re-planning (200; `POST .../replan` plans with them). Honours
    If-Match on an update (412 when the deployment moved on) and `Idempotency-Key`."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    content, created = service.put_deployment(
        name,
        body,
        catalog,
        if_version=if_match,
        run=deadline.run,
        solver_time_limit_s=deadline.solver_time_limit_s(settings.solver_time_limit_s),
        default_provider=settings.default_price_provider,
    )
    headers = {"ETag": etag(content["version"])}
    if created:
        headers["Location"] = f"/v1/deployments/{name}"
        _record_plan(metrics, content["current_plan"])
    answer = JSONResponse(
        jsonable_encoder(DeploymentRead.model_validate(content)),
        status_code=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        headers=headers,
    )
    return idempotency.respond(body, answer)


@router.get(
    "/deployments",
    response_model=DeploymentPage,
    name="list_deployments",
    summary="List deployments",
    responses=problem_responses(401, 422),
)
def list_deployments(
    deployments: DeploymentsDep, plans: PlansDep, _reader: ReaderDep, limit: Limit = 50, offset: Offset = 0
) -> Any:
    """Deployments by name with their current plan's GPU, size and cost; `total` counts all."""
    page = deployments.list(limit=limit, offset=offset)
    items = [service.deployment_summary(plans, d) for d in page.items]
    return {"items": items, "total": page.total, "limit": limit, "offset": offset}


@router.get(
    "/deployments/{name}",
    response_model=DeploymentRead,
    name="get_deployment",
    summary="A deployment: settings, hysteresis and current plan",
    responses=problem_responses(401, 404),
)
def get_deployment(name: Name, deployments: DeploymentsDep, plans: PlansDep, response: Response, _reader: ReaderDep) -> Any:
    """The deployment with its plan in force; 404 for a name nobody created."""
    content = service.deployment_read(deployments, plans, deployments.get(name))
    response.headers["ETag"] = etag(content["version"])
    return content


@router.get(
    "/deployments/{name}/plans",
    response_model=PlanHistoryPage,
    name="list_deployment_plans",
    summary="A deployment's plan history, newest first (JSON or CSV)",
    responses={**csv_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS), **problem_responses(401, 404, 422)},
)
def list_deployment_plans(
    name: Name, deployments: DeploymentsDep, _reader: ReaderDep, as_csv: CsvDep, limit: Limit = 50, offset: Offset = 0
) -> Any:
    """Every plan made for the deployment (POST /v1/plans with its name, PUT, re-plans — adopted or
    not), newest first; `current` marks the plan in force. As CSV (`?format=csv` or
    `Accept: text/csv`) the page's plans as plan rows, newest first (a class plan's rows, a row per
    class, are its own CSV: GET /v1/plans/{id}?format=csv). 404 for an unknown deployment."""
    deployment = deployments.get(name)
    page = deployments.history(name, limit=limit, offset=offset)
    if as_csv:
        # a class plan's rows have other columns: its own CSV is GET /v1/plans/{id}?format=csv
        rows = [
            row for plan in page.items if not is_classes_plan(plan.response) for row in plan_csv_rows(plan.request, plan.response)
        ]
        return csv_response(rows_to_csv(rows, PLAN_CSV_COLUMNS), filename=f"deployment-{name}-plans.csv")
    items = [service.history_item(plan, deployment.current_plan_id) for plan in page.items]
    return {"items": items, "total": page.total, "limit": limit, "offset": offset}


@router.post(
    "/deployments/{name}/replan",
    response_model=ReplanResponse | ClassesReplanResponse,  # ClassesReplanResponse for a class deployment
    name="replan_deployment",
    summary="Plan a deployment again for a new forecast, diff it and decide with hysteresis",
    responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
)
def replan_deployment(
    name: Name,
    body: ReplanRequest,
    catalog: CatalogDep,
    idempotency: IdempotencyDep,
    settings: SettingsDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
    _planner: PlannerKeyDep,
) -> Response:
    """Plans again with the new workload (or only `arrival_rate_rps`), SLOs and constraints against
    today's catalog, and diffs the new plan against the current one: GPU type, tp, replicas, batch
    limit, precision, GPUs added/removed, cost per hour and per month (730 h), and why
    (`diff.why`: traffic, slo, constraints, prices, catalog).

    The current plan is re-evaluated by the planner's forward model (one replica at λ/r, the
    queueing model) at the new rate and at (1 + `headroom_margin`) × it. It is kept
    (`changed: false`, `reason` says why) while it meets every SLO with that margin and switching
    would save less than the hysteresis thresholds; a plan that misses the SLOs is always replaced.
    The new plan is stored in the history either way; `adopted` names the plan now in force.
    404 for an unknown deployment; 422 `infeasible-plan` when nothing meets the new SLOs.

    A class deployment (made by POST /v1/plans with `classes` and `name`) is re-planned from its
    classes: `class_rates_rps` gives new rates by class name, `classes` new classes, an empty body
    the same request; the answer (ClassesReplanResponse) diffs the arrangement, each pool (GPU, tp,
    replicas, classes, scheduling) and each class (rate, pool, latencies at its percentile), and
    adopts the new plan when the arrangement or any pool changes, or when the same pools' cost moved
    beyond the hysteresis thresholds (docs/traffic-classes.md)."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    content = service.replan(
        name,
        body,
        catalog,
        run=deadline.run,
        solver_time_limit_s=deadline.solver_time_limit_s(settings.solver_time_limit_s),
        default_provider=settings.default_price_provider,
    )
    if is_classes_plan(content["plan"]):
        metrics.record_plan_computed()  # a class plan reports no solver time
        read: ReplanResponse | ClassesReplanResponse = ClassesReplanResponse.model_validate(content)
    else:
        _record_plan(metrics, content["plan"])
        read = ReplanResponse.model_validate(content)
    answer = JSONResponse(
        jsonable_encoder(read),
        status_code=status.HTTP_200_OK,
        headers={"Location": f"/v1/plans/{content['plan']['id']}"},
    )
    return idempotency.respond(body, answer)


@router.get(
    "/plans/{plan_id}/recheck",
    response_model=RecheckResponse | ClassesRecheckResponse,
    name="recheck_plan",
    summary="Whether a stored plan still holds on today's catalog",
    tags=["plans"],
    responses=problem_responses(401, 404),
)
def recheck_plan(
    plan_id: Annotated[str, Path(max_length=64, description="The id POST /v1/plans answered with.")],
    catalog: CatalogDep,
    settings: SettingsDep,
    _reader: ReaderDep,
) -> Any:
    """Re-evaluates the plan's configuration at its own workload and SLOs with today's catalog
    (prices, efficiencies) by the forward model: whether it still meets every SLO, its cost now
    against when planned, the catalog versions then and now, and what changed for its GPUs. A class
    plan (ClassesRecheckResponse) is judged pool by pool at its own classes, by the queueing model and
    simulated again (the step simulator for an FCFS pool, the class simulator for a priority pool),
    with each class's figures and simulated p99s."""
    return service.recheck(plan_id, catalog, default_provider=settings.default_price_provider)
