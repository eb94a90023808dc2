"""`GET /v1/operations/{operation_id}` (get_operation): a long-running request's state, progress and
result; `GET /v1/operations` (list_operations): newest first, filtered by state and kind, a page at a
time; `POST /v1/operations/{operation_id}:cancel` (cancel_operation); and `POST
/v1/deployments:replan` (replan_deployments), which is always an operation. Other operations are
created by the routes that may run as one (POST /v1/what-if with `Prefer: respond-async`);
api/tasks.py runs them."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, status
from fastapi.responses import JSONResponse

from api import bulk_replan
from api.deps import DeploymentsDep, OperationsDep, PlannerKeyDep, ReaderDep, SettingsDep, TasksDep
from api.operations import RESPOND_ASYNC, operation_location, operation_read
from api.problems import problem_responses
from api.routers.catalog import Limit, Offset
from api.schemas.operations import (
    BulkReplanRequest,
    OperationKindName,
    OperationPage,
    OperationRead,
    OperationStateName,
)
from catalog.operations import StoredOperation

router = APIRouter(tags=["operations"])

#: RFC 7240's `Prefer` request header, as routes that may answer with an operation declare it.
PreferHeader = Annotated[
    str | None,
    Header(alias="Prefer", description="`respond-async` (RFC 7240): answer 202 with an operation at once instead of waiting."),
]


def accepted_responses(when: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI entry of a route's 202: the queued operation, its `Location`, and `Preference-Applied`."""
    return {
        202: {
            "model": OperationRead,
            "description": f"The work runs as an operation ({when}): the operation, queued; GET its `Location` until `state` is final.",
            "headers": {
                "Location": {"description": "The operation's path.", "schema": {"type": "string", "pattern": "^/v1/operations/"}},
                "Preference-Applied": {
                    "description": "`respond-async` when the request asked for it (RFC 7240).",
                    "schema": {"type": "string"},
                },
            },
        }
    }


def accepted(operation: StoredOperation, *, asked: bool) -> JSONResponse:
    """202 with the queued operation, `Location` and (when asked for) `Preference-Applied: respond-async`."""
    headers = {"Location": operation_location(operation.id)} | ({"Preference-Applied": RESPOND_ASYNC} if asked else {})
    content = OperationRead.model_validate(operation_read(operation)).model_dump(mode="json")
    return JSONResponse(content, status_code=status.HTTP_202_ACCEPTED, headers=headers)


@router.get(
    "/operations",
    response_model=OperationPage,
    name="list_operations",
    summary="List operations, newest first",
    responses=problem_responses(401, 422),
)
def list_operations(
    operations: OperationsDep,
    _reader: ReaderDep,
    state: Annotated[OperationStateName | None, Query(description="Only operations in this state.")] = None,
    kind: Annotated[OperationKindName | None, Query(description="Only operations of this kind.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Operations newest first with their state and progress; `total` counts every match. Results
    are left out (`result` null): GET /v1/operations/{id} has each."""
    page = operations.list_operations(state=state, kind=kind, limit=limit, offset=offset)
    items = [operation_read(operation, with_result=False) for operation in page.items]
    return {"items": items, "total": page.total, "limit": limit, "offset": offset}


@router.get(
    "/operations/{operation_id}",
    response_model=OperationRead,
    name="get_operation",
    summary="An operation: state, progress, and its result or problem",
    responses=problem_responses(401, 404),
)
def get_operation(operation_id: str, operations: OperationsDep, _reader: ReaderDep) -> Any:
    """The operation's state (queued, running, succeeded, failed, cancelled), progress {done, total,
    eta_s}, timestamps, and once finished its `result` (for `what-if` the WhatIfResponse the
    synchronous route answers) or the `problem` it failed with; 404 for an id nobody issued."""
    return operation_read(operations.get(operation_id))


@router.post(
    "/operations/{operation_id}:cancel",
    response_model=OperationRead,
    name="cancel_operation",
    summary="Cancel an operation",
    responses=problem_responses(401, 403, 404),
)
def cancel_operation(operation_id: str, operations: OperationsDep, _planner: PlannerKeyDep) -> Any:
    """A queued or running operation becomes `cancelled` at once: units not started are skipped and
    a unit being computed is not used. A finished operation is answered as it is (cancelling is
    idempotent); 404 for an id nobody issued."""
    return operation_read(operations.cancel(operation_id))


@router.post(
    "/deployments:replan",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=OperationRead,
    name="replan_deployments",
    tags=["deployments"],
    summary="Re-plan many deployments as one operation",
    responses={**accepted_responses("on every call"), **problem_responses(401, 403, 404, 422)},
)
def replan_deployments(
    body: BulkReplanRequest, deployments: DeploymentsDep, settings: SettingsDep, tasks: TasksDep, _planner: PlannerKeyDep
) -> JSONResponse:
    """Each named deployment (or every one) planned again for its stored request, as `POST
    /v1/deployments/{name}/replan` with an empty body does — the nightly re-plan as one call. One
    unit per deployment, run by the task workers; the operation's `result` lists each deployment's
    re-plan (or the problem that stopped it, e.g. `infeasible-plan`) and counts those changed.
    404 when a named deployment does not exist."""
    names = bulk_replan.deployment_names(deployments, body.deployments)
    operation = tasks.submit(
        kind=bulk_replan.OPERATION_KIND, request=bulk_replan.operation_request(names, settings), units_total=len(names)
    )
    return accepted(operation, asked=False)
