"""Charts as SVG and PNG, drawn from the same numbers the JSON routes answer (api/charts.py):
`GET /v1/plans/{plan_id}/charts/{name}.svg|.png` (wall, knee, cost, alternatives),
`GET /v1/fleet-plans/{plan_id}/charts/day.svg|.png`, `POST /v1/what-if/charts/sweep.svg|.png`
(body: the what-if request) and `POST /v1/capacity/charts/wall.svg|.png` (body: the capacity
request). Each chart has one route per format, so the OpenAPI document names one media type per
operation. Stored plans are read with any key that may read; a sweep needs the planner role, as
POST /v1/what-if does."""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Path, Request, Response

from api import charts
from api import what_if as what_if_service
from api.capacity import estimate_capacity
from api.classes_replan import class_wall_series
from api.deps import CatalogDep, FleetPlansDep, PlannerKeyDep, PlansDep, ReaderDep, SettingsDep
from api.observability import DeadlineDep, MetricsDep
from api.problems import problem_responses
from api.schemas.capacity import CapacityRequest
from api.schemas.classes import is_classes_plan
from api.schemas.what_if import WhatIfRequest
from api.settings import Settings
from catalog.errors import NotFoundError
from catalog.fleet_plans import FleetPlans
from catalog.plans import Plans
from catalog.repository import Catalog
from planner.errors import PlannerInputError

router = APIRouter(tags=["charts"])

#: A stored plan's charts: the function drawing each from the plan's stored request and response.
PLAN_CHARTS: dict[str, Callable[[dict[str, Any], dict[str, Any]], charts.Chart]] = {
    "wall": lambda request, response: charts.wall_chart(charts.plan_wall(request, response)),
    "knee": charts.knee_chart,
    "cost": charts.cost_chart,
    "alternatives": charts.alternatives_chart,
    "pools": charts.pools_chart,
}
assert tuple(PLAN_CHARTS) == charts.PLAN_CHARTS

CHART_NAME = Path(
    description=f"Which chart: {', '.join(charts.PLAN_CHARTS)} (else 404).",
    examples=list(charts.PLAN_CHARTS),
)


def _stored(store: Plans | FleetPlans, plan_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The stored request and response of a plan or fleet plan (404 for an id nobody issued): the
    one place this router reads a store."""
    stored = store.get(plan_id)
    return dict(stored.request), dict(stored.response)


#: The same bytes for a client that asks for any binary (`Accept: application/octet-stream` without
#: an image type): a client generated from the OpenAPI document (openapi-python-client knows no image
#: types) reads the chart as a file.
OCTET_STREAM = "application/octet-stream"


def _image(chart: charts.Chart, fmt: charts.Format, filename: str, request: Request) -> Response:
    image_type = charts.MEDIA_TYPES[fmt]
    accept = request.headers.get("accept", "")
    binary = OCTET_STREAM in accept and image_type not in accept and "image/*" not in accept
    return Response(
        charts.render(chart, fmt),
        media_type=OCTET_STREAM if binary else image_type,
        headers={"Content-Disposition": f'inline; filename="{filename}.{fmt}"'},
    )


def _responses(fmt: charts.Format, *statuses: int) -> dict[int | str, dict[str, Any]]:
    schema = {"type": "string"} if fmt == "svg" else {"type": "string", "format": "binary"}
    what = 'SVG (the drawn series as JSON in `<metadata id="headroom-chart-data">`)' if fmt == "svg" else "PNG"
    content = {charts.MEDIA_TYPES[fmt]: {"schema": schema}, OCTET_STREAM: {"schema": {"type": "string", "format": "binary"}}}
    return {
        200: {"description": f"The chart as {what}; the same bytes as {OCTET_STREAM} when asked for.", "content": content},
        **problem_responses(*statuses),
    }


def _plan_chart(fmt: charts.Format) -> None:
    @router.get(
        f"/plans/{{plan_id}}/charts/{{name}}.{fmt}",
        response_class=Response,
        name=f"get_plan_chart_{fmt}",
        summary=f"A stored plan's chart as {fmt.upper()}: wall, knee, cost, alternatives or pools",
        responses=_responses(fmt, 401, 404, 422),
    )
    def plan_chart(
        plan_id: str,
        plans: PlansDep,
        catalog: CatalogDep,
        settings: SettingsDep,
        _reader: ReaderDep,
        request: Request,
        name: str = CHART_NAME,
    ) -> Response:
        """`wall`: p99 TTFT, TPOT and E2E against arrival rate per replica (the queueing section's
        ρ curve), the SLO lines, the plan's operating point and its headroom, the simulator's
        points with their confidence intervals. `knee`: decode tokens/s per replica and per user
        against batch size, memory- and compute-bound ranges, the break-even intensity, the
        KV-cache and batch limits. `cost`: cost and replicas against demand with the +10/25/50 %
        re-plans. `alternatives`: each other GPU type or precision's cost and why it lost. `pools`:
        each pool's GPUs and cost per hour, with its ρ and binding constraint (a disaggregated plan's
        prefill and decode pools; an aggregated plan's one mixed pool per configuration).
        A class plan (docs/traffic-classes.md): `wall` draws each class's TTFT, TPOT and end-to-end
        latency on its pools against the classes' load (0.5× to 1.5× the planned rates, on today's
        catalog), `alternatives` the arrangements compared, `pools` its pools with their classes;
        its `knee` and `cost` are 422 (several pools; cost against demand is POST /v1/what-if with
        its classes).
        404 for an unknown plan or chart; 422 when the plan lacks the section the chart is drawn
        from (a batch job's plan has no queue, so none but pools; a disaggregated plan has no one
        queue, so only pools)."""
        draw = PLAN_CHARTS.get(name)
        if draw is None:
            raise NotFoundError(f"no chart {name!r}; a plan has {', '.join(charts.PLAN_CHARTS)}", kind="chart", name=name)
        asked, answered = _stored(plans, plan_id)
        if is_classes_plan(answered):  # its classes and pools (api/charts.py, "class plans")
            return _image(_class_chart(name, asked, answered, catalog, settings), fmt, f"plan-{plan_id}-{name}", request)
        return _image(draw(asked, answered), fmt, f"plan-{plan_id}-{name}", request)


def _class_chart(
    name: str, asked: dict[str, Any], answered: dict[str, Any], catalog: Catalog, settings: Settings
) -> charts.Chart:
    """A class plan's chart `name`: its wall (each class against the classes' load, by the forward model on
    today's catalog), its arrangements compared, its pools; its knee and cost are 422, saying why."""
    if name == "wall":
        wall = class_wall_series(asked, answered, catalog, default_provider=settings.default_price_provider)
        return charts.class_wall_chart(asked, answered, wall)
    if name == "alternatives":
        return charts.class_alternatives_chart(asked, answered)
    if name == "pools":
        return charts.class_pools_chart(asked, answered)
    why = {
        "knee": "a class plan has a pool per arrangement, each its own configuration: the pools chart draws them",
        "cost": "a class plan's cost against demand needs a class plan at each demand: POST /v1/what-if with its classes "
        "and sweep.class_rates_rps sweeps it",
    }[name]
    raise charts.ChartDataMissingError(f"The {name} chart of a class plan is not drawn: {why}.", chart=name, missing="classes")


def _fleet_chart(fmt: charts.Format) -> None:
    @router.get(
        f"/fleet-plans/{{plan_id}}/charts/day.{fmt}",
        response_class=Response,
        name=f"get_fleet_plan_day_chart_{fmt}",
        summary=f"A stored fleet plan's GPUs over the day as {fmt.upper()}",
        responses=_responses(fmt, 401, 404),
    )
    def fleet_day_chart(plan_id: str, fleet_plans: FleetPlansDep, _reader: ReaderDep, request: Request) -> Response:
        """GPUs held in each period, stacked by GPU type and reserved / on demand / spot, against
        each workload's demand; 404 for an id nobody issued."""
        _asked, answered = _stored(fleet_plans, plan_id)
        return _image(charts.fleet_day_chart(answered), fmt, f"fleet-plan-{plan_id}-day", request)


def _sweep_chart(fmt: charts.Format) -> None:
    @router.post(
        f"/what-if/charts/sweep.{fmt}",
        response_class=Response,
        name=f"what_if_sweep_chart_{fmt}",
        summary=f"A what-if sweep's cost against the swept variable as {fmt.upper()}",
        responses=_responses(fmt, 401, 403, 404, 422, 503),
    )
    def sweep_chart(
        body: WhatIfRequest,
        catalog: CatalogDep,
        settings: SettingsDep,
        _planner: PlannerKeyDep,
        deadline: DeadlineDep,
        metrics: MetricsDep,
        request: Request,
    ) -> Response:
        """The sweep POST /v1/what-if answers for the same body, drawn: cost per hour (a batch job:
        the whole job's cost) against the variable swept fastest, one line per GPU type or SLO
        value; points no plan serves marked. Same errors as POST /v1/what-if."""
        answer = what_if_service.what_if_sweep(body, catalog, settings, deadline, metrics)
        return _image(charts.sweep_chart(answer.model_dump(mode="json")), fmt, "what-if-sweep", request)


def _capacity_chart(fmt: charts.Format) -> None:
    @router.post(
        f"/capacity/charts/wall.{fmt}",
        response_class=Response,
        name=f"capacity_wall_chart_{fmt}",
        summary=f"The latency wall of given GPUs as {fmt.upper()}",
        responses=_responses(fmt, 401, 404, 422),
    )
    def capacity_chart(
        body: CapacityRequest, catalog: CatalogDep, settings: SettingsDep, _reader: ReaderDep, request: Request
    ) -> Response:
        """The per-replica ρ–latency curve POST /v1/capacity answers for the same body, up to μ (the
        most each replica serves within every SLO), with the SLO lines and, with `verify`, the
        simulator's accepted step. Same errors as POST /v1/capacity."""
        answer = estimate_capacity(body, catalog, settings.default_price_provider)
        if answer.configuration is None:
            raise PlannerInputError(
                "the latency wall is one aggregated replica's curve; separate prefill and decode pools have none "
                "(POST /v1/capacity answers their capacity)",
                constraint="topology",
                field="constraints.topology",
            )
        wall = charts.capacity_wall(body.model_dump(mode="json"), answer.model_dump(mode="json"))
        return _image(charts.wall_chart(wall), fmt, "capacity-wall", request)


for _format in charts.FORMATS:
    _plan_chart(_format)
    _fleet_chart(_format)
    _sweep_chart(_format)
    _capacity_chart(_format)
