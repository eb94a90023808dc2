"""Bounded work for POST /v1/fleet-plans (issue 22 §1): requests past the size bounds are 422
naming the bound before any planning; the MILP's limit is the least of the request's, the
service's and the time the request has left; and a plan past the request timeout answers 503 and
then stops (its thread ends, no table job is left in the workers) instead of burning CPU on."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from api import fleet_plans, fleet_tables
from api.schemas.fleet_plans import MAX_DISTINCT_SHAPES, MAX_SHAPE_OPTIONS, MAX_WORKLOAD_PERIODS
from api.settings import SOLVER_SHARE_OF_DEADLINE
from planner.fleet_candidates import clear_caches
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_fleet_plans import (
    body,
    load_reference_catalog,
    post,
    seeded_sqlite_template,
    workload,
)

__all__ = ["seeded_sqlite_template"]  # a fixture, used by name

#: How soon after its 503 a timed-out plan's thread must have ended: one stage of the work (a
#: (GPU, tp) search in a table, an LP, one period's MILP) on a loaded 2-core machine.
STOPS_WITHIN_S = 10.0


@pytest.fixture
def seeded(
    make_client: Callable[..., ApiClient], migrated_database_url: str, seeded_sqlite_template: Path
) -> Callable[..., ApiClient]:
    """`seeded(**settings)`: a client with those settings on a database holding the reference catalog."""
    url = make_url(migrated_database_url)
    if url.get_backend_name() == "sqlite" and url.database:
        shutil.copyfile(seeded_sqlite_template, url.database)
    else:
        load_reference_catalog(migrated_database_url)
    return make_client


def plan_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("headroom-work-_plan")]


def test_a_request_past_the_size_bounds_is_422_naming_the_bound(seeded: Callable[..., ApiClient]) -> None:
    api = seeded()
    periods = MAX_WORKLOAD_PERIODS // 10 + 1
    wide = body(*(workload(f"w{i}", [1.0] * periods) for i in range(10)))
    problem = assert_problem(post(api, wide), 422, "invalid-request")
    assert "MAX_WORKLOAD_PERIODS" in bad_fields(problem)["workloads"]

    shapes = body(
        *(workload(f"w{i}", [1.0], output_tokens={"mean": 100 + i, "p99": 1000}) for i in range(MAX_DISTINCT_SHAPES + 1))
    )
    problem = assert_problem(post(api, shapes), 422, "invalid-request")
    assert "MAX_DISTINCT_SHAPES" in bad_fields(problem)["workloads"]

    grid = {"tp_degrees": [1, 2, 4, 8, 16, 32, 64], "batch_limits": list(range(1, 17)), "chunk_budgets": [None, *range(2, 9)]}
    shapes_needed = MAX_SHAPE_OPTIONS // (7 * 16 * 8) + 1
    assert shapes_needed <= MAX_DISTINCT_SHAPES
    searched = body(
        *(workload(f"w{i}", [1.0], output_tokens={"mean": 100 + i, "p99": 1000}) for i in range(shapes_needed)), search=grid
    )
    problem = assert_problem(post(api, searched), 422, "invalid-request")
    assert "MAX_SHAPE_OPTIONS" in bad_fields(problem)["search"]


def test_a_milp_past_its_column_bound_is_422_naming_the_bound(
    seeded: Callable[..., ApiClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet_plans, "MAX_MILP_COLUMNS", 3)
    problem = assert_problem(post(seeded(), body()), 422, "invalid-planner-input")
    assert problem["constraint"] == "milp_columns" and problem["limit"] == 3 and problem["needed"] > 3


@pytest.mark.parametrize(("service_s", "request_s"), [(0.5, 10.0), (10.0, 0.7)])
def test_the_solver_limit_is_the_least_of_request_service_and_deadline(
    seeded: Callable[..., ApiClient], monkeypatch: pytest.MonkeyPatch, service_s: float, request_s: float
) -> None:
    limits: list[float] = []
    solve = fleet_plans.solve_fleet

    def recording(spec: Any, *, time_limit_s: float, **kwargs: Any) -> Any:
        limits.append(time_limit_s)
        return solve(spec, time_limit_s=time_limit_s, **kwargs)

    monkeypatch.setattr(fleet_plans, "solve_fleet", recording)
    api = seeded(solver_time_limit_s=service_s, request_timeout_s=30.0)
    response = post(api, body(solver_time_limit_s=request_s))
    assert response.status_code == 201, response.text
    assert limits and limits[0] <= min(service_s, request_s)


def test_the_deadline_bounds_the_solver_limit(seeded: Callable[..., ApiClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """Service and request allow 10 s but the request times out after 4 s: the MILP gets at most
    what is left of those 4 s once the (cached) tables are read."""
    limits: list[float] = []
    solve = fleet_plans.solve_fleet

    def recording(spec: Any, *, time_limit_s: float, **kwargs: Any) -> Any:
        limits.append(time_limit_s)
        return solve(spec, time_limit_s=time_limit_s, **kwargs)

    assert post(seeded(), body()).status_code == 201  # the tables, cached
    monkeypatch.setattr(fleet_plans, "solve_fleet", recording)
    response = post(seeded(solver_time_limit_s=10.0, request_timeout_s=4.0), body(solver_time_limit_s=10.0))
    assert response.status_code == 201, response.text
    assert 0 < limits[0] < 4.0


def test_the_fleet_solver_limit_is_the_one_policy_on_the_deadline(
    seeded: Callable[..., ApiClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same policy as every planning endpoint (api.settings.solver_time_limit_s): with 10 s
    allowed by service and request and a 4 s request timeout, the MILP gets at most
    SOLVER_SHARE_OF_DEADLINE of the time left when it starts, so at most 0.8 x 4 s = 3.2 s."""
    limits: list[float] = []
    solve = fleet_plans.solve_fleet

    def recording(spec: Any, *, time_limit_s: float, **kwargs: Any) -> Any:
        limits.append(time_limit_s)
        return solve(spec, time_limit_s=time_limit_s, **kwargs)

    assert post(seeded(), body()).status_code == 201  # the tables, cached
    monkeypatch.setattr(fleet_plans, "solve_fleet", recording)
    response = post(seeded(solver_time_limit_s=10.0, request_timeout_s=4.0), body(solver_time_limit_s=10.0))
    assert response.status_code == 201, response.text
    assert 0 < limits[0] <= 4.0 * SOLVER_SHARE_OF_DEADLINE


def test_a_plan_past_the_request_timeout_answers_503_and_then_stops(seeded: Callable[..., ApiClient]) -> None:
    """Cold tables (every cache cleared) on the default grid take seconds; with a 0.3 s request
    timeout the answer is a 503 `request-timeout`, and soon after it the plan's thread has ended
    and the table workers hold no job of it: nothing keeps burning CPU for a client that left."""
    fleet_tables.clear_table_cache()
    clear_caches()
    fleet_tables.restart_table_workers()  # workers with empty caches
    api = seeded(request_timeout_s=0.3)
    shapes = [workload(f"w{i}", [5.0, 9.0], output_tokens={"mean": 200 + 10 * i, "p99": 1000}) for i in range(6)]
    payload = body(*shapes, search={})
    payload["constraints"] = {"precisions": payload["constraints"]["precisions"]}  # every catalog GPU
    started = time.monotonic()
    problem = assert_problem(post(api, payload), 503, "request-timeout")
    assert problem["timeout_s"] == 0.3
    answered_s = time.monotonic() - started
    while (plan_threads() or fleet_tables.pending_table_jobs()) and time.monotonic() - started < answered_s + STOPS_WITHIN_S:
        time.sleep(0.05)
    assert plan_threads() == [] and fleet_tables.pending_table_jobs() == 0
    fleet_tables.clear_table_cache()
