"""Why a fleet plan's draft length can differ from a single plan's (docs/speculative-decoding.md "Fleet
plans"): a single plan swaps its configuration to the speculating variant with the lowest TPOT at its own
per-replica load, at the same replicas and cost, once the simulator agrees (planner/plan_speculative.py
`latency_choice`); a fleet row's configuration serves every period at a different load and the MILP covers
demand with its rate at the SLO, so the fleet keeps, per configuration, the variant that carries the most
at the SLO (its dominance rule) and makes no per-load swap."""

from __future__ import annotations

from typing import Any

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS
from tests.api.test_fleet_levers import OUTPUT, PROMPT, SLO, fleet, fleet_workload, planned, single_plan
from tests.api.test_fleet_plans import api, seeded_sqlite_template  # noqa: F401  (fixtures)

#: Llama 3.1 8B chat on H100 at 4 requests/s: one replica either way, where a draft head is free.
RATE = 4.0


def _capacity(api: ApiClient, row: dict[str, Any], draft_tokens: int) -> float:  # noqa: F811
    """POST /v1/capacity of one replica of the fleet row's configuration drafting k tokens with its head."""
    body = {
        "model": "llama-3.1-8b",
        "gpu": row["gpu"],
        "gpus": row["tp"],
        "workload": {"prompt_tokens": PROMPT, "output_tokens": OUTPUT},
        "slo": SLO,
        "precision": row["precision"],
        "constraints": {
            "speculative": "on",
            "pin": {
                "tp": row["tp"],
                "batch_limit": row["batch_limit"],
                "chunk_tokens": row["chunk_tokens"],
                "draft_tokens": draft_tokens,
            },
        },
    }
    response = api.post("/v1/capacity", json=body, headers=ADMIN_HEADERS)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["speculative"]["draft_tokens"] == draft_tokens
    return float(answer["max_arrival_rate_rps"])


def test_the_fleet_keeps_the_draft_that_carries_most_where_a_single_plan_takes_the_fastest(api: ApiClient) -> None:  # noqa: F811
    single = single_plan(api, RATE, speculative="auto")
    chosen = single["plan"]["speculative"]
    assert chosen is not None and "lower TPOT" in single["justification"]["speculative"]["reason"]
    plan = planned(api, fleet(fleet_workload("chat", [RATE, RATE]), speculative="auto"))
    rows = [row for period in plan["periods"] for row in period["workloads"]]
    assert {row["speculative"]["method"] for row in rows} == {chosen["method"]}
    [fleet_k] = {row["speculative"]["draft_tokens"] for row in rows}
    assert fleet_k != chosen["draft_tokens"], "the two rules pick different draft lengths here"
    # the fleet's draft is the one its configuration serves more traffic with at the SLO ...
    row = rows[0]
    assert _capacity(api, row, fleet_k) > _capacity(api, row, chosen["draft_tokens"])
    # ... and the single plan's is the one with the lower TPOT at its load, at the same replicas and cost
    trials = {t["draft_tokens"]: t for t in single["justification"]["speculative"]["trials"]}
    assert trials[chosen["draft_tokens"]]["tpot_s"] < trials[fleet_k]["tpot_s"]
    assert single["cost"]["usd_per_hour"] == single["justification"]["speculative"]["cost_usd_per_hour_without"]
