"""A stored class plan's recheck (GET /v1/plans/{id}/recheck) and a class deployment's re-plan with
its headroom margin, through the real app on the reference catalog: the recheck judges the plan's
pools at its own classes (its own figures back, and the simulators' p99s), prices it today; the
re-plan keeps the plan in force while its pools still meet every class's target at
(1 + headroom_margin) × the new rates, and adopts the new one when they do not."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine

from api.classes_plans import _response
from api.classes_replan import class_check_read, day_run_in_pool, deployed_pools
from api.schemas.classes import ClassesPlanRequest
from catalog.db import make_session_factory
from catalog.deployments import Deployments
from planner.class_check import check_class_plan
from planner.plan_classes import ClassesPlan, plan_classes
from planner.plan_classes_base import _Context
from planner.plan_classes_priority import _shared_priority
from tests.api.client import ApiClient
from tests.api.test_classes_deployments import named, post_plan, replan
from tests.api.test_classes_plans import WORKED
from tests.api.test_deployments import CHAT
from tests.planner.test_plan_classes import BASE, CHAT_CLASS, OFFICE_DAY, SUMMARISE, _over_the_cap
from tests.planner.test_planning import INPUTS


def test_a_class_plan_rechecked_gives_its_figures_and_simulated_p99s(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, WORKED)
    response = seeded.get(f"/v1/plans/{plan['id']}/recheck")
    assert response.status_code == 200, response.text
    recheck = response.json()
    assert (recheck["plan_id"], recheck["arrangement"], recheck["holds"]) == (plan["id"], plan["arrangement"]["chosen"], True)
    assert recheck["summary"] == "still holds: every class meets its target"
    check = recheck["check"]
    assert check["simulated"] is True and check["load_factor"] == 1 and check["meets_targets"] is True
    planned = {k["name"]: k for k in plan["classes"]}
    for k in check["classes"]:
        mine = planned[k["name"]]
        assert (k["pool"], k["percentile"], k["checked"], k["meets_target"]) == (mine["pool"], mine["percentile"], True, True)
        assert k["ttft_ms"] == pytest.approx(mine["ttft_ms"], abs=0.1)  # both served rounded to 0.1 ms
        assert k["tpot_ms"] == pytest.approx(mine["tpot_ms"], abs=0.1)
        assert k["e2e_s"] == pytest.approx(mine["e2e_s"], rel=1e-3)
        assert k["simulated_ttft_p99_ms"] > 0 and k["simulated_e2e_p99_s"] > 0
    chat = next(k for k in check["classes"] if k["name"] == "chat")
    assert chat["simulated_ttft_p99_ms"] <= 500
    assert recheck["cost"]["then_usd_per_hour"] == pytest.approx(plan["cost_usd_per_hour"])
    assert recheck["cost"]["now_usd_per_hour"] == pytest.approx(plan["cost_usd_per_hour"])
    assert recheck["changes"] == []


def test_a_class_plan_rechecked_after_a_price_move_costs_what_it_costs_now(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, {**WORKED, "constraints": {"gpus": ["h100-sxm"]}})
    [price] = seeded.post("/v1/plans", json={**CHAT, "store": False}, headers=admin).json()["cost"]["prices"]
    url = f"/v1/prices/{price['provider']}/h100-sxm"
    old = seeded.get(url).json()["on_demand"]
    assert seeded.patch(url, json={"on_demand": old * 1.5}, headers=admin).status_code == 200
    recheck = seeded.get(f"/v1/plans/{plan['id']}/recheck").json()
    assert recheck["holds"] is True  # prices do not move latencies
    assert recheck["cost"]["now_usd_per_hour"] == pytest.approx(1.5 * plan["cost_usd_per_hour"], abs=0.01)
    assert "costs $" in recheck["summary"]
    assert [c["kind"] for c in recheck["changes"]] == ["prices"]


def set_hysteresis(engine: Engine, name: str, **hysteresis: float) -> None:
    """The deployment's hysteresis, as PUT /v1/deployments/{name} sets a one-workload deployment's."""
    with make_session_factory(engine)() as session, session.begin():
        deployments = Deployments(session)
        current = deployments.get(name)
        deployments.save(name=name, request=current.request, hysteresis={**current.hysteresis, **hysteresis})


def check_of(result: dict[str, Any], which: str) -> dict[str, Any]:
    check: dict[str, Any] = result["current_check"][which]
    return check


def test_a_class_replan_keeps_pools_that_meet_every_target_at_the_margin(
    seeded: ApiClient, admin: dict[str, str], engine: Engine
) -> None:
    """Chat from 60 to 30 req/s on any GPU: the new plan halves the chat pool (4 → 2 L40S). With the
    saving threshold out of reach (min_saving_fraction 1) and a headroom margin of 5 %, the plan in
    force is kept: its pools meet every class's target at 1.05× the new rates. With the default 10 %
    they do not (the summarisation pool, planned at ρ 0.94, passes saturation at 1.1× its rate),
    and the new plan is adopted, saying so."""
    current = post_plan(seeded, admin, named("assistant", constraints={}))
    set_hysteresis(engine, "assistant", min_saving_fraction=1.0, headroom_margin=0.05)
    kept = replan(seeded, admin, "assistant", {"class_rates_rps": {"chat": 30}})
    assert kept["diff"]["same_configuration"] is False
    assert kept["diff"]["cost_usd_per_hour"]["after"] < current["cost_usd_per_hour"]
    assert kept["changed"] is False and kept["adopted"] == current["id"]
    assert "still meet every class's target at 1.05× the new rates" in kept["reason"]
    at_rate, with_margin = check_of(kept, "at_new_rate"), check_of(kept, "with_margin")
    assert (at_rate["load_factor"], with_margin["load_factor"]) == (1, 1.05)
    assert at_rate["meets_targets"] and with_margin["meets_targets"] and not with_margin["simulated"]
    chat = {k["name"]: k for k in with_margin["classes"]}["chat"]
    assert chat["arrival_rate_rps"] == pytest.approx(31.5) and chat["ttft_ms"] <= 500
    assert seeded.get("/v1/deployments/assistant").json()["current_plan_id"] == current["id"]

    set_hysteresis(engine, "assistant", headroom_margin=0.1)
    adopted = replan(seeded, admin, "assistant", {"class_rates_rps": {"chat": 30}})
    assert adopted["changed"] is True and adopted["adopted"] == adopted["plan"]["id"]
    assert "but not at 1.1× them" in adopted["reason"] and "summarise" in adopted["reason"]
    assert check_of(adopted, "at_new_rate")["meets_targets"] and not check_of(adopted, "with_margin")["meets_targets"]
    assert seeded.get("/v1/deployments/assistant").json()["current_plan_id"] == adopted["plan"]["id"]


def test_a_stored_class_plan_reads_back_its_admission_limits_and_day_run_for_the_check() -> None:
    """What the recheck reads from a stored class plan (api/classes_plans.py's response): each pool with
    its classes' admission limits (a shedding plan's limit below the batch), and a verified deferred
    plan's day run on the interactive pool, period by period, as the planner returned them."""
    shedding_classes, _, _ = _over_the_cap(1.03, 0.2)
    shedding = _shared_priority(
        _Context(classes=shedding_classes, inputs=INPUTS, base=replace(BASE, verify=True)), verify=True, shedding=True
    )
    plan = ClassesPlan(chosen=shedding.name, pools=shedding.pools, classes=shedding.classes, compared=(),
                       verification=shedding.verification)  # fmt: skip
    body = ClassesPlanRequest.model_validate({**WORKED, "classes": [
        {**k, "arrival_rate_rps": c.arrival_rate_rps, "max_shed_fraction": c.max_shed_fraction}
        for k, c in zip(WORKED["classes"], shedding_classes, strict=True)
    ]})  # fmt: skip
    response = json.loads(json.dumps(_response(body, plan, INPUTS, plan_id="p", created_at="now")))
    (pool,) = deployed_pools(response)
    limit = next(f.admission_limit for f in shedding.classes if f.name == "summarise")
    assert limit is not None and limit < pool.batch_limit and dict(pool.admission_limits) == {"summarise": limit}
    assert day_run_in_pool(response) is None  # not a deferred plan
    # the recheck's check of those pools (simulated), as the response carries it: the verification's refusals
    read = class_check_read(check_class_plan(shedding.name, [pool], shedding_classes, INPUTS, simulated=True))
    assert shedding.verification is not None
    verified = {c.name: c.shed_fraction_simulated for c in shedding.verification.classes}
    assert {k["name"]: k["simulated_shed_fraction"] for k in read["classes"]} == pytest.approx(verified)
    assert read["meets_targets"] and 0.0 < verified["summarise"] <= 0.2

    chat, summarise = replace(CHAT_CLASS, demand_rps=OFFICE_DAY), replace(SUMMARISE, deadline_h=12.0)
    deferred = plan_classes([chat, summarise], INPUTS, replace(BASE, verify=True))
    assert deferred.chosen == "deferred" and deferred.verification is not None
    body = ClassesPlanRequest.model_validate({**WORKED, "classes": [
        {**WORKED["classes"][0], "demand_rps": list(OFFICE_DAY)}, {**WORKED["classes"][1], "deadline_h": 12}
    ]})  # fmt: skip
    response = json.loads(json.dumps(_response(body, deferred, INPUTS, plan_id="d", created_at="now")))
    assert day_run_in_pool(response) == [p.background_in_pool_rps for p in deferred.verification.periods]
    assert all(not p.admission_limits for p in deployed_pools(response))
