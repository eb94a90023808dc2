"""The committed OpenAPI document is what the app serves; operationIds are stable and readable."""

from __future__ import annotations

import functools
import json
import re
import tomllib
from pathlib import Path

import api
from api.cli import openapi_document as _openapi_document

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "openapi" / "openapi.json"
openapi_document = functools.cache(_openapi_document)
REGENERATE = "regenerate it with `.venv/bin/python -m api.cli openapi export` (or `headroom openapi export`) and commit it"


def test_committed_document_matches_the_app() -> None:
    assert COMMITTED.exists(), f"{COMMITTED} is missing: {REGENERATE}"
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    current = json.loads(openapi_document())
    changed = sorted(set(committed.get("paths", {})) ^ set(current.get("paths", {})))
    assert current == committed, f"openapi/openapi.json differs from the app (paths added/removed: {changed}); {REGENERATE}"
    assert COMMITTED.read_text(encoding="utf-8") == openapi_document(), f"formatting differs; {REGENERATE}"


def test_operation_ids_are_unique_snake_case_and_named_for_the_catalog() -> None:
    document = json.loads(openapi_document())
    ids = [operation["operationId"] for operations in document["paths"].values() for operation in operations.values()]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", operation_id) for operation_id in ids)
    expected = {
        f"{verb}_{noun}" for verb in ("get", "create", "replace", "update", "delete") for noun in ("gpu", "model", "quantization")
    }
    expected |= {"list_gpus", "list_models", "list_quantizations", "healthz", "readyz"}
    assert expected <= set(ids)


def test_errors_are_documented_as_problems() -> None:
    document = json.loads(openapi_document())
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (method, path, status)
    create = document["paths"]["/v1/gpus"]["post"]
    assert {"401", "403", "409", "422"} <= create["responses"].keys()


def test_fields_carry_units_in_their_descriptions() -> None:
    gpu = json.loads(openapi_document())["components"]["schemas"]["GpuCreate"]["properties"]
    assert "GB" in gpu["memory_gb"]["description"]
    assert "GB/s" in gpu["memory_bandwidth_gb_per_s"]["description"]
    assert all("description" in member for member in gpu.values())


def test_version_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert api.__version__ == project["version"]


def test_every_operation_documents_the_answers_of_the_layers_around_it() -> None:
    """413/415/400/422 wherever there is a body, 400/409 with Idempotency-Key, 400/412 with If-Match,
    503 on every /v1 route (issue 22 §5; api/app.py `_complete_contract`)."""
    document = json.loads(openapi_document())
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            headers = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            expected = {"503"} if path.startswith("/v1/") else set()
            expected |= {"400", "413", "415", "422"} if "requestBody" in operation else set()
            expected |= {"400", "409"} if "Idempotency-Key" in headers else set()
            expected |= {"400", "412"} if "If-Match" in headers else set()
            assert expected <= documented, f"{method.upper()} {path} does not document {sorted(expected - documented)}"
