"""A stored class plan's charts through the real app on the reference catalog (the worked example of
tests/api/test_classes_plans.py): the wall draws each class's latency on the plan's pools against the
classes' load, passing through the plan's own figures at its rate; the alternatives chart the
arrangements compared; the pools chart its pools with their classes; knee and cost are 422 saying
why; a class mix sweep draws its chart too."""

from __future__ import annotations

import pytest

from api.charts import DPI
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_charts import _has, _ids, _png_size, _svg
from tests.api.test_classes_deployments import post_plan
from tests.api.test_classes_plans import WORKED
from tests.api.test_what_if_classes import MIX


def test_a_class_plans_wall_passes_through_each_class_at_the_plans_rate(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, WORKED)
    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/wall.svg"))
    assert drawn["plan_rate_rps"] == 80  # chat 60 + summarise 20
    at_plan = drawn["load_factor"].index(1.0)
    assert drawn["rate_rps"][at_plan] == pytest.approx(80)
    planned = {k["name"]: k for k in plan["classes"]}
    assert [k["name"] for k in drawn["classes"]] == ["chat", "summarise"]
    for k in drawn["classes"]:
        mine = planned[k["name"]]
        assert k["pool"] == mine["pool"]
        assert k["ttft_ms"][at_plan] == pytest.approx(mine["ttft_ms"], abs=0.1)  # the plan is served rounded to 0.1 ms
        assert k["e2e_s"][at_plan] == pytest.approx(mine["e2e_s"], rel=1e-3)
        ttft = [v for v in k["ttft_ms"] if v is not None]
        assert ttft == sorted(ttft)  # more load, longer waits
        assert f"curve-ttft_ms-{k['name']}" in _ids(root)
    chat = drawn["classes"][0]
    assert chat["slo"] == {"ttft_ms": 500}
    assert drawn["classes"][1]["slo"] == {"e2e_s": 6 * 3600}
    # chat's pool has a latency wall inside the range: its TTFT passes its target before 1.5× the rates
    assert any(v is None or v > 500 for v in chat["ttft_ms"][at_plan:])
    _has(texts, f"Latency wall of the {plan['arrangement']['chosen']} class plan", "chat target")
    assert _png_size(seeded.get(f"/v1/plans/{plan['id']}/charts/wall.png")) == (10 * DPI, 9 * DPI)


def test_a_class_plans_alternatives_and_pools_charts(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, WORKED)
    _root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/alternatives.svg"))
    rows = drawn["rows"]
    chosen = plan["arrangement"]["chosen"]
    assert rows[0]["label"] == f"chosen: {chosen}" and rows[0]["cost_usd_per_hour"] == pytest.approx(plan["cost_usd_per_hour"])
    compared = {c["name"]: c for c in plan["arrangement"]["compared"]}
    assert {r["label"] for r in rows[1:]} == set(compared) - {chosen}
    for row in rows[1:]:
        assert (row["cost_usd_per_hour"], row["reason"]) == (compared[row["label"]]["cost_usd_per_hour"],
                                                             compared[row["label"]]["reason"])  # fmt: skip
    _has(texts, "Arrangements compared for the classes of llama-3.1-8b", "cannot serve")

    root, drawn, texts = _svg(seeded.get(f"/v1/plans/{plan['id']}/charts/pools.svg"))
    assert drawn["arrangement"] == chosen
    assert [(p["pool"], p["gpus"], p["classes"]) for p in drawn["pools"]] == [
        (p["name"], p["replicas"] * p["tp"], p["classes"]) for p in plan["pools"]
    ]
    assert sum(p["cost_usd_per_hour"] for p in drawn["pools"]) == pytest.approx(plan["cost_usd_per_hour"])
    assert {"gpus-0", "cost-0"} <= _ids(root)


def test_a_class_plans_knee_and_cost_say_why_they_are_not_drawn(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = post_plan(seeded, admin, WORKED)
    assert "pools chart" in assert_problem(seeded.get(f"/v1/plans/{plan['id']}/charts/knee.svg"), 422)["detail"]
    assert "POST /v1/what-if" in assert_problem(seeded.get(f"/v1/plans/{plan['id']}/charts/cost.png"), 422)["detail"]
    assert_problem(seeded.get(f"/v1/plans/{plan['id']}/charts/nope.svg"), 404)


def test_a_class_mix_sweep_draws_cost_against_the_classes_total_rate(seeded: ApiClient, admin: dict[str, str]) -> None:
    table = seeded.post("/v1/what-if", json=MIX, headers=admin).json()
    _root, drawn, _texts = _svg(seeded.post("/v1/what-if/charts/sweep.svg", json=MIX, headers=admin))
    assert drawn["x"] == "arrival_rate_rps"
    (group,) = drawn["groups"].values()
    assert group["x"] == [p["arrival_rate_rps"] for p in table["points"]]
    assert group["y"] == [p["cost_usd_per_hour"] for p in table["points"]]
