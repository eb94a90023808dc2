"""POST /v1/capacity through the real app and database (SQLite and PostgreSQL) on the shipped
reference catalog: the answer's arithmetic, a reader key, nothing stored, verification, refusals."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from sqlalchemy import func, select

from catalog.db import make_engine, make_session_factory
from catalog.models import PlanRow
from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_auth_health import issue_key

#: "How much chat traffic do 16 H100s hold?" on an 8B model.
SIXTEEN_H100: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpus": 16,
    "workload": {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
}


def body(**changes: Any) -> dict[str, Any]:
    request = copy.deepcopy(SIXTEEN_H100)
    request.update(changes)
    return request


def _plans_stored(url: str) -> int:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return int(session.execute(select(func.count()).select_from(PlanRow)).scalar_one())
    finally:
        engine.dispose()


def test_capacity_is_replicas_times_mu_with_a_reader_key_and_stores_nothing(
    seeded: ApiClient,
    make_client: Any,
    migrated_database_url: str,
) -> None:
    engine = make_engine(migrated_database_url)
    try:
        reader = issue_key(engine, "reader")
    finally:
        engine.dispose()
    strict = make_client(require_auth=True)
    assert_problem(strict.post("/v1/capacity", json=body()), 401)
    response = strict.post("/v1/capacity", json=body(), headers=reader)
    assert response.status_code == 200, response.text
    answer = response.json()
    config = answer["configuration"]
    assert config["gpu"] == "h100-sxm" and config["replicas"] == 16 // config["tp"]
    assert config["gpus_used"] == config["replicas"] * config["tp"] <= 16
    assert answer["max_arrival_rate_rps"] == pytest.approx(config["replicas"] * answer["max_rps_per_replica"])
    assert answer["output_tokens_per_s"] == pytest.approx(answer["max_arrival_rate_rps"] * 200, rel=1e-6)
    assert 0 < answer["utilisation"] < 1 and answer["binding"] in {"ttft", "tpot", "saturation"}
    assert answer["verification"] is None
    curve = answer["curve"]
    assert curve and curve[-1]["arrival_rate_rps"] == pytest.approx(answer["max_rps_per_replica"])
    assert all(p["meets_slo"] for p in curve)
    assert [p["utilisation"] for p in curve] == sorted(p["utilisation"] for p in curve)
    if answer["cost"]["price_usd_per_gpu_hour"] is not None:
        assert answer["cost"]["usd_per_hour"] == pytest.approx(config["gpus_used"] * answer["cost"]["price_usd_per_gpu_hour"])
    assert _plans_stored(migrated_database_url) == 0


def test_pins_are_respected(seeded: ApiClient) -> None:
    pinned = body(tp=2, batch_limit=64, chunk_tokens=2048, precision={"weights": "bf16", "kv_cache": "bf16"})
    response = seeded.post("/v1/capacity", json=pinned)
    assert response.status_code == 200, response.text
    config = response.json()["configuration"]
    assert (config["tp"], config["replicas"], config["batch_limit"], config["chunk_tokens"]) == (2, 8, 64, 2048)
    assert config["precision"] == {"weights": "bf16", "kv_cache": "bf16"}


def test_verify_reports_each_simulated_step_and_ends_where_the_simulator_agrees(seeded: ApiClient) -> None:
    response = seeded.post("/v1/capacity", json=body(gpus=2, verify=True))
    assert response.status_code == 200, response.text
    answer = response.json()
    steps = answer["verification"]
    assert steps and steps[-1]["meets_slo"] and all(not s["meets_slo"] for s in steps[:-1])
    assert steps[0]["arrival_rate_rps"] == pytest.approx(answer["analytic_arrival_rate_rps"])
    for before, after in itertools.pairwise(steps):
        assert after["arrival_rate_rps"] == pytest.approx(before["arrival_rate_rps"] / 1.10)
    assert answer["max_arrival_rate_rps"] == pytest.approx(steps[-1]["arrival_rate_rps"])
    assert steps[-1]["ttft_ms"] <= 1000 and steps[-1]["tpot_ms"] <= 60


def test_an_slo_no_configuration_meets_unloaded_is_a_422_naming_it(seeded: ApiClient) -> None:
    problem = assert_problem(seeded.post("/v1/capacity", json=body(slo={"tpot_ms": 0.01})), 422, "infeasible-plan")
    assert problem["constraint"] == "tpot"


def test_unknown_names_are_404_and_bad_bodies_422(seeded: ApiClient) -> None:
    assert_problem(seeded.post("/v1/capacity", json=body(gpu="no-such-gpu")), 404)
    assert_problem(seeded.post("/v1/capacity", json=body(model="no-such-model")), 404)
    assert_problem(seeded.post("/v1/capacity", json=body(provider="no-such-provider")), 404)
    assert_problem(seeded.post("/v1/capacity", json=body(tp=32)), 422)
    assert_problem(
        seeded.post("/v1/capacity", json=body(workload={"prompt_tokens": 100, "output_tokens": 10, "arrival_rate_rps": 3})), 422
    )
