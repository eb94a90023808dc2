"""constraints.speculative through POST /v1/plans on the reference catalog: the schema, the plan's
`speculative` record and justification section, the CSV columns and the deploy flags; `off` (the
default) leaves the plan without speculation."""

from __future__ import annotations

import csv
import io
import json
import shlex
from typing import Any

import pytest

from api.deploy import engine_cli
from tests.api.client import ApiClient

#: Llama 3.1 8B on H100 at 0.2 requests/s: well under one sequence per replica, each step a weight
#: read, where an EAGLE head cuts TPOT by more than half (tests/planner/test_plan_speculative.py).
LOW_LOAD: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {
        "arrival_rate_rps": 0.2,
        "prompt_tokens": {"mean": 800, "p99": 3000},
        "output_tokens": {"mean": 200, "p99": 700},
    },
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
}


def _plan(client: ApiClient, headers: dict[str, str], **constraints: Any) -> dict[str, Any]:
    body = {**LOW_LOAD, "constraints": {**LOW_LOAD["constraints"], **constraints}}
    response = client.post("/v1/plans", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


@pytest.fixture
def plans(seeded: ApiClient, admin: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {"off": _plan(seeded, admin, speculative="off"), "on": _plan(seeded, admin, speculative="on")}


def test_on_plans_speculation_the_schema_describes(plans: dict[str, dict[str, Any]]) -> None:
    off, on = plans["off"], plans["on"]
    assert off["plan"]["speculative"] is None and off["justification"]["speculative"] is None
    chosen = on["plan"]["speculative"]
    assert chosen["method"] == "eagle" and 1 <= chosen["draft_tokens"] <= 5
    assert chosen["tokens_per_step"] == pytest.approx((1 - 0.8 ** (chosen["draft_tokens"] + 1)) / 0.2, rel=1e-3)
    assert chosen["crossover_batch"] is None or chosen["crossover_batch"] > 1
    assert on["justification"]["speculative"]["chosen"] == chosen
    assert on["predicted"]["tpot_ms"]["p99"] < off["predicted"]["tpot_ms"]["p99"] / 2
    assert on["verification"]["meets_slo"]
    assert (on["plan"]["gpu"], on["plan"]["replicas"], on["cost"]["usd_per_hour"]) == (
        off["plan"]["gpu"],
        off["plan"]["replicas"],
        off["cost"]["usd_per_hour"],
    )


def test_the_csv_row_and_the_deploy_flags_carry_it(seeded: ApiClient, plans: dict[str, dict[str, Any]]) -> None:
    on = plans["on"]
    response = seeded.get(f"/v1/plans/{on['id']}/csv")
    assert response.status_code == 200, response.text
    [row] = list(csv.DictReader(io.StringIO(response.text)))
    chosen = on["plan"]["speculative"]
    assert (row["speculative_method"], int(row["speculative_draft_tokens"])) == ("eagle", chosen["draft_tokens"])
    script = seeded.get(f"/v1/plans/{on['id']}/deploy", params={"target": "vllm"}).text
    [command] = [shlex.split(line) for line in script.replace("\\\n", " ").splitlines() if line and not line.startswith("#")]
    config = json.loads(command[command.index("--speculative-config") + 1])
    head = engine_cli()["draft_heads"]["llama-3.1-8b"]["eagle"]["checkpoint"]
    assert config == {"method": "eagle", "model": head, "num_speculative_tokens": chosen["draft_tokens"]}
    off_row = next(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{plans['off']['id']}/csv").text)))
    assert off_row["speculative_method"] == ""


def test_unknown_modes_and_draft_lengths_are_422(seeded: ApiClient, admin: dict[str, str]) -> None:
    for constraints in ({"speculative": "always"}, {"speculative": "on", "pin": {"draft_tokens": 9}}):
        body = {**LOW_LOAD, "constraints": {**LOW_LOAD["constraints"], **constraints}}
        assert seeded.post("/v1/plans", json=body, headers=admin).status_code == 422


def test_a_pinned_draft_length_is_kept(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, speculative="on", pin={"draft_tokens": 2})
    assert plan["plan"]["speculative"]["draft_tokens"] == 2
    assert {trial["draft_tokens"] for trial in plan["justification"]["speculative"]["trials"]} == {2}


def test_what_if_plans_every_point_with_the_requests_speculation(seeded: ApiClient, admin: dict[str, str]) -> None:
    """POST /v1/what-if takes the plans request's constraints, speculative among them: at 0.2 and 0.4
    requests/s each point's TPOT with `on` is under half the one without, on the same GPUs and cost."""
    body: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "workload": {key: LOW_LOAD["workload"][key] for key in ("prompt_tokens", "output_tokens")},
        "slo": LOW_LOAD["slo"],
        "constraints": LOW_LOAD["constraints"],
        "sweep": {"arrival_rates_rps": [0.2, 0.4]},
    }
    points = {}
    for mode in ("off", "on"):
        request = {**body, "constraints": {**body["constraints"], "speculative": mode}}
        response = seeded.post("/v1/what-if", json=request, headers=admin)
        assert response.status_code == 200, response.text
        points[mode] = response.json()["points"]
    for off, on in zip(points["off"], points["on"], strict=True):
        assert on["tpot_p99_ms"] < off["tpot_p99_ms"] / 2
        assert (on["gpu"], on["replicas"], on["cost_usd_per_hour"]) == (off["gpu"], off["replicas"], off["cost_usd_per_hour"])


#: 50 chat requests/s (bench/plan_latency.py's request #4 without N+1) on L40S fp8 under a 40 ms p99
#: TPOT: the TPOT binds at the batch a replica runs, so the replicas are bought by the step time,
#: which a draft head divides by about E while the L40S's verify step is still a weight read.
TPOT_BOUND: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {
        "arrival_rate_rps": 50.0,
        "prompt_tokens": {"mean": 1000, "p99": 4000},
        "output_tokens": {"mean": 250, "p99": 1000},
    },
    "slo": {"ttft_ms": 800, "tpot_ms": 40},
    "constraints": {"gpus": ["l40s"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
}


def test_auto_buys_a_cheaper_plan_where_tpot_binds(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Through POST /v1/plans: auto's plan costs less than off's, says what it deploys, what the plan
    without speculation costs (off's own cost) and is verified by the simulator with speculation."""
    off_body = {**TPOT_BOUND, "constraints": {**TPOT_BOUND["constraints"], "speculative": "off"}}
    off_response = seeded.post("/v1/plans", json=off_body, headers=admin)
    body = {**TPOT_BOUND, "constraints": {**TPOT_BOUND["constraints"], "speculative": "auto"}}
    auto_response = seeded.post("/v1/plans", json=body, headers=admin)
    assert off_response.status_code == auto_response.status_code == 201, auto_response.text
    off, auto = off_response.json(), auto_response.json()
    assert auto["cost"]["usd_per_hour"] < off["cost"]["usd_per_hour"]
    assert auto["plan"]["speculative"]["method"] == "eagle"
    section = auto["justification"]["speculative"]
    assert section["cost_usd_per_hour_without"] == pytest.approx(off["cost"]["usd_per_hour"])
    assert section["replicas_without"] == off["plan"]["replicas"]
    assert auto["verification"]["meets_slo"]
    assert auto["predicted"]["tpot_ms"]["p99"] <= 40.0


def test_capacity_speculates_where_asked(seeded: ApiClient, admin: dict[str, str]) -> None:
    """POST /v1/capacity with constraints.speculative auto: four L40S under a 40 ms TPOT hold more traffic
    with a draft head than without, and the answer names the draft; a draft length pinned with
    speculation off is a 422 saying what it needs."""
    body: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "gpu": "l40s",
        "gpus": 4,
        "workload": {key: TPOT_BOUND["workload"][key] for key in ("prompt_tokens", "output_tokens")},
        "slo": TPOT_BOUND["slo"],
        "precision": {"weights": "fp8", "kv_cache": "fp8"},
    }
    off = seeded.post("/v1/capacity", json=body, headers=admin)
    auto = seeded.post("/v1/capacity", json={**body, "constraints": {"speculative": "auto"}}, headers=admin)
    assert off.status_code == auto.status_code == 200, auto.text
    assert off.json()["speculative"] is None
    assert auto.json()["speculative"]["method"] == "eagle"
    assert auto.json()["max_arrival_rate_rps"] > off.json()["max_arrival_rate_rps"]
    refused = seeded.post("/v1/capacity", json={**body, "constraints": {"pin": {"draft_tokens": 2}}}, headers=admin)
    assert refused.status_code == 422, refused.text
    assert "needs constraints.speculative auto or on" in refused.text


def test_a_model_without_a_published_head_is_not_offered_speculation(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Llama 3.1 70B has no draft head in the deploy table (api/data/engine_cli.json): auto plans it without
    speculation and says so; on is a 422 naming the constraint, not a plan nobody can deploy."""
    body = {**LOW_LOAD, "model": "llama-3.1-70b", "constraints": {"speculative": "auto"}}
    auto = seeded.post("/v1/plans", json={**body, "verify": False}, headers=admin)
    assert auto.status_code == 201, auto.text
    assert auto.json()["plan"]["speculative"] is None
    assert "published" in auto.json()["justification"]["speculative"]["reason"]
    on = seeded.post("/v1/plans", json={**body, "constraints": {"speculative": "on"}, "verify": False}, headers=admin)
    assert on.status_code == 422, on.text
    assert on.json()["constraint"] == "speculative"


def test_auto_is_the_default(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A request without constraints.speculative is planned with auto: the section says auto and the TPOT-bound
    load buys the same speculating plan as when auto is asked for."""
    default = seeded.post("/v1/plans", json={**TPOT_BOUND, "verify": False}, headers=admin).json()
    body = {**TPOT_BOUND, "constraints": {**TPOT_BOUND["constraints"], "speculative": "auto"}, "verify": False}
    asked = seeded.post("/v1/plans", json=body, headers=admin).json()
    assert default["justification"]["speculative"]["mode"] == "auto"
    assert default["plan"]["speculative"] == asked["plan"]["speculative"]
    assert asked["plan"]["speculative"] is not None
    assert default["cost"]["usd_per_hour"] == asked["cost"]["usd_per_hour"]


def test_a_measured_acceptance_rate_is_planned_with(seeded: ApiClient, admin: dict[str, str]) -> None:
    """constraints.pin.acceptance_rate 0.5 at k 2: E = (1 − 0.5³)/0.5 = 1.75 tokens per step, said to be given;
    a rate outside (0, 1) is a 422."""
    chosen = _plan(seeded, admin, speculative="on", pin={"draft_tokens": 2, "acceptance_rate": 0.5})["plan"]["speculative"]
    assert chosen["acceptance_rate"] == 0.5 and "given" in chosen["acceptance_source"]
    assert chosen["tokens_per_step"] == pytest.approx(1.75)
    body = {**LOW_LOAD, "constraints": {**LOW_LOAD["constraints"], "pin": {"acceptance_rate": 1.0}}}
    assert seeded.post("/v1/plans", json=body, headers=admin).status_code == 422


def test_the_workload_task_picks_the_published_acceptance_rate(seeded: ApiClient, admin: dict[str, str]) -> None:
    """`workload.task` "code": the EAGLE head's α is EAGLE-3's HumanEval τ 6.74 at k 8 made a chain's,
    0.9257 (planner/speculative.py PUBLISHED_ACCEPTANCE) instead of the chat default 0.8; E follows it.
    An unknown task is a 422 naming the field."""
    body = {
        **LOW_LOAD,
        "workload": {**LOW_LOAD["workload"], "task": "code"},
        "constraints": {**LOW_LOAD["constraints"], "speculative": "on"},
    }
    response = seeded.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    chosen = response.json()["plan"]["speculative"]
    assert chosen["acceptance_rate"] == pytest.approx(0.92566, abs=1e-4)
    assert "HumanEval" in chosen["acceptance_source"] and "2503.01840" in chosen["acceptance_source"]
    k = chosen["draft_tokens"]
    assert chosen["tokens_per_step"] == pytest.approx(
        (1 - chosen["acceptance_rate"] ** (k + 1)) / (1 - chosen["acceptance_rate"]), rel=1e-6
    )
    bad = {**body, "workload": {**body["workload"], "task": "poetry"}}
    refused = seeded.post("/v1/plans", json=bad, headers=admin)
    assert refused.status_code == 422 and "task" in refused.text
