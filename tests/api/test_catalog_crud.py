"""CRUD, pagination, filters and ETag/If-Match on /v1/gpus, /v1/models, /v1/quantizations,
through the real app on a real migrated database (SQLite and PostgreSQL)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.api.client import ApiClient
from tests.api.conftest import RECORDS, assert_problem

#: A member each resource can change, and a valid new value for it.
CHANGES = {"gpus": ("memory_gb", 94), "models": ("max_context_tokens", 8192), "quantizations": ("name", "AWQ int4")}


def stored_fields(body: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in body.items() if key not in ("version", "created_at", "updated_at")}


@pytest.mark.parametrize("plural", RECORDS)
def test_create_get_list_replace_update_delete(client: ApiClient, admin: dict[str, str], plural: str) -> None:
    record = copy.deepcopy(RECORDS[plural])
    slug = record["slug"]

    created = client.post(f"/v1/{plural}", json=record, headers=admin)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"/v1/{plural}/{slug}"
    assert created.headers["etag"] == '"1"'
    body = created.json()
    assert body["version"] == 1
    assert stored_fields(body) == record

    fetched = client.get(f"/v1/{plural}/{slug}")
    assert fetched.status_code == 200
    assert fetched.json() == body
    assert fetched.headers["etag"] == '"1"'

    listed = client.get(f"/v1/{plural}").json()
    assert listed["total"] == 1
    assert listed["items"] == [body]

    member, value = CHANGES[plural]
    replacement = {key: val for key, val in record.items() if key != "slug"} | {member: value}
    replaced = client.put(f"/v1/{plural}/{slug}", json=replacement, headers=admin)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()[member] == value
    assert replaced.headers["etag"] == '"2"'

    patched = client.patch(f"/v1/{plural}/{slug}", json={"source": "patched"}, headers=admin)
    assert patched.status_code == 200, patched.text
    assert patched.json()["source"] == "patched"
    assert patched.json()[member] == value  # members not sent stay
    assert patched.json()["version"] == 3

    deleted = client.delete(f"/v1/{plural}/{slug}", headers=admin)
    assert deleted.status_code == 204
    assert deleted.content == b""
    assert_problem(client.get(f"/v1/{plural}/{slug}"), 404, "not-found")
    assert client.get(f"/v1/{plural}").json()["total"] == 0


def test_put_replaces_every_member(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    """PUT is a full replacement: an optional member left out is cleared, not kept."""
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    replacement = {key: value for key, value in gpu_record.items() if key not in ("slug", "price_usd_per_hour")}
    body = client.put("/v1/gpus/h100-sxm", json=replacement, headers=admin).json()
    assert body["price_usd_per_hour"] is None
    assert body["memory_gb"] == 80


def test_patch_replaces_nested_block_whole_and_null_clears(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]
) -> None:
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    new_price = {"on_demand": 2.5, "as_of": "2026-11-01"}
    body = client.patch("/v1/gpus/h100-sxm", json={"price_usd_per_hour": new_price}, headers=admin).json()
    assert body["price_usd_per_hour"] == {"on_demand": 2.5, "reserved_1y": None, "as_of": "2026-11-01", "source": None}
    body = client.patch("/v1/gpus/h100-sxm", json={"interconnect_latency_us": None}, headers=admin).json()
    assert body["interconnect_latency_us"] is None
    assert body["price_usd_per_hour"]["on_demand"] == 2.5


def _gpu(slug: str, vendor: str, architecture: str) -> dict[str, Any]:
    return RECORDS["gpus"] | {"slug": slug, "vendor": vendor, "architecture": architecture}


def test_pagination_and_filters(client: ApiClient, admin: dict[str, str]) -> None:
    for record in (
        _gpu("a100-80gb", "nvidia", "ampere"),
        _gpu("h100-sxm", "nvidia", "hopper"),
        _gpu("h200", "nvidia", "hopper"),
        _gpu("mi300x", "amd", "cdna3"),
    ):
        assert client.post("/v1/gpus", json=record, headers=admin).status_code == 201

    first = client.get("/v1/gpus", params={"limit": 3}).json()
    assert [item["slug"] for item in first["items"]] == ["a100-80gb", "h100-sxm", "h200"]
    assert (first["total"], first["limit"], first["offset"]) == (4, 3, 0)
    second = client.get("/v1/gpus", params={"limit": 3, "offset": 3}).json()
    assert [item["slug"] for item in second["items"]] == ["mi300x"]
    assert second["total"] == 4
    beyond = client.get("/v1/gpus", params={"offset": 10}).json()
    assert (beyond["items"], beyond["total"]) == ([], 4)

    nvidia = client.get("/v1/gpus", params={"vendor": "nvidia"}).json()
    assert nvidia["total"] == 3
    hopper = client.get("/v1/gpus", params={"architecture": "hopper", "limit": 1}).json()
    assert (hopper["total"], [item["slug"] for item in hopper["items"]]) == (2, ["h100-sxm"])
    assert client.get("/v1/gpus", params={"vendor": "amd", "architecture": "hopper"}).json()["total"] == 0


def test_model_and_quantization_filters(
    client: ApiClient, admin: dict[str, str], model_record: dict[str, Any], quantization_record: dict[str, Any]
) -> None:
    mixtral = model_record | {
        "slug": "mixtral-8x7b",
        "params_total": 46_700_000_000,
        "params_active": 12_900_000_000,
        "layers": 32,
        "hidden_size": 4096,
        "attention_heads": 32,
        "intermediate_size": 14336,
        "moe": {"experts": 8, "experts_per_token": 2, "shared_experts": 0, "expert_params": 176_160_768, "moe_layers": 32},
    }
    for record in (model_record, mixtral):
        assert client.post("/v1/models", json=record, headers=admin).status_code == 201, record["slug"]
    moe_only = client.get("/v1/models", params={"moe": "true"}).json()
    assert [item["slug"] for item in moe_only["items"]] == ["mixtral-8x7b"]
    assert moe_only["items"][0]["moe"]["experts_per_token"] == 2
    assert client.get("/v1/models", params={"moe": "false"}).json()["items"][0]["slug"] == "llama-2-70b"

    fp8 = quantization_record | {"slug": "fp8", "weight_bytes_per_param": 1, "element_bytes": 1, "compute_dtype": "fp8"}
    for record in (quantization_record, fp8):
        assert client.post("/v1/quantizations", json=record, headers=admin).status_code == 201
    listed = client.get("/v1/quantizations", params={"compute_dtype": "fp8"}).json()
    assert (listed["total"], listed["items"][0]["slug"]) == (1, "fp8")


def test_if_match_protects_against_lost_updates(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    etag = client.get("/v1/gpus/h100-sxm").headers["etag"]
    first = client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 81}, headers=admin | {"If-Match": etag})
    assert first.status_code == 200
    assert first.headers["etag"] == '"2"'

    # A second writer still holding the old ETag is refused and changes nothing.
    stale = client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 99}, headers=admin | {"If-Match": etag})
    body = assert_problem(stale, 412, "version-conflict")
    assert (body["expected_version"], body["current_version"]) == (1, 2)
    stale_put = client.put(
        "/v1/gpus/h100-sxm", json={k: v for k, v in gpu_record.items() if k != "slug"}, headers=admin | {"If-Match": etag}
    )
    assert_problem(stale_put, 412, "version-conflict")
    assert_problem(client.delete("/v1/gpus/h100-sxm", headers=admin | {"If-Match": etag}), 412, "version-conflict")
    assert client.get("/v1/gpus/h100-sxm").json()["memory_gb"] == 81

    assert client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 82}, headers=admin | {"If-Match": "*"}).status_code == 200
    assert client.delete("/v1/gpus/h100-sxm", headers=admin | {"If-Match": '"3"'}).status_code == 204


def test_malformed_if_match_is_a_400(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    body = assert_problem(
        client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 81}, headers=admin | {"If-Match": "three"}), 400, "malformed-header"
    )
    assert "If-Match" in body["detail"]
    assert client.get("/v1/gpus/h100-sxm").json()["version"] == 1


def test_reads_with_require_auth(make_client: Any, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    client = make_client(require_auth=True)
    assert_problem(client.get("/v1/gpus"), 401, "unauthenticated")
    assert client.post("/v1/gpus", json=gpu_record, headers=admin).status_code == 201
    assert client.get("/v1/gpus", headers=admin).json()["total"] == 1


def test_gpu_efficiency_overlap_defaults_to_max_and_is_range_checked(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]
) -> None:
    """`efficiency.memory_compute_overlap`: omitted = 1 (max of memory and compute time), stored when given, [0, 1]."""
    body = client.post("/v1/gpus", json=gpu_record, headers=admin).json()
    assert body["efficiency"]["memory_compute_overlap"] == 1.0
    efficiency = {**gpu_record["efficiency"], "memory_compute_overlap": 0.35}
    body = client.patch("/v1/gpus/h100-sxm", json={"efficiency": efficiency}, headers=admin).json()
    assert body["efficiency"]["memory_compute_overlap"] == 0.35
    assert client.get("/v1/gpus/h100-sxm").json()["efficiency"]["memory_compute_overlap"] == 0.35
    bad = client.patch("/v1/gpus/h100-sxm", json={"efficiency": {**efficiency, "memory_compute_overlap": 1.2}}, headers=admin)
    assert_problem(bad, 422)
    assert client.get("/v1/gpus/h100-sxm").json()["efficiency"]["memory_compute_overlap"] == 0.35
