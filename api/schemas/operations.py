"""Bodies of /v1/operations: a long-running request's state, progress and result (or the problem it
failed with), as GET /v1/operations/{id} answers it and the routes that run as one (POST /v1/what-if,
/v1/fleet-plans, /v1/deployments:replan) answer it with 202."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.problems import Problem
from api.schemas.catalog import Page
from api.schemas.deployments import ClassesReplanResponse, ReplanResponse
from api.schemas.fleet_plan_response import FleetPlanResponse
from api.schemas.what_if import WhatIfResponse

OperationStateName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
OperationKindName = Literal["what-if", "deployments-replan", "fleet-plan"]


class BulkReplanRequest(BaseModel):
    """Which deployments `POST /v1/deployments:replan` plans again: those named, or all of them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    deployments: list[Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^/\x00-\x1f]+$")]] | None = Field(
        default=None, min_length=1, max_length=500, description="Deployment names; omitted: every deployment (up to 500)."
    )


class BulkReplanItem(BaseModel):
    deployment: str
    changed: bool = Field(description="Whether the deployment now runs the new plan.")
    replan: ReplanResponse | ClassesReplanResponse | None = Field(
        description="What POST /v1/deployments/{name}/replan answers (a class deployment's: ClassesReplanResponse); "
        "null with a problem."
    )
    problem: Problem | None = Field(description="Why this deployment could not be re-planned (e.g. infeasible-plan).")


class BulkReplanResult(BaseModel):
    """A bulk re-plan's outcome: one item per deployment, in the order asked."""

    items: list[BulkReplanItem]
    changed: int = Field(ge=0, description="Deployments that now run a new plan.")
    failed: int = Field(ge=0, description="Deployments that could not be re-planned (their items carry the problem).")


class OperationProgress(BaseModel):
    done: int = Field(
        ge=0,
        description="Units of work done (a what-if sweep's points; a fleet plan's candidate tables, one per workload shape and GPU type, then its MILP; a bulk re-plan's deployments).",
    )
    total: int = Field(ge=0, description="Units of work in all.")
    eta_s: float | None = Field(
        default=None, ge=0, description="Seconds left at the rate units have been done so far; null until one is done."
    )


class OperationRead(BaseModel):
    """One operation. `result` is its answer once `state` is `succeeded` (for `what-if`, the
    WhatIfResponse the synchronous route gives); `problem` says why it `failed`."""

    id: str = Field(description="32 hex digits; the operation's URL is /v1/operations/{id}.")
    kind: OperationKindName = Field(
        description="What the operation runs: `what-if` (POST /v1/what-if), `deployments-replan` (POST "
        "/v1/deployments:replan), `fleet-plan` (POST /v1/fleet-plans)."
    )
    state: OperationStateName = Field(description="queued → running → succeeded, failed or cancelled (the last three final).")
    progress: OperationProgress
    created_at: datetime
    started_at: datetime | None = Field(default=None, description="When a worker started its first unit.")
    finished_at: datetime | None = Field(default=None, description="When it succeeded, failed or was cancelled.")
    updated_at: datetime
    cancel_requested: bool = Field(description="POST /v1/operations/{id}:cancel was called.")
    attempts: int = Field(ge=1, description="1, plus one for each restart of the service it was resumed after.")
    result: WhatIfResponse | BulkReplanResult | FleetPlanResponse | None = Field(
        default=None,
        description="The answer, once succeeded: a WhatIfResponse for `what-if`, a BulkReplanResult for `deployments-replan`, "
        "the stored FleetPlanResponse for `fleet-plan` (also at `result_location`).",
    )
    result_location: str | None = Field(default=None, description="Where a stored result can be read, if it is stored elsewhere.")
    problem: Problem | None = Field(default=None, description="Why it failed (an RFC 9457 problem document).")


class OperationPage(Page[OperationRead]):
    """A page of operations, newest first."""
