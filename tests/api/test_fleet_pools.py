"""POST /v1/fleet-plans with a workload's `topology`: separate prefill and decode pools sharing the
fleet's GPUs, inventory and budget, named in `topologies` and each period's `pools`."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from api.schemas.fleet_plan_csv import CSV_COLUMNS
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem
from tests.api.test_charts import _svg
from tests.api.test_fleet_plans import (  # noqa: F401  (api and seeded_sqlite_template are fixtures)
    GPUS,
    PRECISIONS,
    api,
    body,
    post,
    seeded_sqlite_template,
    workload,
)
from tests.api.test_operations import ASYNC, wait_for, without_fleet_timings, working  # noqa: F401  (working is a fixture)

#: Long prompts, short answers, a relaxed TTFT and a strict TPOT: the regime where separate pools pay
#: (docs/disaggregation.md "Regime map").
LONG_PROMPTS: dict[str, Any] = {
    "prompt_tokens": {"mean": 3000, "p99": 8000},
    "output_tokens": {"mean": 250, "p99": 1000},
    "slo": {"ttft_ms": 3000, "tpot_ms": 20, "percentile": 99},
}


def _used_by_type(period: dict[str, Any]) -> dict[str, int]:
    used: dict[str, int] = {}
    for row in period["workloads"]:
        used[row["gpu"]] = used.get(row["gpu"], 0) + row["gpus"]
    for pair in period["pools"]:
        for gpu, n in pair["gpus"].items():
            used[gpu] = used.get(gpu, 0) + n
    return used


def test_a_disaggregated_workload_runs_pools_beside_an_aggregated_one(api: ApiClient) -> None:  # noqa: F811
    pools = workload("rag", [4, 8], topology="disaggregated", **LONG_PROMPTS)
    chat = workload("chat", [6, 3])
    response = post(api, body(chat, pools))
    assert response.status_code == 201, response.text
    plan = response.json()
    assert plan["topologies"]["chat"] == {
        "requested": "aggregated",
        "chosen": "aggregated",
        "pool_option": None,
        "pool_options_offered": 0,
    }
    rag = plan["topologies"]["rag"]
    assert rag["requested"] == "disaggregated" and rag["chosen"] == "disaggregated" and rag["pool_options_offered"] >= 1
    gpus_per_period = []
    for period in plan["periods"]:
        assert {row["name"] for row in period["workloads"]} == {"chat"}
        (pair,) = period["pools"]
        assert pair["name"] == "rag" and pair["option"] == rag["pool_option"]
        assert pair["demand_rps"] == period["demand_rps"]["rag"]
        prefill, decode = pair["prefill"], pair["decode"]
        assert (prefill["role"], decode["role"]) == ("prefill", "decode")
        assert pair["ratio"] == f"{prefill['replicas']}P{decode['replicas']}D"
        assert sum(pair["gpus"].values()) == prefill["gpus"] + decode["gpus"]
        assert _used_by_type(period) == period["gpus_used"]
        assert all(period["gpus_used"][g] <= period["gpus_held"][g] for g in period["gpus_used"])
        gpus_per_period.append(prefill["gpus"] + decode["gpus"])
    assert gpus_per_period[0] <= gpus_per_period[1]  # twice the demand never needs fewer GPUs
    cost = plan["cost"]
    assert sum(cost["per_workload_usd"].values()) + cost["idle_usd"] == pytest.approx(cost["usd_total"], rel=1e-3)
    assert cost["per_workload_usd"]["rag"] > 0


def test_any_takes_pools_only_where_the_fleet_is_cheaper(api: ApiClient) -> None:  # noqa: F811
    """The same workload planned three ways: `any` costs no more than the cheaper of all-aggregated
    and all-pools, and says which it chose."""
    costs = {}
    for topology in ("aggregated", "disaggregated", "any"):
        response = post(api, body(workload("rag", [4, 8], topology=topology, **LONG_PROMPTS)))
        assert response.status_code == 201, response.text
        plan = response.json()
        costs[topology] = plan["cost"]["usd_total"]
        chosen = plan["topologies"]["rag"]["chosen"]
        assert (chosen == "disaggregated") == all(period["pools"] for period in plan["periods"])
        if topology != "any":
            assert chosen == topology
    assert costs["any"] <= min(costs["aggregated"], costs["disaggregated"]) * (1 + 0.011)  # within the 1 % MILP gap


def test_pools_share_the_inventory(api: ApiClient) -> None:  # noqa: F811
    """With the GPU type the unconstrained pools use most limited to one GPU fewer, the pools move
    (wholly or in part) to the other type or the fleet is refused naming the shortfall: never more
    GPUs of that type than given."""
    rag = workload("rag", [8], topology="disaggregated", **LONG_PROMPTS)
    free = post(api, body(rag)).json()
    used = free["periods"][0]["gpus_used"]
    gpu = max(sorted(used), key=lambda g: used[g])
    limited = post(api, body(rag, inventory={gpu: used[gpu] - 1}))
    if limited.status_code == 201:
        assert limited.json()["periods"][0]["gpus_held"].get(gpu, 0) <= used[gpu] - 1
        assert limited.json()["cost"]["usd_total"] >= free["cost"]["usd_total"] * (1 - 0.011)
    else:
        assert_problem(limited, 422)


def test_pools_refuse_what_they_do_not_model(api: ApiClient) -> None:  # noqa: F811
    no_ttft = workload("rag", [4], topology="disaggregated", slo={"tpot_ms": 20})
    assert_problem(post(api, body(no_ttft)), 422)


def test_n_plus_one_pools_carry_a_spare_each_and_cost_more(api: ApiClient) -> None:  # noqa: F811
    """Under N+1 each pool of the disaggregated workload carries its spare replica (priced) in every period with
    demand, and the fleet costs more than without; min_replicas 2 floors each pool."""
    rag = workload("rag", [4, 8], topology="disaggregated", **LONG_PROMPTS)
    plain = post(api, body(rag))
    assert plain.status_code == 201, plain.text
    constraints = {"gpus": GPUS, "precisions": PRECISIONS}
    spared = post(api, body(rag, constraints={**constraints, "n_plus_one": True}))
    assert spared.status_code == 201, spared.text
    for period in spared.json()["periods"]:
        (pair,) = period["pools"]
        assert pair["prefill"]["spare_replicas"] == pair["decode"]["spare_replicas"] == 1
        assert pair["prefill"]["replicas"] >= 2 and pair["decode"]["replicas"] >= 2
    for period in plain.json()["periods"]:
        (pair,) = period["pools"]
        assert pair["prefill"]["spare_replicas"] == pair["decode"]["spare_replicas"] == 0
    assert spared.json()["cost"]["usd_total"] > plain.json()["cost"]["usd_total"]
    floored = post(api, body(rag, constraints={**constraints, "min_replicas": 2}))
    assert floored.status_code == 201, floored.text
    for period in floored.json()["periods"]:
        (pair,) = period["pools"]
        assert pair["prefill"]["replicas"] >= 2 and pair["decode"]["replicas"] >= 2


def test_an_e2e_target_the_pools_can_meet_is_planned(api: ApiClient) -> None:  # noqa: F811
    """An E2E target is the decode pool's to meet (planner/plan_disagg.py): a generous one leaves the pools as they
    are; a tighter one (3 s TTFT + 12 s for a p99 output of 1,000 tokens) binds: the L40S-only pools chosen without it
    decode past it, and the fleet pays for faster decode GPUs."""
    plain = post(api, body(workload("rag", [4, 8], topology="disaggregated", **LONG_PROMPTS)))
    assert plain.status_code == 201, plain.text
    loose_slo = {**LONG_PROMPTS["slo"], "e2e_s": 600}
    loose = post(api, body(workload("rag", [4, 8], topology="disaggregated", **{**LONG_PROMPTS, "slo": loose_slo})))
    assert loose.status_code == 201, loose.text
    assert loose.json()["periods"][0]["pools"] == plain.json()["periods"][0]["pools"]
    tight_slo = {**LONG_PROMPTS["slo"], "e2e_s": 15}
    tight = post(api, body(workload("rag", [4, 8], topology="disaggregated", **{**LONG_PROMPTS, "slo": tight_slo})))
    assert tight.status_code == 201, tight.text
    assert tight.json()["topologies"]["rag"]["chosen"] == "disaggregated"
    assert tight.json()["cost"]["usd_total"] > plain.json()["cost"]["usd_total"] * (1 + 0.011)  # beyond the 1 % MILP gap
    assert tight.json()["periods"][0]["pools"] != plain.json()["periods"][0]["pools"]


def test_the_schedule_csv_has_a_row_per_pool_and_period_with_its_role(api: ApiClient) -> None:  # noqa: F811
    """Beside chat's replica rows (pool_role mixed), rag's pools give a prefill and a decode row in every period, each with
    its pool's configuration, GPUs (bought reserved, on demand or spot) and share of the period's cost; with the
    replica rows they account for every GPU used."""
    response = post(api, body(workload("chat", [6, 3]), workload("rag", [4, 8], topology="disaggregated", **LONG_PROMPTS)))
    assert response.status_code == 201, response.text
    plan = response.json()
    schedule = api.get(f"/v1/fleet-plans/{plan['id']}", params={"format": "csv"})
    assert schedule.status_code == 200, schedule.text
    assert tuple(next(csv.reader(io.StringIO(schedule.text)))) == CSV_COLUMNS
    rows = list(csv.DictReader(io.StringIO(schedule.text)))
    assert {r["pool_role"] for r in rows if r["workload"] == "chat"} == {"mixed"}
    for period in plan["periods"]:
        here = [r for r in rows if int(r["period"]) == period["period"]]
        (pair,) = period["pools"]
        pools = {r["pool_role"]: r for r in here if r["workload"] == "rag"}
        assert set(pools) == {"prefill", "decode"} and len([r for r in here if r["workload"] == "rag"]) == 2
        for role, row in pools.items():
            pool = pair[role]
            assert (row["gpu"], int(row["tp"]), int(row["replicas"]), int(row["gpus"])) == (
                pool["gpu"],
                pool["tp"],
                pool["replicas"],
                pool["gpus"],
            )
            assert (row["weights_precision"], row["kv_cache_precision"]) == (
                pool["precision"]["weights"],
                pool["precision"]["kv_cache"],
            )
            assert int(row["gpus_reserved"]) + int(row["gpus_on_demand"]) + int(row["gpus_spot"]) == pool["gpus"]
            assert float(row["demand_rps"]) == float(row["offered_rps"]) == pytest.approx(pair["demand_rps"])
            assert row["capacity_rps"] == "" and float(row["target_rho"]) == pytest.approx(pool["rho"], rel=1e-5)
            assert float(row["cost_usd"]) > 0
        assert (pools["prefill"]["batch_limit"], pools["decode"]["chunk_tokens"]) == ("", "")
        used: dict[str, int] = {}
        for r in here:
            used[r["gpu"]] = used.get(r["gpu"], 0) + int(r["gpus"])
        assert used == period["gpus_used"]
        assert sum(float(r["cost_usd"]) for r in here) <= period["cost_usd"] * (1 + 1e-6)


def test_the_day_chart_names_the_pools_of_each_period(api: ApiClient) -> None:  # noqa: F811
    response = post(api, body(workload("chat", [6, 3]), workload("rag", [4, 8], topology="disaggregated", **LONG_PROMPTS)))
    assert response.status_code == 201, response.text
    plan = response.json()
    root, drawn, texts = _svg(api.get(f"/v1/fleet-plans/{plan['id']}/charts/day.svg"))
    pairs = [period["pools"][0] for period in plan["periods"]]
    assert drawn["pools"] == {
        "rag": {
            "ratio": [pair["ratio"] for pair in pairs],
            "prefill_gpus": [pair["prefill"]["gpus"] for pair in pairs],
            "decode_gpus": [pair["decode"]["gpus"] for pair in pairs],
        }
    }
    for i, pair in enumerate(pairs):
        assert f"pools-{i}" in {e.get("id", "") for e in root.iter()}
        label = f"rag {pair['ratio']} ({pair['prefill']['gpus']}+{pair['decode']['gpus']} GPUs)"
        assert any(label in text for text in texts), (label, texts)
        assert drawn["held"][i] == sum(plan["periods"][i]["gpus_held"].values())  # the pools' GPUs are in the stack
    assert "demand: rag" in texts


def test_a_fleet_with_pools_asked_async_equals_the_synchronous_plan(working: ApiClient) -> None:  # noqa: F811
    """Fleet plans run as operations (api/fleet_operation.py): the pools come back the same way."""
    request = body(workload("chat", [6, 3]), workload("rag", [4, 8], topology="any", **LONG_PROMPTS))
    accepted = working.post("/v1/fleet-plans", json=request, headers=ASYNC)
    assert accepted.status_code == 202, accepted.text
    done = wait_for(working, accepted.headers["Location"], states=("succeeded", "failed"))[-1]
    assert done["state"] == "succeeded", done
    synchronous = working.post("/v1/fleet-plans", json=request, headers=ADMIN_HEADERS)
    assert synchronous.status_code == 201, synchronous.text
    assert without_fleet_timings(done["result"]) == without_fleet_timings(synchronous.json())
    assert done["result"]["topologies"]["rag"]["requested"] == "any"
    chosen = done["result"]["topologies"]["rag"]["chosen"]
    assert (chosen == "disaggregated") == all(period["pools"] for period in done["result"]["periods"])
