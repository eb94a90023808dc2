"""Every error the service returns is an RFC 9457 `application/problem+json` document, built here
from ONE table that maps exception types to a status and a problem type.

A problem carries `type`, `title`, `status`, `detail`, `instance` (the request path) and the
exception's `extensions` as extension members; a 422 lists every bad field in `errors`
(`field` as a dotted path, `pointer` as a JSON pointer into the body, `location`, `message`).
An exception type not in the table is looked up by its base classes, so a new planner error
subclass inherits its parent's mapping; anything unexpected is a 500 that leaks no internals.

To map a new exception: add one row to `PROBLEM_TYPES`.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm.exc import StaleDataError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import (
    ApiError,
    AuthenticationError,
    BrokerUnavailableError,
    MalformedHeaderError,
    NotReadyError,
    PermissionDeniedError,
    RequestTimeoutError,
)
from api.idempotency import IdempotencyConflictError
from api.schemas.plan_result import RelaxationRead
from catalog.errors import (
    AlreadyExistsError,
    CatalogError,
    InvalidRecordError,
    NotFoundError,
    VersionConflictError,
)
from planner.errors import (
    CalibrationError,
    ConvergenceError,
    HeadroomError,
    InfeasiblePlanError,
    ModelDoesNotFitError,
    OccupancySaturatedError,
    PlannerInputError,
    SimulationLimitError,
    SolverError,
    UnstableLoadError,
    UnsupportedConfigurationError,
)


class PayloadTooLargeError(ApiError):
    """A request body larger than the service accepts (HEADROOM_MAX_BODY_BYTES), refused unread."""

    title = "Request body too large"


class UnsupportedMediaTypeError(ApiError):
    """A body on a JSON route that is not `application/json`."""

    title = "Unsupported media type"


PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:headroom:problem:"

logger = logging.getLogger("headroom.api")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProblemType:
    """How one family of exceptions is answered. `title` None takes the exception's own title."""

    status: int
    name: str
    title: str | None = None

    @property
    def uri(self) -> str:
        return f"{PROBLEM_TYPE_BASE}{self.name}"


#: The one mapping table. Looked up along the exception's MRO, most specific class first.
PROBLEM_TYPES: dict[type[BaseException], ProblemType] = {
    # the HTTP edge
    AuthenticationError: ProblemType(status=401, name="unauthenticated"),
    PermissionDeniedError: ProblemType(status=403, name="forbidden"),
    MalformedHeaderError: ProblemType(status=400, name="malformed-header"),
    NotReadyError: ProblemType(status=503, name="not-ready"),
    RequestTimeoutError: ProblemType(status=503, name="request-timeout"),
    BrokerUnavailableError: ProblemType(status=503, name="broker-unavailable"),
    IdempotencyConflictError: ProblemType(status=409, name="idempotency-conflict"),
    PayloadTooLargeError: ProblemType(status=413, name="payload-too-large"),
    UnsupportedMediaTypeError: ProblemType(status=415, name="unsupported-media-type"),
    ApiError: ProblemType(status=400, name="bad-request"),
    RequestValidationError: ProblemType(status=422, name="invalid-request", title="Invalid request"),
    PydanticValidationError: ProblemType(status=422, name="invalid-request", title="Invalid request"),
    # the catalog
    NotFoundError: ProblemType(status=404, name="not-found"),
    AlreadyExistsError: ProblemType(status=409, name="already-exists"),
    VersionConflictError: ProblemType(status=412, name="version-conflict"),
    InvalidRecordError: ProblemType(status=422, name="invalid-record"),
    # a bare CatalogError is the server's state (not migrated, reference data unreadable)
    CatalogError: ProblemType(status=503, name="catalog-unavailable"),
    # the planner: an impossible request is an answer (422), a solver that gave up is a 503
    PlannerInputError: ProblemType(status=422, name="invalid-planner-input"),
    UnsupportedConfigurationError: ProblemType(status=422, name="unsupported-configuration"),
    ModelDoesNotFitError: ProblemType(status=422, name="model-does-not-fit"),
    UnstableLoadError: ProblemType(status=422, name="unstable-load"),
    OccupancySaturatedError: ProblemType(status=422, name="unstable-load"),
    InfeasiblePlanError: ProblemType(status=422, name="infeasible-plan"),
    CalibrationError: ProblemType(status=422, name="calibration-failed"),
    SimulationLimitError: ProblemType(status=422, name="simulation-too-large"),
    ConvergenceError: ProblemType(status=500, name="convergence-failed"),
    SolverError: ProblemType(status=503, name="solver-failed"),
    HeadroomError: ProblemType(status=422, name="planner-error"),
    # the database, when the repository let one through (a concurrent writer won a race)
    StaleDataError: ProblemType(status=412, name="version-conflict", title="Version conflict"),
    IntegrityError: ProblemType(status=409, name="conflict", title="Conflict"),
    OperationalError: ProblemType(status=503, name="database-unavailable", title="Database unavailable"),
    # routing (404 unknown path, 405 method) and everything else
    StarletteHTTPException: ProblemType(status=500, name="http-error"),
    Exception: ProblemType(status=500, name="internal-error", title="Internal server error"),
}


class FieldError(BaseModel):
    """One bad field of a request."""

    field: str = Field(description="Dotted path of the field, e.g. `peak_tflops.fp6` or `moe.experts_per_token`.")
    pointer: str | None = Field(default=None, description="JSON pointer (RFC 6901) into the request body.")
    location: str = Field(default="body", description="Where the field is: body, query, path or header.")
    message: str = Field(description="What is wrong, in a sentence.")


class Problem(BaseModel):
    """An RFC 9457 problem document. Extension members (e.g. `errors`, `shortfall_gb`) vary by type."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="URI naming the problem type, e.g. `urn:headroom:problem:not-found`.")
    title: str = Field(description="Short summary of the problem type.")
    status: int = Field(description="HTTP status code.")
    detail: str = Field(description="What went wrong in this occurrence, in a sentence a person can act on.")
    instance: str | None = Field(default=None, description="The request path this problem occurred on.")
    errors: list[FieldError] | None = Field(default=None, description="Each bad field (422 only).")
    request_id: str | None = Field(default=None, description="The request's X-Request-ID, to find it in the service's logs.")
    constraint: str | None = Field(
        default=None, description="infeasible-plan: the family of the first culprit (`ttft`, `budget`, `max_gpus`, …)."
    )
    culprits: list[str] | None = Field(
        default=None, description="infeasible-plan: the request fields that stand in the way (`slo.ttft_ms`, …)."
    )
    relaxations: list[RelaxationRead] | None = Field(
        default=None,
        description="infeasible-plan: each relaxation found to work when applied (the request re-planned with it); "
        "minimal within 5 % (integer limits exactly).",
    )
    relaxations_apply: Literal["any", "all"] | None = Field(
        default=None, description="infeasible-plan: `any` — each relaxation alone is enough; `all` — they must all move together."
    )


def problem_type_for(exc: BaseException) -> ProblemType:
    """The table row for `exc`: its own class, else the nearest base class in the table."""
    for cls in type(exc).__mro__:
        if cls in PROBLEM_TYPES:
            return PROBLEM_TYPES[cls]
    return PROBLEM_TYPES[Exception]


def problem_response(request: Request, exc: Exception) -> JSONResponse:
    """The problem document answering `exc` on `request`."""
    kind = problem_type_for(exc)
    status = kind.status
    title = kind.title
    headers: dict[str, str] = {}
    extensions: dict[str, Any] = {}
    problem_type = kind.uri

    if isinstance(exc, RequestValidationError | PydanticValidationError):
        errors = field_errors(exc.errors(), strip_body=isinstance(exc, RequestValidationError))
        detail = f"{len(errors)} invalid field(s): " + "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        extensions["errors"] = errors
    elif isinstance(exc, HeadroomError | ApiError):
        title = title or exc.title
        detail = exc.detail
        extensions.update(exc.extensions)
        if isinstance(exc, ApiError):
            headers.update(exc.headers)
    elif isinstance(exc, StarletteHTTPException):
        status = exc.status_code
        title = _status_phrase(status)
        detail = exc.detail if isinstance(exc.detail, str) else title
        headers.update(exc.headers or {})
        problem_type = "about:blank"
    elif status >= 500 and kind is PROBLEM_TYPES[Exception]:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        detail = "The server failed to answer this request; the error has been logged."
    else:
        logger.warning("%s on %s %s: %s", type(exc).__name__, request.method, request.url.path, exc)
        detail = _DATABASE_DETAILS.get(kind.name, "The request could not be completed.")

    body: dict[str, Any] = {
        "type": problem_type,
        "title": title or _status_phrase(status),
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    body.update((key, value) for key, value in jsonable_encoder(extensions).items() if key not in body)
    request_id = getattr(request.state, "request_id", None)  # set by api.observability's middleware
    if request_id is not None:
        body["request_id"] = headers["X-Request-ID"] = request_id
    return JSONResponse(body, status_code=status, headers=headers or None, media_type=PROBLEM_MEDIA_TYPE)


_DATABASE_DETAILS = {
    "version-conflict": "The record was changed by another request meanwhile; read it again and retry.",
    "conflict": "The write conflicts with a record that exists already.",
    "database-unavailable": "The catalog database cannot be reached; retry later.",
}


def field_errors(errors: Iterable[Mapping[str, Any]], *, strip_body: bool) -> list[dict[str, str]]:
    """Pydantic's error list as `{field, pointer, location, message}`, one entry per bad field."""
    result = []
    for error in errors:
        loc: Sequence[str | int] = tuple(error.get("loc", ()))
        location = "body"
        if strip_body and loc and loc[0] in ("body", "query", "path", "header", "cookie"):
            location, loc = str(loc[0]), loc[1:]
        # A model-level check (mode="after") reports at the model; its message names the field.
        path = [str(part) for part in loc if not _is_validator_tag(part)]
        message = str(error.get("msg", "invalid value"))
        if error.get("type") == "extra_forbidden":
            message = f"unknown field {path[-1]!r}" if path else message
        elif error.get("type") == "json_invalid":
            path = []
        result.append(
            {
                "field": ".".join(path) if path else "(body)" if location == "body" else location,
                "pointer": "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in path),
                "location": location,
                "message": message.removeprefix("Value error, "),
            }
        )
    return result


def _is_validator_tag(part: str | int) -> bool:
    # pydantic inserts the member type of a union or a function validator into loc, e.g. "function-after[...]"
    return isinstance(part, str) and ("[" in part and part.endswith("]"))


def _status_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries documenting the problem documents a route can answer with."""
    return {
        status: {
            "description": _DESCRIPTIONS.get(status, _status_phrase(status)),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


_DESCRIPTIONS = {
    400: "Malformed request: a body that cannot be decoded, or a malformed `Idempotency-Key` or `If-Match` header.",
    401: "No API key, or an unknown one (`Authorization: Bearer <key>`).",
    403: "The API key's role may not do this.",
    404: "No record with that slug.",
    409: "A record with that slug exists already, or the `Idempotency-Key` was used with another body "
    "(`reason: body_mismatch`) or its first request is still running (`reason: in_progress`, with `Retry-After`).",
    412: "`If-Match` names a version other than the stored one: read the record again and retry.",
    413: "The request body is larger than the service accepts (HEADROOM_MAX_BODY_BYTES, 1 MiB by default).",
    415: "The request body is not `application/json`.",
    422: "Invalid request (a body that is not JSON, or fields of the wrong type or out of range): `errors` lists each bad field.",
    503: "A dependency (database, solver) is not available, or the work ran past the request timeout "
    "(HEADROOM_REQUEST_TIMEOUT_S); retry later.",
}


def problem_schemas() -> dict[str, Any]:
    """The component schemas `problem_responses` refers to, for the OpenAPI document."""
    schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    definitions = schema.pop("$defs", {})
    return {"Problem": schema, **definitions}


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    return problem_response(request, exc)


class AnswerUnexpectedErrors:
    """An exception no handler answered becomes the 500 problem here, inside the app, and is not
    raised on: Starlette's outermost error middleware would send the same 500 and then re-raise,
    and the server closes a connection whose application raised, so a client's next request on that
    pooled keep-alive connection was reset. The error is logged by `problem_response`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            if started:  # the answer was under way: nothing sane can be sent now
                raise
            await problem_response(Request(scope, receive), exc)(scope, receive, send)


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every exception in `PROBLEM_TYPES` (and so every exception) with a problem document."""
    for exc_type in PROBLEM_TYPES:
        app.add_exception_handler(exc_type, _handle)  # type: ignore[arg-type]  # every key is an Exception; the table's type is wider
    app.add_middleware(AnswerUnexpectedErrors)  # innermost of the app's own middleware: observability sees the 500
