"""A fleet plan as an operation (`POST /v1/fleet-plans` with `Prefer: respond-async`): one unit, the
whole plan as the synchronous route makes it (api/fleet_plans.py), stored in the transaction that
records the unit, so the operation's `result_location` is the stored plan. The plan is bounded by a
task's time instead of a request's: OPERATION_TIMEOUT_S for its tables and MILP stages, each
stage's solver still bounded by HEADROOM_SOLVER_TIME_LIMIT_S."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from api import fleet_plans
from api.observability import Deadline
from api.schemas.fleet_plans import FleetPlanRequest
from api.settings import Settings
from catalog.fleet_plans import FleetPlans
from catalog.repository import Catalog

#: An operation's `kind` for a fleet plan (api/tasks.py runs it).
OPERATION_KIND = "fleet-plan"
#: How long the plan may take: nine tenths of Dramatiq's 10-minute task limit (api/tasks.py
#: TASK_TIME_LIMIT_MS), so the plan's own deadline stops it first, with a problem that says so.
OPERATION_TIMEOUT_S = 540.0


def operation_request(body: FleetPlanRequest, settings: Settings) -> dict[str, Any]:
    return {"body": body.model_dump(mode="json"), "default_provider": settings.default_price_provider}


def prepare(request: dict[str, Any], _catalog: Catalog) -> tuple[FleetPlanRequest, str]:
    return FleetPlanRequest.model_validate(request["body"]), request["default_provider"]


def run_unit(prepared: tuple[FleetPlanRequest, str], _index: int, settings: Settings, session: Session) -> dict[str, Any]:
    """The plan, planned and stored in `session`; its FleetPlanResponse JSON."""
    body, default_provider = prepared
    deadline = Deadline(timeout_s=OPERATION_TIMEOUT_S, expires_at_s=time.monotonic() + OPERATION_TIMEOUT_S)
    plan = fleet_plans.create_fleet_plan(
        body, Catalog(session), FleetPlans(session), default_provider=default_provider, deadline=deadline,
        solver_time_limit_s=settings.solver_time_limit_s,
    )  # fmt: skip
    return plan.model_dump(mode="json")


def result(_prepared: Any, units: list[Any], _elapsed_ms: float) -> dict[str, Any]:
    plan: dict[str, Any] = units[0]
    return plan


def location(units: list[Any]) -> str:
    return f"/v1/fleet-plans/{units[0]['id']}"
