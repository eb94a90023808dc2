"""`GET /`: the plan explorer, a page served by the app itself that asks a plan or a capacity
question through the JSON API and shows the answer in words, its charts, the stored deployments
with their plan history, and the CSV and deploy downloads.

Offline by construction: the HTML is rendered here from `api/templates/explorer.html`, and its
script and stylesheet are files in `api/static/explorer/` served by the `/static` mount
(api/docs_assets.py), so nothing is fetched from another host and there is no build step. The page
calls the API from the browser with `fetch`, so it is authorised like any other client: with
HEADROOM_REQUIRE_AUTH unset, reads and dry-run plans need no key, and a plan is stored only when
the user gives a planner key (api/deps.py `authorize_plan`).

Not part of the OpenAPI document (`include_in_schema=False`): it is a page, not an operation.
"""

# No `from __future__ import annotations`: FastAPI reads the handler's annotations at runtime.

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import get_args

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.routing import BaseRoute

import api
from api.docs_assets import STATIC_PATH
from api.schemas.plans import PlanConstraintsSpec
from planner.workload import Task

TEMPLATES = Jinja2Templates(directory=Path(__file__).resolve().parent.parent / "templates")

#: The charts of a stored plan the page embeds, in the order it shows them, with the caption each
#: gets; served by GET /v1/plans/{plan_id}/charts/{name}.svg (api/routers/charts.py).
CHARTS: tuple[tuple[str, str], ...] = (
    ("wall", "p99 latencies against the rate per replica: the SLO lines, the plan's operating point and its headroom"),
    ("knee", "Decode tokens/s per replica and per user against batch: memory- and compute-bound ranges, KV and batch limits"),
    ("cost", "Cost and replicas against demand, with the +10/25/50 % traffic re-plans"),
    ("alternatives", "What each other GPU type and precision would cost, and why it lost"),
)

#: A class plan's charts (api/charts.py "class plans"), with the caption each gets there: the wall and
#: alternatives draw other things for a class plan than for one workload, the pools chart its class pools;
#: its knee and cost are 422 (several configurations; cost against demand is a what-if over the mix).
CLASS_CHARTS: dict[str, str] = {
    "wall": "Each class's latency at its percentile on the plan's pools against the classes' total rate (0.5× to 1.5× "
    "the planned rates), with each class's targets",
    "alternatives": "What each other arrangement of the classes would cost, and why it lost",
    "pools": "Each pool's GPUs and cost per hour, with its scheduling, utilisation and classes",
}

#: The form's choices for workload.task and constraints.speculative, read from the request schema so the page
#: cannot offer a value the API refuses (or miss one it takes).
TASKS: tuple[str, ...] = get_args(Task)
SPECULATIVE_MODES: tuple[str, ...] = get_args(PlanConstraintsSpec.model_fields["speculative"].annotation)
SPECULATIVE_DEFAULT: str = PlanConstraintsSpec.model_fields["speculative"].default
#: Each mode in words, as PlanConstraintsSpec.speculative describes it.
SPECULATIVE_WORDS: dict[str, str] = {
    "auto": "auto: with and without, the cheaper plan wins",
    "off": "off: never",
    "on": "on: only speculating configurations",
}

#: Where vLLM, SGLang and TensorRT-LLM commands and Kubernetes manifests come from (api/routers/deploy.py).
DEPLOY_TARGETS: tuple[str, ...] = ("vllm", "sglang", "trt-llm", "k8s")

_CHART_PATH = re.compile(r"^/v1/plans/\{[a-z_]+\}/charts/(\{[a-z_]+\}|[a-z]+)\.svg$")

#: The capacity answer's chart, drawn from the capacity request itself (no stored id to embed by URL).
_CAPACITY_CHART = "/v1/capacity/charts/wall.svg"

router = APIRouter(include_in_schema=False)


def _route_paths(routes: Iterable[BaseRoute]) -> Iterator[str]:
    """Every route's full path; FastAPI keeps an included router as one entry whose
    `effective_route_contexts` are its routes with their full paths (as api/app.py's _RouteTable reads them)."""
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        for each in contexts() if callable(contexts) else [route]:
            yield str(getattr(each, "path", ""))


def available_charts(routes: Iterable[BaseRoute]) -> tuple[tuple[str, str], ...]:
    """The charts this app serves: a page that embedded a chart route the app lacks would show a
    broken image (and a 404 in the browser's console), so the page asks the app, not a list."""
    paths = [match.group(1) for path in _route_paths(routes) if (match := _CHART_PATH.match(path))]
    if any(path.startswith("{") for path in paths):  # one route with the chart's name as a parameter
        return CHARTS
    return tuple((name, caption) for name, caption in CHARTS if name in paths)


def serves_pools_chart(routes: Iterable[BaseRoute]) -> bool:
    """Whether the app serves GET /v1/plans/{plan_id}/charts/pools.svg: the chart a disaggregated plan shows
    in place of the four above (they are drawn from one queue's justification, which separate pools lack)."""
    paths = [match.group(1) for path in _route_paths(routes) if (match := _CHART_PATH.match(path))]
    return any(path.startswith("{") or path == "pools" for path in paths)


@router.get("/", response_class=HTMLResponse, name="explorer")
def explorer(request: Request) -> HTMLResponse:
    """The explorer page; its data comes from the API, fetched by the page's script."""
    prefix = str(request.scope.get("root_path", "")).rstrip("/")  # behind a proxy that mounts the service under a path
    return TEMPLATES.TemplateResponse(
        request,
        "explorer.html",
        {
            "prefix": prefix,
            "static": f"{prefix}{STATIC_PATH}",
            "version": api.__version__,
            "charts": available_charts(request.app.routes),
            "pools_chart": serves_pools_chart(request.app.routes),
            "class_charts": CLASS_CHARTS,
            "tasks": TASKS,
            "speculative_modes": [(mode, SPECULATIVE_WORDS.get(mode, mode)) for mode in SPECULATIVE_MODES],
            "speculative_default": SPECULATIVE_DEFAULT,
            "deploy_targets": DEPLOY_TARGETS,
            "capacity_chart": _CAPACITY_CHART in set(_route_paths(request.app.routes)),
            "require_auth": bool(request.app.state.settings.require_auth),
        },
    )
