"""Invariant 4 of issue 13 through the API: a plan's JSON cost fields and its CSV equal Σ price ×
GPUs over its rows, to the cent (docs/plan-invariants.md).

The prices are given in the request (`prices`), so the expected cost is worked from numbers the
test chose, not from the plan's own account of them; the plan's `cost.prices` must name the same.
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.api.client import ApiClient

HOURS_PER_MONTH = 730
#: USD per GPU-hour the requests below set; deliberately not round, so a price × GPUs slip shows in cents.
PRICES = {"h100-sxm": 3.137, "a100-80gb-sxm": 1.789, "l40s": 0.913}
CHAT: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 30, "prompt_tokens": {"mean": 600, "p99": 2000},
                 "output_tokens": {"mean": 150, "p99": 500}},
    "slo": {"ttft_ms": 1500, "tpot_ms": 60},
    "constraints": {"gpus": sorted(PRICES)},
    "prices": {gpu: {"on_demand": price} for gpu, price in PRICES.items()},
    "verify": False,
}  # fmt: skip


def aggregated(body: dict[str, Any]) -> dict[str, Any]:
    """`body` pinned to topology aggregated: the invariant is over aggregated rows (a disaggregated plan's pools have no
    CSV rows yet), and under the default `any` separate pools may win."""
    return {**body, "constraints": {**body["constraints"], "topology": "aggregated"}}


def rows_of(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """(gpu, GPUs, the row's own stated cost per hour or None) for every configuration of the plan."""
    decision = plan["plan"]
    if decision.get("fleet"):
        return [
            {
                "gpu": r["gpu"],
                "gpus": r["gpus"],
                "cost_usd_per_hour": r["cost_usd_per_hour"],
                "cost_usd_per_month": r["cost_usd_per_month"],
            }
            for r in decision["fleet"]
        ]
    return [{"gpu": decision["gpu"], "gpus": decision["gpus_total"], "cost_usd_per_hour": None, "cost_usd_per_month": None}]


def cents(value: float | str) -> int:
    return round(float(value) * 100)


def assert_json_costs_are_price_times_gpus(plan: dict[str, Any]) -> None:
    rows = rows_of(plan)
    expected = sum(PRICES[r["gpu"]] * r["gpus"] for r in rows)
    cost = plan["cost"]
    assert cents(cost["usd_per_hour"]) == cents(expected), (cost, rows)
    assert cents(cost["usd_per_month"]) == cents(expected * HOURS_PER_MONTH), (cost, rows)
    for row in rows:
        if row["cost_usd_per_hour"] is not None:
            assert cents(row["cost_usd_per_hour"]) == cents(PRICES[row["gpu"]] * row["gpus"]), row
            assert cents(row["cost_usd_per_month"]) == cents(PRICES[row["gpu"]] * row["gpus"] * HOURS_PER_MONTH), row
    assert {p["gpu"]: p["price_usd_per_hour"] for p in cost["prices"]} == {r["gpu"]: PRICES[r["gpu"]] for r in rows}


def assert_csv_costs_are_price_times_gpus(client: ApiClient, plan: dict[str, Any]) -> None:
    rows = rows_of(plan)
    response = client.get(f"/v1/plans/{plan['id']}", params={"format": "csv"})
    assert response.status_code == 200, response.text
    lines = list(csv.DictReader(io.StringIO(response.content.decode("utf-8"), newline="")))
    assert len(lines) == len(rows)
    for line, row in zip(lines, rows, strict=True):
        assert line["gpu"] == row["gpu"] and int(line["gpus_total"]) == row["gpus"]
        row_cost = PRICES[row["gpu"]] * row["gpus"]
        assert cents(line["cost_usd_per_hour"]) == cents(row_cost), line
        assert cents(line["cost_usd_per_month"]) == cents(row_cost * HOURS_PER_MONTH), (
            f"{row['gpu']}: CSV says {line['cost_usd_per_month']}/month, price × GPUs × 730 = {row_cost * HOURS_PER_MONTH:.2f}"
        )
    # each row is in cents on its own, so a sum of n rows may differ from the cent-rounded exact total
    # by the rows' rounding, at most half a cent each: one cent for two rows, none for one
    drift = abs(
        cents(sum(float(line["cost_usd_per_hour"]) for line in lines)) - cents(sum(PRICES[r["gpu"]] * r["gpus"] for r in rows))
    )
    assert drift <= len(rows) // 2, (drift, lines)


#: Mixed fleets the inventory forces onto two GPU types (two CSV rows).
TWO_ROW_FLEETS = [
    {"constraints": {"gpus": sorted(PRICES), "mixed_fleet": True, "inventory": {"l40s": 1}}},
    {"workload": {**CHAT["workload"], "arrival_rate_rps": 90},
     "constraints": {"gpus": sorted(PRICES), "mixed_fleet": True, "inventory": {"l40s": 2, "a100-80gb-sxm": 1}}},
]  # fmt: skip
ONE_ROW_PLANS = [
    {},
    {"constraints": {"gpus": sorted(PRICES), "n_plus_one": True, "min_replicas": 2}},
    {"constraints": {"gpus": sorted(PRICES), "mixed_fleet": True}},
    {"verify": True},
]  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    ONE_ROW_PLANS + TWO_ROW_FLEETS,
    ids=["single", "n-plus-one", "mixed-fleet", "verified", "two-row-fleet", "two-row-fleet-90-rps"],
)
def test_a_plans_json_cost_is_price_times_gpus_to_the_cent(
    seeded: ApiClient, admin: dict[str, str], changes: dict[str, Any]
) -> None:
    created = seeded.post("/v1/plans", json=aggregated({**CHAT, **changes}), headers=admin)
    assert created.status_code == 201, created.text
    assert_json_costs_are_price_times_gpus(created.json())
    stored = seeded.get(created.headers["location"])
    assert stored.status_code == 200
    assert_json_costs_are_price_times_gpus(stored.json())


@pytest.mark.parametrize(
    "changes",
    [*ONE_ROW_PLANS, *TWO_ROW_FLEETS],
    ids=["single", "n-plus-one", "mixed-fleet", "verified", "two-row-fleet", "two-row-fleet-90-rps"],
)
def test_a_plans_csv_cost_is_price_times_gpus_to_the_cent(
    seeded: ApiClient, admin: dict[str, str], changes: dict[str, Any]
) -> None:
    created = seeded.post("/v1/plans", json=aggregated({**CHAT, **changes}), headers=admin)
    assert created.status_code == 201, created.text
    if changes in TWO_ROW_FLEETS:
        assert len(rows_of(created.json())) == 2, "the inventory no longer forces two rows: pick another"
    assert_csv_costs_are_price_times_gpus(seeded, created.json())
