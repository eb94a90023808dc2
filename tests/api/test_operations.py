"""Operations on the embedded broker: POST /v1/what-if with `Prefer: respond-async` answers 202 and
the sweep runs in the API process's own Dramatiq worker (a real `headroom serve`, whose lifespan
starts it), to the same points the synchronous route answers; progress, cancel, the list and its
filters, 404s; and an operation left running by a killed process is resumed by the next one."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine

from api import fleet_operation, tasks
from api.app import create_app
from api.cli import main
from api.schemas.fleet_plans import FleetPlanRequest
from api.settings import Settings, SettingsError
from catalog.db import make_engine, make_session_factory
from catalog.operations import Operations
from planner.candidates import Drop
from planner.fleet_candidates import CandidateTable, SloRefusal
from planner.optimizer import Candidate
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY, assert_problem, bad_fields, serve_headroom

SHAPE = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
#: Chat on an 8B model over H100s only: about 20 ms a point in process on the 2-core machine.
SWEEP: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": SHAPE,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "sweep": {"arrival_rate_range": {"start_rps": 1, "stop_rps": 200, "steps": 20}},
}
ASYNC = {**ADMIN_HEADERS, "Prefer": "respond-async"}
#: Bound on every wait for an operation to finish (a 20-point sweep takes about a second).
OPERATION_TIMEOUT_S = 60.0
#: Fields of a sweep's answer that are timings, which differ between any two runs.
TIMINGS = ("sweep_ms", "plan_ms")


def sweep(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(SWEEP)
    body["sweep"].update(changes)
    return body


def without_timings(answer: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in answer.items() if k not in TIMINGS},
        "points": [{k: v for k, v in p.items() if k not in TIMINGS} for p in answer["points"]],
    }


def wait_for(client: httpx.Client | ApiClient, location: str, *, states: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every reading of the operation until its state is one of `states`, at most OPERATION_TIMEOUT_S."""
    readings: list[dict[str, Any]] = []
    deadline = time.monotonic() + OPERATION_TIMEOUT_S
    while True:
        response = client.get(location)
        assert response.status_code == 200, response.text
        readings.append(response.json())
        if readings[-1]["state"] in states:
            return readings
        assert time.monotonic() < deadline, f"still {readings[-1]['state']} after {OPERATION_TIMEOUT_S} s: {readings[-1]}"
        time.sleep(0.02)


# ---- the contract, on the app in process (no worker runs here: operations stay queued) ----------------


def test_respond_async_answers_202_with_the_operation(seeded: ApiClient) -> None:
    response = seeded.post("/v1/what-if", json=SWEEP, headers=ASYNC)
    assert response.status_code == 202, response.text
    operation = response.json()
    assert response.headers["Location"] == f"/v1/operations/{operation['id']}"
    assert response.headers["Preference-Applied"] == "respond-async"
    assert (operation["kind"], operation["state"], operation["progress"]) == (
        "what-if", "queued", {"done": 0, "total": 20, "eta_s": None},
    )  # fmt: skip
    assert seeded.get(response.headers["Location"]).json()["id"] == operation["id"]


def test_without_the_header_a_sweep_stays_synchronous_and_its_bound_says_how_to_ask(seeded: ApiClient) -> None:
    assert seeded.post("/v1/what-if", json=SWEEP, headers=ADMIN_HEADERS).status_code == 200
    big = sweep(arrival_rate_range={"start_rps": 1, "stop_rps": 200, "steps": 50}, slo={"metric": "tpot_ms", "values": [40, 60]})
    body = assert_problem(seeded.post("/v1/what-if", json=big, headers=ADMIN_HEADERS), 422, "invalid-request")
    assert "Prefer: respond-async" in " ".join(bad_fields(body).values())
    assert seeded.post("/v1/what-if", json=big, headers=ASYNC).status_code == 202
    too_big = sweep(
        arrival_rate_range={"start_rps": 1, "stop_rps": 200, "steps": 50},
        slo={"metric": "tpot_ms", "values": list(range(30, 51))},
    )
    assert "at most 1000" in " ".join(
        bad_fields(assert_problem(seeded.post("/v1/what-if", json=too_big, headers=ASYNC), 422)).values()
    )


def test_a_sweep_estimated_past_the_threshold_runs_as_an_operation_unasked(make_client: Any, seeded: ApiClient) -> None:
    quick = make_client(async_threshold_s=0.5)  # 20 points × 0.40 s estimated: 8 s
    response = quick.post("/v1/what-if", json=SWEEP, headers=ADMIN_HEADERS)
    assert response.status_code == 202, response.text
    assert "Preference-Applied" not in response.headers


def test_a_broker_that_cannot_be_reached_is_a_503_and_the_operation_is_failed_not_left_queued(
    make_client: Any, seeded: ApiClient
) -> None:
    """Broker loss at submission (nothing listens on port 1): the operation is stored, its messages
    cannot be sent, so it is failed at once with the reason and the client gets 503 broker-unavailable
    naming it; no operation waits in `queued` for messages that were never sent."""
    lost = make_client(broker_url="redis://127.0.0.1:1/0", broker_namespace="headroom-test-lost")
    body = assert_problem(lost.post("/v1/what-if", json=SWEEP, headers=ASYNC), 503, "broker-unavailable")
    assert "task broker" in body["detail"] and "Connection" in body["detail"]
    operation = seeded.get(f"/v1/operations/{body['operation_id']}").json()
    assert operation["state"] == "failed" and operation["problem"]["type"] == "urn:headroom:problem:broker-unavailable"
    assert seeded.get("/v1/operations", params={"state": "queued"}).json()["total"] == 0


def test_unknown_operations_are_404_and_the_list_is_filtered_and_paged(seeded: ApiClient) -> None:
    assert_problem(seeded.get("/v1/operations/" + "0" * 32), 404, "not-found")
    assert_problem(seeded.get("/v1/operations/nope"), 404, "not-found")
    assert_problem(seeded.post("/v1/operations/" + "0" * 32 + ":cancel", headers=ADMIN_HEADERS), 404, "not-found")
    first = seeded.post("/v1/what-if", json=SWEEP, headers=ASYNC).json()
    second = seeded.post("/v1/what-if", json=SWEEP, headers=ASYNC).json()
    cancelled = seeded.post(f"/v1/operations/{first['id']}:cancel", headers=ADMIN_HEADERS)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert seeded.post(f"/v1/operations/{first['id']}:cancel", headers=ADMIN_HEADERS).json()["state"] == "cancelled"
    assert [op["id"] for op in seeded.get("/v1/operations", params={"state": "queued"}).json()["items"]] == [second["id"]]
    assert [op["id"] for op in seeded.get("/v1/operations", params={"state": "cancelled"}).json()["items"]] == [first["id"]]
    page = seeded.get("/v1/operations", params={"kind": "what-if", "limit": 1}).json()
    assert (page["total"], len(page["items"]), page["items"][0]["id"]) == (2, 1, second["id"])  # newest first
    assert (
        seeded.get("/v1/operations", params={"kind": "what-if", "limit": 1, "offset": 1}).json()["items"][0]["id"] == first["id"]
    )
    assert_problem(seeded.get("/v1/operations", params={"state": "done"}), 422, "invalid-request")


def test_cancelling_needs_a_planner_key(seeded: ApiClient) -> None:
    operation = seeded.post("/v1/what-if", json=SWEEP, headers=ASYNC).json()
    assert_problem(seeded.post(f"/v1/operations/{operation['id']}:cancel"), 401)
    assert seeded.get(f"/v1/operations/{operation['id']}").status_code == 200  # reads need no key by default


def test_broker_settings_are_checked_and_a_worker_needs_a_broker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert Settings.from_env({}).broker_url is None  # the embedded default
    redis = Settings.from_env({"HEADROOM_BROKER_URL": "redis://127.0.0.1:6379/0", "HEADROOM_BROKER_NAMESPACE": "team-a"})
    assert (redis.broker_url, redis.broker_namespace) == ("redis://127.0.0.1:6379/0", "team-a")
    with pytest.raises(SettingsError, match="RabbitMQ"):
        Settings.from_env({"HEADROOM_BROKER_URL": "amqp://guest@localhost"})
    with pytest.raises(SettingsError, match="HEADROOM_BROKER_URL"):
        Settings.from_env({"HEADROOM_BROKER_URL": "kafka://x"})
    with pytest.raises(SettingsError, match="HEADROOM_ASYNC_THRESHOLD_S"):
        Settings.from_env({"HEADROOM_ASYNC_THRESHOLD_S": "0"})
    monkeypatch.delenv("HEADROOM_BROKER_URL", raising=False)
    assert main(["worker"]) == 2
    assert "needs HEADROOM_BROKER_URL" in capsys.readouterr().err


# ---- the embedded worker, in a real served process ------------------------------------------------------


@pytest.mark.slow
def test_embedded_operations_match_the_synchronous_sweep_cancel_and_survive_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In a served process: an async sweep completes with the synchronous points, progress only
    moves forward, `headroom operations wait` prints it, cancel stops a sweep; then a 100-point
    sweep (about 20 ms a point) is killed with the process (SIGKILL, no shutdown) with some points
    done, and the next process finds it unfinished, counts the restart in `attempts` and finishes it."""
    env = {"HEADROOM_WORKER_THREADS": "1"}
    with serve_headroom(tmp_path, env=env) as served, httpx.Client(base_url=served.base_url, timeout=30) as client:
        accepted = client.post("/v1/what-if", json=SWEEP, headers=ASYNC)
        assert accepted.status_code == 202, accepted.text
        readings = wait_for(client, accepted.headers["Location"], states=("succeeded", "failed", "cancelled"))
        done = readings[-1]
        assert done["state"] == "succeeded", done
        assert done["progress"] == {"done": 20, "total": 20, "eta_s": None}
        assert done["started_at"] is not None and done["finished_at"] >= done["started_at"]
        dones = [reading["progress"]["done"] for reading in readings]
        assert dones == sorted(dones)  # progress only moves forward
        synchronous = client.post("/v1/what-if", json=SWEEP, headers=ADMIN_HEADERS)
        assert synchronous.status_code == 200, synchronous.text
        assert without_timings(done["result"]) == without_timings(synchronous.json())

        capsys.readouterr()
        assert main(["operations", "wait", done["id"], "--url", served.base_url, "--timeout", "30"]) == 0
        waited = capsys.readouterr()
        assert json.loads(waited.out) == done["result"]  # the result alone on stdout
        assert "20/20 succeeded" in waited.err  # the progress bar on stderr
        assert main(["operations", "wait", "0" * 32, "--url", served.base_url]) == 2  # unknown: bad input
        assert "404" in capsys.readouterr().err

        bigger = sweep(
            arrival_rate_range={"start_rps": 1, "stop_rps": 200, "steps": 50}, slo={"metric": "tpot_ms", "values": [40, 60, 80]}
        )
        running = client.post("/v1/what-if", json=bigger, headers=ASYNC).json()
        cancelled = client.post(f"/v1/operations/{running['id']}:cancel", headers=ADMIN_HEADERS).json()
        assert cancelled["state"] == "cancelled" and cancelled["cancel_requested"]
        time.sleep(0.5)
        after = client.get(f"/v1/operations/{running['id']}").json()
        assert after["state"] == "cancelled" and after["result"] is None
        assert after["progress"]["done"] < after["progress"]["total"]

        long_sweep = sweep(
            arrival_rate_range={"start_rps": 1, "stop_rps": 200, "steps": 50}, slo={"metric": "tpot_ms", "values": [40, 60]}
        )
        location = client.post("/v1/what-if", json=long_sweep, headers=ASYNC).headers["Location"]
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        while client.get(location).json()["progress"]["done"] < 5:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=10)
    with serve_headroom(tmp_path, env=env) as served, httpx.Client(base_url=served.base_url, timeout=30) as client:
        before = client.get(location).json()
        assert before["state"] in ("queued", "running", "succeeded") and before["attempts"] == 2, before
        done = wait_for(client, location, states=("succeeded", "failed", "cancelled"))[-1]
        assert done["state"] == "succeeded", done
        assert done["progress"] == {"done": 100, "total": 100, "eta_s": None}
        assert [p["point"] for p in done["result"]["points"]] == list(range(1, 101))
        assert client.get(f"/v1/operations/{running['id']}").json()["state"] == "cancelled"  # not resumed


# ---- POST /v1/deployments:replan: one unit per deployment, run by a worker started here ------------------

CHAT_PLAN: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, **SHAPE},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


@pytest.fixture
def working(seeded: ApiClient, migrated_database_url: str, open_client: Any) -> Iterator[ApiClient]:
    """A client on the reference catalog whose app runs an embedded worker (the lifespan's job in a served process)."""
    app = create_app(Settings(database_url=migrated_database_url, admin_key=ADMIN_KEY, log_level="critical"))
    client = open_client(app)
    app.state.tasks.start_worker(1)
    try:
        yield client
    finally:
        app.state.tasks.stop_worker()


def test_a_bulk_replan_replans_every_deployment_as_one_operation(working: ApiClient) -> None:
    client = working
    empty = client.post("/v1/deployments:replan", json={}, headers=ADMIN_HEADERS)
    assert empty.status_code == 202, empty.text
    nothing = wait_for(client, empty.headers["Location"], states=("succeeded", "failed"))[-1]
    assert (nothing["state"], nothing["result"]) == ("succeeded", {"items": [], "changed": 0, "failed": 0})

    for name, rate in (("chat", 15), ("big", 40)):
        response = client.post(
            "/v1/plans",
            json={**CHAT_PLAN, "name": name, "workload": {**CHAT_PLAN["workload"], "arrival_rate_rps": rate}},
            headers=ADMIN_HEADERS,
        )
        assert response.status_code == 201, response.text
    assert_problem(client.post("/v1/deployments:replan", json={"deployments": ["chat", "nobody"]}, headers=ADMIN_HEADERS), 404)
    assert_problem(client.post("/v1/deployments:replan", json={"deployments": []}, headers=ADMIN_HEADERS), 422)
    assert_problem(client.post("/v1/deployments:replan", json={}), 401)

    accepted = client.post("/v1/deployments:replan", json={}, headers=ADMIN_HEADERS)
    assert accepted.status_code == 202 and accepted.json()["progress"]["total"] == 2
    done = wait_for(client, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    items = done["result"]["items"]
    assert [item["deployment"] for item in items] == ["big", "chat"]  # every deployment, by name
    for item in items:  # the same request again: a new plan in the history, the current one kept
        assert item["problem"] is None and item["changed"] is False
        assert item["replan"]["adopted"] == item["replan"]["current"]
        history = client.get(f"/v1/deployments/{item['deployment']}/plans").json()
        assert history["total"] == 2 and item["replan"]["plan"]["id"] in [plan["id"] for plan in history["items"]]
    assert (done["result"]["changed"], done["result"]["failed"]) == (0, 0)


FLEET: dict[str, Any] = {
    "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", **SHAPE, "slo": {"ttft_ms": 2000, "tpot_ms": 60}, "demand_rps": [6, 6, 12, 6]}
    ],
    "constraints": {"gpus": ["l40s", "h100-sxm"]},
    "search": {"tp_degrees": [1, 2], "batch_limits": [32, 128], "chunk_budgets": [None, 2048]},
}


#: Two shapes (chat, and summarise with an E2E SLO), the chat shape shared by two workloads.
FLEET_SHAPES: dict[str, Any] = {
    **FLEET,
    "workloads": [
        *FLEET["workloads"],
        {"name": "summarise", "model": "llama-3.1-8b", "prompt_tokens": {"mean": 3000, "p99": 8000},
         "output_tokens": {"mean": 300, "p99": 800}, "slo": {"e2e_s": 60}, "demand_rps": [2, 3, 4, 2]},
        {**FLEET["workloads"][0], "name": "chat-eu", "demand_rps": [3, 9, 4, 3]},
    ],
    "include_candidates": True,
}  # fmt: skip


def without_fleet_timings(plan: dict[str, Any]) -> dict[str, Any]:
    """A fleet plan less what differs between any two runs: its id, time and timings."""
    rest = {k: v for k, v in plan.items() if k not in ("id", "created_at", "plan_ms")}
    return {
        **rest,
        "candidate_search": {k: v for k, v in plan["candidate_search"].items() if k != "ms"},
        "solver": {k: v for k, v in plan["solver"].items() if k != "solve_ms"},
    }


def test_a_fleet_plan_asked_async_fans_its_tables_out_and_equals_the_synchronous_plan(working: ApiClient) -> None:
    """2 shapes × 2 GPU types = 4 table units and the MILP's unit: the stored plan equals the
    synchronous route's field by field (candidates, periods, costs, shadow prices, search counts)."""
    accepted = working.post("/v1/fleet-plans", json=FLEET_SHAPES, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    assert accepted.headers["Preference-Applied"] == "respond-async"
    assert accepted.json()["kind"] == "fleet-plan" and accepted.json()["progress"]["total"] == 2 * 2 + 1
    readings = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))
    done = readings[-1]
    assert done["state"] == "succeeded", done
    assert done["progress"] == {"done": 5, "total": 5, "eta_s": None}
    dones = [reading["progress"]["done"] for reading in readings]
    assert dones == sorted(dones)
    stored = working.get(done["result_location"])
    assert stored.status_code == 200 and done["result_location"] == f"/v1/fleet-plans/{done['result']['id']}"
    assert stored.json() == done["result"]
    synchronous = working.post("/v1/fleet-plans", json=FLEET_SHAPES, headers=ADMIN_HEADERS)
    assert synchronous.status_code == 201, synchronous.text
    assert without_fleet_timings(done["result"]) == without_fleet_timings(synchronous.json())
    assert done["result"]["candidate_search"]["distinct_tables"] == 2
    assert {c["gpu"] for c in done["result"]["candidates"]["chat"]} <= {"l40s", "h100-sxm"}


def test_a_fleet_plan_estimated_past_the_threshold_runs_as_an_operation_unasked(make_client: Any, seeded: ApiClient) -> None:
    """2 shapes × 2 GPU types × 0.065 s + 3 workloads × 4 periods × 7.4 ms = 0.26 + 0.0888 = 0.3488 s
    estimated: over a 0.1 s threshold, under the default 20 s; 50 workloads × 24 periods of 12 shapes
    on 7 GPU types: 84 × 0.065 + 1,200 × 0.0074 = 5.46 + 8.88 = 14.3 s, still answered at once."""
    assert fleet_operation.estimated_plan_s(FleetPlanRequest.model_validate(FLEET_SHAPES), 2) == pytest.approx(0.3488)
    quick = make_client(async_threshold_s=0.1)
    response = quick.post("/v1/fleet-plans", json=FLEET_SHAPES, headers=ADMIN_HEADERS)
    assert response.status_code == 202, response.text
    assert "Preference-Applied" not in response.headers and response.json()["progress"]["total"] == 5
    assert seeded.post("/v1/fleet-plans", json=FLEET_SHAPES, headers=ADMIN_HEADERS).status_code == 201


def test_the_estimate_counts_the_pool_options_plan_disagg_runs() -> None:
    """chat-eu with topology any: 3 distinct demands (3, 9, 4, 3) × (2 GPU types alone + one run on both, 2 types)
    = 12 GPU types planned across × POOL_PLAN_COST_S on top of the aggregated estimate; an idle period is one more
    distinct demand; aggregated workloads add nothing."""
    pools = {**FLEET_SHAPES, "workloads": [*FLEET_SHAPES["workloads"][:2], {**FLEET_SHAPES["workloads"][2], "topology": "any"}]}
    body = FleetPlanRequest.model_validate(pools)
    assert fleet_operation.pool_plan_gpu_types(body, 2) == 12
    assert fleet_operation.estimated_plan_s(body, 2) == pytest.approx(0.3488 + 12 * fleet_operation.POOL_PLAN_COST_S)
    assert fleet_operation.pool_plan_gpu_types(body, 1) == 3  # one type: no run on all of them
    idle = {**pools, "workloads": [*pools["workloads"][:2], {**pools["workloads"][2], "demand_rps": [0, 9, 4, 3]}]}
    assert fleet_operation.pool_plan_gpu_types(FleetPlanRequest.model_validate(idle), 2) == 16
    assert fleet_operation.pool_plan_gpu_types(FleetPlanRequest.model_validate(FLEET_SHAPES), 7) == 0


def test_an_infeasible_fleet_plan_fails_its_operation_at_once_with_the_problem(working: ApiClient) -> None:
    broke = {**FLEET, "constraints": {**FLEET["constraints"], "budget_usd_per_day": 0.01}}
    location = working.post("/v1/fleet-plans", json=broke, headers=ASYNC).headers["Location"]
    done = wait_for(working, location, states=("succeeded", "failed"))[-1]
    assert done["state"] == "failed", done
    assert done["problem"]["type"] == "urn:headroom:problem:infeasible-plan"
    assert (done["problem"]["constraint"], done["problem"]["attempts"]) == ("budget", 1)  # not retried: same answer again


def test_a_unit_that_keeps_failing_fails_its_operation_after_its_attempts(
    working: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poison unit: retried by Dramatiq with backoff (about 1 s, then 2 s), then the operation
    fails with a problem naming the unit, its attempts and the error."""

    def poison(_prepared: Any, index: int, _settings: Any, _session: Any) -> Any:
        raise RuntimeError(f"unit {index} is poison")

    monkeypatch.setitem(tasks.KINDS, "what-if", dataclasses.replace(tasks.KINDS["what-if"], run_unit=poison))
    location = working.post(
        "/v1/what-if", json=sweep(arrival_rate_range={"start_rps": 1, "stop_rps": 2, "steps": 2}), headers=ASYNC
    ).headers["Location"]
    done = wait_for(working, location, states=("succeeded", "failed"))[-1]
    assert done["state"] == "failed", done
    problem = done["problem"]
    assert problem["type"] == "urn:headroom:problem:operation-failed" and problem["attempts"] == tasks.MAX_UNIT_ATTEMPTS
    assert "RuntimeError: unit" in problem["detail"] and "is poison" in problem["detail"]


def test_a_candidate_table_travels_through_a_units_json_unchanged() -> None:
    """A table unit's result is stored as JSON (PostgreSQL's jsonb has no infinity): a drop's
    infinite bound travels as text and comes back a float; candidates, refusals and counts as they were."""
    table = CandidateTable(
        candidates=(
            Candidate(id="h100-sxm/bf16/tp1/b64", gpu="h100-sxm", tp=1, weights_precision="bf16", kv_precision="bf16",
                      batch_limit=64, chunk_tokens=None, gpus_per_replica=1, cost_usd_per_hour=6.155,
                      max_rps_at_slo=1 / 3, saturation_rps=0.41),
        ),
        options_enumerated=12, groups=2, groups_searched=1,
        drops=(Drop(gpu="l40s", weights_precision="bf16", kv_precision="bf16", tp=1, constraint="tpot",
                    reason="unstable", bound_s=math.inf, target_s=0.06),),
        slo_refusals=(SloRefusal(option_id="h100-sxm/bf16/tp1/b256", constraint="ttft", reason="too slow"),),
        mu_searches=3, predictions=17, exhaustive=True,
    )  # fmt: skip
    stored = json.loads(json.dumps(fleet_operation.table_json(table), allow_nan=False))
    assert fleet_operation.table_from_json(stored) == table


def test_a_redelivered_unit_found_stored_sends_again_what_its_first_delivery_may_have_lost(migrated_database_url: str) -> None:
    """A worker that stored a unit's result and died before sending what comes next (the finishing
    step; a fleet plan's gathering last unit) leaves that message unsent, while Redis redelivers the
    unit's own. The redelivered unit finds its result stored and sends the next message again. A
    gathering last unit delivered before the others are stored (a resumption sends it early) does
    nothing: the operation is not even marked running."""
    database = make_engine(migrated_database_url)
    try:
        redelivered_after_a_lost_send(database, migrated_database_url)
    finally:
        database.dispose()  # no connection left for the garbage collector to warn about in a later test


def redelivered_after_a_lost_send(database: Engine, database_url: str) -> None:
    sessions = make_session_factory(database)
    engine = tasks.TaskEngine(Settings(database_url=database_url), session_factory=sessions)
    queue = engine.broker.queues[tasks.QUEUE]  # type: ignore[attr-defined]  # StubBroker's in-memory queue

    def store(operation_id: str, index: int) -> None:
        with sessions() as session, session.begin():
            assert Operations(session).start_unit(operation_id, index) is not None
            assert Operations(session).record_unit(operation_id, index, {"unit": index})

    def sent() -> list[str]:
        names = []
        while not queue.empty():
            message = queue.get_nowait()
            names.append(json.loads(message)["actor_name"])
        return names

    with sessions() as session, session.begin():
        sweep_operation = Operations(session).create(kind="what-if", request={}, units_total=1)
        fleet = Operations(session).create(kind="fleet-plan", request={}, units_total=3)
    engine.run_unit(fleet.id, 2)  # the MILP's unit, tables not stored: waits
    with sessions() as session:
        assert Operations(session).get(fleet.id).state == "queued"
    store(sweep_operation.id, 0)
    store(fleet.id, 0)
    store(fleet.id, 1)
    sent()
    engine.run_unit(sweep_operation.id, 0)  # redelivered: stored already
    engine.run_unit(fleet.id, 1)
    assert sent() == ["finish_operation", "run_unit"]
