"""constraints.pin on POST /v1/plans and POST /v1/what-if through the real app on the reference
catalog: pinned values are what the plan has, the engine is echoed, and every pin outside the
request or the model is a 422 naming its member."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_plans import body


def _plan(client: ApiClient, headers: dict[str, str], pin: dict[str, Any], **changes: Any) -> Any:
    request = body(**changes)
    request["constraints"]["pin"] = pin
    return client.post("/v1/plans", json={**request, "store": False}, headers=headers)


def test_a_pinned_plan_has_the_pinned_values_and_echoes_the_engine(seeded: ApiClient, admin: dict[str, str]) -> None:
    pin = {"gpu": "a100-80gb-sxm", "tp": 2, "replicas": 3, "batch_limit": 64, "chunk_tokens": None, "engine": "sglang"}
    response = _plan(seeded, admin, pin)
    assert response.status_code == 200, response.text
    plan = response.json()["plan"]
    assert (plan["gpu"], plan["tp"], plan["replicas"], plan["batch_limit"], plan["chunk_tokens"]) == (
        "a100-80gb-sxm",
        2,
        3,
        64,
        None,
    )
    assert plan["gpus_total"] == 6 and plan["engine"] == "sglang" and plan["instances"] is None


def test_pinning_the_free_plans_choices_gives_the_same_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    free = seeded.post("/v1/plans", json={**body(), "store": False}, headers=admin).json()
    decision = free["plan"]
    pin = {key: decision[key] for key in ("gpu", "tp", "replicas", "batch_limit", "chunk_tokens", "precision")}
    pinned = _plan(seeded, admin, pin).json()
    assert pinned["plan"] == {**decision, "engine": None}
    assert pinned["cost"]["usd_per_hour"] == free["cost"]["usd_per_hour"]


def test_unmodelled_or_contradictory_pins_are_422_naming_the_member(seeded: ApiClient, admin: dict[str, str]) -> None:
    pp = assert_problem(_plan(seeded, admin, {"pp": 3}), 422, "invalid-request")
    assert (
        "a pinned pp must be one of the pipeline degrees the planner models (1, 2, 4, 8)" in bad_fields(pp)["constraints.pin.pp"]
    )
    assert "constraints.pin.engine" in bad_fields(assert_problem(_plan(seeded, admin, {"engine": "tgi"}), 422))
    chunk = assert_problem(_plan(seeded, admin, {"batch_limit": 256, "chunk_tokens": 128}), 422)
    assert "chunk_tokens (128) must exceed batch_limit (256)" in bad_fields(chunk)["constraints.pin"]
    gpu = assert_problem(_plan(seeded, admin, {"gpu": "l40s"}), 422, "invalid-planner-input")
    assert gpu["field"] == "constraints.pin.gpu" and "l40s" in gpu["detail"]
    tp = assert_problem(_plan(seeded, admin, {"tp": 3}), 422, "invalid-planner-input")
    assert tp["field"] == "constraints.pin.tp"
    n_plus_one = assert_problem(_plan(seeded, admin, {"replicas": 1}, constraints__n_plus_one=True), 422, "invalid-planner-input")
    assert n_plus_one["field"] == "constraints.pin.replicas"


def test_too_few_pinned_replicas_is_infeasible_with_the_pin_as_culprit(seeded: ApiClient, admin: dict[str, str]) -> None:
    problem = assert_problem(_plan(seeded, admin, {"replicas": 1}, workload__arrival_rate_rps=400), 422, "infeasible-plan")
    assert "constraints.pin.replicas" in problem["culprits"]
    relaxation = next(r for r in problem["relaxations"] if r["constraint"] == "constraints.pin.replicas")
    assert relaxation["current"] == 1 and relaxation["value"] >= 2


def test_a_stored_request_keeps_an_omitted_chunk_budget_searched(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body()
    request["constraints"]["pin"] = {"tp": 1}
    response = seeded.post("/v1/plans", json=request, headers=admin)
    assert response.status_code == 201, response.text
    stored = seeded.get(f"/v1/plans/{response.json()['id']}", headers=admin)
    assert stored.status_code == 200
    deployment = seeded.get("/v1/deployments/chat-8b", headers=admin).json()
    assert deployment["settings"]["constraints"]["pin"] == {"tp": 1}  # not {"tp": 1, "chunk_tokens": null, ...}


def test_what_if_points_honour_the_pin(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body()
    sweep = {
        "model": request["model"],
        "workload": {k: v for k, v in request["workload"].items() if k != "arrival_rate_rps"},
        "slo": request["slo"],
        "constraints": {**request["constraints"], "pin": {"gpu": "a100-80gb-sxm", "tp": 1}},
        "sweep": {"arrival_rates_rps": [5, 20]},
    }
    response = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert response.status_code == 200, response.text
    points = response.json()["points"]
    assert [(p["gpu"], p["tp"]) for p in points] == [("a100-80gb-sxm", 1), ("a100-80gb-sxm", 1)]
