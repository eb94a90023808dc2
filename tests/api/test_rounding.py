"""The rounding policy (api/rounding.py): money in cents, times to 0.1 ms, everything else to 6
significant figures, applied to what is served; checked on its rules and on whole responses."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

import pytest

from api.rounding import allowed_digits, round_number, rounded, unit_of
from tests.api.client import ApiClient
from tests.api.test_csv_costs import FLEET


@pytest.mark.parametrize(
    ("key", "unit"),
    [
        ("cost_usd_per_hour", "usd"),
        ("usd_total", "usd"),
        ("price_usd_per_hour", "price"),
        ("on_demand", "price"),
        ("ttft_ms", "ms"),
        ("decode_step_s", "s"),
        ("output_tokens_per_s", None),
        ("target_rho", None),
        ("p99", None),
    ],
)
def test_a_key_names_its_unit(key: str, unit: str | None) -> None:
    assert unit_of(key) == unit


def test_the_issue_example_and_each_unit() -> None:
    assert round_number(2087.7999999999997, "usd") == 2087.8
    assert round_number(12.345678, "usd") == 12.35
    assert round_number(41.26, "ms") == 41.3
    assert round_number(1.234567, "s") == 1.2346  # 0.1 ms
    assert round_number(2.345678e-5, "s") == 2.346e-5  # 4 significant figures of a small time
    assert round_number(0.8048, "price") == 0.8048  # a listed unit price stays as listed
    assert round_number(3.14159265358979, None) == 3.14159
    assert round_number(16060522496.0, None) == 16060522496.0  # an exact count is left whole


def test_units_are_inherited_and_other_values_untouched() -> None:
    body = {
        "ttft_ms": {"p50": 41.26, "p99": [12.3456]},
        "cost": {"usd_per_hour": 2087.7999999999997},
        "replicas": 3,
        "verified": True,
        "gpu": "h100-sxm",
        "note": None,
        "gap": 0.0123456789,
    }
    assert rounded(body) == {
        "ttft_ms": {"p50": 41.3, "p99": [12.3]},
        "cost": {"usd_per_hour": 2087.8},
        "replicas": 3,
        "verified": True,
        "gpu": "h100-sxm",
        "note": None,
        "gap": 0.0123457,
    }


def _floats(value: Any, key: str | None = None, unit: str | None = None) -> Iterator[tuple[str | None, str | None, float]]:
    own = unit_of(key)
    unit = unit if unit == "price" and own == "usd" else (own or unit)  # a USD amount inside a price is a unit price
    if isinstance(value, float):
        yield key, unit, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _floats(v, k, unit)
    elif isinstance(value, list):
        for item in value:
            yield from _floats(item, None, unit)


def assert_policy_holds(body: Any) -> None:
    """No float anywhere in `body` carries more digits than the policy allows."""
    offending = [(key, value) for key, unit, value in _floats(body) if not allowed_digits(value, unit)]
    assert offending == []


def test_a_fleet_plan_and_its_csv_follow_the_policy(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/fleet-plans", json=FLEET, headers=admin)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert_policy_holds(plan)
    rows = list(csv.DictReader(io.StringIO(seeded.get(created.headers["location"], params={"format": "csv"}).text)))
    for row in rows:
        for column, cell in row.items():
            if cell and column not in (
                "workload",
                "gpu",
                "weights_precision",
                "kv_cache_precision",
                "currency",
                "calibration_grade",
                "warning",
                "pool_role",
            ):
                assert allowed_digits(float(cell), unit_of(column)), (column, cell)
    # cost = Σ price × GPUs held to the cent, per period: the served prices reproduce the served costs
    prices = plan["prices"]
    for period in plan["periods"]:
        expected = plan["period_hours"] * sum(
            plan["reserved_gpus"].get(gpu, 0) * prices[gpu]["reserved_usd_per_hour"]
            + period["on_demand_gpus"].get(gpu, 0) * prices[gpu]["on_demand_usd_per_hour"]
            for gpu in prices
        )
        assert period["cost_usd"] == pytest.approx(expected, abs=0.005)
