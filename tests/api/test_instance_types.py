"""Cloud instance types through the real app on the reference catalog: /v1/instance-types listing
and filters, one instance type by provider and name, and admin writes with ETag / If-Match and
problem documents, as /v1/prices does them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, assert_problem

ACME_8X: dict[str, Any] = {
    "provider": "acme",
    "name": "gpu.8x-h100",
    "gpu": "h100-sxm",
    "gpus": 8,
    "nvlink_domain": 8,
    "network_gbit_per_s": 3200,
    "vcpus": 192,
    "ram_gib": 2048,
    "on_demand_usd_per_hour": 40.0,
    "as_of": "2026-11-01",
    "source": "acme price list (test), 2026-11-01",
}


def test_the_reference_instance_types_are_listed_by_provider_and_gpu(seeded: ApiClient) -> None:
    everything = seeded.get("/v1/instance-types", params={"limit": 500}).json()
    assert {"aws", "gcp", "azure"} <= {i["provider"] for i in everything["items"]}
    assert everything["total"] == len(everything["items"]) and everything["limit"] == 500
    aws = seeded.get("/v1/instance-types", params={"provider": "aws"}).json()
    assert [i["name"] for i in aws["items"]] == sorted(i["name"] for i in aws["items"])
    assert all(i["provider"] == "aws" and i["as_of"] and i["source"] and i["version"] == 1 for i in aws["items"])
    mi300x = seeded.get("/v1/instance-types", params={"gpu": "mi300x"}).json()
    assert mi300x["total"] >= 2 and all(i["gpu"] == "mi300x" and i["gpus"] == 8 for i in mi300x["items"])
    page = seeded.get("/v1/instance-types", params={"provider": "lambda", "limit": 2, "offset": 1}).json()
    assert len(page["items"]) == 2 and page["offset"] == 1 and page["total"] > 2
    assert seeded.get("/v1/instance-types", params={"provider": "nobody"}).json()["total"] == 0
    assert_problem(seeded.get("/v1/instance-types", params={"limit": 0}), 422)


def test_one_instance_type_is_read_by_provider_name_and_region(seeded: ApiClient) -> None:
    p5 = seeded.get("/v1/instance-types/aws/p5.48xlarge", params={"region": "us-east-1"})
    assert p5.status_code == 200 and p5.headers["etag"] == '"1"'
    body = p5.json()
    assert (body["gpu"], body["gpus"], body["nvlink_domain"], body["region"]) == ("h100-sxm", 8, 8, "us-east-1")
    assert body["on_demand_usd_per_hour"] > 0
    # p5.48xlarge is only listed in us-east-1: no list price
    assert_problem(seeded.get("/v1/instance-types/aws/p5.48xlarge"), 404, "not-found")
    lambda_8x = seeded.get("/v1/instance-types/lambda/gpu_8x_h100_sxm5").json()
    assert lambda_8x["region"] is None and lambda_8x["on_demand_usd_per_hour"] == pytest.approx(8 * 3.99)


def test_an_instance_type_is_created_read_changed_with_if_match_and_deleted(seeded: ApiClient) -> None:
    assert_problem(seeded.post("/v1/instance-types", json=ACME_8X), 401)
    created = seeded.post("/v1/instance-types", json=ACME_8X, headers=ADMIN_HEADERS)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/instance-types/acme/gpu.8x-h100" and created.headers["etag"] == '"1"'
    assert created.json()["region"] is None and created.json()["reserved_1y_usd_per_hour"] is None
    assert_problem(seeded.post("/v1/instance-types", json=ACME_8X, headers=ADMIN_HEADERS), 409, "already-exists")
    regional = seeded.post("/v1/instance-types", json={**ACME_8X, "region": "eu-west"}, headers=ADMIN_HEADERS)
    assert regional.headers["location"] == "/v1/instance-types/acme/gpu.8x-h100?region=eu-west"

    stale = {**ADMIN_HEADERS, "If-Match": '"7"'}
    assert_problem(seeded.patch("/v1/instance-types/acme/gpu.8x-h100", json={"vcpus": 96}, headers=stale), 412)
    patched = seeded.patch(
        "/v1/instance-types/acme/gpu.8x-h100", json={"on_demand_usd_per_hour": 38.0}, headers={**ADMIN_HEADERS, "If-Match": '"1"'}
    )
    assert patched.status_code == 200 and patched.headers["etag"] == '"2"'
    assert patched.json()["on_demand_usd_per_hour"] == 38.0 and patched.json()["vcpus"] == 192
    replacement = {key: value for key, value in ACME_8X.items() if key not in ("provider", "name", "vcpus")}
    replaced = seeded.put("/v1/instance-types/acme/gpu.8x-h100", json=replacement, headers=ADMIN_HEADERS)
    assert replaced.json()["vcpus"] is None and replaced.json()["version"] == 3

    assert_problem(seeded.delete("/v1/instance-types/acme/gpu.8x-h100", headers=stale), 412)
    assert seeded.delete("/v1/instance-types/acme/gpu.8x-h100", headers=ADMIN_HEADERS).status_code == 204
    assert_problem(seeded.get("/v1/instance-types/acme/gpu.8x-h100"), 404, "not-found")
    assert seeded.get("/v1/instance-types/acme/gpu.8x-h100", params={"region": "eu-west"}).status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpu": "no-such-gpu"}, "gpu"),
        ({"nvlink_domain": 16}, "nvlink_domain"),
        ({"on_demand_usd_per_hour": -1}, "on_demand_usd_per_hour"),
        ({"name": "Standard_ND96isr_H100_v5"}, "name"),
    ],
)
def test_an_impossible_instance_type_is_refused_with_a_422_naming_the_field(seeded: ApiClient, change: dict, field: str) -> None:
    problem = assert_problem(seeded.post("/v1/instance-types", json={**ACME_8X, **change}, headers=ADMIN_HEADERS), 422)
    assert field in [error["field"].split(".")[-1] for error in problem["errors"]]
