"""POST /v1/fleet-plans and GET /v1/fleet-plans/{id} through the real app on the seeded reference
catalog: capacity covers demand, reserved vs on-demand, CSV, storage, and the 4xx answers.

Grids are small (two GPU types, two precisions, tp 1–2, two batch limits, two chunk budgets) so
each candidate table needs a handful of root-finds; the queueing calls are cached per process,
so tests after the first reuse them.
"""

from __future__ import annotations

import copy
import csv
import io
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from api.schemas.fleet_plan_csv import CSV_COLUMNS
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem, bad_fields

GPUS = ["l40s", "h100-sxm"]
SEARCH = {"tp_degrees": [1, 2], "batch_limits": [32, 128], "chunk_budgets": [None, 2048]}
PRECISIONS = [{"weights": "fp8", "kv_cache": "fp8"}, {"weights": "fp16", "kv_cache": "fp16"}]


def workload(name: str, demand: list[float], **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "llama-3.1-8b",
        "prompt_tokens": {"mean": 1000, "p99": 4000},
        "output_tokens": {"mean": 250, "p99": 1000},
        "slo": {"ttft_ms": 2000, "tpot_ms": 60, "percentile": 99},
        "demand_rps": demand,
        **changes,
    }


def body(*workloads: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {
        "workloads": list(workloads) or [workload("chat", [6, 6, 6, 6]), workload("batch", [2, 2, 2, 30], slo={"e2e_s": 60})],
        "constraints": {"gpus": GPUS, "precisions": PRECISIONS},
        "search": SEARCH,
        **changes,
    }


def load_reference_catalog(url: str) -> None:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def seeded_sqlite_template(migrated_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The migrated SQLite template with the reference catalog loaded, once per test session."""
    path = tmp_path_factory.mktemp("seeded") / "headroom.db"
    shutil.copyfile(migrated_sqlite_template, path)
    load_reference_catalog(f"sqlite:///{path}")
    return path


@pytest.fixture
def api(make_client: Callable[..., ApiClient], migrated_database_url: str, seeded_sqlite_template: Path) -> ApiClient:
    """A client on a database holding the shipped reference catalog (SQLite: copied from a template)."""
    url = make_url(migrated_database_url)
    if url.get_backend_name() == "sqlite" and url.database:
        shutil.copyfile(seeded_sqlite_template, url.database)
    else:
        load_reference_catalog(migrated_database_url)
    return make_client()


def post(api: ApiClient, payload: dict[str, Any], **kwargs: Any) -> Any:
    return api.post("/v1/fleet-plans", json=payload, headers={**ADMIN_HEADERS, **kwargs.pop("headers", {})}, **kwargs)


def test_a_day_of_two_workloads_covers_demand_and_reserves_the_flat_part(api: ApiClient) -> None:
    """`chat` is flat at 6 req/s, `batch` idles at 2 req/s and spikes to 30 in the last period.
    Reserved l40s/h100 cost ≈ 63 % of on-demand, so a GPU busy in every period is cheaper
    reserved and one busy in one period of four (25 % < 63 %) cheaper on demand: the spike
    must be rented and nothing rented outside it."""
    response = post(api, body())
    assert response.status_code == 201, response.text
    plan = response.json()
    assert response.headers["location"] == f"/v1/fleet-plans/{plan['id']}"
    assert [p["period"] for p in plan["periods"]] == [0, 1, 2, 3]
    demand = {"chat": [6, 6, 6, 6], "batch": [2, 2, 2, 30]}
    for period in plan["periods"]:
        for name, rates in demand.items():
            rows = [row for row in period["workloads"] if row["name"] == name]
            assert rows, (period["period"], name)
            assert sum(row["capacity_rps"] for row in rows) >= rates[period["period"]] * (1 - 1e-9)
            for row in rows:
                assert row["capacity_rps"] == pytest.approx(
                    row["replicas"] * row["max_rps_at_slo"], rel=1e-5
                )  # both served to 6 significant figures
                assert 0 < row["target_rho"] < 1
                assert row["gpu"] in GPUS and row["tp"] in (1, 2)
        used = {gpu: sum(r["gpus"] for r in period["workloads"] if r["gpu"] == gpu) for gpu in GPUS}
        for gpu, n in used.items():
            assert n <= plan["reserved_gpus"].get(gpu, 0) + period["on_demand_gpus"].get(gpu, 0)
    assert plan["reserved_gpus"], "flat demand is served from reserved GPUs"
    assert all(not p["on_demand_gpus"] for p in plan["periods"][:3])
    assert plan["periods"][3]["on_demand_gpus"], "the one-period spike is rented on demand"
    cost = plan["cost"]
    assert cost["usd_total"] == pytest.approx(cost["reserved_usd"] + cost["on_demand_usd"] + cost["spot_usd"])
    assert cost["usd_total"] == pytest.approx(
        sum(cost["per_period_usd"]), abs=0.005 * (len(cost["per_period_usd"]) + 1)
    )  # each in cents
    assert cost["usd_total"] == pytest.approx(sum(cost["per_workload_usd"].values()) + cost["idle_usd"])
    assert cost["usd_per_day"] == pytest.approx(
        cost["usd_total"] * 24 / 4, abs=0.005 * (24 / 4 + 1)
    )  # the total in cents, times 6
    prices = plan["prices"]
    reserved = sum(n * prices[gpu]["reserved_usd_per_hour"] * 4 for gpu, n in plan["reserved_gpus"].items())
    assert cost["reserved_usd"] == pytest.approx(reserved, abs=0.005)
    assert plan["solver"]["status"] == "optimal" and plan["solver"]["name"]
    assert plan["model_size"]["variables"] > 0 and plan["model_size"]["constraints"] > 0
    assert len(plan["shadow_prices"]["demand"]) == 2 * 4
    assert plan["catalog_version"] >= 1
    assert plan["candidates"] is None
    assert plan["notes"] == []


def test_include_candidates_and_share_pools_note(api: ApiClient) -> None:
    flat = workload("chat", [3, 3])
    response = post(api, body(flat, dict(flat, name="chat-eu"), include_candidates=True, share_pools=True))
    assert response.status_code == 201, response.text
    plan = response.json()
    assert set(plan["candidates"]) == {"chat", "chat-eu"}
    assert plan["candidates"]["chat"] == plan["candidates"]["chat-eu"]
    assert plan["candidate_search"]["distinct_tables"] == 1, "identical shapes share one table"
    for candidate in plan["candidates"]["chat"]:
        assert candidate["gpu"] in GPUS
        assert candidate["gpus_per_replica"] == candidate["tp"]
        assert 0 < candidate["max_rps_at_slo"] <= candidate["saturation_rps"]
        assert candidate["id"].startswith(f"{candidate['gpu']}/")
    assert any("share_pools" in note for note in plan["notes"])


def test_csv_schedule_and_get_by_id_return_the_same_plan(api: ApiClient) -> None:
    created = post(api, body())
    assert created.status_code == 201, created.text
    plan = created.json()
    as_csv = post(api, body(), headers={"Accept": "text/csv"})
    assert as_csv.status_code == 201
    assert as_csv.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert tuple(csv.reader(io.StringIO(as_csv.text)).__next__()) == CSV_COLUMNS
    assignments = [(p["period"], r["name"]) for p in plan["periods"] for r in p["workloads"]]
    assert len(rows) == len(assignments)
    assert {(int(r["period"]), r["workload"]) for r in rows} == {(p, w) for p in range(4) for w in ("chat", "batch")}
    for row in rows:
        assert int(row["gpus_reserved"]) + int(row["gpus_on_demand"]) + int(row["gpus_spot"]) == int(row["gpus"])
        assert int(row["gpus"]) == int(row["replicas"]) * int(row["tp"])
    by_period = {p: sum(float(r["cost_usd"]) for r in rows if int(r["period"]) == p) for p in range(4)}
    for p, period in enumerate(plan["periods"]):
        assert by_period[p] <= period["cost_usd"] * (1 + 1e-6)

    fetched = api.get(f"/v1/fleet-plans/{plan['id']}")
    assert fetched.status_code == 200
    assert fetched.json() == plan
    fetched_csv = api.get(f"/v1/fleet-plans/{as_csv.headers['location'].rsplit('/', 1)[1]}?format=csv")
    assert fetched_csv.status_code == 200
    assert fetched_csv.text == as_csv.text
    again = api.get(f"/v1/fleet-plans/{plan['id']}", params={"format": "csv"})
    assert again.text.splitlines()[0] == ",".join(CSV_COLUMNS)
    assert len(again.text.splitlines()) == len(assignments) + 1


def test_unknown_fleet_plan_id_is_a_404_problem(api: ApiClient) -> None:
    assert_problem(api.get("/v1/fleet-plans/" + "0" * 32), 404, "not-found")
    assert_problem(api.get("/v1/fleet-plans/not-an-id"), 404, "not-found")


def test_mismatched_periods_duplicates_and_negative_demand_are_422_listing_fields(api: ApiClient) -> None:
    payload = body(workload("chat", [1, 2, 3]), workload("code", [1, 2]), workload("chat", [1, 2, 3]))
    problem = assert_problem(post(api, payload), 422, "invalid-request")
    fields = bad_fields(problem)
    assert "workloads.1.demand_rps" in fields and "3" in fields["workloads.1.demand_rps"]
    assert "duplicate" in fields["workloads.2.name"]

    negative = assert_problem(post(api, body(workload("chat", [1, -2]))), 422, "invalid-request")
    assert "workloads.0.demand_rps.1" in bad_fields(negative)

    empty = assert_problem(post(api, body(workloads=[]) | {"workloads": []}), 422, "invalid-request")
    assert "workloads" in bad_fields(empty)

    inventory = assert_problem(post(api, body(workload("chat", [1, 2]), inventory={"l40s": [1, 2, 3]})), 422)
    assert "inventory.l40s" in bad_fields(inventory)


def test_demand_beyond_inventory_names_workload_period_gpu_and_shortfall(api: ApiClient) -> None:
    payload = body(workload("chat", [1, 1, 400]), inventory={"h100-sxm": 2, "l40s": 2})
    problem = assert_problem(post(api, payload), 422, "infeasible-plan")
    assert problem["constraint"] == "gpu_inventory"
    assert problem["workload"] == "chat"
    assert problem["period"] == 2
    assert problem["gpu"] in GPUS
    assert problem["gpus_short"] >= 1
    assert all(s["period"] == 2 for s in problem["shortfalls"])
    assert "chat" in problem["detail"] and "short" in problem["detail"]


def test_workload_no_configuration_serves_is_422_naming_it(api: ApiClient) -> None:
    payload = body(workload("chat", [1, 1]), workload("impossible", [1, 1], slo={"tpot_ms": 0.01}))
    problem = assert_problem(post(api, payload), 422, "infeasible-plan")
    assert problem["workload"] == "impossible"
    assert problem["constraint"] == "tpot"


@pytest.mark.parametrize(
    ("change", "missing"),
    [
        ({"workloads": [workload("chat", [1], model="no-such-model")]}, "no-such-model"),
        ({"constraints": {"gpus": ["no-such-gpu"]}}, "no-such-gpu"),
        ({"inventory": {"no-such-gpu": 3}}, "no-such-gpu"),
        ({"prices": {"no-such-gpu": {"on_demand": 1.0}}}, "no-such-gpu"),
        ({"efficiency_profile": "no-such-profile"}, "no-such-profile"),
    ],
)
def test_unknown_slugs_are_404(api: ApiClient, change: dict[str, Any], missing: str) -> None:
    payload = body(workload("chat", [1]))
    payload.update(copy.deepcopy(change))
    problem = assert_problem(post(api, payload), 404, "not-found")
    assert missing in problem["detail"]


def test_price_overrides_and_spot_change_the_plan(api: ApiClient) -> None:
    """With the reserved price above on-demand nothing is reserved; spot at 90 % off with room
    for the whole fleet replaces on-demand entirely."""
    expensive = {gpu: {"reserved_1y": 100.0} for gpu in GPUS}
    plan = post(api, body(workload("chat", [4, 4]), prices=expensive)).json()
    assert plan["reserved_gpus"] == {}
    assert all(p["on_demand_gpus"] for p in plan["periods"])
    assert {g: p["source"] for g, p in plan["prices"].items()} == {g: "request" for g in plan["prices"]}

    spot = {gpu: {"discount": 0.9, "max_gpus": 1000} for gpu in GPUS}
    plan = post(api, body(workload("chat", [4, 4]), prices=expensive, spot=spot)).json()
    assert plan["reserved_gpus"] == {} and all(not p["on_demand_gpus"] for p in plan["periods"])
    assert all(p["spot_gpus"] for p in plan["periods"])
    gpu = next(iter(plan["periods"][0]["spot_gpus"]))
    assert plan["prices"][gpu]["spot_usd_per_hour"] == pytest.approx(plan["prices"][gpu]["on_demand_usd_per_hour"] * 0.1)
    assert plan["cost"]["spot_usd"] == pytest.approx(plan["cost"]["usd_total"])


def test_n_plus_one_keeps_demand_covered_with_the_largest_replica_lost(api: ApiClient) -> None:
    payload = body(
        workload("chat", [3, 9]), constraints={"gpus": GPUS, "precisions": PRECISIONS, "n_plus_one": True, "min_replicas": 2}
    )
    response = post(api, payload)
    assert response.status_code == 201, response.text
    for period, demand in zip(response.json()["periods"], (3, 9), strict=True):
        rows = period["workloads"]
        capacity = sum(r["capacity_rps"] for r in rows)
        assert capacity - max(r["max_rps_at_slo"] for r in rows) >= demand * (1 - 1e-9)
        assert sum(r["replicas"] for r in rows) >= 2


def test_per_period_inventory_moves_the_load_to_another_gpu_type(api: ApiClient) -> None:
    """An inventory of 0 for the type the unconstrained plan prefers, in period 1 only, moves
    period 1's load to the other type and holds none of the first there (reserved included)."""
    free = post(api, body(workload("chat", [6, 6]))).json()
    first_choice = free["periods"][0]["workloads"][0]["gpu"]
    other = next(gpu for gpu in GPUS if gpu != first_choice)
    response = post(api, body(workload("chat", [6, 6]), inventory={first_choice: [64, 0]}))
    assert response.status_code == 201, response.text
    periods = response.json()["periods"]
    assert {r["gpu"] for r in periods[1]["workloads"]} == {other}
    assert periods[1]["gpus_held"].get(first_choice, 0) == 0


def test_budget_below_the_cheapest_fleet_is_422_with_the_needed_budget(api: ApiClient) -> None:
    problem = assert_problem(
        post(
            api, body(workload("chat", [4, 4]), constraints={"gpus": GPUS, "precisions": PRECISIONS, "budget_usd_per_day": 1.0})
        ),
        422,
        "infeasible-plan",
    )
    assert problem["constraint"] == "budget"
    assert problem["needed"] > 1.0 and math.isfinite(problem["needed"])


def test_creating_a_fleet_plan_needs_a_planner_key(api: ApiClient) -> None:
    assert_problem(api.post("/v1/fleet-plans", json=body(workload("chat", [1]))), 401, "unauthenticated")


def test_postgres_and_sqlite_store_the_same_json(api: ApiClient, migrated_database_url: str) -> None:
    """The stored request is the validated body (defaults filled in), whatever the backend."""
    created = post(api, body(workload("chat", [2, 2])))
    assert created.status_code == 201, created.text
    from catalog.fleet_plans import FleetPlans

    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            stored = FleetPlans(session).get(created.json()["id"])
    finally:
        engine.dispose()
    assert stored.request["period_hours"] == 1.0
    assert stored.request["workloads"][0]["demand_rps"] == [2, 2]
    assert stored.response == created.json()
    assert stored.catalog_version == created.json()["catalog_version"]
    assert make_url(migrated_database_url).get_backend_name() in ("sqlite", "postgresql")


def test_schedule_csv_states_each_row_cost_per_hour_and_month(api: ApiClient) -> None:
    """A row's `cost_usd` is for its whole period: per hour it is that over `period_hours` (2 h here),
    per month that rate over 730 h, in USD."""
    response = post(api, body(period_hours=2), params={"format": "csv"})
    assert response.status_code == 201, response.text
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert rows
    for row in rows:
        per_hour = float(row["cost_usd"]) / 2
        assert float(row["cost_usd_per_hour"]) == pytest.approx(per_hour, abs=0.005 / 2 + 0.005)  # both in cents
        assert float(row["cost_usd_per_month"]) == pytest.approx(per_hour * 730, abs=0.005 / 2 * 730 + 0.005)  # cost_usd in cents
        assert row["currency"] == "USD"


def test_a_fleet_plan_refuses_an_unknown_speculative_mode(api: ApiClient) -> None:
    """constraints.speculative takes auto, off or on (tests/api/test_fleet_levers.py plans with them); anything
    else is a 422 naming the field."""
    payload = body()
    payload["constraints"] = {**payload["constraints"], "speculative": "sometimes"}
    response = post(api, payload)
    assert response.status_code == 422, response.text
    assert "speculative" in response.text and "'auto'" in response.text
