"""Confidence in the open: a plan or fleet line on a low-graded calibration carries a warning (JSON
and CSV), every row names its GPU's grade, and `min_confidence` leaves lower-graded GPUs out."""

from __future__ import annotations

import copy
import csv
import io
from typing import Any

from tests.api.client import ApiClient
from tests.api.test_csv_costs import FLEET


def fleet(gpus: list[str], **constraints: Any) -> dict[str, Any]:
    body = copy.deepcopy(FLEET)
    body["constraints"] = {**body["constraints"], "gpus": gpus, **constraints}
    return body


def test_a_schedule_on_a_low_graded_gpu_warns_in_json_and_csv(seeded: ApiClient, admin: dict[str, str]) -> None:
    """l40s is fitted on one source and one model, its held-out error 21 % > 20 %: graded low."""
    created = seeded.post("/v1/fleet-plans", json=fleet(["l40s"]), headers=admin)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert [(w["code"], w["gpu"], w["grade"]) for w in plan["warnings"]] == [("low_confidence_plan", "l40s", "low")]
    assert {row["calibration_grade"] for period in plan["periods"] for row in period["workloads"]} == {"low"}
    rows = list(csv.DictReader(io.StringIO(seeded.get(created.headers["location"], params={"format": "csv"}).text)))
    assert rows and all(row["calibration_grade"] == "low" and "graded low" in row["warning"] for row in rows)


def test_a_schedule_on_a_medium_graded_gpu_does_not_warn(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = seeded.post("/v1/fleet-plans", json=fleet(["h100-sxm"]), headers=admin).json()
    assert plan["warnings"] == []
    assert {row["calibration_grade"] for period in plan["periods"] for row in period["workloads"]} == {"medium"}


def test_min_confidence_leaves_lower_graded_gpus_out_of_a_fleet(seeded: ApiClient, admin: dict[str, str]) -> None:
    created = seeded.post("/v1/fleet-plans", json=fleet(["h100-sxm", "l40s"], min_confidence="medium"), headers=admin)
    assert created.status_code == 201, created.text
    plan = created.json()
    assert any(note.startswith("l40s left out: its calibration is graded low") for note in plan["notes"])
    assert {row["gpu"] for period in plan["periods"] for row in period["workloads"]} == {"h100-sxm"}
    assert "l40s" not in plan["prices"]


def test_an_unknown_grade_is_refused(seeded: ApiClient, admin: dict[str, str]) -> None:
    assert seeded.post("/v1/fleet-plans", json=fleet(["h100-sxm"], min_confidence="certain"), headers=admin).status_code == 422
