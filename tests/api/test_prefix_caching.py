"""workload.prefix_reuse through POST /v1/plans and the routes that accept or refuse it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.prefix_cache import PrefixReuse, Sessions
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_plans import CHAT

#: Half the requests share a 1,000-token system prompt, 40 % carry one of 100 documents of 1,500 tokens.
REUSE = {
    "system_prompt_tokens": 1000,
    "system_prompt_fraction": 0.5,
    "distinct_prefixes": 100,
    "prefix_tokens": 1500,
    "prefix_fraction": 0.4,
    "zipf_exponent": 1.0,
}


def _body(reuse: dict[str, Any] | None, **top: Any) -> dict[str, Any]:
    body = copy.deepcopy(CHAT)
    del body["name"]
    if reuse is not None:
        body["workload"]["prefix_reuse"] = reuse
    body.update(top)
    return body


def test_a_high_reuse_plan_deploys_a_cache_and_costs_less(seeded: ApiClient, admin: dict[str, str]) -> None:
    without = seeded.post("/v1/plans", json=_body(None, verify=True), headers=admin)
    assert without.status_code == 201, without.text
    plain = without.json()
    assert plain["plan"]["prefix_caching"] is None
    assert plain["justification"].get("prefix_caching") is None

    response = seeded.post("/v1/plans", json=_body(REUSE, verify=True), headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    chosen = plan["plan"]["prefix_caching"]
    assert chosen["routing"] in {"random", "prefix_aware"}
    assert chosen["cache_tokens"] > 0 and 0.5 < chosen["hit_rate"] <= 1.0
    assert 0 < chosen["prefill_tokens_saved_fraction"] < 1
    assert plan["cost"]["usd_per_hour"] < plain["cost"]["usd_per_hour"]
    section = plan["justification"]["prefix_caching"]
    assert section["cost_usd_per_hour_without"] == pytest.approx(plain["cost"]["usd_per_hour"], rel=1e-6)
    assert section["ttft_s_with"] is not None and section["ttft_s_without"] is not None
    assert len(section["trials"]) == 3
    assert plan["verification"]["meets_slo"] is True
    assert section["simulated_hit_rate"] == pytest.approx(chosen["hit_rate"], abs=0.05)
    again = seeded.get(f"/v1/plans/{plan['id']}")
    assert again.json()["plan"]["prefix_caching"] == chosen


def test_a_measured_hit_rate_is_planned_as_given(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=_body({"hit_rate": 0.7}), headers=admin)
    assert response.status_code == 201, response.text
    section = response.json()["justification"]["prefix_caching"]
    assert section["trials"][0]["routing"] == "as_measured"
    assert section["trials"][0]["cache_tokens"] == 0
    assert section["trials"][0]["hit_rate"] == pytest.approx(0.7)


@pytest.mark.parametrize(
    ("reuse", "field"),
    [
        ({"hit_rate": 1.5}, "workload.prefix_reuse.hit_rate"),
        ({}, "workload.prefix_reuse"),
        ({"hit_rate": 0.5, "system_prompt_tokens": 100, "system_prompt_fraction": 0.5}, "workload.prefix_reuse"),
        ({**REUSE, "system_prompt_fraction": 0.7}, "workload.prefix_reuse"),
        ({"distinct_prefixes": 10, "prefix_tokens": 8, "prefix_fraction": 0.5}, "workload.prefix_reuse"),
        ({"hit_rate": 0.5, "bogus": 1}, "workload.prefix_reuse.bogus"),
    ],
)
def test_bad_reuse_is_a_422_naming_it(seeded: ApiClient, admin: dict[str, str], reuse: dict[str, Any], field: str) -> None:
    problem = assert_problem(seeded.post("/v1/plans", json=_body(reuse), headers=admin), 422, "invalid-request")
    assert field in bad_fields(problem), bad_fields(problem)


#: A prefill-bound question: long prompts, short answers and a tight TTFT on two H100s.
PREFILL_BOUND: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpus": 2,
    "workload": {"prompt_tokens": {"mean": 6000, "p99": 12000}, "output_tokens": {"mean": 60, "p99": 200}},
    "slo": {"ttft_ms": 800, "tpot_ms": 60},
}


def test_capacity_with_a_measured_hit_rate_is_higher_and_a_plan_at_it_fits_the_hardware(
    seeded: ApiClient, admin: dict[str, str]
) -> None:
    plain = seeded.post("/v1/capacity", json=PREFILL_BOUND)
    assert plain.status_code == 200, plain.text
    without = plain.json()
    assert without["prefix_caching"] is None and without["max_arrival_rate_rps_without_cache"] is None
    reused = copy.deepcopy(PREFILL_BOUND)
    reused["workload"]["prefix_reuse"] = {"hit_rate": 0.5}
    response = seeded.post("/v1/capacity", json=reused)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["prefix_caching"]["routing"] == "as_measured"
    assert answer["prefix_caching"]["hit_rate"] == pytest.approx(0.5)
    assert answer["prefix_caching"]["cache_tokens"] == 0
    assert answer["prefix_caching"]["prefill_tokens_saved_fraction"] == pytest.approx(0.5, abs=0.01)
    assert answer["max_arrival_rate_rps_without_cache"] == pytest.approx(without["max_arrival_rate_rps"], rel=1e-6)
    assert answer["max_arrival_rate_rps"] > 1.2 * without["max_arrival_rate_rps"]
    # a plan at that rate with that reuse is feasible on that hardware (no more GPUs than given)
    plan_body = {
        "model": PREFILL_BOUND["model"],
        "workload": {**reused["workload"], "arrival_rate_rps": answer["max_arrival_rate_rps"]},
        "slo": PREFILL_BOUND["slo"],
        "constraints": {"gpus": ["h100-sxm"]},
        "verify": False,
    }
    planned = seeded.post("/v1/plans", json=plan_body, headers=admin)
    assert planned.status_code == 201, planned.text
    assert planned.json()["plan"]["gpus_total"] <= PREFILL_BOUND["gpus"]


def test_capacity_with_shared_prefixes_states_the_cache_and_routing_and_verifies_them(seeded: ApiClient) -> None:
    reused = copy.deepcopy(PREFILL_BOUND)
    reused["workload"]["prompt_tokens"] = {"mean": 3000, "p99": 6000}
    reused["workload"]["prefix_reuse"] = REUSE
    response = seeded.post("/v1/capacity", json={**reused, "verify": True})
    assert response.status_code == 200, response.text
    answer = response.json()
    chosen = answer["prefix_caching"]
    assert chosen["routing"] in {"random", "prefix_aware"}
    assert chosen["cache_tokens"] > 0 and 0.5 < chosen["hit_rate"] <= 1.0
    assert answer["max_arrival_rate_rps"] > answer["max_arrival_rate_rps_without_cache"]
    assert answer["verification"][-1]["meets_slo"] is True
    assert answer["max_arrival_rate_rps"] == pytest.approx(answer["verification"][-1]["arrival_rate_rps"])


def test_capacity_with_shared_prefixes_and_a_draft_head_runs_and_verifies_both(seeded: ApiClient) -> None:
    reused = copy.deepcopy(PREFILL_BOUND)
    reused["workload"]["prompt_tokens"] = {"mean": 3000, "p99": 6000}
    reused["workload"]["prefix_reuse"] = REUSE
    response = seeded.post("/v1/capacity", json={**reused, "verify": True, "constraints": {"speculative": "on"}})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["prefix_caching"]["cache_tokens"] > 0 and answer["speculative"]["method"]
    assert answer["verification"][-1]["meets_slo"] is True


def test_separate_pools_refuse_prefix_reuse_in_capacity(seeded: ApiClient) -> None:
    reused = copy.deepcopy(PREFILL_BOUND)
    reused["workload"]["prefix_reuse"] = {"hit_rate": 0.5}
    reused["constraints"] = {"topology": "disaggregated"}
    problem = assert_problem(seeded.post("/v1/capacity", json=reused), 422)
    assert "prefix_reuse" in problem["detail"]


def test_what_if_plans_each_point_with_the_reuse(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The sweep's points are plans: with prefix reuse each costs at most the point without it."""
    shape = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
    sweep: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "workload": shape,
        "slo": {"ttft_ms": 1000, "tpot_ms": 60},
        "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
        "sweep": {"arrival_rates_rps": [4, 15]},
    }
    plain = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert plain.status_code == 200, plain.text
    sweep["workload"] = {**shape, "prefix_reuse": REUSE}
    reused = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert reused.status_code == 200, reused.text
    costs = [
        (a["cost_usd_per_hour"], b["cost_usd_per_hour"])
        for a, b in zip(plain.json()["points"], reused.json()["points"], strict=True)
    ]
    assert all(with_reuse <= without for without, with_reuse in costs)
    assert any(with_reuse < without for without, with_reuse in costs)


#: Long chat sessions (tests/planner/test_prefix_sessions.py's SESSION_CHAT): 8 turns of 1,000 tokens, 10 s apart.
SESSIONS = {"sessions": {"turns": 8, "turn_tokens": 1000, "think_time_s": 10}}
SESSION_WORKLOAD = {
    "arrival_rate_rps": 40,
    "prompt_tokens": {"mean": 4000, "p99": 10000},
    "output_tokens": {"mean": 80, "p99": 320},
}


def test_sessions_round_trip_through_a_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    """POST /v1/plans with prefix_reuse.sessions: a cache under session-sticky routing, cheaper than the plan
    without it, sized on the working set of the replicas its own plan deploys (fewer replicas hold more
    sessions each: not the plan without a cache's), verified by the simulator within 0.05 of the model's hit
    rate (measured: 0.662 against 0.677 at 3 replicas, the simulator's session stream in steady state), and
    read back as planned."""
    body = _body(None, verify=True)
    body["workload"] = {**SESSION_WORKLOAD, "prefix_reuse": SESSIONS}
    # speculative off: this test is about the cache (auto once hit a duplicate-candidate bug here, tests/api/test_speculative_tie.py)
    body["constraints"] = {"gpus": ["h100-sxm"], "speculative": "off"}
    response = seeded.post("/v1/plans", json=body, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    chosen = plan["plan"]["prefix_caching"]
    assert chosen is not None and chosen["routing"] == "prefix_aware"
    assert 0.3 < chosen["hit_rate"] < 1.0
    section = plan["justification"]["prefix_caching"]
    assert plan["cost"]["usd_per_hour"] < section["cost_usd_per_hour_without"]
    assert section["simulated_hit_rate"] == pytest.approx(chosen["hit_rate"], abs=0.05)
    reuse = PrefixReuse(sessions=Sessions(**SESSIONS["sessions"]))
    planned = [t for t in section["trials"] if t["replicas"] is not None]
    assert planned
    for trial in planned:
        own = reuse.working_set_tokens("prefix_aware", trial["replicas"], arrival_rate_rps=SESSION_WORKLOAD["arrival_rate_rps"])
        assert trial["cache_tokens"] == int(trial["cache_fraction"] * own) // 16 * 16
    # the plan without a cache's replicas are more (working_set_tokens is theirs): some trial re-sized up for fewer
    assert any(t["cache_tokens"] > section["working_set_tokens"] for t in planned)
    again = seeded.get(f"/v1/plans/{plan['id']}")
    assert again.status_code == 200 and again.json()["plan"]["prefix_caching"] == chosen


@pytest.mark.parametrize(
    ("reuse", "field"),
    [
        ({"sessions": {"turns": 1, "turn_tokens": 400, "think_time_s": 10}}, "workload.prefix_reuse.sessions.turns"),
        ({"sessions": {"turns": 4, "turn_tokens": 8, "think_time_s": 10}}, "workload.prefix_reuse.sessions.turn_tokens"),
        ({"sessions": {"turns": 4, "turn_tokens": 400, "think_time_s": 0}}, "workload.prefix_reuse.sessions.think_time_s"),
        ({"sessions": {"turns": 4, "turn_tokens": 400}}, "workload.prefix_reuse.sessions.think_time_s"),
        ({**SESSIONS, "system_prompt_tokens": 512, "system_prompt_fraction": 1.0}, "workload.prefix_reuse"),
    ],
)
def test_bad_sessions_are_a_422_naming_them(seeded: ApiClient, admin: dict[str, str], reuse: dict[str, Any], field: str) -> None:
    problem = assert_problem(seeded.post("/v1/plans", json=_body(reuse), headers=admin), 422, "invalid-request")
    assert field in bad_fields(problem), bad_fields(problem)


def test_what_if_plans_sessions_at_each_points_rate(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A what-if sweep has a rate per point, so it takes sessions (capacity solves for its rate: test_capacity_sessions.py):
    each point costs at most the point without them, and the busier one caches (more sessions share each replica's
    cache, and a long-session workload at 40 req/s is prefill-bound)."""
    shape = {key: value for key, value in SESSION_WORKLOAD.items() if key != "arrival_rate_rps"}
    sweep: dict[str, Any] = {
        "model": "llama-3.1-8b",
        "workload": shape,
        "slo": {"ttft_ms": 1000, "tpot_ms": 60},
        "constraints": {"gpus": ["h100-sxm"], "speculative": "off"},
        "sweep": {"arrival_rates_rps": [10, 40]},
    }
    plain = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert plain.status_code == 200, plain.text
    sweep["workload"] = {**shape, "prefix_reuse": SESSIONS}
    reused = seeded.post("/v1/what-if", json=sweep, headers=admin)
    assert reused.status_code == 200, reused.text
    costs = [
        (a["cost_usd_per_hour"], b["cost_usd_per_hour"])
        for a, b in zip(plain.json()["points"], reused.json()["points"], strict=True)
    ]
    assert all(with_reuse <= without for without, with_reuse in costs)
    assert costs[1][1] < costs[1][0]
