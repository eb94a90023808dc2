"""`POST /v1/deployments:replan`: every named deployment (or all of them) planned again for its
stored request as one operation, one unit per deployment, each exactly what `POST
/v1/deployments/{name}/replan` with an empty body does (api/deployment_service.py). A deployment
that cannot be re-planned (no plan meets its SLOs any more, or it was deleted meanwhile) is an
item with its problem, not a failed operation."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from api import deployment_service
from api.problems import problem_type_for
from api.schemas.deployments import ReplanRequest
from api.settings import Settings
from catalog.deployments import Deployments
from catalog.repository import Catalog
from planner.errors import HeadroomError

#: An operation's `kind` for a bulk re-plan (api/tasks.py runs it).
OPERATION_KIND = "deployments-replan"
#: Most deployments one bulk re-plan takes (a page of the deployments list).
MAX_DEPLOYMENTS = 500


def deployment_names(deployments: Deployments, names: list[str] | None) -> list[str]:
    """The deployments to re-plan, checked now (404 for an unknown name): `names`, or every deployment by name."""
    if names is not None:
        for name in names:
            deployments.get(name)
        return list(dict.fromkeys(names))
    return [deployment.name for deployment in deployments.list(limit=MAX_DEPLOYMENTS).items]


def operation_request(names: list[str], settings: Settings) -> dict[str, Any]:
    return {"deployments": names, "default_provider": settings.default_price_provider}


def prepare(request: dict[str, Any], _catalog: Catalog) -> dict[str, Any]:
    return request


def run_unit(request: dict[str, Any], index: int, settings: Settings, session: Session) -> dict[str, Any]:
    """Re-plan deployment `index` in `session` (committed with the unit's result), or say why not."""
    name = request["deployments"][index]
    try:
        with session.begin_nested():  # a re-plan that fails writes nothing
            answer = deployment_service.replan(
                name, ReplanRequest(), Catalog(session), solver_time_limit_s=settings.solver_time_limit_s,
                default_provider=request["default_provider"],
            )  # fmt: skip
    except HeadroomError as exc:
        kind = problem_type_for(exc)
        if kind.status >= 500:
            raise  # the service's failure (a solver that gave up): retried, then fails the operation
        problem = {"type": kind.uri, "title": kind.title or exc.title, "status": kind.status, "detail": exc.detail}
        return {"deployment": name, "changed": False, "replan": None, "problem": {**problem, **exc.extensions}}
    return {"deployment": name, "changed": answer["changed"], "replan": answer, "problem": None}


def result(_request: dict[str, Any], units: list[Any], _elapsed_ms: float) -> dict[str, Any]:
    """Every deployment's outcome, in the order asked, and how many changed or could not be re-planned."""
    return {
        "items": units,
        "changed": sum(1 for item in units if item["changed"]),
        "failed": sum(1 for item in units if item["problem"] is not None),
    }
