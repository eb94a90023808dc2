"""`headroom serve` over real HTTP: a fresh SQLite file is migrated, seeded and served."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY, MODEL_RECORD, serve_headroom


@pytest.mark.slow
def test_serve_migrates_seeds_and_lists_gpus(tmp_path: Path) -> None:
    with serve_headroom(tmp_path, ready_path="/healthz") as served:
        base = served.base_url
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
    output = served.output()
    assert "loaded the reference catalog" in output
    assert ADMIN_KEY not in output
