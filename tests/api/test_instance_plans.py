"""constraints.unit instance on POST /v1/plans through the real app on the reference catalog: the
plan is bought as whole instances of the provider's instance types (AWS p5.48xlarge for the H100
SXM: 8 GPUs, one NVLink domain, $55.04/h in catalog/data/instance_types.json), costed per
instance-hour, with `plan.instances`; a provider without instance types is a 422 naming
constraints.unit."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem
from tests.api.test_plans import body

P5_USD_PER_HOUR = 55.04  # aws p5.48xlarge, catalog/data/instance_types.json


def _instance_plan(client: ApiClient, headers: dict[str, str], **changes: Any) -> Any:
    request = body(**{"constraints__gpus": ["h100-sxm"], **changes})
    request["constraints"]["unit"] = "instance"
    return client.post("/v1/plans", json={**request, "provider": "aws", "store": False}, headers=headers)


def test_a_plan_in_p5_instances_costs_whole_instances(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = _instance_plan(seeded, admin, workload__arrival_rate_rps=120)
    assert response.status_code == 200, response.text
    answer = response.json()
    plan = answer["plan"]
    per_instance = 8 // plan["tp"]  # a replica never straddles two 8-GPU instances
    count = math.ceil(plan["replicas"] / per_instance)
    [instances] = plan["instances"]
    assert instances == {
        "provider": "aws",
        "instance_type": "p5.48xlarge",
        "count": count,
        "gpus_per_instance": 8,
        "gpus_used": plan["replicas"] * plan["tp"],
        "stranded_gpus": count * 8 - plan["replicas"] * plan["tp"],
        "usd_per_instance_hour": P5_USD_PER_HOUR,
        "usd_per_hour": pytest.approx(count * P5_USD_PER_HOUR),
    }
    assert answer["cost"]["usd_per_hour"] == pytest.approx(count * P5_USD_PER_HOUR)


def test_pinned_tp2_five_replicas_take_two_instances_and_strand_six(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body(constraints__gpus=["h100-sxm"])
    request["constraints"].update(unit="instance", pin={"tp": 2, "replicas": 5})
    response = seeded.post("/v1/plans", json={**request, "provider": "aws", "store": False}, headers=admin)
    assert response.status_code == 200, response.text
    [instances] = response.json()["plan"]["instances"]
    # 5 replicas × tp 2 = 10 GPUs; 4 replicas per p5.48xlarge → ⌈5/4⌉ = 2 instances, 16 − 10 = 6 stranded
    assert (instances["count"], instances["gpus_used"], instances["stranded_gpus"]) == (2, 10, 6)
    assert response.json()["cost"]["usd_per_hour"] == pytest.approx(2 * P5_USD_PER_HOUR)


def test_instance_mode_at_a_provider_without_instance_types_names_the_unit(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = body()
    request["constraints"]["unit"] = "instance"
    problem = assert_problem(
        seeded.post("/v1/plans", json={**request, "provider": "runpod", "store": False}, headers=admin),
        422,
        "invalid-planner-input",
    )
    assert problem["field"] == "constraints.unit"
    assert "aws" in problem["providers_with_instance_types"] and "aws" in problem["detail"]


def test_gpus_without_an_instance_type_are_left_out_with_a_note(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = _instance_plan(seeded, admin, constraints__gpus=["h100-sxm", "a100-80gb-sxm"])
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["plan"]["gpu"] == "h100-sxm"
    assert any("a100-80gb-sxm" in note and "no instance type" in note for note in answer["cost"]["notes"])


def test_gpu_mode_stays_the_default(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json={**body(), "store": False}, headers=admin)
    assert response.status_code == 200
    assert response.json()["plan"]["instances"] is None
