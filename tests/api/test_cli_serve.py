"""`headroom serve --workers N`: the option reaches uvicorn, and two worker processes serve the API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

import api.fleet_tables
import planner.queueing
from api.cli import main
from tests.api.conftest import living_group_members, serve_headroom


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `headroom serve` hands uvicorn (nothing is served) and what it started in this process."""
    seen: dict[str, Any] = {"started": []}

    def run(app: Any, **options: Any) -> None:
        seen["app"], seen["options"] = app, options

    monkeypatch.setattr(uvicorn, "run", run)
    monkeypatch.setattr(planner.queueing, "warm_up", lambda: seen["started"].append("warm_up"))
    monkeypatch.setattr(api.fleet_tables, "start_table_workers", lambda: seen["started"].append("table_workers"))
    monkeypatch.setenv("HEADROOM_DATABASE_URL", "sqlite:///elsewhere.db")
    return seen


def test_one_worker_serves_the_app_in_this_process(tmp_path: Path, served: dict[str, Any]) -> None:
    assert main(["--database-url", f"sqlite:///{tmp_path / 'h.db'}", "serve", "--port", "8123"]) == 0
    assert isinstance(served["app"], FastAPI)
    assert "workers" not in served["options"]
    assert served["options"]["port"] == 8123
    assert served["started"] == ["warm_up", "table_workers"]


def test_workers_reach_uvicorn_with_an_app_factory_on_the_same_database(tmp_path: Path, served: dict[str, Any]) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert main(["--database-url", url, "serve", "--host", "0.0.0.0", "--port", "8123", "--workers", "3"]) == 0
    # uvicorn runs several workers only from an import string; each worker builds its app from the environment.
    assert served["app"] == "api.cli:worker_app"
    assert served["options"]["factory"] is True
    assert served["options"]["workers"] == 3
    assert (served["options"]["host"], served["options"]["port"]) == ("0.0.0.0", 8123)
    assert os.environ["HEADROOM_DATABASE_URL"] == url
    assert served["started"] == []  # the supervisor serves nothing: each worker loads its own kernels


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_workers_must_be_a_positive_count(workers: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--workers", workers])
    assert exited.value.code == 2
    assert "--workers" in capsys.readouterr().err


def test_two_workers_serve_the_api(tmp_path: Path) -> None:
    with serve_headroom(tmp_path, serve_args=["--workers", "2"]) as server:
        # uvicorn starts its workers with multiprocessing's spawn (the table workers come from a fork server)
        workers = [pid for pid in living_group_members(server.process.pid) if b"spawn_main" in _cmdline(pid)]
        assert len(workers) == 2, server.output()
        for _ in range(4):
            assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
            gpus = httpx.get(f"{server.base_url}/v1/gpus", params={"limit": 1}, timeout=10)
            assert gpus.status_code == 200 and gpus.json()["items"], gpus.text


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
