"""POST /v1/what-if through the real app on the reference catalog: the sweep's table against
single plans, its axes (rate list and range, SLO values, GPU types each alone), infeasible points,
the bound on its size, CSV, and the OpenAPI declaration."""

from __future__ import annotations

import copy
import csv
import io
from typing import Any

import pytest

from api.schemas.what_if import MAX_WHAT_IF_POINTS, WHAT_IF_CSV_COLUMNS
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields

SHAPE = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
#: Chat on an 8B model over H100s only, so each point plans in well under a second.
SWEEP: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": SHAPE,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "sweep": {"arrival_rates_rps": [4, 40]},
}


def sweep(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(SWEEP)
    body["sweep"].update(changes)
    return body


def test_each_point_is_the_plan_post_plans_would_make_at_that_rate(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/what-if", json=sweep(), headers=admin)
    assert response.status_code == 200, response.text
    table = response.json()
    assert (table["model"], table["currency"], table["hours_per_month"], table["verify"]) == ("llama-3.1-8b", "USD", 730, False)
    assert "not verified in the simulator" in table["method"]
    assert (table["points_total"], table["points_feasible"]) == (2, 2)
    assert [p["point"] for p in table["points"]] == [1, 2]
    assert [p["arrival_rate_rps"] for p in table["points"]] == [4, 40]

    for point in table["points"]:
        plan = seeded.post(
            "/v1/plans",
            json={**{k: SWEEP[k] for k in ("model", "slo", "constraints")}, "verify": False,
                  "workload": {**SHAPE, "arrival_rate_rps": point["arrival_rate_rps"]}},
            headers=admin,
        ).json()  # fmt: skip
        decided = plan["plan"]
        assert (
            point["gpu"],
            point["tp"],
            point["replicas"],
            point["gpus_total"],
            point["batch_limit"],
            point["chunk_tokens"],
        ) == (
            decided["gpu"],
            decided["tp"],
            decided["replicas"],
            decided["gpus_total"],
            decided["batch_limit"],
            decided["chunk_tokens"],
        )
        assert (point["weights_precision"], point["kv_cache_precision"]) == (
            decided["precision"]["weights"],
            decided["precision"]["kv_cache"],
        )
        assert point["cost_usd_per_hour"] == pytest.approx(plan["cost"]["usd_per_hour"])
        assert (
            point["cost_usd_per_month"]
            == pytest.approx(plan["cost"]["usd_per_month"])
            == pytest.approx(730 * point["cost_usd_per_hour"])
        )
        assert point["cost_usd_per_million_output_tokens"] == pytest.approx(plan["cost"]["usd_per_million_output_tokens"])
        assert point["target_rho"] == pytest.approx(decided["target_rho"])
        assert point["tpot_p99_ms"] == pytest.approx(plan["predicted"]["tpot_ms"]["p99"]) and point["tpot_p99_ms"] <= 60
        assert point["ttft_p99_ms"] <= 1000
        assert (point["feasible"], point["verified"], point["currency"], point["gpu_allowed"]) == (True, False, "USD", None)
        assert point["infeasible_reason"] is None and point["plan_ms"] > 0
    low, high = table["points"]
    assert high["cost_usd_per_hour"] >= low["cost_usd_per_hour"]  # ten times the traffic never costs less


def test_slo_values_and_gpu_types_are_axes_and_an_impossible_point_says_why(seeded: ApiClient, admin: dict[str, str]) -> None:
    """0.2 ms per output token is below the time one decode step takes just to read an 8B model's
    weights once: at best fp8 (8 GB) over 8 H100s, 8e9 B / (8 × 3.35e12 B/s) = 0.30 ms. Those points
    are infeasible on any efficiency; the sweep still answers every point."""
    body = sweep(arrival_rates_rps=[10], slo={"metric": "tpot_ms", "values": [0.2, 20, 60]}, gpus=["h100-sxm", "a100-80gb-sxm"])
    table = seeded.post("/v1/what-if", json=body, headers=admin).json()
    points = table["points"]
    assert [(p["gpu_allowed"], p["slo_tpot_ms"]) for p in points] == [
        ("h100-sxm", 0.2),
        ("h100-sxm", 20),
        ("h100-sxm", 60),
        ("a100-80gb-sxm", 0.2),
        ("a100-80gb-sxm", 20),
        ("a100-80gb-sxm", 60),
    ]
    assert {p["slo_ttft_ms"] for p in points} == {1000}  # the other target stays the request's
    assert (table["points_total"], table["points_feasible"]) == (6, 4)
    for p in points:
        if p["slo_tpot_ms"] == 0.2:
            assert p["feasible"] is False
            assert p["infeasible_problem"] == "urn:headroom:problem:infeasible-plan"
            assert p["infeasible_constraint"] == "tpot_ms" or "tpot" in p["infeasible_reason"]
            assert (p["gpu"], p["cost_usd_per_hour"], p["replicas"], p["currency"]) == (None, None, None, "USD")
        else:
            assert p["feasible"] is True and p["gpu"] == p["gpu_allowed"]
            assert p["tpot_p99_ms"] <= p["slo_tpot_ms"]
    for gpu in ("h100-sxm", "a100-80gb-sxm"):
        strict, loose = (p["cost_usd_per_hour"] for p in points if p["gpu_allowed"] == gpu and p["feasible"])
        assert strict >= loose  # a looser SLO never costs more


def test_a_rate_range_spaces_its_rates_and_ends_exactly(seeded: ApiClient, admin: dict[str, str]) -> None:
    linear = seeded.post(
        "/v1/what-if",
        json=sweep(arrival_rates_rps=None, arrival_rate_range={"start_rps": 2, "stop_rps": 8, "steps": 4}),
        headers=admin,
    ).json()
    assert [p["arrival_rate_rps"] for p in linear["points"]] == pytest.approx([2, 4, 6, 8])
    log = seeded.post("/v1/what-if", json=sweep(arrival_rates_rps=None,
                                                arrival_rate_range={"start_rps": 1, "stop_rps": 100, "steps": 3, "spacing": "log"}),
                      headers=admin).json()  # fmt: skip
    assert [p["arrival_rate_rps"] for p in log["points"]] == pytest.approx([1, 10, 100])
    assert log["points"][-1]["arrival_rate_rps"] == 100


def test_the_sweep_as_csv_has_the_points_as_rows(seeded: ApiClient, admin: dict[str, str]) -> None:
    body = sweep(arrival_rates_rps=[5], slo={"metric": "tpot_ms", "values": [0.2, 60]})
    as_json = seeded.post("/v1/what-if", json=body, headers=admin).json()
    response = seeded.post("/v1/what-if", json=body, headers={**admin, "Accept": "text/csv"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == 'attachment; filename="what-if.csv"'
    text = response.content.decode()
    assert text.splitlines()[0] == ",".join(WHAT_IF_CSV_COLUMNS)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [r["point"] for r in rows] == ["1", "2"]
    infeasible, feasible = rows
    assert (infeasible["feasible"], infeasible["gpu"], infeasible["cost_usd_per_hour"], infeasible["currency"]) == (
        "false",
        "",
        "",
        "USD",
    )
    assert infeasible["infeasible_reason"] == as_json["points"][0]["infeasible_reason"]
    assert feasible["feasible"] == "true" and feasible["gpu"] == "h100-sxm"
    assert float(feasible["cost_usd_per_hour"]) == as_json["points"][1]["cost_usd_per_hour"]
    assert float(feasible["cost_usd_per_month"]) == as_json["points"][1]["cost_usd_per_month"]
    assert (
        seeded.post("/v1/what-if", json=body, params={"format": "csv"}, headers=admin).content.splitlines()[0]
        == text.encode().splitlines()[0]
    )


def test_the_sweep_is_bounded_and_its_axes_checked(seeded: ApiClient, admin: dict[str, str]) -> None:
    too_many = sweep(
        arrival_rates_rps=[1 + i for i in range(10)], slo={"metric": "tpot_ms", "values": [20, 40, 60]}, gpus=["h100-sxm", "l4"]
    )
    body = assert_problem(seeded.post("/v1/what-if", json=too_many, headers=admin), 422, "invalid-request")
    assert f"60 points (rates × SLO values × GPU types); at most {MAX_WHAT_IF_POINTS}" in " ".join(bad_fields(body).values())
    assert_problem(
        seeded.post("/v1/what-if", json=sweep(arrival_rates_rps=list(range(1, 52))), headers=admin), 422, "invalid-request"
    )
    neither = assert_problem(
        seeded.post("/v1/what-if", json=sweep(arrival_rates_rps=None), headers=admin), 422, "invalid-request"
    )
    assert "exactly one of arrival_rates_rps and arrival_rate_range" in " ".join(bad_fields(neither).values())
    assert_problem(seeded.post("/v1/what-if", json=sweep(arrival_rates_rps=[0]), headers=admin), 422, "invalid-request")
    backwards = sweep(arrival_rates_rps=None, arrival_rate_range={"start_rps": 8, "stop_rps": 2, "steps": 3})
    assert_problem(seeded.post("/v1/what-if", json=backwards, headers=admin), 422, "invalid-request")
    assert_problem(seeded.post("/v1/what-if", json=sweep(gpus=["no-such-gpu"]), headers=admin), 404, "not-found")
    assert_problem(seeded.post("/v1/what-if", json=sweep()), 401, "unauthenticated")


def test_the_openapi_document_declares_the_sweep_and_its_csv(client: ApiClient) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/what-if"]["post"]
    assert operation["operationId"] == "what_if_sweep"
    content = operation["responses"]["200"]["content"]
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/WhatIfResponse"}
    assert content["text/csv"]["example"] == ",".join(WHAT_IF_CSV_COLUMNS) + "\r\n"
    assert {"WhatIfRequest", "WhatIfAxes", "WhatIfPoint", "RateRange", "SloSweep"} <= document["components"]["schemas"].keys()


def test_a_sweep_past_the_request_timeout_is_a_503_and_counts_in_metrics(
    make_client: Any, migrated_database_url: str, admin: dict[str, str]
) -> None:
    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    hurried = make_client(request_timeout_s=0.05)
    body = sweep(arrival_rate_range={"start_rps": 1, "stop_rps": 50, "steps": 50}, arrival_rates_rps=None, gpus=None)
    body["constraints"] = {}  # every GPU type: far more than 50 ms of planning
    problem = assert_problem(hurried.post("/v1/what-if", json=body, headers=admin), 503, "request-timeout")
    assert problem["timeout_s"] == 0.05

    patient = make_client()
    assert patient.post("/v1/what-if", json=sweep(arrival_rates_rps=[4]), headers=admin).status_code == 200
    metrics = patient.get("/metrics").text
    assert any(line.startswith("headroom_plans_computed_total") and not line.endswith(" 0") for line in metrics.splitlines()), (
        metrics
    )
