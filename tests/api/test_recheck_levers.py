"""A plan's levers under GET /v1/plans/{id}/recheck and the deployment re-plan's current-plan check
(issue 18): speculative decoding and the prefix cache are modelled as the plan deployed them.

Consistency rule: a plan re-checked on an unchanged catalog at its own rate gives back its own
predicted figures; at a higher rate the same forward model (with the levers) degrades. Before the
fix the recheck ignored `plan.speculative` and `plan.prefix_caching`: the L40S plan below was
reported overloaded right after planning, and the H100 plan's TPOT was the figure without
speculation.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.test_prefix_caching import REUSE

#: Llama 3.1 8B chat at 20 requests/s with speculation offered (auto): the issue's workload.
SPECULATING: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 20, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["l40s"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}], "speculative": "auto"},
    "verify": False,
}


def _body(
    gpus: list[str], *, speculative: str = "auto", reuse: dict[str, Any] | None = None, name: str | None = None
) -> dict[str, Any]:
    body = copy.deepcopy(SPECULATING)
    body["constraints"] = {**body["constraints"], "gpus": gpus, "speculative": speculative}
    if reuse is not None:
        body["workload"]["prefix_reuse"] = reuse
    if name is not None:
        body["name"] = name
    return body


def _plan(client: ApiClient, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def _recheck(client: ApiClient, plan: dict[str, Any]) -> dict[str, Any]:
    response = client.get(f"/v1/plans/{plan['id']}/recheck")
    assert response.status_code == 200, response.text
    return response.json()


def _assert_own_figures(check: dict[str, Any], plan: dict[str, Any]) -> None:
    """The check's one row predicts the plan's own p-percentile TTFT and TPOT (the plan rounds to 0.1 ms)."""
    [row] = check["rows"]
    predicted = plan["predicted"]
    assert row["per_replica_rate_rps"] == pytest.approx(predicted["per_replica_rate_rps"], rel=1e-5)
    assert row["predicted"]["ttft_ms"] == pytest.approx(predicted["ttft_ms"]["at_percentile"], abs=0.051)
    assert row["predicted"]["tpot_ms"] == pytest.approx(predicted["tpot_ms"]["at_percentile"], abs=0.051)


@pytest.mark.parametrize("gpu", ["l40s", "h100-sxm"])
def test_a_speculating_plan_rechecked_at_once_holds_with_its_own_figures(
    seeded: ApiClient, admin: dict[str, str], gpu: str
) -> None:
    plan = _plan(seeded, admin, _body([gpu]))
    assert plan["plan"]["speculative"] is not None  # auto speculates here: what this test is about
    checked = _recheck(seeded, plan)
    assert checked["holds"] is True, checked["summary"]
    assert checked["summary"].startswith("still holds")
    _assert_own_figures(checked["check"], plan)
    # the figures are the speculating ones: the plan's configuration without a draft predicts a slower TPOT
    without_s = plan["justification"]["speculative"]["tpot_s_without"]
    [row] = checked["check"]["rows"]
    assert without_s is None or row["predicted"]["tpot_ms"] < without_s * 1000 * 0.9


@pytest.mark.parametrize("speculative", ["off", "auto"])
def test_a_caching_plan_rechecked_at_once_holds_with_its_own_figures(
    seeded: ApiClient, admin: dict[str, str], speculative: str
) -> None:
    plan = _plan(seeded, admin, _body(["h100-sxm", "a100-80gb-sxm"], speculative=speculative, reuse=REUSE))
    assert plan["plan"]["prefix_caching"] is not None
    assert (plan["plan"]["speculative"] is not None) == (speculative == "auto")
    checked = _recheck(seeded, plan)
    assert checked["holds"] is True, checked["summary"]
    _assert_own_figures(checked["check"], plan)


def test_a_measured_hit_rate_is_rechecked_as_planned(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, _body(["l40s"], speculative="off", reuse={"hit_rate": 0.7}))
    assert plan["plan"]["prefix_caching"]["routing"] == "as_measured"
    checked = _recheck(seeded, plan)
    assert checked["holds"] is True, checked["summary"]
    _assert_own_figures(checked["check"], plan)


def test_prefix_aware_routing_is_rechecked_at_the_plans_own_replica_count(seeded: ApiClient, admin: dict[str, str]) -> None:
    """A prefix-aware cache's hit rate depends on how many replicas share the prefixes. The planner
    predicts its trials at the replica count of the plan without a cache (its trial record's hit rate)
    and reports the hit rate at the plan's own count; the recheck judges the deployment as it runs:
    at the plan's own count, the hit rate the plan reports. Here (L40S, 2 replicas against 3 without a
    cache) that hit rate is lower, so the rechecked TTFT is no shorter than the plan's prediction."""
    plan = _plan(seeded, admin, _body(["l40s"], reuse=REUSE))
    cached = plan["plan"]["prefix_caching"]
    assert cached is not None and cached["routing"] == "prefix_aware"
    [trial] = [t for t in plan["justification"]["prefix_caching"]["trials"] if t["cache_tokens"] == cached["cache_tokens"]]
    checked = _recheck(seeded, plan)
    assert checked["holds"] is True, checked["summary"]
    [row] = checked["check"]["rows"]
    if trial["hit_rate"] == pytest.approx(cached["hit_rate"], abs=1e-6):  # the same count: the plan's own figures
        _assert_own_figures(checked["check"], plan)
    else:
        assert cached["hit_rate"] < trial["hit_rate"]
        assert row["predicted"]["ttft_ms"] > plan["predicted"]["ttft_ms"]["at_percentile"]


def test_the_deployment_replan_checks_the_current_plan_with_its_levers(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = _plan(seeded, admin, _body(["h100-sxm", "a100-80gb-sxm"], reuse=REUSE, name="levers"))
    assert plan["plan"]["speculative"] is not None and plan["plan"]["prefix_caching"] is not None
    same = seeded.post("/v1/deployments/levers/replan", json={"arrival_rate_rps": 20}, headers=admin)
    assert same.status_code == 200, same.text
    at_rate = same.json()["current_check"]["at_new_rate"]
    assert at_rate["meets_slo"] is True, at_rate["summary"]
    _assert_own_figures(at_rate, plan)
    assert same.json()["changed"] is False

    more = seeded.post("/v1/deployments/levers/replan", json={"arrival_rate_rps": 30}, headers=admin)
    assert more.status_code == 200, more.text
    busier = more.json()["current_check"]["at_new_rate"]
    assert busier["arrival_rate_rps"] == 30
    [before], [after] = at_rate["rows"], busier["rows"]
    # 1.5× the rate on the same replicas: 1.5× the per-replica rate, a busier replica, slower tokens
    assert after["per_replica_rate_rps"] == pytest.approx(1.5 * before["per_replica_rate_rps"])
    if not after["unstable"]:
        assert after["utilisation"] > before["utilisation"]
        assert after["predicted"]["tpot_ms"] > before["predicted"]["tpot_ms"]
        assert after["predicted"]["ttft_ms"] > before["predicted"]["ttft_ms"]


def test_recheck_at_a_higher_rate_degrades_with_the_levers(seeded: ApiClient, admin: dict[str, str]) -> None:
    """The speculating L40S plan re-planned at +50 %: the current plan's check at the new rate is the
    same forward model, busier (its TPOT, TTFT and ρ rise), and at 1.1× it is busier still."""
    plan = _plan(seeded, admin, _body(["l40s"], name="spec"))
    replanned = seeded.post("/v1/deployments/spec/replan", json={"arrival_rate_rps": 30}, headers=admin)
    assert replanned.status_code == 200, replanned.text
    checks = replanned.json()["current_check"]
    [own] = _recheck(seeded, plan)["check"]["rows"]
    [at_rate], [margin] = checks["at_new_rate"]["rows"], checks["with_margin"]["rows"]
    assert at_rate["per_replica_rate_rps"] == pytest.approx(1.5 * own["per_replica_rate_rps"])
    assert margin["per_replica_rate_rps"] == pytest.approx(1.1 * at_rate["per_replica_rate_rps"])
    for lower, higher in ((own, at_rate), (at_rate, margin)):
        if higher["unstable"]:
            continue
        assert higher["utilisation"] > lower["utilisation"]
        assert higher["predicted"]["tpot_ms"] > lower["predicted"]["tpot_ms"]


def test_a_plan_drafting_with_a_catalog_model_is_rechecked_with_that_draft(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Llama 3.1 70B drafted by Llama 3.1 8B (constraints.pin.draft_model, α 0.7): the recheck rebuilds the
    draft model's passes and the memory its weights and cache take, and gives back the plan's figures."""
    from tests.api.test_speculative_draft_model import BODY

    plan = _plan(seeded, admin, BODY)
    assert plan["plan"]["speculative"]["method"] == "draft_model"
    checked = _recheck(seeded, plan)
    assert checked["holds"] is True, checked["summary"]
    _assert_own_figures(checked["check"], plan)
