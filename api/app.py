"""The FastAPI application factory: `create_app(settings)` builds one service instance.

Adding an area of the API:
1. `api/schemas/<area>.py`: pydantic request/response bodies (`PlanRequest`, `PlanResponse`),
   units in field names and descriptions.
2. `api/routers/<area>.py`: `router = APIRouter(tags=[...])`; plain `def` handlers named after
   their operationId (the route name becomes the operationId), taking `CatalogDep`,
   `SettingsDep`, `ReaderDep` / `PlannerKeyDep` / `AdminKeyDep` from `api/deps.py`; no session
   handling and no status-code logic: raise the typed planner/catalog error and
   `api/problems.py` answers (add a row to `PROBLEM_TYPES` for a new exception type);
   document them with `responses=problem_responses(...)`.
3. One line here: append the router to `ROUTERS`.
4. `python -m api.cli openapi export` (= `headroom openapi export`) and commit openapi/openapi.json;
   tests/api/test_openapi.py fails until the committed document matches the app.
"""

from __future__ import annotations

import gc
import json
import logging
import re
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import api
from api.docs_assets import install_docs
from api.errors import NotReadyError
from api.fleet_tables import stop_table_workers
from api.observability import install_observability
from api.problems import (
    PROBLEM_MEDIA_TYPE,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    install_problem_handlers,
    problem_response,
    problem_responses,
    problem_schemas,
)
from api.routers import calibrations as calibration_routes
from api.routers import capacity as capacity_routes
from api.routers import catalog as catalog_routes
from api.routers import charts as chart_routes
from api.routers import deploy as deploy_routes
from api.routers import deployments as deployment_routes
from api.routers import evaluate as evaluate_routes
from api.routers import explorer as explorer_routes
from api.routers import fleet_plans as fleet_plan_routes
from api.routers import instances as instance_routes
from api.routers import keys as key_routes
from api.routers import operations as operation_routes
from api.routers import plans as plan_routes
from api.routers import prices as price_routes
from api.routers import simulate as simulate_routes
from api.routers import what_if as what_if_routes
from api.settings import Settings
from api.tasks import TaskEngine
from catalog.db import make_engine, make_session_factory
from catalog.migrate import is_at_head

logger = logging.getLogger("headroom.app")

#: Routers mounted under /v1, in the order the OpenAPI document lists them.
ROUTERS: tuple[APIRouter, ...] = (
    catalog_routes.router,
    price_routes.router,
    instance_routes.router,
    plan_routes.router,
    deploy_routes.router,
    calibration_routes.router,
    fleet_plan_routes.router,
    evaluate_routes.router,
    simulate_routes.router,
    deployment_routes.router,
    what_if_routes.router,
    operation_routes.router,
    capacity_routes.router,
    chart_routes.router,
    key_routes.router,
)

DESCRIPTION = """\
Capacity planning for LLM inference: which GPUs, how many, at what precision, tensor-parallel
degree, batch limit and utilisation serve a workload within its p99 latency SLOs at minimum
cost, and why. `POST /v1/plans` answers with the plan and its justification (roofline step
times, KV-cache limit, Little's law and the waiting-time tail, the binding constraint,
alternatives, sensitivity) verified by a discrete-event simulator; `POST /v1/fleet-plans` plans
many workloads over a day of demand with reserved and on-demand GPUs; `POST /v1/evaluate` and
`POST /v1/simulate` expose the performance and queueing models; deployments keep plan history and
re-plan with hysteresis; the catalog (GPUs, models, quantization schemes) feeds all of it.

Costs are in USD per hour, per month (730 h) and per million output tokens. Plans, fleet plans,
deployment histories and what-if sweeps are also CSV (`Accept: text/csv` or `?format=csv`).
POSTs that create something accept an `Idempotency-Key`.

Errors are RFC 9457 `application/problem+json` documents. Writes need an API key with role
admin as `Authorization: Bearer <key>`. Every record carries a `version`, sent as the ETag;
send it back in `If-Match` on PUT/PATCH to avoid overwriting someone else's change (412).
Units are in the field names: GB = 1e9 bytes, GB/s = 1e9 bytes/s, TFLOP/s = 1e12 FLOP/s (dense).
"""


class _RouteTable:
    """Which methods each path answers and which of them take a JSON body, across every route of
    the app (FastAPI keeps an included router as one entry; its `effective_route_contexts` are
    its routes with their full paths)."""

    def __init__(self, routes: Iterable[BaseRoute]) -> None:
        self._entries: list[tuple[re.Pattern[str], frozenset[str], bool]] = []
        #: per route, the query parameters it declares (its dependencies' too); None: not a FastAPI route
        self._queries: list[tuple[re.Pattern[str], frozenset[str], frozenset[str] | None]] = []
        for route in routes:
            contexts = getattr(route, "effective_route_contexts", None)
            for each in contexts() if callable(contexts) else [route]:
                methods, path_regex = getattr(each, "methods", None), getattr(each, "path_regex", None)
                if methods and path_regex is not None:
                    self._entries.append((path_regex, frozenset(methods), getattr(each, "body_field", None) is not None))
                    dependant = getattr(each, "dependant", None)
                    declared = None if dependant is None else frozenset(_query_names(dependant))
                    self._queries.append((path_regex, frozenset(methods), declared))

    def allowed_methods(self, path: str) -> list[str]:
        return sorted({method for regex, methods, _ in self._entries if regex.match(path) for method in methods})

    def takes_json(self, method: str, path: str) -> bool:
        return any(takes and method in methods and regex.match(path) is not None for regex, methods, takes in self._entries)

    def unknown_query(self, method: str, path: str, names: Iterable[str]) -> list[str]:
        """The query parameters in `names` the route for (method, path) does not declare; [] when it
        declares them all or is not a FastAPI route."""
        for regex, methods, declared in self._queries:
            if method in methods and regex.match(path) is not None:
                return [] if declared is None else sorted(set(names) - declared)
        return []


def _query_names(dependant: Any) -> Iterator[str]:
    """The query parameter names (aliases) a FastAPI dependant declares, its sub-dependencies included."""
    for field in dependant.query_params:
        yield field.alias
    for sub in dependant.dependencies:
        yield from _query_names(sub)


class BodyGuard:
    """Refuses a request body before anything parses it: 413 when it is larger than
    `max_body_bytes` (by its Content-Length, or by counting a chunked body), 415 when a route that
    takes JSON is sent something else (a body without a JSON Content-Type, or a non-JSON
    Content-Type). The body read is handed on unchanged. On every method but OPTIONS, reads
    included, a query parameter the route does not declare is 422 naming it."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, routes: _RouteTable) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)
            return
        # a query parameter the operation does not declare is refused, not silently ignored: a write's
        # `?dry_run=true` would write, a read's misspelt `?limt=5` would answer the default page
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if unknown := self.routes.unknown_query(scope["method"], scope["path"], (name for name, _ in query)):
            errors = [
                {"type": "extra_forbidden", "loc": ("query", name), "msg": "Unknown query parameter", "input": dict(query)[name]}
                for name in unknown
            ]
            await self._refuse(scope, send, RequestValidationError(errors))
            return
        if scope["method"] in ("GET", "HEAD"):  # no body to guard
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.max_body_bytes:
            await self._refuse(scope, send, self._too_large())
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._refuse(scope, send, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        content_type = headers.get("content-type")
        if (
            (body or content_type is not None)
            and not _is_json(content_type)
            and self.routes.takes_json(scope["method"], scope["path"])
        ):
            await self._refuse(
                scope,
                send,
                UnsupportedMediaTypeError(
                    f"This operation takes an application/json body; got {content_type or 'no Content-Type'}.",
                    content_type=content_type,
                ),
            )
            return
        if (why := _unstorable_text(body)) is not None:
            error = {"type": "json_invalid", "loc": ("body",), "msg": f"JSON decode error: {why}", "input": None}
            await self._refuse(scope, send, RequestValidationError([error]))
            return
        await self.app(scope, _replay(body, receive), send)

    def _too_large(self) -> PayloadTooLargeError:
        return PayloadTooLargeError(
            f"The request body is larger than this service accepts ({self.max_body_bytes} bytes, HEADROOM_MAX_BODY_BYTES).",
            max_body_bytes=self.max_body_bytes,
        )

    @staticmethod
    async def _refuse(scope: Scope, send: Send, exc: Exception) -> None:
        response = problem_response(Request(scope), exc)
        response.headers["Connection"] = "close"  # the unread rest of the body must not be taken for the next request
        await response(scope, _no_receive, send)


#: An escape that spells a UTF-16 surrogate half (`\\ud800`–`\\udfff`) or NUL (`\\u0000`).
_SUSPECT_ESCAPE = re.compile(rb"\\[uU](?:[dD][89a-fA-F][0-9a-fA-F]{2}|0000)")


def _unstorable_text(body: bytes) -> str | None:
    """Why a JSON body's strings cannot be stored as text, or None. Two things Python's JSON decoder
    accepts but a database does not: an unpaired surrogate escape (`"\\ud800"`: no Unicode character,
    RFC 8259 §8.2 and RFC 7493 §2.1; UTF-8 cannot encode it) and NUL (`"\\u0000"`: PostgreSQL text
    cannot hold it). Either made a route answer 500 on PostgreSQL at its first query (the schemathesis
    run on POST /v1/deployments:replan). A surrogate pair (`"\\ud83d\\ude00"`) is one character and
    passes. Only bodies holding such an escape at all are decoded here."""
    if _SUSPECT_ESCAPE.search(body) is None:
        return None
    try:
        document = json.loads(body)
    except ValueError:
        return None  # malformed JSON: the route's own parsing says so

    def why(value: Any) -> str | None:
        if isinstance(value, str):
            if "\x00" in value:
                return "a string holds NUL (\\u0000), which no text field accepts (PostgreSQL text cannot store it)"
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return (
                    "a string holds an unpaired UTF-16 surrogate escape (\\ud800–\\udfff), which is no Unicode "
                    "character (RFC 8259 §8.2, RFC 7493 §2.1)"
                )
            return None
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else []
        return next((found for item in items if (found := why(item)) is not None), None)

    return why(document)


def _is_json(content_type: str | None) -> bool:
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (media_type.startswith("application/") and media_type.endswith("+json"))


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def operation_id(route: APIRoute) -> str:
    """operationIds are route names (the handler's function name): stable and readable."""
    return route.name


def freeze_startup_heap() -> None:
    """Collect, then move every object alive after start-up (modules, the catalog's tables, the
    planner's fixed sample) out of the cyclic collector's reach (`gc.freeze`): a full collection
    otherwise walks them all (≈ 355,000 objects, ≈ 170 ms of CPU measured in bench/plan_latency.py's
    process), and a plan offering prefix caching allocates enough to trigger one every few plans.
    They stay alive for the process's life anyway; objects made later are collected as before."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    """A service configured by `settings` (default: read once from the environment)."""
    settings = Settings.from_env() if settings is None else settings
    engine = make_engine(settings.database_url)
    session_factory = make_session_factory(engine)
    tasks = TaskEngine(settings, session_factory)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if tasks.embedded:  # the queue lived in the last process's memory: resume what it left, then work
            try:
                tasks.resume_unfinished()
            except SQLAlchemyError as exc:  # an unmigrated database: /readyz says so, and nothing was queued in it
                logger.warning("operations not resumed: %s", type(exc).__name__)
            tasks.start_worker()
        freeze_startup_heap()
        yield
        gc.unfreeze()  # back into the collector's oldest generation: a process making apps again (tests) frees them
        tasks.stop_worker()
        engine.dispose()
        stop_table_workers()

    app = FastAPI(
        title="Headroom",
        version=api.__version__,
        description=DESCRIPTION,
        generate_unique_id_function=operation_id,
        lifespan=lifespan,
        docs_url=None,  # api.docs_assets serves /docs and /redoc from vendored files, not a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.session_factory = session_factory
    app.state.tasks = tasks
    install_problem_handlers(app)

    @app.get("/healthz", tags=["health"], summary="Process is up", name="healthz")
    def healthz() -> dict[str, str]:
        """Answers while the process runs; touches nothing else."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Ready to serve", name="readyz", responses=problem_responses(503))
    def readyz() -> dict[str, str]:
        """The database answers and its schema is migrated to the newest revision; else 503."""
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
            at_head = is_at_head(settings.database_url)
        except Exception as exc:
            raise NotReadyError(f"the database is not reachable ({type(exc).__name__})") from exc
        if not at_head:
            raise NotReadyError("the database is not migrated to head: run `headroom db upgrade`")
        return {"status": "ready"}

    install_docs(app)
    app.include_router(explorer_routes.router)  # GET /: the plan explorer page (not in the OpenAPI document)
    for router in ROUTERS:
        app.include_router(router, prefix="/v1")
    routes = _RouteTable(app.router.routes)

    async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:  # Starlette names the methods of the first route on the path only
            exc.headers = {**(exc.headers or {}), "Allow": ", ".join(routes.allowed_methods(request.url.path))}
        return problem_response(request, exc)

    app.add_exception_handler(StarletteHTTPException, method_not_allowed)
    app.add_middleware(BodyGuard, max_body_bytes=settings.max_body_bytes, routes=routes)
    install_observability(app, settings)  # outermost: 413 and 415 answers carry a request id and are logged

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _validation_errors_as_problems(schema: dict[str, Any]) -> None:
    """FastAPI documents its own 422 body (HTTPValidationError) on every route with parameters;
    this service answers 422 with a Problem, so the document says that instead."""
    problem_422 = problem_responses(422)[422]
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            response = operation.get("responses", {}).get("422")
            if response is not None and PROBLEM_MEDIA_TYPE not in response.get("content", {}):
                operation["responses"]["422"] = problem_422
    for name in ("HTTPValidationError", "ValidationError"):
        schema["components"]["schemas"].pop(name, None)


#: Header formats, as api/idempotency.py and api/deps.py check them (a value outside is 400).
IDEMPOTENCY_KEY_SCHEMA = {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]{1,200}$"}
IF_MATCH_SCHEMA = {"type": "string", "pattern": '^ *("[0-9]{1,18}"|\\*) *$'}
RESPONSE_HEADERS: dict[str, dict[str, Any]] = {
    "ETag": {
        "description": 'The record\'s version as a strong entity tag, e.g. `"3"`; send it back in If-Match.',
        "schema": {"type": "string", "pattern": '^"[0-9]+"$'},
    },
    "Location": {
        "description": "The path of what was created, to read it back.",
        "schema": {"type": "string", "pattern": "^/v1/"},
    },
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "string", "pattern": "^[0-9]+$"}},
}
#: Operations that document 403 and yet answer a caller without a key: a dry-run plan (`store: false`).
ANONYMOUS_WRITES = frozenset({"create_plan"})
#: Where a bounded piece of work (the request deadline or the solver's limit) applies besides the
#: database every /v1 route reads: all of /v1 answers 503 when its database is unavailable.
_NO_DATABASE = ("/healthz", "/metrics", "/docs", "/redoc", "/openapi.json")


def _complete_contract(schema: dict[str, Any]) -> None:
    """Every answer a route can give, whichever layer gives it: 413/415 from `BodyGuard` on routes
    with a body, 400/409 from the Idempotency-Key and 400/412 from If-Match, 422 for a body or
    parameter that does not validate (on every operation: `BodyGuard` refuses a query parameter it
    does not declare), 503 wherever the database (or a deadline, or a solver) is used; and the
    formats of the headers requests send and answers carry."""
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})

            def add(*statuses: int, responses: dict[str, Any] = responses) -> None:
                for status, response in problem_responses(*statuses).items():
                    responses.setdefault(str(status), response)

            if "requestBody" in operation:
                add(400, 413, 415, 422)
            if path != "/metrics":  # BodyGuard refuses an undeclared query parameter (the metrics route is added after it)
                add(422)
            for parameter in operation.get("parameters", []):
                if parameter.get("in") != "header":
                    continue
                if parameter["name"] == "Idempotency-Key":
                    parameter["schema"] = dict(IDEMPOTENCY_KEY_SCHEMA)
                    add(400, 409)
                    responses["409"].setdefault("headers", {})["Retry-After"] = RESPONSE_HEADERS["Retry-After"]
                elif parameter["name"] == "If-Match":
                    parameter["schema"] = dict(IF_MATCH_SCHEMA)
                    add(400, 412)
            if operation.get("security") and ("403" not in responses or operation.get("operationId") in ANONYMOUS_WRITES):
                # a read needs a key only where the service runs with HEADROOM_REQUIRE_AUTH=1
                operation["security"] = [{}, *operation["security"]]
            if not path.startswith(_NO_DATABASE):
                add(503)
                responses["503"].setdefault("headers", {})["Retry-After"] = RESPONSE_HEADERS["Retry-After"]
            for status, response in responses.items():
                headers = response.get("headers", {})
                if status == "201":
                    headers.setdefault("Location", RESPONSE_HEADERS["Location"])
                if "ETag" in headers:
                    headers["ETag"] = RESPONSE_HEADERS["ETag"]
                if headers:
                    response["headers"] = headers


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document, with the Problem schema the error responses refer to."""
    if app.openapi_schema is None:
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
            tags=[
                {"name": "gpus", "description": "GPU types with datasheet numbers, prices and calibrated efficiencies."},
                {"name": "models", "description": "Model architectures as published in model cards."},
                {"name": "quantizations", "description": "Numeric formats for weights and KV cache."},
                {"name": "health", "description": "Liveness and readiness probes."},
                {
                    "name": "plans",
                    "description": "Minimum-cost plans that meet p99 SLOs, with their justification and simulator verification.",
                },
                {
                    "name": "fleet-plans",
                    "description": "Many workloads over periods: reserved, on-demand and spot GPUs within inventory, one MILP.",
                },
                {
                    "name": "deployments",
                    "description": "Named deployments: plan history, re-planning with a diff and hysteresis, rechecks.",
                },
                {
                    "name": "what-if",
                    "description": "Sweeps over traffic, SLOs or GPU types for finance: one cheapest plan per point.",
                },
                {
                    "name": "operations",
                    "description": "Long-running requests run by task workers: state, progress, result, cancel.",
                },
                {
                    "name": "performance",
                    "description": "The performance model (roofline, KV cache) and the queueing model and simulator of one configuration.",
                },
                {
                    "name": "calibrations",
                    "description": "Fit efficiencies to measured points or a vLLM benchmark result and store them as a named profile.",
                },
            ],
        )
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(problem_schemas())
        _validation_errors_as_problems(schema)
        _complete_contract(schema)
        app.openapi_schema = schema
    return app.openapi_schema
