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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from sqlalchemy import text

import api
from api.docs_assets import install_docs
from api.errors import NotReadyError
from api.fleet_plans import stop_table_workers
from api.observability import install_observability
from api.problems import PROBLEM_MEDIA_TYPE, install_problem_handlers, problem_responses, problem_schemas
from api.routers import calibrations as calibration_routes
from api.routers import capacity as capacity_routes
from api.routers import catalog as catalog_routes
from api.routers import deployments as deployment_routes
from api.routers import fleet_plans as fleet_plan_routes
from api.routers import keys as key_routes
from api.routers import plans as plan_routes
from api.routers import prices as price_routes
from api.routers import evaluate as evaluate_routes
from api.routers import simulate as simulate_routes
from api.routers import what_if as what_if_routes
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import is_at_head

#: Routers mounted under /v1, in the order the OpenAPI document lists them.
ROUTERS: tuple[APIRouter, ...] = (
    catalog_routes.router,
    price_routes.router,
    plan_routes.router,
    calibration_routes.router,
    fleet_plan_routes.router,
    evaluate_routes.router,
    simulate_routes.router,
    deployment_routes.router,
    what_if_routes.router,
    capacity_routes.router,
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


def operation_id(route: APIRoute) -> str:
    """operationIds are route names (the handler's function name): stable and readable."""
    return route.name


def create_app(settings: Settings | None = None) -> FastAPI:
    """A service configured by `settings` (default: read once from the environment)."""
    settings = Settings.from_env() if settings is None else settings
    engine = make_engine(settings.database_url)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
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
    app.state.session_factory = make_session_factory(engine)
    install_problem_handlers(app)

    @app.get("/healthz", tags=["health"], summary="Process is up", name="healthz")
    def healthz() -> dict[str, str]:
        """Answers while the process runs; touches nothing else."""
        return {"status": "ok"}

    @app.get(
        "/readyz", tags=["health"], summary="Ready to serve", name="readyz", responses=problem_responses(503)
    )
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

    install_observability(app, settings)
    install_docs(app)
    for router in ROUTERS:
        app.include_router(router, prefix="/v1")

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
                {"name": "plans", "description": "Minimum-cost plans that meet p99 SLOs, with their justification and simulator verification."},
                {"name": "fleet-plans", "description": "Many workloads over periods: reserved, on-demand and spot GPUs within inventory, one MILP."},
                {"name": "deployments", "description": "Named deployments: plan history, re-planning with a diff and hysteresis, rechecks."},
                {"name": "what-if", "description": "Sweeps over traffic, SLOs or GPU types for finance: one cheapest plan per point."},
                {"name": "performance", "description": "The performance model (roofline, KV cache) and the queueing model and simulator of one configuration."},
                {"name": "calibrations", "description": "Fit efficiencies to measured points or a vLLM benchmark result and store them as a named profile."},
            ],
        )
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(problem_schemas())
        _validation_errors_as_problems(schema)
        app.openapi_schema = schema
    return app.openapi_schema

