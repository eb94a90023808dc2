"""API fixtures: a real app on a real, migrated database (SQLite and PostgreSQL through the shared
`migrated_database_url` fixture), driven through httpx's ASGI transport.

- `open_client(app)`: a client on any app (e.g. one on an unmigrated database).
- `make_client(**settings)` builds an app with `Settings(database_url=..., admin_key=ADMIN_KEY, **settings)`
  and returns an `ApiClient`; engines and clients are closed after the test.
- `client`: `make_client()` with default settings (reads open, writes need the admin key).
- `admin`: headers with the bootstrap admin key.
- `gpu_record`, `model_record`, `quantization_record`: valid POST bodies (fresh copies).
- `serve_headroom(folder, ...)`: `headroom serve` as a subprocess on a free 127.0.0.1 port, in a
  process group of its own, output in files (never a pipe a leftover child could hold open), every
  wait bounded, stopped terminate-then-kill with whatever is left of its group killed after.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from api.app import create_app
from api.settings import Settings
from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.client import ApiClient

ADMIN_KEY = "test-admin-key-0123456789"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}

#: H100 SXM5 datasheet figures (dense), as docs/design.md's test vectors use them.
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
    "scale_out_gbit_per_s": 400,
    "scale_out_latency_us": 10,
    "scale_out_source": "test NIC: one ConnectX-7 NDR 400 Gb/s per GPU",
    "price_usd_per_hour": {"on_demand": 3.0, "reserved_1y": 2.0, "as_of": "2026-10-01", "source": "test price"},
    "efficiency": {
        "memory": 1.0,
        "compute": 1.0,
        "step_overhead_ms": 0.0,
        "memory_reserve_fraction": 0.0,
        "memory_compute_overlap": 1.0,
        "source": "ideal",
        "confidence": None,
    },
    "source": "NVIDIA H100 datasheet",
}

#: Llama 2 70B's published shape (Touvron et al., 2023), as in docs/design.md.
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
    "checkpoint": "meta-llama/Llama-2-70b-hf",
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
    "engine_names": {"vllm": "awq_marlin", "sglang": "awq_marlin", "trt-llm": "W4A16_AWQ"},
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
def seeded(client: ApiClient, migrated_database_url: str) -> ApiClient:
    """A client over a database holding the reference catalog (catalog/data)."""
    engine = make_engine(migrated_database_url)
    try:
        with make_session_factory(engine)() as session:
            assert Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    return client


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


ROOT = Path(__file__).resolve().parents[2]
#: Bounds on a served process: migrating, seeding and warming the kernels; and each stop step.
SERVE_STARTUP_TIMEOUT_S = 60.0
SERVE_STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def living_group_members(pgid: int) -> list[int]:
    """Pids of the processes in group `pgid` that have not exited (zombies count as exited); Linux /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return sorted(members)


@dataclass
class ServedHeadroom:
    """A running `headroom serve`: its URL, process (the leader of its own process group) and output files."""

    base_url: str
    process: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path

    def stdout(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def output(self) -> str:
        """stdout and stderr (one text when they share a file)."""
        return self.stdout() if self.stdout_path == self.stderr_path else self.stdout() + self.stderr()

    def wait_ready(self, path: str = "/readyz") -> None:
        """Until `path` answers 200, at most SERVE_STARTUP_TIMEOUT_S; fails with the output if the server exits."""
        deadline = time.monotonic() + SERVE_STARTUP_TIMEOUT_S
        while True:
            assert self.process.poll() is None, f"headroom serve exited with {self.process.returncode}: {self.output()}"
            try:
                if httpx.get(f"{self.base_url}{path}", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (
                f"headroom serve did not answer within {SERVE_STARTUP_TIMEOUT_S} s: {self.output()}"
            )
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM (the service's own shutdown), SIGKILL to the whole group if it overruns, then
        SIGKILL to whatever of the group outlived the server, each wait bounded."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=SERVE_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _kill_group(self.process.pid)
                self.process.wait(timeout=SERVE_STOP_TIMEOUT_S)
        _kill_group(self.process.pid)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def serve_headroom(
    folder: Path,
    *,
    env: Mapping[str, str | None] | None = None,
    separate_stderr: bool = False,
    ready_path: str | None = "/readyz",
    serve_args: Sequence[str] = (),
) -> Iterator[ServedHeadroom]:
    """`headroom serve` over a fresh SQLite file in `folder` (migrated and seeded at start) with the
    bootstrap admin key, until `ready_path` answers 200; stopped on exit. `env` overrides the
    environment (None removes a variable); `separate_stderr` writes stderr to a file of its own;
    `ready_path=None` returns at once (call `wait_ready` after work of your own); `serve_args` are
    more `headroom serve` options."""
    port = free_port()
    environment = {
        **os.environ,
        "HEADROOM_DATABASE_URL": f"sqlite:///{folder / 'headroom.db'}",
        "HEADROOM_ADMIN_KEY": ADMIN_KEY,
        "HEADROOM_LOG_LEVEL": "warning",
    }
    environment.pop("HEADROOM_REQUIRE_AUTH", None)
    for name, value in (env or {}).items():
        if value is None:
            environment.pop(name, None)
        else:
            environment[name] = value
    stdout_path = folder / "serve.out"
    stderr_path = folder / "serve.err" if separate_stderr else stdout_path
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") if separate_stderr else contextlib.nullcontext() as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *serve_args],
            cwd=ROOT, env=environment, stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=stderr if separate_stderr else subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    served = ServedHeadroom(
        base_url=f"http://127.0.0.1:{port}", process=process, stdout_path=stdout_path, stderr_path=stderr_path
    )
    try:
        if ready_path is not None:
            served.wait_ready(ready_path)
        yield served
    finally:
        served.stop()
