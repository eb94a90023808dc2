"""`headroom serve` over real HTTP: a fresh SQLite file is migrated, seeded and served."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY, MODEL_RECORD

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_serve_migrates_seeds_and_lists_gpus(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "HEADROOM_DATABASE_URL": f"sqlite:///{tmp_path / 'headroom.db'}",
        "HEADROOM_ADMIN_KEY": ADMIN_KEY,
        "HEADROOM_LOG_LEVEL": "warning",
    }
    env.pop("HEADROOM_REQUIRE_AUTH", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert server.poll() is None, f"headroom serve exited: {server.communicate()[0]}"
            try:
                if httpx.get(f"{base}/healthz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"headroom serve did not answer within {STARTUP_TIMEOUT_S} s"
            time.sleep(0.1)

        assert httpx.get(f"{base}/readyz", timeout=5.0).json() == {"status": "ready"}
        listed = httpx.get(f"{base}/v1/gpus", params={"limit": 100}, timeout=5.0).json()
        assert listed["total"] >= 12
        slugs = {gpu["slug"] for gpu in listed["items"]}
        assert {"h100-sxm", "mi300x"} <= slugs
        h100 = httpx.get(f"{base}/v1/gpus/h100-sxm", timeout=5.0).json()
        assert (h100["memory_gb"], h100["memory_bandwidth_gb_per_s"], h100["peak_tflops"]["bf16"]) == (80, 3350, 989)
        refused = httpx.post(f"{base}/v1/models", json=MODEL_RECORD, timeout=5.0)
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        added = httpx.post(f"{base}/v1/models", json=MODEL_RECORD | {"slug": "my-llama"}, headers=ADMIN_HEADERS, timeout=5.0)
        assert added.status_code == 201, added.text
        assert httpx.get(f"{base}/v1/models/my-llama", timeout=5.0).headers["etag"] == '"1"'
    finally:
        server.terminate()
        try:
            output = server.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:
            server.kill()
            output = server.communicate()[0]
    assert "loaded the reference catalog" in output
    assert ADMIN_KEY not in output
