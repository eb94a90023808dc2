"""Bodies of /v1/operations: a long-running request's state, progress and result (or the problem it
failed with), as GET /v1/operations/{id} answers it and POST /v1/what-if answers it with 202."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from api.problems import Problem
from api.schemas.catalog import Page
from api.schemas.what_if import WhatIfResponse

OperationStateName = Literal["queued", "running", "succeeded", "failed", "cancelled"]
OperationKindName = Literal["what-if"]


class OperationProgress(BaseModel):
    done: int = Field(ge=0, description="Units of work done (a what-if sweep's points).")
    total: int = Field(ge=0, description="Units of work in all.")
    eta_s: float | None = Field(
        default=None, ge=0, description="Seconds left at the rate units have been done so far; null until one is done."
    )


class OperationRead(BaseModel):
    """One operation. `result` is the answer the request would have had synchronously (for
    `what-if`, the WhatIfResponse) once `state` is `succeeded`; `problem` says why it `failed`."""

    id: str = Field(description="32 hex digits; the operation's URL is /v1/operations/{id}.")
    kind: OperationKindName = Field(description="What the operation runs: `what-if` (POST /v1/what-if).")
    state: OperationStateName = Field(description="queued → running → succeeded, failed or cancelled (the last three final).")
    progress: OperationProgress
    created_at: datetime
    started_at: datetime | None = Field(default=None, description="When a worker started its first unit.")
    finished_at: datetime | None = Field(default=None, description="When it succeeded, failed or was cancelled.")
    updated_at: datetime
    cancel_requested: bool = Field(description="POST /v1/operations/{id}:cancel was called.")
    attempts: int = Field(ge=1, description="1, plus one for each restart of the service it was resumed after.")
    result: WhatIfResponse | None = Field(default=None, description="The answer, once succeeded.")
    result_location: str | None = Field(default=None, description="Where a stored result can be read, if it is stored elsewhere.")
    problem: Problem | None = Field(default=None, description="Why it failed (an RFC 9457 problem document).")


class OperationPage(Page[OperationRead]):
    """A page of operations, newest first."""
