"""A class plan as a deployment, through the real app and database: POST /v1/plans with `classes`
and a `name` makes the stored class plan that deployment's current plan (GET /v1/deployments/{name},
the list, the history and its CSV read it), and POST /v1/deployments/{name}/replan plans its
classes again and answers a per-class and per-pool diff with the adoption rule of
docs/traffic-classes.md ("Re-planning a class deployment").

The worked example of tests/api/test_classes_plans.py (verify false) on the shipped reference
catalog; the arrangement it chooses is read from its answer, not pinned, except where a test needs
another to win."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from api.classes_plans import create_classes_plan
from api.plan_service import DEFAULT_SOLVER_TIME_LIMIT_S, run_directly
from api.schemas.classes import ClassesPlanRequest
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_classes_plans import WORKED
from tests.api.test_cli_plan import local_url, run, write  # noqa: F401 (local_url is a fixture)
from tests.api.test_deployments import CHAT
from tests.api.test_operations import ADMIN_HEADERS, wait_for, working  # noqa: F401 (working: the fixture)


def named(name: str, **members: Any) -> dict[str, Any]:
    body = copy.deepcopy(WORKED)
    body.update(members, name=name)
    return body


def post_plan(client: ApiClient, admin: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    plan: dict[str, Any] = response.json()
    return plan


def test_a_named_class_plan_becomes_the_deployments_current_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, named("assistant"))
    assert plan["name"] == "assistant"
    deployment = seeded.get("/v1/deployments/assistant").json()
    assert deployment["current_plan_id"] == plan["id"]
    assert deployment["current_plan"] == plan  # read back as the class plan it is
    assert "classes" in deployment["settings"] and "name" not in deployment["settings"]

    [summary] = seeded.get("/v1/deployments").json()["items"]
    pools = plan["pools"]
    assert summary["arrangement"] == plan["arrangement"]["chosen"]
    assert summary["replicas"] == sum(p["replicas"] for p in pools)
    assert summary["gpus_total"] == sum(p["replicas"] * p["tp"] for p in pools)
    assert summary["gpu"] in {p["gpu"] for p in pools}
    assert summary["cost_usd_per_hour"] == plan["cost_usd_per_hour"]
    assert summary["cost_usd_per_month"] == plan["cost_usd_per_hour"] * 730

    [item] = seeded.get("/v1/deployments/assistant/plans").json()["items"]
    assert item["id"] == plan["id"] and item["current"]
    assert item["arrival_rate_rps"] == sum(k["arrival_rate_rps"] for k in WORKED["classes"])
    assert [(p["gpu"], p["replicas"]) for p in item["pools"]] == [(p["gpu"], p["replicas"]) for p in pools]
    assert item["arrangement"] == plan["arrangement"]["chosen"]

    # the history CSV holds plan rows; a class plan's own rows are its CSV
    text = seeded.get("/v1/deployments/assistant/plans", params={"format": "csv"}).text
    assert list(csv.DictReader(io.StringIO(text))) == []
    rows = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"}).text)))
    assert [r["class"] for r in rows] == ["chat", "summarise"]
    assert [p["id"] for p in seeded.get("/v1/plans", params={"name": "assistant"}).json()["items"]] == [plan["id"]]


def test_a_dry_run_with_a_name_makes_no_deployment(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=named("assistant", store=False), headers=admin)
    assert response.status_code == 200, response.text
    assert_problem(seeded.get("/v1/deployments/assistant"), 404)


def test_a_one_workload_plan_and_a_class_plan_take_turns_as_current(seeded: ApiClient, admin: dict[str, str]) -> None:
    first = post_plan(seeded, admin, {**CHAT, "name": "assistant"})
    second = post_plan(seeded, admin, named("assistant"))
    deployment = seeded.get("/v1/deployments/assistant").json()
    assert deployment["current_plan_id"] == second["id"] and deployment["plans_total"] == 2
    items = seeded.get("/v1/deployments/assistant/plans").json()["items"]
    assert [(i["id"], i["current"], i["arrangement"]) for i in items] == [
        (second["id"], True, second["arrangement"]["chosen"]),
        (first["id"], False, None),
    ]
    text = seeded.get("/v1/deployments/assistant/plans", params={"format": "csv"}).text
    assert [r["plan_id"] for r in csv.DictReader(io.StringIO(text))] == [first["id"]]


def replan(client: ApiClient, admin: dict[str, str], name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/deployments/{name}/replan", json=body, headers=admin)
    assert response.status_code == 200, response.text
    assert response.headers["location"] == f"/v1/plans/{response.json()['plan']['id']}"
    result: dict[str, Any] = response.json()
    return result


def test_replanning_the_same_request_keeps_the_plan_in_force(seeded: ApiClient, admin: dict[str, str]) -> None:
    current = post_plan(seeded, admin, named("assistant"))
    result = replan(seeded, admin, "assistant", {})
    assert result["changed"] is False and result["adopted"] == result["current"] == current["id"]
    diff = result["diff"]
    assert diff["same_configuration"] is True and diff["summary"] == "same arrangement and pools"
    chosen = current["arrangement"]["chosen"]
    assert diff["arrangement"] == {"before": chosen, "after": chosen, "changed": False}
    assert [(p["pool"], p["status"]) for p in diff["pools"]] == [(p["name"], "same") for p in current["pools"]]
    assert [(k["name"], k["status"]) for k in diff["classes"]] == [("chat", "same"), ("summarise", "same")]
    assert diff["why"] == []
    assert "the current plan is kept" in result["reason"]
    assert result["saving_usd_per_hour"] == pytest.approx(0, abs=1e-9)
    assert result["threshold_usd_per_hour"] == pytest.approx(0.05 * current["cost_usd_per_hour"])  # the default hysteresis
    assert seeded.get("/v1/deployments/assistant").json()["current_plan_id"] == current["id"]
    history = seeded.get("/v1/deployments/assistant/plans").json()["items"]
    assert [(i["id"], i["current"]) for i in history] == [(result["plan"]["id"], False), (current["id"], True)]


def test_more_chat_traffic_grows_the_chat_pool_and_is_adopted(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Chat from 60 to 180 req/s: the pool serving chat needs more GPUs."""
    current = post_plan(seeded, admin, named("assistant"))
    result = replan(seeded, admin, "assistant", {"class_rates_rps": {"chat": 180}})
    assert result["changed"] is True and result["adopted"] == result["plan"]["id"] != current["id"]
    diff = result["diff"]
    by_pool = {p["pool"]: p for p in diff["pools"]}
    chat_pool = next(p["name"] for p in current["pools"] if "chat" in p["classes"])
    grown = by_pool[chat_pool]
    assert grown["status"] == "changed" and grown["gpus"]["after"] > grown["gpus"]["before"]
    assert grown["summary"].startswith(f"{chat_pool}: ")
    assert diff["gpus_total"]["after"] > diff["gpus_total"]["before"]
    by_class = {k["name"]: k for k in diff["classes"]}
    assert by_class["chat"]["arrival_rate_rps"] == {"before": 60.0, "after": 180.0, "changed": True}
    assert by_class["summarise"]["arrival_rate_rps"]["changed"] is False
    for figure in ("ttft_ms", "tpot_ms", "e2e_s", "percentile"):
        assert by_class["chat"][figure]["after"] == next(k[figure] for k in result["plan"]["classes"] if k["name"] == "chat")
        assert by_class["chat"][figure]["before"] == pytest.approx(
            next(k[figure] for k in current["classes"] if k["name"] == "chat")
        )
    assert diff["cost_usd_per_hour"]["after"] == result["plan"]["cost_usd_per_hour"] > current["cost_usd_per_hour"]
    assert diff["cost_usd_per_hour"]["before_now"] == pytest.approx(current["cost_usd_per_hour"])  # prices unchanged
    assert [r["kind"] for r in diff["why"]] == ["traffic"]
    assert "chat arrival rate 60 → 180 rps (+200%)" in diff["why"][0]["detail"]
    assert "other pools" in result["reason"] and "it is adopted" in result["reason"]

    deployment = seeded.get("/v1/deployments/assistant").json()
    assert deployment["current_plan_id"] == result["plan"]["id"]
    assert {k["name"]: k["arrival_rate_rps"] for k in deployment["settings"]["classes"]} == {"chat": 180, "summarise": 20}


def test_a_day_profile_changes_the_arrangement(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The day-profile example of docs/traffic-classes.md on any GPU: the worked example is
    segregated, with the profile another arrangement wins (deferral there), so pools are removed and
    added by name."""
    post_plan(seeded, admin, named("assistant", constraints={}))
    office = [60 if 9 <= hour < 17 else 15 for hour in range(24)]
    chat, summarise = WORKED["classes"]
    classes = [{**chat, "demand_rps": office}, {**summarise, "deadline_h": 12}]
    result = replan(seeded, admin, "assistant", {"classes": classes})
    diff = result["diff"]
    assert diff["arrangement"]["before"] == "segregated"
    assert diff["arrangement"]["after"] == result["plan"]["arrangement"]["chosen"] != "segregated"
    assert result["changed"] is True and f"arrangement segregated → {diff['arrangement']['after']}" in result["reason"]
    statuses = {p["pool"]: p["status"] for p in diff["pools"]}
    assert {p["name"] for p in result["plan"]["pools"]} <= {n for n, s in statuses.items() if s in ("added", "changed", "same")}
    assert "removed" in statuses.values()
    why = " ".join(r["detail"] for r in diff["why"])
    assert "chat's day profile changed" in why and "summarise's lengths, target, priority or shedding changed" in why


def test_a_price_move_adopts_the_same_pools_only_beyond_the_threshold(seeded: ApiClient, admin: dict[str, str]) -> None:
    """On H100 alone every arrangement's cost scales with its price, so the pools stay as they are:
    +1 % is under the default 5 % threshold (kept), +50 % beyond it (adopted, saying so)."""
    current = post_plan(seeded, admin, named("assistant", constraints={"gpus": ["h100-sxm"]}))
    dry = seeded.post("/v1/plans", json={**CHAT, "store": False}, headers=admin).json()
    [price] = dry["cost"]["prices"]
    url = f"/v1/prices/{price['provider']}/h100-sxm"
    old = seeded.get(url).json()["on_demand"]

    assert seeded.patch(url, json={"on_demand": old * 1.01}, headers=admin).status_code == 200
    kept = replan(seeded, admin, "assistant", {})
    assert kept["changed"] is False and kept["diff"]["same_configuration"] is True
    assert kept["diff"]["cost_usd_per_hour"]["after"] == pytest.approx(current["cost_usd_per_hour"] * 1.01)
    assert kept["diff"]["cost_usd_per_hour"]["before_now"] == pytest.approx(current["cost_usd_per_hour"] * 1.01)
    assert [r["kind"] for r in kept["diff"]["why"]] == ["prices"]

    assert seeded.patch(url, json={"on_demand": old * 1.5}, headers=admin).status_code == 200
    adopted = replan(seeded, admin, "assistant", {})
    assert adopted["changed"] is True and adopted["diff"]["same_configuration"] is True
    assert "the same arrangement and pools cost" in adopted["reason"]
    assert adopted["diff"]["cost_usd_per_hour"]["after"] == pytest.approx(current["cost_usd_per_hour"] * 1.5)
    assert seeded.get("/v1/deployments/assistant").json()["current_plan_id"] == adopted["plan"]["id"]


def test_replan_refuses_the_other_kinds_members(seeded: ApiClient, admin: dict[str, str]) -> None:
    post_plan(seeded, admin, named("assistant"))
    post_plan(seeded, admin, {**CHAT, "name": "chat"})
    url = "/v1/deployments/{}/replan"
    assert_problem(seeded.post(url.format("assistant"), json={"arrival_rate_rps": 3}, headers=admin), 422)
    assert_problem(seeded.post(url.format("assistant"), json={"class_rates_rps": {"search": 3}}, headers=admin), 422)
    assert_problem(seeded.post(url.format("chat"), json={"class_rates_rps": {"chat": 3}}, headers=admin), 422)
    both = {"class_rates_rps": {"chat": 3}, "classes": WORKED["classes"]}
    assert_problem(seeded.post(url.format("assistant"), json=both, headers=admin), 422, "invalid-request")
    assert seeded.get("/v1/deployments/assistant/plans").json()["total"] == 1  # nothing stored for the refusals
    assert seeded.get("/v1/deployments/chat/plans").json()["total"] == 1
    # a PUT replaced the class deployment's settings with one workload's: its class plan in force cannot be diffed
    assert seeded.put("/v1/deployments/assistant", json=CHAT, headers=admin).status_code == 200
    refused = assert_problem(seeded.post(url.format("assistant"), json={}, headers=admin), 422)
    assert "plan in force is a class plan" in refused["detail"]


def test_a_bulk_replan_replans_a_class_deployment_too(working: ApiClient) -> None:  # noqa: F811
    """POST /v1/deployments:replan re-plans every deployment as its own POST .../replan would: the class
    deployment's item is a class re-plan (the same request: kept)."""
    current = post_plan(working, ADMIN_HEADERS, named("assistant"))
    accepted = working.post("/v1/deployments:replan", json={}, headers=ADMIN_HEADERS)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    [item] = done["result"]["items"]
    assert item["deployment"] == "assistant" and item["problem"] is None and item["changed"] is False
    assert item["replan"]["current"] == item["replan"]["adopted"] == current["id"]
    assert item["replan"]["diff"]["same_configuration"] is True
    assert item["replan"]["plan"]["arrangement"]["chosen"] == current["arrangement"]["chosen"]


def test_headroom_replan_re_plans_a_class_deployment_in_process(
    local_url: str,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`headroom replan NAME --demand FILE` with a class re-plan body: JSON as the route answers, and the
    table. (`headroom plan` takes no classes yet: the class plan is made by the service in process.)"""
    engine = make_engine(local_url)
    try:
        with make_session_factory(engine)() as session, session.begin():
            request = ClassesPlanRequest.model_validate(named("assistant"))
            planned = create_classes_plan(
                request, Catalog(session), run=run_directly, solver_time_limit_s=DEFAULT_SOLVER_TIME_LIMIT_S
            )
    finally:
        engine.dispose()
    body = write(tmp_path / "rates.json", {"class_rates_rps": {"chat": 180}})
    code, out, err = run(capsys, "--database-url", local_url, "replan", "assistant", "--demand", body)
    assert code == 0, err
    result = json.loads(out)
    assert result["changed"] is True and result["current"] == planned["id"]
    assert result["diff"]["classes"][0]["arrival_rate_rps"] == {"before": 60.0, "after": 180.0, "changed": True}
    code, out, err = run(capsys, "--database-url", local_url, "replan", "assistant", "--demand", body, "--format", "table")
    assert code == 0, err
    table = {line[:14].strip(): line[14:].strip() for line in out.splitlines()}
    assert table["changed"] == "no" and table["pools"] == "same arrangement and pools"
    assert table["arrangement"] == result["plan"]["arrangement"]["chosen"]

    # a one-workload plan for the deployment replaces the class plan in force: planned and changed (exit 5)
    one = write(tmp_path / "chat.json", CHAT)
    code, out, err = run(capsys, "--database-url", local_url, "plan", one, "--deployment", "assistant", "--detailed-exitcode")
    assert code == 5, err
    assert json.loads(out)["name"] == "assistant"
