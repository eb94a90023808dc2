"""Deployments through the real app and database (SQLite and PostgreSQL) on the shipped reference
catalog: history from POST /v1/plans with a name and from PUT, re-planning with a diff and the
hysteresis decision, and the recheck of a stored plan after a catalog edit.

Every plan is of Llama 3.1 8B chat on H100 only, bf16 only, unverified, so each takes a fraction
of a second. 40 rps needs more replicas than 15 rps; replica counts are asserted as inequalities,
not as numbers, so the tests do not pin the planner's calibration.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from api.cli import openapi_document
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem

CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 15, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


def chat(rate: float = 15, **members: Any) -> dict[str, Any]:
    body = copy.deepcopy(CHAT)
    body["workload"]["arrival_rate_rps"] = rate
    body.update(members)
    return body


def plan(client: ApiClient, admin: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    return response.json()


def replan(client: ApiClient, admin: dict[str, str], name: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/deployments/{name}/replan", json=body, headers=admin)
    assert response.status_code == 200, response.text
    return response.json()


def test_named_plans_make_a_deployment_with_history_newest_first(seeded: ApiClient, admin: dict[str, str]) -> None:
    first = plan(seeded, admin, chat(15, name="chat"))
    second = plan(seeded, admin, chat(40, name="chat"))
    plan(seeded, admin, chat(15, name="other"))
    plan(seeded, admin, chat(15))  # unnamed: no deployment

    listed = seeded.get("/v1/deployments").json()
    assert listed["total"] == 2 and [d["name"] for d in listed["items"]] == ["chat", "other"]
    assert listed["items"][0]["current_plan_id"] == second["id"]
    assert listed["items"][0]["gpus_total"] == second["plan"]["gpus_total"]

    deployment = seeded.get("/v1/deployments/chat")
    assert deployment.status_code == 200 and deployment.headers["etag"] == f'"{deployment.json()["version"]}"'
    body = deployment.json()
    assert body["current_plan"]["id"] == second["id"] and body["plans_total"] == 2
    assert body["settings"]["workload"]["arrival_rate_rps"] == 40 and "name" not in body["settings"]
    assert body["hysteresis"] == {"headroom_margin": 0.1, "min_saving_fraction": 0.05, "min_saving_usd_per_hour": 0.0}

    history = seeded.get("/v1/deployments/chat/plans").json()
    assert history["total"] == 2
    assert [p["id"] for p in history["items"]] == [second["id"], first["id"]]
    assert [p["current"] for p in history["items"]] == [True, False]
    assert [p["arrival_rate_rps"] for p in history["items"]] == [40, 15]
    assert history["items"][0]["cost_usd_per_month"] == pytest.approx(history["items"][0]["cost_usd_per_hour"] * 730)

    table = seeded.get("/v1/deployments/chat/plans", params={"format": "csv"})
    assert table.status_code == 200 and table.headers["content-type"].startswith("text/csv")
    lines = table.text.strip().split("\r\n")
    assert lines[0].startswith("plan_id,deployment,created_at") and len(lines) == 3
    assert [line.split(",")[0] for line in lines[1:]] == [second["id"], first["id"]]

    page = seeded.get("/v1/deployments/chat/plans", params={"limit": 1, "offset": 1}).json()
    assert (page["total"], page["limit"], page["offset"]) == (2, 1, 1)
    assert [p["id"] for p in page["items"]] == [first["id"]]


def test_a_deployment_name_with_a_slash_is_refused_as_unaddressable(seeded: ApiClient, admin: dict[str, str]) -> None:
    problem = assert_problem(seeded.post("/v1/plans", json=chat(15, name="team/chat"), headers=admin), 422, "invalid-request")
    assert "name" in {e["field"] for e in problem["errors"]}


def test_unknown_deployments_are_404(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert_problem(seeded.get("/v1/deployments/nobody"), 404, "not-found")
    assert_problem(seeded.get("/v1/deployments/nobody/plans"), 404, "not-found")
    assert_problem(seeded.post("/v1/deployments/nobody/replan", json={"arrival_rate_rps": 3}, headers=admin), 404, "not-found")
    assert_problem(seeded.get("/v1/plans/" + "0" * 32 + "/recheck"), 404, "not-found")


def test_put_creates_and_plans_then_replaces_settings_without_replanning(seeded: ApiClient, admin: dict[str, str]) -> None:
    settings = {k: v for k, v in chat(15).items()} | {"hysteresis": {"headroom_margin": 0.2, "min_saving_usd_per_hour": 1.0}}
    created = seeded.put("/v1/deployments/api", json=settings, headers=admin)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/deployments/api"
    body = created.json()
    assert body["current_plan"] is not None and body["plans_total"] == 1
    assert body["hysteresis"]["headroom_margin"] == 0.2 and body["hysteresis"]["min_saving_fraction"] == 0.05

    updated = seeded.put(
        "/v1/deployments/api",
        json=settings | {"slo": {"ttft_ms": 800, "tpot_ms": 60}},
        headers={**admin, "If-Match": created.headers["etag"]},
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["settings"]["slo"]["ttft_ms"] == 800
    assert updated.json()["plans_total"] == 1 and updated.json()["current_plan_id"] == body["current_plan_id"]

    stale = seeded.put("/v1/deployments/api", json=settings, headers={**admin, "If-Match": created.headers["etag"]})
    assert_problem(stale, 412, "version-conflict")
    assert_problem(seeded.put("/v1/deployments/api", json=settings), 401, "unauthenticated")


def test_replan_for_more_traffic_adds_replicas_and_says_traffic(seeded: ApiClient, admin: dict[str, str]) -> None:
    first = plan(seeded, admin, chat(15, name="chat"))
    result = replan(seeded, admin, "chat", {"arrival_rate_rps": 40})

    assert result["changed"] is True
    assert "no longer meets the SLOs" in result["reason"]
    assert result["current"] == first["id"] and result["adopted"] == result["plan"]["id"] != first["id"]
    diff = result["diff"]
    assert diff["replicas"]["before"] == first["plan"]["replicas"] < diff["replicas"]["after"]
    assert diff["gpus_added"] == {"h100-sxm": diff["gpus_total"]["after"] - diff["gpus_total"]["before"]}
    assert diff["gpus_removed"] == {}
    assert diff["cost_usd_per_hour"]["change"] > 0
    assert diff["cost_usd_per_month"]["change"] == pytest.approx(diff["cost_usd_per_hour"]["change"] * 730)
    assert [r["kind"] for r in diff["why"]] == ["traffic"]
    assert "15 → 40 rps" in diff["why"][0]["detail"]
    assert result["current_check"]["at_new_rate"]["meets_slo"] is False
    assert result["current_check"]["with_margin"]["arrival_rate_rps"] == pytest.approx(44.0)

    deployment = seeded.get("/v1/deployments/chat").json()
    assert deployment["current_plan_id"] == result["plan"]["id"]
    assert deployment["settings"]["workload"]["arrival_rate_rps"] == 40
    samples = dict(line.rsplit(" ", 1) for line in seeded.get("/metrics").text.splitlines() if line and not line.startswith("#"))
    assert float(samples["headroom_plans_computed_total"]) >= 1 and float(samples["headroom_solver_seconds_count"]) >= 1
    assert seeded.get("/v1/deployments/chat/plans").json()["total"] == 2


def test_hysteresis_keeps_the_current_plan_when_the_saving_is_below_the_threshold(
    seeded: ApiClient, admin: dict[str, str]
) -> None:
    """From 40 rps to 15 rps the new plan needs fewer replicas; the current one still meets the SLOs
    at 1.1 × 15 rps, and a threshold of 90 % of its cost is more than the saving (the new plan keeps
    at least one of the current plan's few replicas): keep it."""
    current = plan(seeded, admin, chat(40, name="chat"))
    settings = chat(40) | {"hysteresis": {"headroom_margin": 0.1, "min_saving_fraction": 0.9}}
    assert seeded.put("/v1/deployments/chat", json=settings, headers=admin).status_code == 200

    result = replan(seeded, admin, "chat", {"arrival_rate_rps": 15})
    assert result["changed"] is False
    assert result["adopted"] == result["current"] == current["id"]
    assert result["diff"]["replicas"]["after"] < result["diff"]["replicas"]["before"]
    assert 0 < result["saving_usd_per_hour"] < result["threshold_usd_per_hour"]
    assert result["threshold_usd_per_hour"] == pytest.approx(0.9 * current["cost"]["usd_per_hour"])
    assert "still meets the SLOs at 1.1× the new rate" in result["reason"]
    assert f"save only ${result['saving_usd_per_hour']:.2f}/h" in result["reason"]
    assert result["current_check"]["with_margin"]["meets_slo"] is True

    deployment = seeded.get("/v1/deployments/chat").json()
    assert deployment["current_plan_id"] == current["id"]  # kept
    assert deployment["settings"]["workload"]["arrival_rate_rps"] == 15  # the newest forecast is remembered
    history = seeded.get("/v1/deployments/chat/plans").json()["items"]
    assert [p["current"] for p in history] == [False, True]  # the new plan is in the history, not in force

    # without the threshold the same saving is taken
    settings["hysteresis"] = {"headroom_margin": 0.1, "min_saving_fraction": 0.0}
    assert seeded.put("/v1/deployments/chat", json=settings, headers=admin).status_code == 200
    switched = replan(seeded, admin, "chat", {"arrival_rate_rps": 15})
    assert switched["changed"] is True and "switching saves" in switched["reason"]


def test_a_tiny_change_that_plans_the_same_configuration_changes_nothing(seeded: ApiClient, admin: dict[str, str]) -> None:
    current = plan(seeded, admin, chat(15, name="chat"))
    result = replan(seeded, admin, "chat", {"arrival_rate_rps": 15.5})
    assert result["changed"] is False and result["adopted"] == current["id"]
    assert result["diff"]["same_configuration"] is True
    assert "nothing to change" in result["reason"]


def test_replan_with_a_new_slo_and_workload_names_both(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan(seeded, admin, chat(15, name="chat"))
    workload = copy.deepcopy(CHAT["workload"]) | {"arrival_rate_rps": 16, "output_tokens": {"mean": 300, "p99": 900}}
    result = replan(seeded, admin, "chat", {"workload": workload, "slo": {"ttft_ms": 900, "tpot_ms": 60}})
    kinds = [r["kind"] for r in result["diff"]["why"]]
    assert kinds == ["traffic", "slo"]
    assert "output length mean" in result["diff"]["why"][0]["detail"]
    assert "TTFT target 1000 ms → 900 ms" in result["diff"]["why"][1]["detail"]


def test_replan_refuses_both_a_workload_and_a_rate_and_an_infeasible_slo(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan(seeded, admin, chat(15, name="chat"))
    both = {"workload": CHAT["workload"], "arrival_rate_rps": 3}
    assert_problem(seeded.post("/v1/deployments/chat/replan", json=both, headers=admin), 422, "invalid-request")
    impossible = {"slo": {"tpot_ms": 0.5}}
    assert_problem(seeded.post("/v1/deployments/chat/replan", json=impossible, headers=admin), 422, "infeasible-plan")
    assert seeded.get("/v1/deployments/chat/plans").json()["total"] == 1  # nothing stored for the refusals


def test_recheck_after_a_price_edit_says_the_plan_holds_and_what_it_costs_now(seeded: ApiClient, admin: dict[str, str]) -> None:
    stored = plan(seeded, admin, chat(15, name="chat"))
    fresh = seeded.get(f"/v1/plans/{stored['id']}/recheck").json()
    assert fresh["holds"] is True and fresh["changes"] == []
    assert fresh["catalog_version_now"] == fresh["catalog_version_then"] == stored["provenance"]["catalog_version"]
    assert fresh["cost"]["now_usd_per_hour"] == pytest.approx(stored["cost"]["usd_per_hour"])

    [used] = stored["cost"]["prices"]
    assert used["gpu"] == "h100-sxm"
    price_url = f"/v1/prices/{used['provider']}/h100-sxm"
    old_price = seeded.get(price_url).json()["on_demand"]
    assert seeded.patch(price_url, json={"on_demand": old_price * 1.5}, headers=admin).status_code == 200

    checked = seeded.get(f"/v1/plans/{stored['id']}/recheck").json()
    assert checked["holds"] is True
    assert checked["catalog_version_now"] > checked["catalog_version_then"]
    assert checked["cost"]["now_usd_per_hour"] == pytest.approx(stored["cost"]["usd_per_hour"] * 1.5)
    assert checked["cost"]["change_usd_per_hour"] == pytest.approx(stored["cost"]["usd_per_hour"] * 0.5)
    assert [c["kind"] for c in checked["changes"]] == ["prices"]
    assert "h100-sxm" in checked["changes"][0]["detail"]
    assert "costs $" in checked["summary"]

    # a re-plan now names prices as a reason too
    assert [r["kind"] for r in replan(seeded, admin, "chat", {"arrival_rate_rps": 15})["diff"]["why"]] == ["prices"]


def test_recheck_says_a_plan_no_longer_holds_when_the_gpu_got_slower(seeded: ApiClient, admin: dict[str, str]) -> None:
    stored = plan(seeded, admin, chat(15, name="chat"))
    efficiency = seeded.get("/v1/gpus/h100-sxm").json()["efficiency"]
    slower = efficiency | {"memory": efficiency["memory"] / 4, "compute": efficiency["compute"] / 4}
    assert seeded.patch("/v1/gpus/h100-sxm", json={"efficiency": slower}, headers=admin).status_code == 200
    checked = seeded.get(f"/v1/plans/{stored['id']}/recheck").json()
    assert checked["holds"] is False and checked["summary"].startswith("no longer holds")
    assert [c["kind"] for c in checked["changes"]] == ["catalog"]
    assert "efficiencies changed" in checked["changes"][0]["detail"]


def test_recheck_of_a_plan_whose_gpu_left_the_catalog_says_it_cannot_hold(seeded: ApiClient, admin: dict[str, str]) -> None:
    stored = plan(seeded, admin, chat(15))
    assert seeded.delete("/v1/gpus/h100-sxm", headers=admin).status_code == 204
    checked = seeded.get(f"/v1/plans/{stored['id']}/recheck").json()
    assert checked["holds"] is False and "cannot be evaluated on today's catalog" in checked["summary"]
    assert checked["cost"]["now_usd_per_hour"] is None and checked["check"]["cost_usd_per_hour"] is None
    assert [c["kind"] for c in checked["changes"]] == ["catalog"]


def test_openapi_names_the_deployment_operations() -> None:
    paths = json.loads(openapi_document())["paths"]
    assert paths["/v1/deployments/{name}"]["put"]["operationId"] == "put_deployment"
    assert paths["/v1/deployments/{name}/replan"]["post"]["operationId"] == "replan_deployment"
    assert paths["/v1/plans/{plan_id}/recheck"]["get"]["operationId"] == "recheck_plan"
    for path in ("/v1/plans", "/v1/deployments/{name}/replan", "/v1/fleet-plans", "/v1/calibrations"):
        assert "Idempotency-Key" in {p["name"] for p in paths[path]["post"]["parameters"]}, path
