"""POST /v1/capacity with constraints.topology: separate prefill and decode pools on the given GPUs."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem

SLO = {"ttft_ms": 2000, "tpot_ms": 40}
WORKLOAD = {"prompt_tokens": {"mean": 3000, "p99": 8000}, "output_tokens": {"mean": 250, "p99": 1000}}


def body(topology: str | None = "disaggregated", gpus: int = 16, **changes: Any) -> dict[str, Any]:
    """How much long-prompt traffic 16 H100s hold on an 8B model."""
    request: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "gpus": gpus,
        "workload": copy.deepcopy(WORKLOAD),
        "slo": dict(SLO),
        "constraints": {} if topology is None else {"topology": topology},
    }
    request.update(changes)
    return request


def plan_gpus(client: ApiClient, rate: float) -> int | None:
    """GPUs of the cheapest disaggregated plan on H100s at `rate` (None: no plan); with one GPU type the
    cheapest pools are the fewest GPUs."""
    request = {
        "model": "llama-3.1-8b",
        "workload": {"arrival_rate_rps": rate, **copy.deepcopy(WORKLOAD)},
        "slo": dict(SLO),
        "constraints": {"topology": "disaggregated", "gpus": ["h100-sxm"]},
        "verify": False,
    }
    answer = client.post("/v1/plans", json=request, headers=ADMIN_HEADERS)
    if answer.status_code == 422:
        return None
    assert answer.status_code == 201, answer.text
    plan = answer.json()
    assert plan["disaggregation"]["predicted_ttft_ms"] <= SLO["ttft_ms"]
    assert plan["disaggregation"]["predicted_tpot_ms"] <= SLO["tpot_ms"]
    return int(plan["plan"]["gpus_total"])


def test_the_pools_capacity_is_planned_within_the_gpus_and_ten_percent_more_is_not(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/capacity", json=body())
    assert answer.status_code == 200, answer.text
    found = answer.json()
    assert found["topology"] == "disaggregated" and found["configuration"] is None and found["curve"] == []
    section = found["disaggregation"]
    prefill, decode = section["pools"]
    assert (prefill["role"], decode["role"]) == ("prefill", "decode")
    assert prefill["gpus"] == prefill["replicas"] * prefill["tp"] == section["prefill_gpus"]
    assert decode["gpus"] == decode["replicas"] * decode["tp"] == section["decode_gpus"]
    assert section["prefill_gpus"] + section["decode_gpus"] + section["gpus_idle"] == 16
    assert section["ratio"] == f"{prefill['replicas']}P{decode['replicas']}D"
    assert section["binding"] in ("prefill", "decode", "both")
    assert section["predicted_ttft_ms"] <= SLO["ttft_ms"] and section["predicted_tpot_ms"] <= SLO["tpot_ms"]
    rate = found["max_arrival_rate_rps"]
    assert rate == section["max_arrival_rate_rps"] > 0
    assert section["unsustained_arrival_rate_rps"] <= rate * 1.0101
    used = section["prefill_gpus"] + section["decode_gpus"]
    assert found["cost"]["usd_per_hour"] == pytest.approx(used * found["cost"]["price_usd_per_gpu_hour"], rel=1e-3)
    # the plan at that rate fits the 16 GPUs and meets the SLOs; at 10 % more no plan does
    at_capacity = plan_gpus(seeded, rate)
    assert at_capacity is not None and at_capacity <= 16
    beyond = plan_gpus(seeded, 1.1 * rate)
    assert beyond is None or beyond > 16


def test_any_answers_the_larger_capacity_and_says_by_how_much(seeded: ApiClient) -> None:
    one = seeded.post("/v1/capacity", json=body(None)).json()
    assert one["topology"] == "aggregated" and one["disaggregation"] is None
    pools = seeded.post("/v1/capacity", json=body()).json()
    either = seeded.post("/v1/capacity", json=body("any"))
    assert either.status_code == 200, either.text
    found = either.json()
    section = found["disaggregation"]
    assert section["requested"] == "any" and found["topology"] == section["chosen"]
    rates = {"aggregated": one["max_arrival_rate_rps"], "disaggregated": pools["max_arrival_rate_rps"]}
    winner = max(rates, key=lambda t: rates[t])
    loser = "aggregated" if winner == "disaggregated" else "disaggregated"
    assert section["chosen"] == winner
    assert found["max_arrival_rate_rps"] == pytest.approx(rates[winner], rel=1e-3)
    assert section["alternative"]["topology"] == loser
    assert section["alternative"]["max_arrival_rate_rps"] == pytest.approx(rates[loser], rel=1e-3)
    assert section["gain_fraction"] == pytest.approx(rates[winner] / rates[loser] - 1, abs=2e-3)
    assert section["max_arrival_rate_rps"] == pytest.approx(rates["disaggregated"], rel=1e-3)
    if winner == "aggregated":
        assert found["configuration"] == one["configuration"]


def test_separate_pools_refuse_what_they_do_not_honour(seeded: ApiClient) -> None:
    """Only what planner/plan_disagg.py's pool_refusals names (a pinned replica count or chunk budget, instances,
    speculation on) and what two pools cannot be (one GPU, no TTFT target to split) is a 422."""
    assert_problem(seeded.post("/v1/capacity", json=body(constraints={"topology": "disaggregated", "pin": {"replicas": 2}})), 422)
    assert_problem(seeded.post("/v1/capacity", json=body(chunk_tokens=4096)), 422)
    assert_problem(seeded.post("/v1/capacity", json=body(gpus=1)), 422)
    no_ttft = body(slo={"tpot_ms": 40})
    assert_problem(seeded.post("/v1/capacity", json=no_ttft), 422)
    # `any` without a TTFT target answers the aggregated capacity and says why the pools have none
    either = seeded.post("/v1/capacity", json={**no_ttft, "constraints": {"topology": "any"}})
    assert either.status_code == 200, either.text
    section = either.json()["disaggregation"]
    assert section["chosen"] == "aggregated" and section["alternative"]["max_arrival_rate_rps"] is None
    assert "TTFT" in section["alternative"]["reason"]
    assert_problem(seeded.post("/v1/capacity/charts/wall.svg", json=body()), 422)
    # `any` with a pin the pools refuse answers the aggregated capacity, the pools' refusal the alternative's reason
    either = seeded.post("/v1/capacity", json=body(constraints={"topology": "any", "pin": {"replicas": 2}}))
    assert either.status_code == 200, either.text
    assert either.json()["topology"] == "aggregated"
    assert "pin.replicas" in either.json()["disaggregation"]["alternative"]["reason"]


def test_an_e2e_target_the_pools_can_meet_is_answered_and_a_tighter_one_binds(seeded: ApiClient) -> None:
    plain = seeded.post("/v1/capacity", json=body()).json()
    predicted_s = plain["disaggregation"]["predicted_e2e_s"]
    loose = seeded.post("/v1/capacity", json=body(slo={**SLO, "e2e_s": 2 * predicted_s}))
    assert loose.status_code == 200, loose.text
    assert loose.json()["max_arrival_rate_rps"] == pytest.approx(plain["max_arrival_rate_rps"], rel=1e-6)
    target_s = 0.5 * predicted_s  # the pools answered without the target miss it at their capacity
    tight = seeded.post("/v1/capacity", json=body(slo={**SLO, "e2e_s": target_s}))
    assert tight.status_code == 200, tight.text
    section = tight.json()["disaggregation"]
    assert section["predicted_e2e_s"] <= target_s
    assert tight.json()["max_arrival_rate_rps"] < plain["max_arrival_rate_rps"]


def test_n_plus_one_pools_keep_a_spare_each_and_hold_less(seeded: ApiClient) -> None:
    """constraints.n_plus_one: each pool's spare is counted in the 16 GPUs and the capacity is the pools' without
    them, so it is lower; the aggregated capacity refuses it, and `any` answers the pools with that reason."""
    plain = seeded.post("/v1/capacity", json=body()).json()
    spared = seeded.post("/v1/capacity", json=body(constraints={"topology": "disaggregated", "n_plus_one": True}))
    assert spared.status_code == 200, spared.text
    section = spared.json()["disaggregation"]
    assert [pool["spare_replicas"] for pool in section["pools"]] == [1, 1]
    assert [pool["spare_replicas"] for pool in plain["disaggregation"]["pools"]] == [0, 0]
    assert section["prefill_gpus"] + section["decode_gpus"] + section["gpus_idle"] == 16
    assert spared.json()["max_arrival_rate_rps"] < plain["max_arrival_rate_rps"]
    assert_problem(seeded.post("/v1/capacity", json=body(None, constraints={"n_plus_one": True})), 422)
    either = seeded.post("/v1/capacity", json=body(constraints={"topology": "any", "n_plus_one": True}))
    assert either.status_code == 200, either.text
    found = either.json()
    assert found["topology"] == "disaggregated"
    assert found["max_arrival_rate_rps"] == pytest.approx(spared.json()["max_arrival_rate_rps"], rel=1e-6)
    alternative = found["disaggregation"]["alternative"]
    assert alternative["topology"] == "aggregated" and alternative["max_arrival_rate_rps"] is None
    assert "n_plus_one" in alternative["reason"]


def test_tp_and_batch_limit_pins_are_honoured_by_the_pools(seeded: ApiClient) -> None:
    by_tp = seeded.post("/v1/capacity", json=body(tp=4))
    assert by_tp.status_code == 200, by_tp.text
    assert [pool["tp"] for pool in by_tp.json()["disaggregation"]["pools"]] == [4, 4]
    pinned = {"topology": "disaggregated", "pin": {"batch_limit": 16}}
    by_batch = seeded.post("/v1/capacity", json=body(constraints=pinned))
    assert by_batch.status_code == 200, by_batch.text
    prefill, decode = by_batch.json()["disaggregation"]["pools"]
    assert decode["batch_limit"] == 16 and prefill["batch_limit"] is None


def test_verify_simulates_the_pools_down_to_a_rate_the_simulator_agrees_with(seeded: ApiClient) -> None:
    answer = seeded.post("/v1/capacity", json=body(gpus=8, verify=True))
    assert answer.status_code == 200, answer.text
    found = answer.json()
    section = found["disaggregation"]
    steps = section["verification"]
    assert steps and steps[-1]["meets_slo"] and not any(s["meets_slo"] for s in steps[:-1])
    analytic = section["analytic_arrival_rate_rps"]
    assert found["analytic_arrival_rate_rps"] == analytic
    for i, step in enumerate(steps):
        assert step["arrival_rate_rps"] == pytest.approx(analytic / 1.1**i, rel=1e-3)
        assert step["requests_simulated"] >= 100
    assert found["max_arrival_rate_rps"] == section["max_arrival_rate_rps"] == steps[-1]["arrival_rate_rps"]
    last = steps[-1]
    assert last["ttft_ms"] <= SLO["ttft_ms"] and last["tpot_ms"] <= SLO["tpot_ms"] and last["misses"] == []
