"""Service hygiene: Prometheus metrics, structured JSON logs with a request id, and a deadline for
planning work. `install_observability(app, settings)` wires all three into one app.

Metrics (`GET /metrics`, Prometheus text exposition format 0.0.4) are prometheus_client metrics in
a registry per app (`app.state.metrics`), so two apps in one process never share counts:

    headroom_http_requests_total{method,route,status}        counter
    headroom_http_request_duration_seconds{method,route}      histogram
    headroom_plans_computed_total                             counter
    headroom_solver_seconds                                   histogram
    headroom_simulation_seconds                               histogram

Several worker processes (`uvicorn --workers N`): set PROMETHEUS_MULTIPROC_DIR to an empty
directory before they start (prometheus_client reads it at import) and every process writes its
values to files there; /metrics, whichever process answers it, sums all of them
(prometheus_client.multiprocess.MultiProcessCollector). Empty the directory at every start, or
counts of the previous run are added in. docs/reliability.md has the commands.

`route` is the route template (`/v1/gpus/{slug}`), never the raw path; a path no route matches
is counted as `unmatched`.

Feeding the planner series from a route (plain `def` handlers):

    from api.observability import DeadlineDep, MetricsDep

    def plan_capacity_route(body: PlanRequest, ..., metrics: MetricsDep, deadline: DeadlineDep):
        with metrics.solver_timer():                      # or metrics.record_solver_time(seconds)
            result = deadline.run(plan_capacity, specs, ...)
        metrics.record_plan_computed()
        metrics.record_simulation_time(result.wall_time_s)  # for POST /v1/simulate

or, with the app or request at hand, `record_solver_time(request, seconds)`,
`record_simulation_time(request, seconds)`, `record_plan_computed(request)` (the first argument
may be a `Request`, the app, or a `MetricsRegistry`).

Logs: the `headroom` logger writes one JSON object per line to stderr at `settings.log_level`;
every request adds one `headroom.access` line (time, level, request_id, method, route, path,
status, duration_ms). Any record logged while a request is served carries its request_id.

Request id: a valid incoming `X-Request-ID` (1-128 of `A-Za-z0-9._-`) is kept, anything else is
replaced by a fresh one; every response echoes it, and problem documents carry it as `request_id`.

Deadline: `settings.request_timeout_s` counts from the moment the request arrived. Sync routes
run in a thread pool and a Python thread cannot be stopped from outside, so the deadline is
enforced where the long work is called: `deadline.run(fn, *args)` runs `fn` in a worker thread
and answers 503 `request-timeout` when the time is up (the session then rolls back, so nothing
is written). The abandoned worker runs on to its end and its result is dropped; `fn` must
therefore be pure planner work on specs already read (never the request's session), and a
solver inside should still get its own limit: `deadline.solver_time_limit_s(settings.solver_time_limit_s)`
(api.settings.solver_time_limit_s, the one policy).
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ParamSpec, TypeGuard, TypeVar

import prometheus_client
from fastapi import Depends, FastAPI, Request
from fastapi.responses import PlainTextResponse
from prometheus_client import CollectorRegistry
from prometheus_client import values as prometheus_values
from prometheus_client.metrics_core import Metric as PrometheusFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import RequestTimeoutError
from api.settings import Settings, solver_time_limit_s

P = ParamSpec("P")
T = TypeVar("T")

REQUEST_ID_HEADER = "X-Request-ID"
METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED_ROUTE = "unmatched"
#: prometheus_client's switch to multi-process mode: the directory its per-process value files live in.
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: prometheus/client_python's DEFAULT_BUCKETS (prometheus_client/metrics.py), in seconds.
HTTP_BUCKETS_S: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
#: The same, extended to 30 s and 60 s: the default HEADROOM_REQUEST_TIMEOUT_S is 30 s and a
#: solve or a simulation may be asked to run up to it.
WORK_BUCKETS_S: tuple[float, ...] = (*HTTP_BUCKETS_S, 30.0, 60.0)

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

#: uvicorn's TRACE level (uvicorn/logging.py: TRACE_LOG_LEVEL = 5) for HEADROOM_LOG_LEVEL=trace.
_LOG_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": 5,
}

_current_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("headroom_request_id", default=None)

access_logger = logging.getLogger("headroom.access")
logger = logging.getLogger("headroom.api")


# ---- metrics -----------------------------------------------------------------------------------


def multiprocess_mode() -> bool:
    """Whether prometheus_client keeps its values in PROMETHEUS_MULTIPROC_DIR. It reads the variable
    once, at its import (prometheus_client/values.py), so ask it; a variable set only after that
    would leave each process counting alone while /metrics read the directory: an error."""
    enabled = bool(getattr(prometheus_values.ValueClass, "_multiprocess", False))
    if os.environ.get(MULTIPROC_DIR_ENV) and not enabled:
        raise RuntimeError(f"{MULTIPROC_DIR_ENV} was set after prometheus_client was imported: set it before the process starts")
    return enabled


def _number_text(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _sample_line(sample: Sample) -> str:
    escaped = {
        name: value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for name, value in sample.labels.items()
    }
    labels = "{" + ",".join(f'{name}="{value}"' for name, value in escaped.items()) + "}" if escaped else ""
    return f"{sample.name}{labels} {_number_text(float(sample.value))}"


def exposition_lines(families: Iterable[PrometheusFamily]) -> list[str]:
    """Metric families in the text format 0.0.4 as the hand-written registry before prometheus-client
    wrote them (integral values without `.0`, labels in declared order, no `_created` series), so
    scrapes and whatever compares their text see no change. `le` is prometheus_client's (0.005, 1.0, +Inf)."""
    out: list[str] = []
    for family in families:
        name = f"{family.name}_total" if family.type == "counter" else family.name  # as generate_latest names it
        help_text = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {family.type}"]
        out += [_sample_line(sample) for sample in family.samples if sample.name != f"{family.name}_created"]
    return out


class _Metric:
    """A prometheus_client metric labelled by keyword (`inc(method="GET", ...)`); unknown or
    missing labels, and non-finite values (which prometheus_client would add to a sum), raise ValueError."""

    def __init__(
        self, name: str, metric: prometheus_client.Counter | prometheus_client.Histogram, label_names: Sequence[str]
    ) -> None:
        self.name, self.label_names, self._metric = name, tuple(label_names), metric

    def _child(self, labels: dict[str, str], value: float) -> Any:
        if labels.keys() != set(self.label_names) or not math.isfinite(value):
            raise ValueError(f"{self.name} takes labels {self.label_names} and a finite value, got {labels} and {value}")
        return self._metric.labels(**labels) if labels else self._metric

    def lines(self) -> list[str]:
        return exposition_lines(self._metric.collect())


class Counter(_Metric):
    """A monotonically increasing count per label set."""

    def __init__(
        self, name: str, help_text: str, label_names: Sequence[str] = (), *, registry: CollectorRegistry | None = None
    ) -> None:
        super().__init__(name, prometheus_client.Counter(name, help_text, label_names, registry=registry), label_names)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        self._child(labels, amount).inc(amount)  # prometheus_client: ValueError when negative


class Histogram(_Metric):
    """Observations counted into cumulative `le` buckets, with their sum and count, per label set."""

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: Sequence[str] = (),
        *,
        buckets: Iterable[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if len(set(bounds)) != len(bounds) or not all(math.isfinite(bound) for bound in bounds):
            raise ValueError(f"{name}: buckets must be distinct finite numbers, got {bounds}")
        histogram = prometheus_client.Histogram(name, help_text, label_names, buckets=bounds, registry=registry)
        super().__init__(name, histogram, label_names)

    def observe(self, value: float, **labels: str) -> None:
        self._child(labels, value).observe(value)

    def time(self) -> AbstractContextManager[Any]:
        """Times the block as one observation of an unlabelled histogram (recorded also when it raises)."""
        timer: AbstractContextManager[Any] = self._child({}, 0.0).time()
        return timer

    def count(self, **labels: str) -> int:
        """This process's count of observations with `labels`."""
        samples = (s for family in self._metric.collect() for s in family.samples)
        return int(next((s.value for s in samples if s.name == f"{self.name}_count" and s.labels == labels), 0))


class MetricsRegistry:
    """The metrics of one app, in a prometheus_client registry of its own, so two apps in one
    process never share counts (in multi-process mode each process serves one app: the files hold
    values by metric name and labels). Thread-safe: the middleware writes from the event loop,
    routes from the thread pool."""

    def __init__(self) -> None:
        self.multiprocess = multiprocess_mode()
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.http_requests = Counter(
            "headroom_http_requests_total",
            "HTTP requests answered, by route template, method and status code.",
            ("method", "route", "status"),
            registry=registry,
        )
        self.http_request_duration = Histogram(
            "headroom_http_request_duration_seconds",
            "Time from receiving a request to the end of its response, by route template and method.",
            ("method", "route"),
            buckets=HTTP_BUCKETS_S,
            registry=registry,
        )
        self.plans_computed = Counter(
            "headroom_plans_computed_total", "Capacity plans computed (plans, re-plans, fleet plans).", registry=registry
        )
        self.solver_seconds = Histogram(
            "headroom_solver_seconds", "Wall time of optimizer (MILP) solves.", buckets=WORK_BUCKETS_S, registry=registry
        )
        self.simulation_seconds = Histogram(
            "headroom_simulation_seconds", "Wall time of discrete-event simulations.", buckets=WORK_BUCKETS_S, registry=registry
        )

    def observe_request(self, *, method: str, route: str, status: int, duration_s: float) -> None:
        self.http_requests.inc(method=method, route=route, status=str(status))
        self.http_request_duration.observe(duration_s, method=method, route=route)

    def record_plan_computed(self, count: int = 1) -> None:
        """`count` more plans computed (count them once the planner returned one)."""
        self.plans_computed.inc(count)

    def record_solver_time(self, seconds: float) -> None:
        """One optimizer solve took `seconds` of wall time."""
        self.solver_seconds.observe(seconds)

    def record_simulation_time(self, seconds: float) -> None:
        """One simulation took `seconds` of wall time."""
        self.simulation_seconds.observe(seconds)

    def solver_timer(self) -> AbstractContextManager[Any]:
        """Times the block as one solve (recorded also when it raises)."""
        return self.solver_seconds.time()

    def simulation_timer(self) -> AbstractContextManager[Any]:
        """Times the block as one simulation (recorded also when it raises)."""
        return self.simulation_seconds.time()

    def render(self) -> str:
        """Every metric in the Prometheus text exposition format (version 0.0.4): this app's own,
        or in multi-process mode the sums over every process that wrote to PROMETHEUS_MULTIPROC_DIR
        (prometheus_client's MultiProcessCollector, which reads the files of exited ones too)."""
        if self.multiprocess:
            collector: Any = MultiProcessCollector  # prometheus_client/multiprocess.py carries no annotations
            families: Iterable[PrometheusFamily] = sorted(collector(None).collect(), key=lambda family: family.name)
        else:
            families = self.registry.collect()
        return "\n".join(exposition_lines(families)) + "\n"


def metrics_of(target: FastAPI | Request | MetricsRegistry) -> MetricsRegistry:
    """The registry of an app, of the app serving a request, or the registry itself."""
    if isinstance(target, MetricsRegistry):
        return target
    app = target.app if isinstance(target, Request) else target
    metrics: MetricsRegistry = app.state.metrics  # set by install_observability; app.state is untyped
    return metrics


def record_plan_computed(target: FastAPI | Request | MetricsRegistry, count: int = 1) -> None:
    metrics_of(target).record_plan_computed(count)


def record_solver_time(target: FastAPI | Request | MetricsRegistry, seconds: float) -> None:
    metrics_of(target).record_solver_time(seconds)


def record_simulation_time(target: FastAPI | Request | MetricsRegistry, seconds: float) -> None:
    metrics_of(target).record_simulation_time(seconds)


def _metrics(request: Request) -> MetricsRegistry:
    metrics: MetricsRegistry = request.app.state.metrics  # set by install_observability; app.state is untyped
    return metrics


#: The serving app's metrics registry, for routes that feed the planner series.
MetricsDep = Annotated[MetricsRegistry, Depends(_metrics)]


# ---- deadline ----------------------------------------------------------------------------------


def run_with_timeout(timeout_s: float, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`fn(*args, **kwargs)` if it finishes within `timeout_s`; else `RequestTimeoutError` (503).

    `fn` runs in a daemon thread with the caller's context variables (so its log lines carry the
    request id); its exceptions are raised here. After a timeout that thread is abandoned, not
    stopped: pass only work that touches no shared state (pure planner functions)."""
    if not timeout_s > 0:
        raise RequestTimeoutError(timeout_s=timeout_s)
    results: list[T] = []
    failures: list[BaseException] = []
    context = contextvars.copy_context()

    def work() -> None:
        try:
            results.append(context.run(fn, *args, **kwargs))
        except BaseException as exc:  # noqa: BLE001  (handed to the caller's thread, which raises it)
            failures.append(exc)

    worker = threading.Thread(target=work, name=f"headroom-work-{getattr(fn, '__name__', 'fn')}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RequestTimeoutError(timeout_s=timeout_s)
    if failures:
        raise failures[0]
    return results[0]


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadline:
    """The time a request has left: `settings.request_timeout_s` from its arrival."""

    timeout_s: float
    expires_at_s: float  # on the time.monotonic() clock

    def remaining_s(self) -> float:
        return max(0.0, self.expires_at_s - time.monotonic())

    def checkpoint(self) -> None:
        """For the planner to call between steps: RequestTimeoutError once the time is up, so work the
        request's 503 abandoned stops at its next step instead of running on in its thread."""
        if self.remaining_s() <= 0:
            raise RequestTimeoutError(timeout_s=self.timeout_s)

    def solver_time_limit_s(self, configured_s: float, requested_s: float | None = None) -> float:
        """The solver's limit now: api.settings.solver_time_limit_s on the time left."""
        return solver_time_limit_s(configured_s, self.remaining_s(), requested_s)

    def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` within the time left; else 503 naming the whole request timeout."""
        try:
            return run_with_timeout(self.remaining_s(), fn, *args, **kwargs)
        except RequestTimeoutError:
            logger.warning("request timeout of %s s reached in %s", self.timeout_s, getattr(fn, "__name__", fn))
            raise RequestTimeoutError(timeout_s=self.timeout_s) from None


def _deadline(request: Request) -> Deadline:
    settings: Settings = request.app.state.settings
    arrived_s = getattr(request.state, "arrived_monotonic_s", None)
    start_s = time.monotonic() if arrived_s is None else arrived_s
    return Deadline(timeout_s=settings.request_timeout_s, expires_at_s=start_s + settings.request_timeout_s)


#: The request's deadline; `deadline.run(fn, *args)` bounds planning work by HEADROOM_REQUEST_TIMEOUT_S.
DeadlineDep = Annotated[Deadline, Depends(_deadline)]


# ---- logging -----------------------------------------------------------------------------------

#: LogRecord's own attributes; everything else on a record came in through `extra=`. uvicorn adds
#: `color_message` (the message with ANSI colours), which a JSON line does not want.
_STANDARD_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the request id
    of the request being served, any `extra=` fields, and the traceback if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = _current_request_id.get()
        if request_id is not None:
            entry["request_id"] = request_id
        entry.update((key, value) for key, value in record.__dict__.items() if key not in _STANDARD_RECORD_FIELDS)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record is emitted (as logging's lastResort does),
    so redirected or captured stderr receives the lines."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(log_level: str) -> None:
    """The `headroom` loggers write JSON lines to stderr at `log_level` (one of Settings' levels).

    Logging is process-wide: the app created last sets the level. The handler is installed once
    and does not propagate, so a root logger set up by someone else does not print lines twice."""
    root = logging.getLogger("headroom")
    root.setLevel(_LOG_LEVELS[log_level])
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter())
        root.addHandler(handler)
    root.propagate = False


#: A `log_config` for `uvicorn.run` that sends uvicorn's own lines through the JSON formatter
#: (pass `access_log=False` as well: the `headroom.access` line replaces uvicorn's access log).
UVICORN_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "api.observability.JsonFormatter"}},
    "handlers": {"stderr": {"()": "api.observability._StderrHandler", "formatter": "json"}},
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
        "uvicorn.error": {"level": "INFO"},
        "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
    },
}


# ---- the middleware ----------------------------------------------------------------------------


def valid_request_id(value: str | None) -> TypeGuard[str]:
    return value is not None and _REQUEST_ID.fullmatch(value) is not None


def current_request_id() -> str | None:
    """The id of the request being served in this context (event loop task or worker thread)."""
    return _current_request_id.get()


def _route_templates(app: Any) -> dict[int, str]:
    """Full path templates of `app`'s routes by the id of the route object, and of its plain
    routes and mounts also by the id of the endpoint they dispatch to. FastAPI versions that keep
    included routers lazy put the router's own route object (path without the prefix) into the
    scope; `iter_route_contexts` pairs each with its full template. Older versions copy routes
    with the full path into `app.routes`, which the fallback reads directly."""
    try:
        from fastapi.routing import iter_route_contexts  # type: ignore[attr-defined,unused-ignore]  # absent in older FastAPI

        routes: Iterable[Any] = list(iter_route_contexts(app.routes))
    except ImportError:
        routes = app.routes
    templates: dict[int, str] = {}
    for route in routes:
        path = getattr(route, "path_format", None) or getattr(route, "path", None)
        if not isinstance(path, str) or not path:
            continue
        original = getattr(route, "original_route", route)
        endpoint = getattr(original, "endpoint", None) or getattr(original, "app", None)
        for key in (id(original), id(endpoint) if endpoint is not None else None):
            if key is not None:
                templates.setdefault(key, path)
    return templates


class ObservabilityMiddleware:
    """Per HTTP request: settles the request id, echoes it on the response, and after the
    response counts it, times it and writes its access line. Plain ASGI, so streaming responses
    pass through untouched."""

    def __init__(self, app: ASGIApp, *, metrics: MetricsRegistry) -> None:
        self.app = app
        self.metrics = metrics
        self._templates: dict[int, str] | None = None

    def _route_template(self, scope: Scope) -> str:
        """The matched route's full path template (`/v1/gpus/{slug}`); `unmatched` if none matched."""
        route, endpoint = scope.get("route"), scope.get("endpoint")
        if route is None and endpoint is None:
            return UNMATCHED_ROUTE
        if self._templates is None:
            self._templates = _route_templates(scope["app"])
        path = self._templates.get(id(route)) or self._templates.get(id(endpoint)) or getattr(route, "path", None)
        return path if isinstance(path, str) and path else UNMATCHED_ROUTE

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_s = time.perf_counter()
        incoming: str | None = next(
            (value.decode("latin-1") for name, value in scope["headers"] if name == b"x-request-id"), None
        )
        request_id = incoming if valid_request_id(incoming) else uuid.uuid4().hex
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["arrived_monotonic_s"] = time.monotonic()
        token = _current_request_id.set(request_id)
        status = 500  # what ServerErrorMiddleware answers if the app raises before responding

        async def send_with_request_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        try:
            await self.app(scope, receive, send_with_request_id)
        except BaseException:
            # Keep the request id set: ServerErrorMiddleware, outside this one, answers the
            # exception next in this same task, and its error log line should carry the id.
            self._observe(scope, status=status, started_s=started_s)
            raise
        self._observe(scope, status=status, started_s=started_s)
        _current_request_id.reset(token)

    def _observe(self, scope: Scope, *, status: int, started_s: float) -> None:
        """Count, time and log one answered request."""
        duration_s = time.perf_counter() - started_s
        route = self._route_template(scope)
        method = scope["method"]
        self.metrics.observe_request(method=method, route=route, status=status, duration_s=duration_s)
        access_logger.log(
            logging.ERROR if status >= 500 else logging.INFO,
            "%s %s %s",
            method,
            route,
            status,
            extra={
                "method": method,
                "route": route,
                "path": scope["path"],
                "status": status,
                "duration_ms": round(duration_s * 1e3, 3),
            },
        )


# ---- wiring ------------------------------------------------------------------------------------


def install_observability(app: FastAPI, settings: Settings) -> None:
    """Logging at `settings.log_level`, the request-id / metrics / access-log middleware, a
    metrics registry of this app's own, and `GET /metrics` (no API key needed)."""
    configure_logging(settings.log_level)
    metrics = MetricsRegistry()
    app.state.metrics = metrics
    app.add_middleware(ObservabilityMiddleware, metrics=metrics)

    @app.get(
        "/metrics",
        tags=["health"],
        name="get_metrics",
        summary="Metrics in Prometheus text format",
        response_class=PlainTextResponse,
        responses={
            200: {
                "content": {"text/plain": {"schema": {"type": "string"}}},
                "description": "Prometheus text exposition format 0.0.4.",
            }
        },
    )
    def get_metrics() -> PlainTextResponse:
        """Request counts and latency histograms per route template, method and status; plans
        computed; solver and simulation wall times. Counts start at zero when the process starts.
        Needs no API key (scrapers rarely carry one): it reveals traffic, not data."""
        return PlainTextResponse(metrics.render(), media_type=METRICS_MEDIA_TYPE)
