"""`POST /v1/plans` (create_plan) and `GET /v1/plans/{plan_id}` (get_plan): the cheapest plan that
meets the SLOs, stored immutable with its request and the catalog version;
`GET /v1/plans/{plan_id}/csv` (get_plan_csv): its CSV rows from a route that answers only CSV;
`GET /v1/plans` (list_plans): the stored plans newest first, a page at a time, so a plan made for
no deployment can be found without its id. A class plan (`classes`) is stored and read back the same way."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response, status
from fastapi.responses import JSONResponse
from pydantic import Discriminator, Tag

from api import plan_service as service
from api.classes_plans import CLASSES_CSV_COLUMNS, classes_csv_rows, create_classes_plan
from api.csv_export import (
    PLAN_CSV_COLUMNS,
    PLAN_CSV_DESCRIPTION,
    CsvDep,
    CsvResponse,
    csv_only_responses,
    csv_response,
    csv_responses,
    plan_csv_rows,
    rows_to_csv,
)
from api.deps import CallerRoleDep, CatalogDep, PlansDep, ReaderDep, SettingsDep, authorize_plan
from api.idempotency import IdempotencyDep
from api.observability import DeadlineDep, MetricsDep
from api.plan_list import plan_summary
from api.problems import problem_responses
from api.routers.catalog import Limit, Offset
from api.schemas.classes import ClassesPlanRequest, ClassesPlanResponse, is_classes_plan
from api.schemas.plan_response import PlanPage, PlanResponse
from api.schemas.plans import PlanRequest
from planner.units import MS_PER_S

router = APIRouter(tags=["plans"])


def _request_kind(value: Any) -> str:
    """`classes` in the body makes it a class plan; anything else is validated as a one-workload plan."""
    if isinstance(value, dict):
        return "classes[classes]" if "classes" in value else "plan[workload]"
    return "classes[classes]" if isinstance(value, ClassesPlanRequest) else "plan[workload]"


# The tags read like pydantic's own union-member tags, which the problem mapper drops from a bad
# field's path: an error in a one-workload plan points at `workload.…` as before classes existed.
PlanBody = Annotated[
    Annotated[PlanRequest, Tag("plan[workload]")] | Annotated[ClassesPlanRequest, Tag("classes[classes]")],
    Discriminator(_request_kind),
    Body(),
]


@router.post(
    "/plans",
    status_code=status.HTTP_201_CREATED,
    response_model=PlanResponse | ClassesPlanResponse,  # ClassesPlanResponse for a body with `classes`
    name="create_plan",
    summary="Plan the cheapest deployment that meets the SLOs",
    responses={
        **csv_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS, status_code=201),
        200: {
            "model": PlanResponse | ClassesPlanResponse,
            "description": "A dry run (`store: false`): the plan (or class plan, with `classes`), not stored.",
        },
        **problem_responses(401, 403, 404, 422, 503),
    },
)
def create_plan(
    body: PlanBody,
    catalog: CatalogDep,
    caller: CallerRoleDep,
    as_csv: CsvDep,
    idempotency: IdempotencyDep,
    settings: SettingsDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
) -> Response:
    """Chooses GPU type, tp, replicas, precision, batch limit and chunked-prefill budget at minimum
    on-demand cost so that the predicted p99 (or `slo.percentile`) latencies meet every target,
    verifies the plan in the simulator (unless `verify` is false) and explains it: the step model,
    memory, roofline, queueing, binding constraints with what a 10 % looser SLO would save,
    alternatives per GPU type and precision, and sensitivity to traffic. The plan is stored and
    can be read back at the `Location` header. 404 for an unknown model, GPU or quantization;
    422 when no plan exists, naming the constraint and the smallest relaxation. With `name`, the
    plan becomes that deployment's current plan (GET /v1/deployments/{name}). A retry with the same
    `Idempotency-Key` and body answers the first plan again and plans nothing. With `store: false`
    (a dry run, allowed for reader keys) the answer is 200 and nothing is written.

    With `classes` instead of `workload` (exactly one of them), several traffic classes of the model:
    the answer compares one FCFS pool at the tightest target, one priority pool,
    segregated pools and, with day profiles (`demand_rps`), background work deferred to off-peak
    hours, chooses the cheapest, and gives each class's predicted latencies (docs/traffic-classes.md).
    It is stored (201, `Location`) or dry-run (`store: false`, 200) as a one-workload plan is; the
    response model of the 201 is then ClassesPlanResponse."""
    authorize_plan(settings, caller, store=body.store)
    if body.store and (replayed := idempotency.replay(body)) is not None:
        return replayed
    if isinstance(body, ClassesPlanRequest):
        classes_content = create_classes_plan(
            body,
            catalog,
            run=deadline.run,
            solver_time_limit_s=deadline.solver_time_limit_s(settings.solver_time_limit_s),
            default_provider=settings.default_price_provider,
            checkpoint=deadline.checkpoint,
        )
        metrics.record_plan_computed()
        return _answer(
            body.store,
            classes_content["id"],
            idempotency,
            body,
            classes_content,
            rows_to_csv(classes_csv_rows(classes_content), CLASSES_CSV_COLUMNS) if as_csv else None,
        )
    content = service.create_named_plan(
        body,
        catalog,
        run=deadline.run,
        solver_time_limit_s=deadline.solver_time_limit_s(settings.solver_time_limit_s),
        default_provider=settings.default_price_provider,
        checkpoint=deadline.checkpoint,
    )
    metrics.record_plan_computed()
    metrics.record_solver_time(content["provenance"]["solve_ms"] / MS_PER_S)
    text = rows_to_csv(plan_csv_rows(body.model_dump(mode="json"), content), PLAN_CSV_COLUMNS) if as_csv else None
    return _answer(body.store, content["id"], idempotency, body, content, text)


def _answer(
    store: bool, plan_id: str, idempotency: IdempotencyDep, body: Any, content: dict[str, Any], text: str | None
) -> Response:
    """A dry run's 200, or a stored plan's 201 with its Location (kept as the Idempotency-Key's answer);
    `text` is the CSV when the caller asked for it."""
    if not store:
        if text is not None:
            return csv_response(text, filename=f"plan-{plan_id}.csv")
        return JSONResponse(content)
    location = f"/v1/plans/{plan_id}"
    if text is not None:
        answer = csv_response(
            text, filename=f"plan-{plan_id}.csv", status_code=status.HTTP_201_CREATED, headers={"Location": location}
        )
    else:
        answer = JSONResponse(content, status_code=status.HTTP_201_CREATED, headers={"Location": location})
    return idempotency.respond(body, answer)


def _csv_rows(request: dict[str, Any], response: dict[str, Any]) -> str:
    """A stored plan's CSV: a row per class of a class plan, else the plan's rows."""
    if is_classes_plan(response):
        return rows_to_csv(classes_csv_rows(response), CLASSES_CSV_COLUMNS)
    return rows_to_csv(plan_csv_rows(request, response), PLAN_CSV_COLUMNS)


@router.get(
    "/plans",
    response_model=PlanPage,
    name="list_plans",
    summary="List stored plans, newest first",
    responses=problem_responses(401, 422),
)
def list_plans(
    plans: PlansDep,
    _reader: ReaderDep,
    name: Annotated[str | None, Query(max_length=200, description="Only plans made for this deployment.")] = None,
    model: Annotated[str | None, Query(max_length=64, description="Only plans of this model (catalog slug).")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Stored plans (dry runs are not stored) newest first, each summarised: model, workload, GPU,
    size and cost; `total` counts every match. The whole plan is GET /v1/plans/{id}."""
    page = plans.list_plans(name=name, model=model, limit=limit, offset=offset)
    return {"items": [plan_summary(plan) for plan in page.items], "total": page.total, "limit": limit, "offset": offset}


@router.get(
    "/plans/{plan_id}",
    response_model=PlanResponse | ClassesPlanResponse,
    name="get_plan",
    summary="A stored plan (JSON or CSV)",
    responses={**csv_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS), **problem_responses(401, 404)},
)
def get_plan(plan_id: str, plans: PlansDep, _reader: ReaderDep, as_csv: CsvDep) -> PlanResponse | ClassesPlanResponse | Response:
    """The plan exactly as `create_plan` answered it (a class plan as ClassesPlanResponse), or as CSV
    rows (`?format=csv` or `Accept: text/csv`; a row per class for a class plan); 404 for an id nobody issued."""
    stored = plans.get(plan_id)
    if as_csv:
        return csv_response(_csv_rows(stored.request, stored.response), filename=f"plan-{plan_id}.csv")
    if is_classes_plan(stored.response):
        return ClassesPlanResponse.model_validate(stored.response)
    return PlanResponse.model_validate(stored.response)


@router.get(
    "/plans/{plan_id}/csv",
    response_class=CsvResponse,
    name="get_plan_csv",
    summary="A stored plan as CSV rows (for spreadsheets)",
    responses={**csv_only_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS), **problem_responses(401, 404)},
)
def get_plan_csv(plan_id: str, plans: PlansDep, _reader: ReaderDep) -> Response:
    """The same rows as `GET /v1/plans/{plan_id}?format=csv`, from a route that answers only CSV, so
    a client generated from the OpenAPI document returns them as text; 404 for an id nobody issued."""
    stored = plans.get(plan_id)
    return csv_response(_csv_rows(stored.request, stored.response), filename=f"plan-{plan_id}.csv")
