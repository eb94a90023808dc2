"""Every error is an application/problem+json document from the one mapping table: 404, 409,
412 (in test_catalog_crud), 422 listing each bad field, 401/403, unknown routes, and a 500 that
leaks nothing. A failed write leaves nothing behind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi import FastAPI

from api.app import create_app
from api.deps import CatalogDep
from api.problems import PROBLEM_TYPES, problem_type_for
from api.settings import Settings
from catalog.errors import AlreadyExistsError, CatalogError, NotFoundError, VersionConflictError
from planner.errors import (
    HeadroomError,
    InfeasiblePlanError,
    ModelDoesNotFitError,
    SolverError,
    UnstableLoadError,
)
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_KEY, assert_problem, bad_fields


def test_unknown_slug_is_404(client: ApiClient) -> None:
    for plural in ("gpus", "models", "quantizations"):
        body = assert_problem(client.get(f"/v1/{plural}/no-such-thing"), 404, "not-found")
        assert "no-such-thing" in body["detail"]
        assert body["slug"] == "no-such-thing"  # the exception's extensions become members


def test_duplicate_is_409_and_writes_nothing(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    assert client.post("/v1/gpus", json=gpu_record, headers=admin).status_code == 201
    duplicate = client.post("/v1/gpus", json=gpu_record | {"name": "other"}, headers=admin)
    assert_problem(duplicate, 409, "already-exists")
    listed = client.get("/v1/gpus").json()
    assert listed["total"] == 1
    assert listed["items"][0]["name"] == gpu_record["name"]


def test_invalid_gpu_lists_each_bad_field(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    gpu_record["memory_gb"] = -80
    gpu_record["peak_tflops"]["fp6"] = 100
    gpu_record["gpus_per_node"] = 0
    gpu_record["efficiency"]["memory"] = 1.5
    del gpu_record["source"]
    body = assert_problem(client.post("/v1/gpus", json=gpu_record, headers=admin), 422, "invalid-request")
    fields = bad_fields(body)
    assert fields.keys() == {"memory_gb", "peak_tflops.fp6", "gpus_per_node", "efficiency.memory", "source"}
    assert "fp6" in fields["peak_tflops.fp6"]
    assert "greater than" in fields["memory_gb"]
    pointers = {error["pointer"] for error in body["errors"]}
    assert "/peak_tflops/fp6" in pointers
    assert all(error["location"] == "body" for error in body["errors"])
    assert client.get("/v1/gpus").json()["total"] == 0


def test_invalid_model_names_the_field_that_breaks_an_invariant(
    client: ApiClient, admin: dict[str, str], model_record: dict[str, Any]
) -> None:
    model_record["kv_heads"] = 6  # 64 heads are not a multiple of 6
    model_record["params_active"] = model_record["params_total"] + 1
    model_record["moe"] = {"experts": 8, "experts_per_token": 9, "shared_experts": 0, "expert_params": 1000, "moe_layers": 80}
    body = assert_problem(client.post("/v1/models", json=model_record, headers=admin), 422)
    fields = bad_fields(body)
    assert fields.keys() == {"kv_heads", "params_active", "moe.experts_per_token"}
    assert "must divide attention_heads (64)" in fields["kv_heads"]


def test_invalid_quantization(client: ApiClient, admin: dict[str, str], quantization_record: dict[str, Any]) -> None:
    quantization_record["compute_dtype"] = "fp6"
    quantization_record["kv_cache_dtypes"] = ["fp16", "fp16"]
    quantization_record["weight_bytes_per_param"] = 0
    body = assert_problem(client.post("/v1/quantizations", json=quantization_record, headers=admin), 422)
    assert bad_fields(body).keys() == {"compute_dtype", "kv_cache_dtypes", "weight_bytes_per_param"}


def test_record_the_catalog_rejects_after_merging_is_422(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]
) -> None:
    """A PATCH whose merged record breaks a rule only the catalog checks (architecture of the vendor)."""
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    body = assert_problem(client.patch("/v1/gpus/h100-sxm", json={"architecture": "cdna3"}, headers=admin), 422, "invalid-record")
    assert "architecture" in bad_fields(body)
    assert client.get("/v1/gpus/h100-sxm").json()["architecture"] == "hopper"


def test_null_for_a_required_member_in_patch_is_422(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    body = assert_problem(client.patch("/v1/gpus/h100-sxm", json={"memory_gb": None}, headers=admin), 422)
    assert "memory_gb" in bad_fields(body)


def test_patch_bodies_keep_the_member_constraints(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    client.post("/v1/gpus", json=gpu_record, headers=admin)
    body = assert_problem(
        client.patch("/v1/gpus/h100-sxm", json={"memory_gb": -1, "peak_tflops": {"fp6": 1}, "colour": "green"}, headers=admin),
        422,
    )
    assert bad_fields(body).keys() == {"memory_gb", "peak_tflops.fp6", "colour"}
    assert client.get("/v1/gpus/h100-sxm").json()["version"] == 1


def test_non_finite_numbers_are_422(client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]) -> None:
    text = json.dumps(gpu_record | {"memory_gb": float("inf"), "memory_bandwidth_gb_per_s": float("nan")})
    assert "Infinity" in text
    response = client.post("/v1/gpus", content=text, headers=admin | {"Content-Type": "application/json"})
    assert bad_fields(assert_problem(response, 422)).keys() == {"memory_gb", "memory_bandwidth_gb_per_s"}


def test_malformed_json_and_bad_query_are_422(client: ApiClient, admin: dict[str, str]) -> None:
    body = assert_problem(
        client.post("/v1/gpus", content=b'{"slug": ', headers=admin | {"Content-Type": "application/json"}), 422
    )
    assert len(body["errors"]) == 1
    body = assert_problem(client.get("/v1/gpus", params={"limit": 0, "offset": -1}), 422)
    assert {(error["location"], error["field"]) for error in body["errors"]} == {("query", "limit"), ("query", "offset")}
    body = assert_problem(client.get("/v1/quantizations", params={"compute_dtype": "fp6"}), 422)
    assert bad_fields(body).keys() == {"compute_dtype"}


def test_missing_and_unknown_keys_are_401_with_challenge(client: ApiClient, gpu_record: dict[str, Any]) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer hr_0123456789abcdef_notarealsecretnotarealsecret"},
        {"Authorization": "Basic eDp5"},
    ):
        response = client.post("/v1/gpus", json=gpu_record, headers=headers)
        assert_problem(response, 401, "unauthenticated")
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/v1/gpus").json()["total"] == 0


def test_unauthenticated_write_with_bad_body_is_401_not_422(client: ApiClient) -> None:
    assert_problem(client.post("/v1/gpus", json={"memory_gb": -1}), 401)


def test_unknown_route_and_method_are_problems(client: ApiClient) -> None:
    assert_problem(client.get("/v1/no-such-route"), 404)
    response = client.request("TRACE", "/v1/gpus")
    assert_problem(response, 405)


def _app_with_route(database_url: str, path: str, endpoint: Any) -> FastAPI:
    app = create_app(Settings(database_url=database_url, admin_key=ADMIN_KEY))
    app.add_api_route(path, endpoint, methods=["POST"])
    return app


def test_unexpected_error_is_a_500_problem_without_internals(make_client: Any, migrated_database_url: str) -> None:
    def explode() -> None:
        raise RuntimeError("secret connection string postgres://admin:hunter2@db")

    client = make_client(app=_app_with_route(migrated_database_url, "/explode", explode), raise_app_exceptions=False)
    body = assert_problem(client.post("/explode"), 500, "internal-error")
    assert "hunter2" not in client.post("/explode").text
    assert body["title"] == "Internal server error"


def test_failed_request_rolls_back_everything_it_wrote(
    make_client: Any, migrated_database_url: str, gpu_record: dict[str, Any], model_record: dict[str, Any]
) -> None:
    """A route that writes, then fails: the session dependency rolls the whole request back."""

    def write_then_fail(catalog: CatalogDep) -> None:
        catalog.create_gpu(gpu_record)
        catalog.create_model(model_record)
        catalog.get_quantization("missing")  # NotFoundError after two successful writes

    client = make_client(app=_app_with_route(migrated_database_url, "/write-then-fail", write_then_fail))
    assert_problem(client.post("/write-then-fail"), 404, "not-found")
    assert client.get("/v1/gpus").json()["total"] == 0
    assert client.get("/v1/models").json()["total"] == 0


def test_failed_writes_do_not_bump_the_catalog_version(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any], engine: Any
) -> None:
    from catalog.db import make_session_factory
    from catalog.repository import Catalog

    def catalog_version() -> int:
        with make_session_factory(engine)() as session:
            return Catalog(session).catalog_version()

    client.post("/v1/gpus", json=gpu_record, headers=admin)
    before = catalog_version()
    client.post("/v1/gpus", json=gpu_record, headers=admin)  # 409
    client.patch("/v1/gpus/h100-sxm", json={"architecture": "cdna3"}, headers=admin)  # 422 from the catalog
    client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 1}, headers=admin | {"If-Match": '"7"'})  # 412
    assert catalog_version() == before
    client.patch("/v1/gpus/h100-sxm", json={"memory_gb": 81}, headers=admin)
    assert catalog_version() == before + 1


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (NotFoundError("x"), 404),
        (AlreadyExistsError("x"), 409),
        (VersionConflictError("x"), 412),
        (ModelDoesNotFitError("x"), 422),
        (InfeasiblePlanError("x"), 422),
        (UnstableLoadError("x"), 422),
        (SolverError("x"), 503),
        (CatalogError("x"), 503),
        (type("NewPlannerOutcome", (HeadroomError,), {})("x"), 422),
        (KeyError("x"), 500),
    ],
)
def test_table_lookup_follows_the_class_hierarchy(exc: BaseException, status: int) -> None:
    assert problem_type_for(exc).status == status


def test_every_planner_error_is_mapped_explicitly() -> None:
    import planner.errors

    errors = [obj for obj in vars(planner.errors).values() if isinstance(obj, type) and issubclass(obj, HeadroomError)]
    assert errors
    assert set(errors) <= PROBLEM_TYPES.keys(), "add the new planner error to api/problems.py's PROBLEM_TYPES"


def test_a_500_keeps_the_keep_alive_connection(migrated_database_url: str) -> None:
    """Served by uvicorn on 127.0.0.1: after an unexpected error's 500 the same pooled connection
    answers the next request (issue 22 §6: the server used to close it, resetting the client's next
    request)."""
    import socket
    import threading
    import time

    import httpx
    import uvicorn

    def explode() -> None:
        raise RuntimeError("boom")

    app = _app_with_route(migrated_database_url, "/explode", explode)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", timeout=10.0) as client:
            first = client.post("/explode")
            assert first.status_code == 500 and first.headers.get("connection", "").lower() != "close"
            assert client.post("/explode").status_code == 500  # the same pooled connection, not reset
            assert client.get("/healthz").status_code == 200
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
        app.state.engine.dispose()


def test_a_write_with_an_unknown_query_parameter_is_422_and_writes_nothing(
    client: ApiClient, admin: dict[str, str], gpu_record: dict[str, Any]
) -> None:
    """A write's query parameters are its operation's own: one it does not declare is refused with the
    parameter named (FastAPI alone ignores it, so `?dry_run=true` would write); a declared one passes."""
    refused = assert_problem(client.post("/v1/gpus?dry_run=true", json=gpu_record, headers=admin), 422)
    assert bad_fields(refused) == {"dry_run": "unknown field 'dry_run'"}
    assert client.get(f"/v1/gpus/{gpu_record['slug']}").status_code == 404
    created = client.post("/v1/gpus", json=gpu_record, headers=admin)
    assert created.status_code == 201, created.text
