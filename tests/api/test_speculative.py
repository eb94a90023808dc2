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
    return {"off": _plan(seeded, admin), "on": _plan(seeded, admin, speculative="on")}


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


def test_capacity_refuses_a_draft_length(seeded: ApiClient, admin: dict[str, str]) -> None:
    """POST /v1/capacity measures without speculation: a pinned draft length is a 422, not ignored."""
    body = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "gpus": 1,
        "workload": {key: LOW_LOAD["workload"][key] for key in ("prompt_tokens", "output_tokens")},
        "slo": LOW_LOAD["slo"],
        "constraints": {"pin": {"draft_tokens": 2}},
    }
    response = seeded.post("/v1/capacity", json=body, headers=admin)
    assert response.status_code == 422, response.text
    assert "without speculative decoding" in response.text
