"""Service hygiene (issue 7 §4): /metrics in Prometheus text format, JSON access logs, the
X-Request-ID round trip, and the request deadline for planning work."""

from __future__ import annotations

import json
import logging
import logging.config
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from api.app import create_app
from api.errors import RequestTimeoutError
from api.observability import (
    HTTP_BUCKETS_S,
    UVICORN_LOG_CONFIG,
    WORK_BUCKETS_S,
    DeadlineDep,
    Histogram,
    MetricsDep,
    MetricsRegistry,
    current_request_id,
    metrics_of,
    record_plan_computed,
    record_simulation_time,
    record_solver_time,
    run_with_timeout,
)
from api.settings import Settings
from planner.errors import InfeasiblePlanError
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_KEY, assert_problem, serve_headroom

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\})? (?P<value>\S+)$')
_LABEL = re.compile(r'(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Samples of a Prometheus text exposition, `(name, labels) -> value`; every line must parse."""
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith(("# HELP ", "# TYPE ")):
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"not an exposition line: {line!r}"
        labels = frozenset((m["name"], m["value"]) for m in _LABEL.finditer(match["labels"] or ""))
        key = (match["name"], labels)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(match["value"])
    return samples


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(client: ApiClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse_exposition(response.text)


def access_lines(captured: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in captured.splitlines() if line.startswith("{")]
    return [line for line in lines if line["logger"] == "headroom.access"]


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: nothing here depends on the database (tests/api/test_concurrency.py runs both)."""
    return f"sqlite:///{tmp_path / 'headroom.db'}"


@pytest.fixture
def make_app(migrated_database_url: str) -> Callable[..., FastAPI]:
    """`make_app(**settings)`: an app to add test routes to before `make_client(app=app)` opens it."""
    return lambda **settings: create_app(Settings(database_url=migrated_database_url, admin_key=ADMIN_KEY, **settings))


# ---- metrics -----------------------------------------------------------------------------------


def test_requests_are_counted_by_route_template_method_and_status(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]
) -> None:
    assert client.post("/v1/gpus", json=gpu_record, headers=admin).status_code == 201
    assert client.get("/v1/gpus/h100-sxm").status_code == 200
    for slug in ("a100-sxm", "b200", "mi300x"):
        assert client.get(f"/v1/gpus/{slug}").status_code == 404
    assert client.get("/no/such/path").status_code == 404
    assert client.request("DELETE", "/healthz").status_code == 405

    samples = scrape(client)
    requests = "headroom_http_requests_total"
    assert sample(samples, requests, method="POST", route="/v1/gpus", status="201") == 1
    assert sample(samples, requests, method="GET", route="/v1/gpus/{slug}", status="200") == 1
    assert sample(samples, requests, method="GET", route="/v1/gpus/{slug}", status="404") == 3
    assert sample(samples, requests, method="GET", route="unmatched", status="404") == 1
    assert sample(samples, requests, method="DELETE", route="/healthz", status="405") == 1
    assert not any("slug" in dict(labels) or "/h100-sxm" in dict(labels).get("route", "") for _, labels in samples)

    duration = "headroom_http_request_duration_seconds"
    route = {"method": "GET", "route": "/v1/gpus/{slug}"}
    assert sample(samples, f"{duration}_count", **route) == 4
    buckets = [sample(samples, f"{duration}_bucket", **route, le=repr(bound)) for bound in HTTP_BUCKETS_S]
    assert buckets == sorted(buckets), "buckets are cumulative"
    assert sample(samples, f"{duration}_bucket", **route, le="+Inf") == 4
    assert 0 < sample(samples, f"{duration}_sum", **route) < 4 * 30


def test_planner_series_from_the_helpers_the_registry_and_a_route(
    make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient]
) -> None:
    """0.3 s falls in the le=0.5 bucket and not in le=0.25; 45 s only in le=60 and above."""
    app = make_app()

    @app.post("/test/plan")
    def fake_plan(request: Request, metrics: MetricsDep) -> dict[str, str]:
        record_solver_time(request, 0.3)
        metrics.record_plan_computed()
        with metrics.simulation_timer():
            time.sleep(0.01)
        return {"status": "planned"}

    client = make_client(app=app)
    assert client.post("/test/plan").status_code == 200
    record_solver_time(app, 45.0)
    record_plan_computed(metrics_of(app), 2)
    record_simulation_time(app, 0.002)

    samples = scrape(client)
    assert sample(samples, "headroom_plans_computed_total") == 3
    assert sample(samples, "headroom_solver_seconds_count") == 2
    assert sample(samples, "headroom_solver_seconds_sum") == pytest.approx(45.3)
    assert sample(samples, "headroom_solver_seconds_bucket", le="0.25") == 0
    assert sample(samples, "headroom_solver_seconds_bucket", le="0.5") == 1
    assert sample(samples, "headroom_solver_seconds_bucket", le="30.0") == 1
    assert sample(samples, "headroom_solver_seconds_bucket", le="60.0") == 2
    assert sample(samples, "headroom_simulation_seconds_count") == 2
    assert sample(samples, "headroom_simulation_seconds_bucket", le="0.005") == 1  # the 2 ms one
    assert 0.012 <= sample(samples, "headroom_simulation_seconds_sum") < 5
    assert {bound for bound in WORK_BUCKETS_S} >= {30.0, 60.0}


def test_each_app_has_its_own_registry(make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient]) -> None:
    first_app = make_app()
    first, second = make_client(app=first_app), make_client()
    for _ in range(3):
        first.get("/healthz")
    record_plan_computed(first_app)
    first_samples, second_samples = scrape(first), scrape(second)
    assert sample(first_samples, "headroom_http_requests_total", method="GET", route="/healthz", status="200") == 3
    assert (
        "headroom_http_requests_total",
        frozenset({("method", "GET"), ("route", "/healthz"), ("status", "200")}),
    ) not in second_samples
    assert sample(first_samples, "headroom_plans_computed_total") == 1
    assert sample(second_samples, "headroom_plans_computed_total") == 0


#: GET /metrics as it was served by the hand-written registry before prometheus-client replaced
#: it (recorded from that code): per metric family its type, help text, and the label names of
#: each of its sample names. Dashboards and alerts key on these, so they must not change.
EXPOSITION_SHAPE: dict[str, tuple[str, str, dict[str, frozenset[str]]]] = {
    "headroom_http_requests_total": (
        "counter",
        "HTTP requests answered, by route template, method and status code.",
        {"headroom_http_requests_total": frozenset({"method", "route", "status"})},
    ),
    "headroom_http_request_duration_seconds": (
        "histogram",
        "Time from receiving a request to the end of its response, by route template and method.",
        {
            "headroom_http_request_duration_seconds_bucket": frozenset({"method", "route", "le"}),
            "headroom_http_request_duration_seconds_sum": frozenset({"method", "route"}),
            "headroom_http_request_duration_seconds_count": frozenset({"method", "route"}),
        },
    ),
    "headroom_plans_computed_total": (
        "counter",
        "Capacity plans computed (plans, re-plans, fleet plans).",
        {"headroom_plans_computed_total": frozenset()},
    ),
    "headroom_solver_seconds": (
        "histogram",
        "Wall time of optimizer (MILP) solves.",
        {
            "headroom_solver_seconds_bucket": frozenset({"le"}),
            "headroom_solver_seconds_sum": frozenset(),
            "headroom_solver_seconds_count": frozenset(),
        },
    ),
    "headroom_simulation_seconds": (
        "histogram",
        "Wall time of discrete-event simulations.",
        {
            "headroom_simulation_seconds_bucket": frozenset({"le"}),
            "headroom_simulation_seconds_sum": frozenset(),
            "headroom_simulation_seconds_count": frozenset(),
        },
    ),
}
#: The `le` labels each histogram's buckets carry, as the text shows them.
HTTP_LE = {"0.005", "0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "+Inf"}
WORK_LE = HTTP_LE | {"30.0", "60.0"}


def exposition_shape(text: str) -> tuple[dict[str, tuple[str, str, dict[str, frozenset[str]]]], dict[str, set[str]]]:
    """`(family -> (type, help, {sample name -> label names}), sample name -> le values)` of an
    exposition; every sample must belong to the family declared by the TYPE line above it."""
    shape: dict[str, tuple[str, str, dict[str, frozenset[str]]]] = {}
    le_values: dict[str, set[str]] = {}
    helps: dict[str, str] = {}
    family = ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            family, _, kind = line[len("# TYPE ") :].partition(" ")
            assert family not in shape, f"{family} declared twice"
            shape[family] = (kind, helps[family], {})
        elif line:
            match = _SAMPLE.match(line)
            assert match is not None, f"not an exposition line: {line!r}"
            assert match["name"].startswith(family), f"{match['name']} outside its family {family}"
            labels = {m["name"]: m["value"] for m in _LABEL.finditer(match["labels"] or "")}
            samples = shape[family][2]
            assert samples.setdefault(match["name"], frozenset(labels)) == frozenset(labels), line
            if "le" in labels:
                le_values.setdefault(match["name"], set()).add(labels["le"])
    return shape, le_values


def test_exposition_keeps_its_metric_names_types_labels_and_help(
    make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient]
) -> None:
    app = make_app()
    client = make_client(app=app)
    assert client.get("/v1/gpus/h100-sxm").status_code == 404
    record_plan_computed(app)
    record_solver_time(app, 0.3)
    record_simulation_time(app, 0.002)
    response = client.get("/metrics")
    shape, le_values = exposition_shape(response.text)
    assert shape == EXPOSITION_SHAPE
    assert le_values == {
        "headroom_http_request_duration_seconds_bucket": HTTP_LE,
        "headroom_solver_seconds_bucket": WORK_LE,
        "headroom_simulation_seconds_bucket": WORK_LE,
    }
    assert {repr(bound) for bound in HTTP_BUCKETS_S} | {"+Inf"} == HTTP_LE
    assert {repr(bound) for bound in WORK_BUCKETS_S} | {"+Inf"} == WORK_LE


def test_metrics_needs_no_key_even_when_reads_do(make_client: Callable[..., ApiClient]) -> None:
    client = make_client(require_auth=True)
    assert_problem(client.get("/v1/gpus"), 401)
    assert client.get("/metrics").status_code == 200


def test_exposition_escapes_label_values_and_rejects_bad_observations() -> None:
    histogram = Histogram("x_seconds", "help", ("route",), buckets=(1.0,))
    histogram.observe(0.5, route='a"b\\c\nd')
    assert 'x_seconds_bucket{route="a\\"b\\\\c\\nd",le="1.0"} 1' in histogram.lines()
    with pytest.raises(ValueError):
        histogram.observe(float("nan"), route="a")
    with pytest.raises(ValueError):
        histogram.observe(1.0)  # missing label
    registry = MetricsRegistry()
    with pytest.raises(ValueError):
        registry.plans_computed.inc(-1)
    threads = [threading.Thread(target=lambda: [registry.record_solver_time(0.01) for _ in range(500)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.solver_seconds.count() == 2000


# ---- request id and logs -----------------------------------------------------------------------


def test_request_id_is_honoured_generated_or_replaced(client: ApiClient) -> None:
    given = "job-42.retry_1"
    assert client.get("/healthz", headers={"X-Request-ID": given}).headers["x-request-id"] == given
    generated = {client.get("/healthz").headers["x-request-id"] for _ in range(3)}
    assert len(generated) == 3 and all(re.fullmatch(r"[0-9a-f]{32}", value) for value in generated)
    for bad in ("x" * 129, "has space", "semi;colon", "ünï".encode("latin-1"), ""):
        echoed = client.get("/healthz", headers={"X-Request-ID": bad}).headers["x-request-id"]
        assert echoed != bad and re.fullmatch(r"[0-9a-f]{32}", echoed)
    assert client.get("/healthz", headers={"X-Request-ID": "y" * 128}).headers["x-request-id"] == "y" * 128


def test_problem_responses_carry_the_request_id(make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient]) -> None:
    app = make_app()

    @app.get("/test/bug")
    def bug() -> None:
        raise RuntimeError("a bug")

    client = make_client(app=app, raise_app_exceptions=False)
    response = client.get("/v1/gpus/nope", headers={"X-Request-ID": "trace-404"})
    body = assert_problem(response, 404, "not-found")
    assert response.headers["x-request-id"] == body["request_id"] == "trace-404"

    body = assert_problem(client.get("/v1/gpus?limit=0"), 422, "invalid-request")
    assert re.fullmatch(r"[0-9a-f]{32}", body["request_id"])

    response = client.get("/test/bug", headers={"X-Request-ID": "trace-500"})
    body = assert_problem(response, 500, "internal-error")
    assert response.headers["x-request-id"] == body["request_id"] == "trace-500"
    assert "a bug" not in response.text
    samples = scrape(client)
    assert sample(samples, "headroom_http_requests_total", method="GET", route="/test/bug", status="500") == 1


def test_one_json_access_line_per_request(make_client: Callable[..., ApiClient], capsys: pytest.CaptureFixture[str]) -> None:
    client = make_client()
    capsys.readouterr()
    client.get("/v1/gpus/h100-sxm", headers={"X-Request-ID": "log-me"})
    client.get("/healthz")
    lines = access_lines(capsys.readouterr().err)
    assert len(lines) == 2
    first = lines[0]
    assert first["request_id"] == "log-me"
    assert (first["method"], first["route"], first["path"], first["status"], first["level"]) == (
        "GET",
        "/v1/gpus/{slug}",
        "/v1/gpus/h100-sxm",
        404,
        "info",
    )
    assert isinstance(first["duration_ms"], float) and first["duration_ms"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert lines[1]["route"] == "/healthz" and lines[1]["request_id"] != "log-me"


def test_log_level_comes_from_the_settings(
    make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient], capsys: pytest.CaptureFixture[str]
) -> None:
    app = make_app(log_level="warning")

    @app.get("/test/bug")
    def bug() -> None:
        raise RuntimeError("a bug")

    quiet = make_client(app=app, raise_app_exceptions=False)
    capsys.readouterr()
    quiet.get("/healthz")
    quiet.get("/test/bug", headers={"X-Request-ID": "quiet-500"})
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    assert [r["status"] for r in records if r["logger"] == "headroom.access"] == [500]
    unhandled = [r for r in records if r["logger"] == "headroom.api"]
    assert unhandled and unhandled[0]["level"] == "error" and unhandled[0]["request_id"] == "quiet-500"
    assert "RuntimeError: a bug" in unhandled[0]["exception"]


def test_uvicorn_log_config_writes_json(capsys: pytest.CaptureFixture[str]) -> None:
    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {
        name: (logging.getLogger(name).handlers[:], logging.getLogger(name).level, logging.getLogger(name).propagate)
        for name in names
    }
    try:
        logging.config.dictConfig(UVICORN_LOG_CONFIG)
        capsys.readouterr()
        logging.getLogger("uvicorn.error").info("Started server process [%d]", 7, extra={"color_message": "\x1b[1m7\x1b[0m"})
        logging.getLogger("uvicorn.access").info("GET / 200")
        lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    finally:
        for name, (handlers, level, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
    assert lines == [
        {"time": lines[0]["time"], "level": "info", "logger": "uvicorn.error", "message": "Started server process [7]"}
    ]


# ---- deadline ----------------------------------------------------------------------------------


def test_run_with_timeout_returns_raises_and_keeps_the_context() -> None:
    assert run_with_timeout(5.0, sum, [1, 2, 3]) == 6
    with pytest.raises(InfeasiblePlanError):
        run_with_timeout(5.0, _infeasible)
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError) as raised:
        run_with_timeout(0.1, release.wait, 10.0)
    assert 0.1 <= time.monotonic() - started < 2.0
    assert raised.value.extensions == {"timeout_s": 0.1}
    release.set()
    with pytest.raises(RequestTimeoutError):
        run_with_timeout(0.0, sum, [1])


def test_planning_past_the_request_timeout_is_a_503_problem(
    make_app: Callable[..., FastAPI], make_client: Callable[..., ApiClient]
) -> None:
    app = make_app(request_timeout_s=1.0)
    release = threading.Event()
    seen: list[Any] = []

    @app.post("/test/slow-plan")
    def slow_plan(deadline: DeadlineDep) -> dict[str, float]:
        seen.append(deadline.remaining_s())
        seen.append(deadline.run(current_request_id))
        deadline.run(release.wait, 10.0)
        return {"remaining_s": deadline.remaining_s()}

    client = make_client(app=app)
    try:
        started = time.monotonic()
        response = client.post("/test/slow-plan", headers={"X-Request-ID": "slow-1"})
        elapsed_s = time.monotonic() - started
    finally:
        release.set()
    body = assert_problem(response, 503, "request-timeout")
    assert body["timeout_s"] == 1.0 and "HEADROOM_REQUEST_TIMEOUT_S" in body["detail"] and "1 s" in body["detail"]
    assert body["request_id"] == response.headers["x-request-id"] == "slow-1"
    assert 1.0 <= elapsed_s < 5.0
    assert 0 < seen[0] <= 1.0
    assert seen[1] == "slow-1"  # the worker thread runs with the request's context


def _infeasible() -> None:
    raise InfeasiblePlanError("no GPU type meets the SLO")


def test_create_app_uses_observability(migrated_database_url: str) -> None:
    app = create_app(Settings(database_url=migrated_database_url))
    try:
        assert isinstance(app.state.metrics, MetricsRegistry)
        assert app.docs_url is None and app.redoc_url is None
    finally:
        app.state.engine.dispose()


@pytest.mark.slow
def test_headroom_serve_writes_json_lines_only(tmp_path: Path) -> None:
    """`headroom serve` over real HTTP: uvicorn's lines and the access lines are JSON, one access
    line per request, and uvicorn's plain-text access log is off."""
    env = {"HEADROOM_LOG_LEVEL": "info", "HEADROOM_ADMIN_KEY": None}
    with serve_headroom(tmp_path, env=env, separate_stderr=True, ready_path=None) as served:
        deadline = time.monotonic() + 30.0
        while True:
            assert served.process.poll() is None, served.output()
            try:
                response = httpx.get(f"{served.base_url}/healthz", headers={"X-Request-ID": "serve-1"}, timeout=1.0)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "headroom serve did not answer"
                time.sleep(0.1)
        assert response.headers["x-request-id"] == "serve-1"
    stdout, stderr = served.stdout(), served.stderr()
    assert stdout == ""
    structured = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    plain = [line for line in stderr.splitlines() if not line.startswith("{")]
    assert all(line.startswith("headroom: ") for line in plain), plain  # the CLI's own start-up notes
    access = [line for line in structured if line["logger"] == "headroom.access"]
    assert [(line["request_id"], line["route"], line["status"]) for line in access] == [("serve-1", "/healthz", 200)]
    assert any(line["logger"] == "uvicorn.error" and "Uvicorn running" in line["message"] for line in structured)
