"""Batch jobs through the real app on the reference catalog (issue 15 §3): POST /v1/plans with
`workload.kind: batch`, GET and CSV of the stored plan, the what-if sweep over deadlines and job
sizes, and the 422s (no deadline nor budget, an SLO still required for traffic, limits a job does
not take)."""

from __future__ import annotations

import copy
import csv
import io
from typing import Any

import pytest

from api.csv_export import PLAN_CSV_COLUMNS
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields

#: Two million documents summarised by Llama 3.1 70B on H100s within 72 hours.
SUMMARIES: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "workload": {
        "kind": "batch",
        "requests": 2_000_000,
        "prompt_tokens": {"mean": 2000, "p99": 8000},
        "output_tokens": {"mean": 300, "p99": 1200},
        "deadline_h": 72,
    },
    "constraints": {"gpus": ["h100-sxm"]},
}


def job(**workload: Any) -> dict[str, Any]:
    body = copy.deepcopy(SUMMARIES)
    body["workload"].update(workload)
    return body


def test_a_summarisation_job_finishes_by_its_deadline_at_gpu_hours_times_price(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=SUMMARIES, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    batch = plan["batch_job"]
    assert batch["requests"] == 2_000_000
    assert batch["output_tokens_total"] == 2_000_000 * 300
    assert batch["finish_h"] <= 72
    assert batch["deadline_h"] == 72
    price = plan["cost"]["prices"][0]["price_usd_per_hour"]
    assert batch["price_usd_per_gpu_hour"] == price
    assert batch["cost_usd"] == pytest.approx(batch["gpu_hours"] * price, abs=0.01)  # cents
    assert batch["gpus"] == batch["replicas"] * plan["plan"]["tp"] == plan["plan"]["gpus_total"]
    assert batch["usd_per_million_output_tokens"] == pytest.approx(
        batch["cost_usd"] / 600, abs=0.005
    )  # per 1e6 of 6e8 tokens, in cents
    assert plan["cost"]["usd_per_million_output_tokens"] == batch["usd_per_million_output_tokens"]
    assert plan["cost"]["usd_per_hour"] == pytest.approx(batch["gpus"] * price, abs=0.01)
    # verified: the simulated rate is reported, and the job is sized with the lower of the two
    assert batch["verification"] is not None
    assert batch["verified_throughput_rps"] == batch["verification"]["completion_rate_rps"]
    assert batch["throughput_rps_per_replica"] == pytest.approx(
        min(batch["analytic_throughput_rps"], batch["verified_throughput_rps"]), rel=1e-5
    )
    assert batch["verification"]["makespan_s"] <= batch["verification"]["predicted_makespan_s"]
    assert (plan["predicted"], plan["justification"], plan["verification"]) == (None, None, None)
    # stored like any plan
    again = seeded.get(response.headers["Location"], headers=admin)
    assert again.status_code == 200
    assert again.json() == plan


def test_a_tighter_deadline_never_costs_less_per_job(seeded: ApiClient, admin: dict[str, str]) -> None:
    costs, finishes = [], []
    for hours in (72, 12, 2):
        batch = seeded.post("/v1/plans", json={**job(deadline_h=hours), "verify": False, "store": False}, headers=admin).json()[
            "batch_job"
        ]
        assert batch["finish_h"] <= hours
        costs.append(batch["cost_usd"])
        finishes.append(batch["finish_h"])
    assert costs == sorted(costs)
    assert finishes == sorted(finishes, reverse=True)


def test_total_tokens_sizes_the_job_and_a_gpu_budget_alone_plans(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = job(requests=None, total_tokens=2300 * 1000, deadline_h=None)
    del body["workload"]["requests"]
    body["constraints"]["max_gpus"] = 16
    response = seeded.post("/v1/plans", json={**body, "verify": False, "store": False}, headers=admin)
    assert response.status_code == 200, response.text
    batch = response.json()["batch_job"]
    assert batch["requests"] == 1000  # ⌈2.3e6 / (2000 + 300)⌉
    assert batch["binding"] == "max_gpus"
    assert batch["gpus"] <= 16
    assert batch["deadline_h"] is None


def test_an_impossible_deadline_within_the_budget_is_a_422_with_relaxations(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = {**job(deadline_h=1), "verify": False, "store": False}
    body["constraints"]["max_gpus"] = 8
    problem = assert_problem(seeded.post("/v1/plans", json=body, headers=admin), 422, "infeasible-plan")
    assert problem["constraint"] == "deadline_h"
    relaxed = {r["constraint"]: r["value"] for r in problem["relaxations"]}
    assert relaxed["workload.deadline_h"] > 1 and relaxed["constraints.max_gpus"] > 8
    body["constraints"]["max_gpus"] = relaxed["constraints.max_gpus"]
    assert seeded.post("/v1/plans", json=body, headers=admin).status_code == 200


def test_request_validation(seeded: ApiClient, admin: dict[str, str]) -> None:
    no_limit = job(deadline_h=None)
    problem = assert_problem(seeded.post("/v1/plans", json=no_limit, headers=admin), 422)
    assert "deadline_h" in problem["detail"]
    both_sizes = job(total_tokens=1000)
    assert "workload" in bad_fields(assert_problem(seeded.post("/v1/plans", json=both_sizes, headers=admin), 422))
    named = {**SUMMARIES, "name": "nightly"}
    assert "not a deployment" in assert_problem(seeded.post("/v1/plans", json=named, headers=admin), 422)["detail"]
    budget = copy.deepcopy(SUMMARIES)
    budget["constraints"]["budget_usd_per_hour"] = 100
    assert "budget_usd_per_hour" in assert_problem(seeded.post("/v1/plans", json=budget, headers=admin), 422)["detail"]
    # traffic without an SLO answers as it always has: slo is a required field
    traffic = {
        "model": "llama-3.1-8b",
        "workload": {"arrival_rate_rps": 5, "prompt_tokens": 500, "output_tokens": 100},
    }
    errors = bad_fields(assert_problem(seeded.post("/v1/plans", json=traffic, headers=admin), 422))
    assert errors == {"slo": "Field required"}


def test_the_plan_csv_carries_the_job_columns(seeded: ApiClient, admin: dict[str, str]) -> None:
    plan = seeded.post("/v1/plans", json={**SUMMARIES, "verify": False}, headers=admin).json()
    response = seeded.get(f"/v1/plans/{plan['id']}", params={"format": "csv"}, headers=admin)
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 1 and list(rows[0]) == list(PLAN_CSV_COLUMNS)
    row, batch = rows[0], plan["batch_job"]
    assert row["workload_kind"] == "batch"
    assert int(row["job_requests"]) == 2_000_000
    assert float(row["job_finish_h"]) == batch["finish_h"]
    assert float(row["job_cost_usd"]) == batch["cost_usd"]
    assert float(row["job_gpu_hours"]) == batch["gpu_hours"]
    assert row["arrival_rate_rps"] == row["ttft_p99_ms"] == row["slo_ttft_ms"] == ""
    assert row["job_verified_throughput_rps"] == ""  # verify false


def _job_sweep(**axes: Any) -> dict[str, Any]:
    workload = {k: v for k, v in SUMMARIES["workload"].items() if k != "deadline_h"}
    return {"model": SUMMARIES["model"], "workload": workload, "constraints": {"gpus": ["h100-sxm"]}, "sweep": axes}


def test_what_if_sweeps_a_jobs_deadline_as_single_plans_would(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/what-if", json=_job_sweep(deadlines_h=[72, 12, 2]), headers=admin)
    assert response.status_code == 200, response.text
    points = response.json()["points"]
    assert [p["job_deadline_h"] for p in points] == [72, 12, 2]
    assert all(p["feasible"] and p["arrival_rate_rps"] is None and p["job_requests"] == 2_000_000 for p in points)
    assert [p["job_cost_usd"] for p in points] == sorted(p["job_cost_usd"] for p in points)  # tighter never cheaper
    for point in points:
        assert point["job_finish_h"] <= point["job_deadline_h"]
        single = seeded.post(
            "/v1/plans", json={**job(deadline_h=point["job_deadline_h"]), "verify": False, "store": False}, headers=admin
        ).json()["batch_job"]
        assert (point["replicas"], point["job_cost_usd"], point["job_finish_h"]) == (
            single["replicas"], single["cost_usd"], single["finish_h"]
        )  # fmt: skip
    by_size = _job_sweep(job_requests=[500_000, 2_000_000])
    by_size["workload"]["deadline_h"] = 72
    as_csv = seeded.post("/v1/what-if", params={"format": "csv"}, json=by_size, headers=admin)
    assert as_csv.status_code == 200, as_csv.text
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [int(r["job_requests"]) for r in rows] == [500_000, 2_000_000]
    assert all(r["arrival_rate_rps"] == "" and float(r["job_cost_usd"]) > 0 for r in rows)


def test_what_if_job_axes_need_a_job(seeded: ApiClient, admin: dict[str, str]) -> None:
    traffic = {"model": "llama-3.1-8b", "workload": {"prompt_tokens": 500, "output_tokens": 100},
               "slo": {"ttft_ms": 1000}, "sweep": {"deadlines_h": [1, 2]}}  # fmt: skip
    assert_problem(seeded.post("/v1/what-if", json=traffic, headers=admin), 422)
    rates_for_a_job = _job_sweep(arrival_rates_rps=[1, 2])
    assert_problem(seeded.post("/v1/what-if", json=rates_for_a_job, headers=admin), 422)


def test_a_batch_job_refuses_speculation_on_saying_why(seeded: ApiClient, admin: dict[str, str]) -> None:
    """Batch-job sizing has no speculative step model: `on` is a 422 naming why; `auto` (or off) plans as before."""
    body = {**SUMMARIES, "constraints": {**SUMMARIES["constraints"], "speculative": "on"}}
    refused = seeded.post("/v1/plans", json=body, headers=admin)
    assert refused.status_code == 422, refused.text
    assert "a batch job does not speculate yet" in refused.text
    auto = {**SUMMARIES, "constraints": {**SUMMARIES["constraints"], "speculative": "auto"}, "verify": False, "store": False}
    assert seeded.post("/v1/plans", json=auto, headers=admin).status_code == 200  # not stored: 200
