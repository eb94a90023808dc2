"""POST /v1/capacity with the hardware as whole instances (`instances` + `instance_type` at a
provider) and with constraints.pin, through the real app on the reference catalog. A replica never
straddles two instances: replicas = instances × ⌊GPUs per instance / tp⌋."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import assert_problem, bad_fields
from tests.api.test_capacity import body

P5_USD_PER_HOUR = 55.04  # aws p5.48xlarge: 8 × H100 SXM in one NVLink domain (catalog/data/instance_types.json)


def _instances(**changes: Any) -> dict[str, Any]:
    request = body(**changes)
    del request["gpus"], request["gpu"]
    return {"instances": 2, "instance_type": "p5.48xlarge", "provider": "aws", **request}


def test_two_p5_instances_are_sixteen_gpus_and_cost_two_instances(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/capacity", json=_instances(), headers=admin)
    assert response.status_code == 200, response.text
    answer = response.json()
    config = answer["configuration"]
    assert (config["gpu"], config["instance_type"], config["instances"], config["gpus_per_instance"]) == (
        "h100-sxm",
        "p5.48xlarge",
        2,
        8,
    )
    assert config["replicas"] == 2 * (8 // config["tp"])
    assert config["gpus_used"] == config["replicas"] * config["tp"]
    assert config["stranded_gpus"] == 16 - config["gpus_used"]
    assert answer["cost"]["usd_per_hour"] == pytest.approx(2 * P5_USD_PER_HOUR)
    same_gpus = seeded.post("/v1/capacity", json=body(gpus=16), headers=admin).json()
    assert answer["max_arrival_rate_rps"] == pytest.approx(same_gpus["max_arrival_rate_rps"])  # 8 | 16: the same replicas


def test_pinned_tp_and_replicas_on_instances(seeded: ApiClient, admin: dict[str, str]) -> None:
    request = _instances(constraints={"pin": {"tp": 2, "replicas": 5, "chunk_tokens": None, "engine": "vllm"}})
    response = seeded.post("/v1/capacity", json=request, headers=admin)
    assert response.status_code == 200, response.text
    config = response.json()["configuration"]
    # 2 instances hold 2 × ⌊8/2⌋ = 8 tp-2 replicas; 5 pinned: 10 GPUs used, 6 idle
    assert (config["tp"], config["replicas"], config["gpus_used"], config["stranded_gpus"]) == (2, 5, 10, 6)
    assert config["chunk_tokens"] is None and config["engine"] == "vllm"
    assert response.json()["max_arrival_rate_rps"] == pytest.approx(5 * response.json()["max_rps_per_replica"])


def test_refusals_name_the_field(seeded: ApiClient, admin: dict[str, str]) -> None:
    both = body()
    both.update(instances=1, instance_type="p5.48xlarge", provider="aws")
    fields = bad_fields(assert_problem(seeded.post("/v1/capacity", json=both, headers=admin), 422))
    assert any("exactly one of gpus and instances" in message for message in fields.values())
    unknown = _instances(instance_type="p9.huge")
    assert_problem(seeded.post("/v1/capacity", json=unknown, headers=admin), 404)
    # a pipeline replica over several instances is not priced (GPU mode takes pp: tests/api/test_capacity_pipeline.py)
    pp = assert_problem(seeded.post("/v1/capacity", json=_instances(constraints={"pin": {"pp": 4}}), headers=admin), 422)
    assert pp["constraint"] == "pin.pp" and "instances" in pp["detail"]
    clash = assert_problem(seeded.post("/v1/capacity", json=body(tp=1, constraints={"pin": {"tp": 2}}), headers=admin), 422)
    assert any("contradicts tp" in message for message in bad_fields(clash).values())
    too_many = assert_problem(
        seeded.post("/v1/capacity", json=body(gpus=4, constraints={"pin": {"tp": 2, "replicas": 3}}), headers=admin), 422
    )
    assert too_many["constraint"] == "pin.replicas"
