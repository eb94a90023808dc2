"""`POST /v1/plans` (create_plan) and `GET /v1/plans/{plan_id}` (get_plan): the cheapest plan that
meets the SLOs, stored immutable with its request and the catalog version (issue 5)."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from datetime import UTC, datetime

from fastapi import APIRouter, Response, status
from fastapi.responses import JSONResponse

from api.csv_export import PLAN_CSV_COLUMNS, PLAN_CSV_DESCRIPTION, CsvDep, csv_response, csv_responses, plan_csv_rows, rows_to_csv
from api.deps import CatalogDep, PlannerKeyDep, ReaderDep, SessionDep
from api.idempotency import IdempotencyDep
from api.problems import problem_responses
from api.schemas.plans import DEFAULT_PRECISIONS, PlanRequest, PlanResponse, plan_response
from catalog.deployments import Deployments
from catalog.errors import NotFoundError
from catalog.plans import Plans, new_plan_id
from catalog.repository import Catalog
from planner.planning import PlanningInputs, PlanningRequest, plan_capacity

router = APIRouter(tags=["plans"])

#: Efficiency names every GPU has; any other name is a stored profile that some GPUs may lack.
BUILT_IN_EFFICIENCIES = ("calibrated", "ideal")
#: Upper bound on GPU types gathered when a request names none (the catalog's page limit).
MAX_GPU_TYPES = 100


def planning_inputs(body: PlanRequest, catalog: Catalog) -> PlanningInputs:
    """Specs for the planner: the named (or every) GPU at the requested efficiencies, the model,
    the allowed precisions. Unknown slugs are 404; a named profile missing for a GPU the request
    names is 404, and GPUs the request does not name are skipped when they lack it."""
    profile = body.efficiency_profile
    constraints = body.constraints
    model = catalog.model_spec(body.model)
    if constraints.gpus is not None:
        gpus = tuple(catalog.gpu_spec(slug, profile) for slug in dict.fromkeys(constraints.gpus))
    else:
        specs = []
        for record in catalog.list_gpus(limit=MAX_GPU_TYPES).items:
            try:
                specs.append(catalog.gpu_spec(record["slug"], profile))
            except NotFoundError:
                if profile in BUILT_IN_EFFICIENCIES:
                    raise
        if not specs and profile not in BUILT_IN_EFFICIENCIES:
            raise NotFoundError(
                f"no GPU has an efficiency profile named {profile!r}: use 'calibrated', 'ideal' or a profile stored "
                "with POST /v1/calibrations", kind="efficiency_profile", name=profile,
            )
        gpus = tuple(specs)
    for slug in constraints.inventory:
        catalog.get_gpu(slug)  # 404 for an inventory of a GPU nobody catalogued
    if constraints.precisions is not None:
        pairs = [(p.weights, p.kv_cache) for p in constraints.precisions]
        precisions = tuple(catalog.precision(w, kv) for w, kv in dict.fromkeys(pairs))
    else:
        known = {record["slug"] for record in catalog.list_quantizations(limit=MAX_GPU_TYPES).items}
        precisions = tuple(catalog.precision(w, kv) for w, kv in DEFAULT_PRECISIONS if w in known and kv in known)
    return PlanningInputs(
        model=model, gpus=gpus, precisions=precisions, efficiency_profile=profile, catalog_version=catalog.catalog_version()
    )


@router.post(
    "/plans",
    status_code=status.HTTP_201_CREATED,
    response_model=PlanResponse,
    name="create_plan",
    summary="Plan the cheapest deployment that meets the SLOs",
    responses={**csv_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS, status_code=201), **problem_responses(401, 403, 404, 422, 503)},
)
def create_plan(
    body: PlanRequest, catalog: CatalogDep, session: SessionDep, _planner: PlannerKeyDep, as_csv: CsvDep,
    idempotency: IdempotencyDep,
) -> Response:
    """Chooses GPU type, tp, replicas, precision, batch limit and chunked-prefill budget at minimum
    on-demand cost so that the predicted p99 (or `slo.percentile`) latencies meet every target,
    verifies the plan in the simulator (unless `verify` is false) and explains it: the step model,
    memory, roofline, queueing, binding constraints with what a 10 % looser SLO would save,
    alternatives per GPU type and precision, and sensitivity to traffic. The plan is stored and
    can be read back at the `Location` header. 404 for an unknown model, GPU or quantization;
    422 when no plan exists, naming the constraint and the smallest relaxation. With `name`, the
    plan becomes that deployment's current plan (GET /v1/deployments/{name}). A retry with the same
    `Idempotency-Key` and body answers the first plan again and plans nothing."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    inputs = planning_inputs(body, catalog)
    request = PlanningRequest(
        workload=body.workload.to_workload(),
        slo=body.slo.to_slo(),
        constraints=body.constraints.to_constraints(),
        verify=body.verify,
    )
    result = plan_capacity(request, inputs)
    plan_id = new_plan_id()
    created_at = datetime.now(UTC)
    content = plan_response(plan_id, body.name, result, created_at.isoformat())
    Plans(session).save(
        plan_id=plan_id,
        name=body.name,
        request=body.model_dump(mode="json"),
        response=content,
        catalog_version=inputs.catalog_version,
        created_at=created_at,
    )
    Deployments(session).record_named_plan(body.name, plan_id, body.model_dump(mode="json"))
    location = f"/v1/plans/{plan_id}"
    if as_csv:
        text = rows_to_csv(plan_csv_rows(body.model_dump(mode="json"), content), PLAN_CSV_COLUMNS)
        answer = csv_response(text, filename=f"plan-{plan_id}.csv", status_code=status.HTTP_201_CREATED, headers={"Location": location})
    else:
        answer = JSONResponse(content, status_code=status.HTTP_201_CREATED, headers={"Location": location})
    return idempotency.respond(body, answer)


@router.get(
    "/plans/{plan_id}",
    response_model=PlanResponse,
    name="get_plan",
    summary="A stored plan (JSON or CSV)",
    responses={**csv_responses(PLAN_CSV_DESCRIPTION, PLAN_CSV_COLUMNS), **problem_responses(401, 404)},
)
def get_plan(plan_id: str, session: SessionDep, _reader: ReaderDep, as_csv: CsvDep) -> PlanResponse | Response:
    """The plan exactly as `create_plan` answered it, or as CSV rows (`?format=csv` or `Accept: text/csv`);
    404 for an id nobody issued."""
    stored = Plans(session).get(plan_id)
    if as_csv:
        return csv_response(rows_to_csv(plan_csv_rows(stored.request, stored.response), PLAN_CSV_COLUMNS), filename=f"plan-{plan_id}.csv")
    return PlanResponse.model_validate(stored.response)
