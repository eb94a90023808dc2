"""`POST /v1/fleet-plans` and `GET /v1/fleet-plans/{id}`: many workloads over periods of demand, on
reserved, on-demand and spot GPUs within inventory, planned as one MILP and stored.
operationIds: create_fleet_plan, get_fleet_plan, and get_fleet_plan_csv (the schedule from a route
that answers only CSV)."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response, status
from fastapi.exceptions import RequestValidationError

from api import fleet_operation
from api import fleet_plans as service
from api.csv_export import CsvDep, CsvResponse, csv_only_responses, csv_response
from api.deps import CatalogDep, FleetPlansDep, PlannerKeyDep, ReaderDep, SettingsDep, TasksDep
from api.fleet_plans import MAX_MILP_COLUMNS
from api.idempotency import IdempotencyDep
from api.observability import DeadlineDep, MetricsDep
from api.operations import prefers_async
from api.problems import problem_responses
from api.routers.operations import PreferHeader, accepted, accepted_responses
from api.schemas.fleet_plan_csv import CSV_COLUMNS, CSV_DESCRIPTION, CSV_MEDIA_TYPE, schedule_csv
from api.schemas.fleet_plan_response import FleetPlanResponse
from api.schemas.fleet_plans import (
    MAX_DISTINCT_SHAPES,
    MAX_PERIODS,
    MAX_SHAPE_OPTIONS,
    MAX_WORKLOAD_PERIODS,
    MAX_WORKLOADS,
    FleetPlanRequest,
)
from planner.units import MS_PER_S

router = APIRouter(tags=["fleet-plans"])


def _csv_content() -> dict[str, Any]:
    return {CSV_MEDIA_TYPE: {"schema": {"type": "string"}, "example": "period,start_hour,workload,gpu,...\n"}}


def _answer(plan: FleetPlanResponse, *, csv: bool, status_code: int, headers: dict[str, str]) -> Response:
    if csv:
        return csv_response(schedule_csv(plan), filename=f"fleet-plan-{plan.id}.csv", status_code=status_code, headers=headers)
    return Response(plan.model_dump_json(), status_code=status_code, media_type="application/json", headers=headers)


@router.post(
    "/fleet-plans",
    status_code=status.HTTP_201_CREATED,
    response_model=FleetPlanResponse,
    name="create_fleet_plan",
    summary="Plan reserved, on-demand and spot GPUs for many workloads over periods of demand",
    responses={
        201: {"description": "The plan (stored; `Location` names it).", "content": _csv_content()},
        **accepted_responses(
            "asked with `Prefer: respond-async` or estimated past the threshold; its `result_location` is the stored plan"
        ),
        **problem_responses(401, 403, 404, 422, 503),
    },
    description=f"""\
Chooses, as one MILP, how many GPUs of each type to reserve (held and paid in every period), how
many to rent on demand (and on spot) in each period, and which configuration (GPU, precision, tp,
batch limit, chunk budget) and how many replicas serve each workload in each period, at minimum
cost over the horizon, so that every period's demand is met within each workload's SLOs:

    minimise   Σ_k R_k·π^res_k·h·P + Σ_(k,p) (O_kp·π^od_k + S_kp·π^spot_k)·h
    subject to Σ_c r_wcp·μ_c ≥ d_wp  (and N+1, min_replicas)
               Σ_(w, c on k) r_wcp·g_c ≤ R_k + O_kp + S_kp ≤ inventory_kp,  total cost ≤ budget

μ_c is the candidate's `max_rps_at_slo` from the queueing model, computed once per distinct
(model, request mix, SLO) — not per period — over the undominated candidates only.
Prices come from the catalog unless `prices` overrides them. `share_pools` is accepted but not
modelled (each workload runs its own replicas; `notes` says so).

`Accept: text/csv` or `?format=csv` answers with the schedule as CSV. {CSV_DESCRIPTION}

Errors: unknown model, GPU or efficiency profile → 404; mismatched period counts, negative
demand, duplicate names, an empty workload list → 422 `invalid-request` listing each field; a
workload no allowed configuration serves within its SLOs → 422 `infeasible-plan` naming the
workload; demand that no allowed configuration can meet within inventory → 422 `infeasible-plan`
with `workload`, `period`, `gpu`, `gpus_short` and every `shortfalls` entry; a budget below the
cheapest fleet → 422 with `constraint: budget` and `needed`.

Bounded work: at most {MAX_WORKLOADS} workloads, {MAX_PERIODS} periods, {MAX_WORKLOAD_PERIODS} workloads × periods,
{MAX_DISTINCT_SHAPES} distinct workload shapes (model, mix, arrival_cv, SLO) and {MAX_SHAPE_OPTIONS} shapes × grid
points; past one → 422 `invalid-request` naming the bound. A MILP of more than {MAX_MILP_COLUMNS} replica variables
(Σ candidates × periods) → 422 `invalid-planner-input` with `constraint: milp_columns`, `limit` and
`needed`. The MILP's time limit is the least of `solver_time_limit_s`, the service's
HEADROOM_SOLVER_TIME_LIMIT_S and what is left of the request's HEADROOM_REQUEST_TIMEOUT_S; past
that timeout → 503 `request-timeout`, and the work stops (nothing is stored).

With `Prefer: respond-async`, or without it when the plan is estimated to take longer than
HEADROOM_ASYNC_THRESHOLD_S (distinct workload shapes × GPU types × {fleet_operation.TABLE_COST_S} s a
candidate table, and for a workload that may run separate pools its distinct demands × the GPU types its
pool options plan across × {fleet_operation.POOL_PLAN_COST_S} s), the plan runs as an operation instead: 202 with the queued operation and
`Location: /v1/operations/{{id}}`. Its candidate tables, one per (shape, GPU type), are computed by
the task workers and the MILP solved in a last unit; each unit is bounded by the operation's time
(9 minutes), not the request's, and once `succeeded` the operation's `result` is this route's
answer and its `result_location` the stored plan (docs/operations.md).""",
)
def create_fleet_plan(
    body: FleetPlanRequest,
    catalog: CatalogDep,
    fleet_plans: FleetPlansDep,
    _planner: PlannerKeyDep,
    idempotency: IdempotencyDep,
    as_csv: CsvDep,
    metrics: MetricsDep,
    settings: SettingsDep,
    deadline: DeadlineDep,
    tasks: TasksDep,
    prefer: PreferHeader = None,
) -> Response:
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    errors = body.field_errors()
    if errors:
        raise RequestValidationError(errors)
    asked = prefers_async(prefer)
    if fleet_operation.runs_as_operation(body, catalog, settings, asked=asked):  # tables fan out to task workers
        operation = fleet_operation.start_operation(body, catalog, settings, tasks)
        return idempotency.respond(body, accepted(operation, asked=asked))
    plan = service.create_fleet_plan(
        body,
        catalog,
        fleet_plans,
        default_provider=settings.default_price_provider,
        deadline=deadline,
        solver_time_limit_s=settings.solver_time_limit_s,
    )
    metrics.record_plan_computed()
    metrics.record_solver_time(plan.solver.solve_ms / MS_PER_S)
    headers = {"Location": f"/v1/fleet-plans/{plan.id}"}
    return idempotency.respond(body, _answer(plan, csv=as_csv, status_code=status.HTTP_201_CREATED, headers=headers))


@router.get(
    "/fleet-plans/{plan_id}",
    response_model=FleetPlanResponse,
    name="get_fleet_plan",
    summary="A stored fleet plan (JSON or CSV)",
    responses={200: {"description": "The plan as it was answered.", "content": _csv_content()}, **problem_responses(401, 404)},
)
def get_fleet_plan(
    plan_id: Annotated[str, Path(max_length=64, description="The id a POST answered with.")],
    fleet_plans: FleetPlansDep,
    _reader: ReaderDep,
    as_csv: CsvDep,
) -> Response:
    """The plan exactly as the POST answered it; `Accept: text/csv` or `?format=csv` for the schedule as CSV.
    404 for an id nobody issued."""
    stored = fleet_plans.get(plan_id)
    plan = FleetPlanResponse.model_validate(stored.response)
    return _answer(plan, csv=as_csv, status_code=status.HTTP_200_OK, headers={})


@router.get(
    "/fleet-plans/{plan_id}/csv",
    response_class=CsvResponse,
    name="get_fleet_plan_csv",
    summary="A stored fleet plan's schedule as CSV (for spreadsheets)",
    responses={**csv_only_responses(CSV_DESCRIPTION, CSV_COLUMNS), **problem_responses(401, 404)},
)
def get_fleet_plan_csv(
    plan_id: Annotated[str, Path(max_length=64, description="The id a POST answered with.")],
    fleet_plans: FleetPlansDep,
    _reader: ReaderDep,
) -> Response:
    """The schedule `GET /v1/fleet-plans/{plan_id}?format=csv` answers, from a route that answers only
    CSV, so a client generated from the OpenAPI document returns it as text; 404 for an id nobody issued."""
    plan = FleetPlanResponse.model_validate(fleet_plans.get(plan_id).response)
    return csv_response(schedule_csv(plan), filename=f"fleet-plan-{plan.id}.csv")
