"""API fixtures: a real app on a real, migrated database (SQLite and PostgreSQL through the shared
`migrated_database_url` fixture), driven through httpx's ASGI transport.

- `open_client(app)`: a client on any app (e.g. one on an unmigrated database).
- `make_client(**settings)` builds an app with `Settings(database_url=..., admin_key=ADMIN_KEY, **settings)`
  and returns an `ApiClient`; engines and clients are closed after the test.
- `client`: `make_client()` with default settings (reads open, writes need the admin key).
- `admin`: headers with the bootstrap admin key.
- `gpu_record`, `model_record`, `quantization_record`: valid POST bodies (fresh copies).
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from api.app import create_app
from api.settings import Settings
from catalog import migrate
from tests.api.client import ApiClient

ADMIN_KEY = "test-admin-key-0123456789"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}

#: H100 SXM5 datasheet figures (dense), as DESIGN.md's test vectors use them.
GPU_RECORD: dict[str, Any] = {
    "slug": "h100-sxm",
    "name": "NVIDIA H100 SXM5 80GB",
    "vendor": "nvidia",
    "architecture": "hopper",
    "memory_gb": 80,
    "memory_bandwidth_gb_per_s": 3350,
    "peak_tflops": {"fp32": 67, "tf32": 494.7, "bf16": 989, "fp16": 989, "fp8": 1979, "int8": 1979, "fp4": None},
    "interconnect_gb_per_s": 450,
    "interconnect_latency_us": 5,
    "gpus_per_node": 8,
    "price_usd_per_hour": {"on_demand": 3.0, "reserved_1y": 2.0, "as_of": "2026-10-01", "source": "test price"},
    "efficiency": {"memory": 1.0, "compute": 1.0, "step_overhead_ms": 0.0, "memory_reserve_fraction": 0.0, "memory_compute_overlap": 1.0, "source": "ideal"},
    "source": "NVIDIA H100 datasheet",
}

#: Llama 2 70B's published shape (Touvron et al., 2023), as in DESIGN.md.
MODEL_RECORD: dict[str, Any] = {
    "slug": "llama-2-70b",
    "name": "Llama 2 70B",
    "params_total": 70_000_000_000,
    "params_active": 70_000_000_000,
    "layers": 80,
    "hidden_size": 8192,
    "attention_heads": 64,
    "kv_heads": 8,
    "head_dim": 128,
    "intermediate_size": 28672,
    "vocab_size": 32000,
    "max_context_tokens": 4096,
    "moe": None,
    "mla": None,
    "source": "Llama 2 model card",
}

QUANTIZATION_RECORD: dict[str, Any] = {
    "slug": "int4-awq",
    "name": "INT4 AWQ (W4A16, group 128)",
    "weight_bytes_per_param": 0.53125,
    "element_bytes": 0.5,
    "compute_dtype": "fp16",
    "kv_cache_dtypes": ["fp16", "bf16", "fp8"],
    "min_architecture": "ampere",
    "source": "AWQ paper",
}

RECORDS = {"gpus": GPU_RECORD, "models": MODEL_RECORD, "quantizations": QUANTIZATION_RECORD}


@pytest.fixture(scope="session")
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated to head per test session; API tests start from a copy of it."""
    path = tmp_path_factory.mktemp("template") / "headroom.db"
    migrate.upgrade(f"sqlite:///{path}", "head")
    return path


@pytest.fixture
def migrated_database_url(database_url: str, migrated_sqlite_template: Path) -> str:
    """The shared fixture's `migrated_database_url`, with SQLite copied from a migrated template
    instead of migrated per test (the migration round trip itself is tested in tests/catalog/)."""
    if make_url(database_url).get_backend_name() == "sqlite" and make_url(database_url).database:
        shutil.copyfile(migrated_sqlite_template, make_url(database_url).database)
    else:
        migrate.upgrade(database_url, "head")
    return database_url


@pytest.fixture
def open_client() -> Iterator[Callable[..., ApiClient]]:
    """`open_client(app, raise_app_exceptions=True)`: a client on `app`; both are closed after the test."""
    opened: list[tuple[ApiClient, FastAPI]] = []

    def build(app: FastAPI, *, raise_app_exceptions: bool = True) -> ApiClient:
        opened.append((ApiClient(app, raise_app_exceptions=raise_app_exceptions), app))
        return opened[-1][0]

    yield build
    for client, app in opened:
        client.close()
        app.state.engine.dispose()


@pytest.fixture
def make_client(migrated_database_url: str, open_client: Callable[..., ApiClient]) -> Callable[..., ApiClient]:
    """`make_client(**settings)`: a client on a new app over the migrated test database."""

    def build(*, raise_app_exceptions: bool = True, app: FastAPI | None = None, **settings: Any) -> ApiClient:
        if app is None:
            settings.setdefault("admin_key", ADMIN_KEY)
            app = create_app(Settings(database_url=migrated_database_url, **settings))
        return open_client(app, raise_app_exceptions=raise_app_exceptions)

    return build


@pytest.fixture
def client(make_client: Callable[..., ApiClient]) -> ApiClient:
    return make_client()


@pytest.fixture
def admin() -> dict[str, str]:
    return dict(ADMIN_HEADERS)


@pytest.fixture
def gpu_record() -> dict[str, Any]:
    return copy.deepcopy(GPU_RECORD)


@pytest.fixture
def model_record() -> dict[str, Any]:
    return copy.deepcopy(MODEL_RECORD)


@pytest.fixture
def quantization_record() -> dict[str, Any]:
    return copy.deepcopy(QUANTIZATION_RECORD)


def assert_problem(response: Any, status: int, problem: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem document with `status` (and type `problem`); returns it."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert {"type", "title", "status", "detail", "instance"} <= body.keys()
    assert body["instance"] == response.request.url.path
    if problem is not None:
        assert body["type"] == f"urn:headroom:problem:{problem}"
    return body


def bad_fields(body: dict[str, Any]) -> dict[str, str]:
    """`field -> message` of a 422 problem's `errors`."""
    return {error["field"]: error["message"] for error in body["errors"]}
