"""What a plan response shows a person, checked on whole responses through the API: numbers rounded
by the one policy (money in cents, times to 0.1 ms, JSON and CSV), calibration grades and the
warnings of a plan or alternative that rests on a low-graded calibration, and `min_confidence`."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.test_plans import body
from tests.api.test_rounding import assert_policy_holds


def plan(client: ApiClient, admin: dict[str, str], **changes: Any) -> dict[str, Any]:
    response = client.post("/v1/plans", json=body(**changes), headers=admin)
    assert response.status_code == 201, response.text
    return response.json()


def test_a_whole_plan_and_its_csv_follow_the_rounding_policy(seeded: ApiClient, admin: dict[str, str]) -> None:
    answer = plan(seeded, admin, verify=True)
    assert_policy_holds(answer)
    # cost = Σ price × GPUs, to the cent, in every currency field
    prices = {p["gpu"]: p["price_usd_per_hour"] for p in answer["cost"]["prices"]}
    expected = prices[answer["plan"]["gpu"]] * answer["plan"]["gpus_total"]
    assert answer["cost"]["usd_per_hour"] == pytest.approx(expected, abs=0.005)
    assert answer["cost"]["usd_per_month"] == pytest.approx(expected * 730, abs=0.005 * 730)
    rows = list(csv.DictReader(io.StringIO(seeded.get(f"/v1/plans/{answer['id']}", params={"format": "csv"}).text)))
    assert float(rows[0]["cost_usd_per_hour"]) == answer["cost"]["usd_per_hour"]
    [price] = [p for p in answer["cost"]["prices"] if p["gpu"] == rows[0]["gpu"]]
    assert rows[0]["price_provider"] == price["provider"] and rows[0]["price_source"] == price["source"]
    assert float(rows[0]["price_usd_per_gpu_hour"]) * int(rows[0]["gpus_total"]) == pytest.approx(
        float(rows[0]["cost_usd_per_hour"]), abs=0.005
    )
    for row in rows:
        for key, value in row.items():
            if key.endswith("_usd_per_hour") and value:
                assert round(float(value), 2) == float(value), (key, value)


def test_a_plan_on_a_low_graded_gpu_warns_and_grades_every_alternative(seeded: ApiClient, admin: dict[str, str]) -> None:
    grades = {
        g["slug"]: (g["efficiency"].get("confidence") or {}).get("grade", "low")
        for g in seeded.get("/v1/gpus", params={"limit": 100}).json()["items"]
    }
    low = sorted(slug for slug, grade in grades.items() if grade == "low")
    assert low, grades
    answer = plan(seeded, admin, constraints__gpus=[low[0], "h100-sxm"])
    if grades[answer["plan"]["gpu"]] == "low":
        assert any(w["gpu"] == answer["plan"]["gpu"] and w["grade"] == "low" for w in answer["warnings"]), answer["warnings"]
    for alternative in answer["justification"]["alternatives"]:
        if alternative["kind"] == "gpu":
            assert alternative["confidence"] == grades[alternative["name"]]


def test_min_confidence_keeps_low_graded_gpus_out_of_a_plan(seeded: ApiClient, admin: dict[str, str]) -> None:
    grades = {
        g["slug"]: (g["efficiency"].get("confidence") or {}).get("grade", "low")
        for g in seeded.get("/v1/gpus", params={"limit": 100}).json()["items"]
    }
    answer = plan(seeded, admin, constraints__gpus=None, constraints__min_confidence="medium")
    assert grades[answer["plan"]["gpu"]] in ("medium", "high")
    assert not any(w["code"] == "low_confidence_plan" for w in answer["warnings"])
