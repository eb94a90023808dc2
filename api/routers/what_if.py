"""`POST /v1/what-if` (what_if_sweep): the cheapest plan at each point of a sweep over arrival
rates (and optionally SLO values or GPU types), as one table a finance workbook can chart, in
JSON or CSV. Nothing is stored: a sweep is a question, not a plan of record. The work is the
what-if service's (api/what_if.py); this module parses, calls it and answers. A long sweep (asked
with `Prefer: respond-async`, or estimated past HEADROOM_ASYNC_THRESHOLD_S) is answered 202 with
the operation that runs it (api/tasks.py), to be read at its `Location`.
"""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from fastapi import APIRouter, Response

from api import what_if as service
from api.csv_export import CsvDep, CsvResponse, csv_only_responses, csv_response, csv_responses, rows_to_csv
from api.deps import CatalogDep, PlannerKeyDep, SettingsDep, TasksDep
from api.observability import DeadlineDep, MetricsDep
from api.operations import prefers_async
from api.problems import problem_responses
from api.routers.operations import PreferHeader, accepted, accepted_responses
from api.schemas.what_if import (
    MAX_WHAT_IF_OPERATION_POINTS,
    MAX_WHAT_IF_POINTS,
    WHAT_IF_CSV_COLUMNS,
    WhatIfRequest,
    WhatIfResponse,
)

router = APIRouter(tags=["what-if"])

WHAT_IF_CSV_DESCRIPTION = "One row per point of the sweep, in the order of `points`."


@router.post(
    "/what-if",
    response_model=WhatIfResponse,
    name="what_if_sweep",
    summary="The cheapest plan at each arrival rate (and SLO value or GPU type) of a sweep",
    responses={
        **accepted_responses("asked with `Prefer: respond-async`, or estimated longer than HEADROOM_ASYNC_THRESHOLD_S"),
        **csv_responses(WHAT_IF_CSV_DESCRIPTION, WHAT_IF_CSV_COLUMNS),
        **problem_responses(401, 403, 404, 422, 503),
    },
    description=f"""\
For one model, workload shape, SLOs and constraints (as POST /v1/plans takes them), plans the
cheapest deployment at every point of a sweep — arrival rates (`sweep.arrival_rates_rps`, or
`sweep.arrival_rate_range` {{start_rps, stop_rps, steps}}), times the values of one SLO target
(`sweep.slo`), times GPU types each planned alone (`sweep.gpus`) — and answers one table: per
point the GPU type, tp, replicas, GPUs, precision, batch limit, target ρ and cost per hour, per
month (730 h) and per million output tokens in USD, or `feasible: false` with the problem type,
constraint and reason (a point no plan serves does not fail the sweep). At most
{MAX_WHAT_IF_POINTS} points answered at once (else 422). Plans are not verified in the simulator unless
`verify` is true, and nothing is stored. `Accept: text/csv` or `?format=csv` answers the points as CSV.

Long sweeps run as operations: with `Prefer: respond-async` (up to {MAX_WHAT_IF_OPERATION_POINTS}
points), or when the sweep is estimated to take longer than the service's HEADROOM_ASYNC_THRESHOLD_S
(20 s by default), the answer is 202 with the queued operation and `Location: /v1/operations/{{id}}`;
its `result`, once `succeeded`, is this route's JSON answer (docs/operations.md).
Errors: unknown model, GPU type or efficiency profile → 404.""",
)
def what_if_sweep(
    body: WhatIfRequest,
    catalog: CatalogDep,
    settings: SettingsDep,
    _planner: PlannerKeyDep,
    as_csv: CsvDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
    tasks: TasksDep,
    prefer: PreferHeader = None,
) -> WhatIfResponse | Response:
    asked = prefers_async(prefer)
    if service.runs_as_operation(body, settings, asked=asked):
        return accepted(service.start_operation(body, catalog, settings, tasks), asked=asked)
    answer = service.what_if_sweep(body, catalog, settings, deadline, metrics)
    if as_csv:
        return _sweep_csv(answer)
    return answer


@router.post(
    "/what-if/csv",
    response_class=CsvResponse,
    name="what_if_sweep_csv",
    summary="A what-if sweep's points as CSV rows (for spreadsheets)",
    responses={**csv_only_responses(WHAT_IF_CSV_DESCRIPTION, WHAT_IF_CSV_COLUMNS), **problem_responses(401, 403, 404, 422, 503)},
)
def what_if_sweep_csv(
    body: WhatIfRequest,
    catalog: CatalogDep,
    settings: SettingsDep,
    _planner: PlannerKeyDep,
    deadline: DeadlineDep,
    metrics: MetricsDep,
) -> Response:
    """The points `POST /v1/what-if?format=csv` answers, from a route that answers only CSV, so a
    client generated from the OpenAPI document returns them as text. Always answered at once."""
    service.runs_as_operation(body, settings, asked=False)  # a sweep too large to answer at once is a 422
    return _sweep_csv(service.what_if_sweep(body, catalog, settings, deadline, metrics))


def _sweep_csv(answer: WhatIfResponse) -> Response:
    rows = [point.model_dump(mode="json", exclude={"classes"}) for point in answer.points]  # a mix's `class_figures` cell
    return csv_response(rows_to_csv(rows, WHAT_IF_CSV_COLUMNS), filename="what-if.csv")
