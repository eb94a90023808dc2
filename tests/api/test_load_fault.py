"""Load and fault on a live `headroom serve` over PostgreSQL (issue 22, "Done when"): 50 parallel
plans and deployment writes all land (no 4xx the client did not cause, no 5xx); then kill -9 of
the server in the middle of a second burst loses no acknowledged write (every 201/200 is there
after a restart on the same database) and leaves no process of it behind.

Bounded: 127.0.0.1 only, 50 requests per burst, every wait with a timeout; about 30 s on a
2-core machine, most of it the two server starts.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN_HEADERS, living_group_members, serve_headroom

#: Requests in each burst, all in flight at once.
BURST = 50
#: Deployment names the burst's writes share, so writes to one name race each other.
NAMES = 5
#: Acknowledged writes of the second burst before the server is killed (the rest are in flight).
ACKED_BEFORE_KILL = 8
#: Bounds on one request, on the second burst's acknowledgements, and on the killed server's processes going.
REQUEST_TIMEOUT_S = 60.0
KILL_WITHIN_S = 45.0
GONE_WITHIN_S = 10.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc"),
]

#: Chat on an 8B model on one GPU type, not verified in the simulator: a cheap plan, so the burst
#: measures the service (threads, connections, database) rather than the planner.
SETTINGS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 5, "prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "verify": False,
}


def write(base_url: str, index: int) -> tuple[str, httpx.Response | None]:
    """The burst's `index`-th write: even, a plan for deployment `plan-<k>` (POST /v1/plans with a
    name: a plan and a deployment write); odd, PUT /v1/deployments/put-<k> (created and planned,
    or its settings replaced). None when the connection failed (never acknowledged)."""
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, headers=ADMIN_HEADERS) as client:
        try:
            if index % 2 == 0:
                name = f"plan-{index % NAMES}"
                return name, client.post("/v1/plans", json={**SETTINGS, "name": name})
            name = f"put-{index % NAMES}"
            return name, client.put(
                f"/v1/deployments/{name}", json={**SETTINGS, "workload": {**SETTINGS["workload"], "arrival_rate_rps": 1 + index}}
            )
        except httpx.TransportError:
            return name, None


def burst(
    base_url: str, on_answer: Callable[[str, httpx.Response | None], None] = lambda _n, _r: None
) -> list[tuple[str, httpx.Response | None]]:
    def one(index: int) -> tuple[str, httpx.Response | None]:
        name, response = write(base_url, index)
        on_answer(name, response)
        return name, response

    with ThreadPoolExecutor(max_workers=BURST) as pool:
        return list(pool.map(one, range(BURST)))


def assert_present(base_url: str, acknowledged: list[tuple[str, httpx.Response]]) -> None:
    """Every acknowledged write is stored: each plan readable as answered, each deployment at
    least at the version acknowledged."""
    with httpx.Client(base_url=base_url, timeout=REQUEST_TIMEOUT_S, headers=ADMIN_HEADERS) as client:
        for name, response in acknowledged:
            body = response.json()
            if name.startswith("plan-"):
                stored = client.get(f"/v1/plans/{body['id']}")
                assert stored.status_code == 200, (name, body["id"], stored.text[:300])
                assert stored.json()["id"] == body["id"]
            deployment = client.get(f"/v1/deployments/{name}")
            assert deployment.status_code == 200, (name, deployment.text[:300])
            if name.startswith("put-"):
                assert deployment.json()["version"] >= body["version"], (name, deployment.json()["version"], body["version"])
            else:
                plans = client.get(f"/v1/deployments/{name}/plans", params={"limit": 200}).json()
                assert body["id"] in {plan["id"] for plan in plans["items"]}, (name, body["id"])


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_a_burst_lands_and_kill_9_loses_no_acknowledged_write(tmp_path: Path, migrated_database_url: str) -> None:
    env = {"HEADROOM_DATABASE_URL": migrated_database_url}
    (tmp_path / "first").mkdir()
    with serve_headroom(tmp_path / "first", env=env) as served:
        answers = burst(served.base_url)
        failed = [
            (name, None if r is None else (r.status_code, r.text[:300]))
            for name, r in answers
            if r is None or r.status_code not in (200, 201)
        ]
        assert failed == [], failed
        assert_present(served.base_url, [(name, r) for name, r in answers if r is not None])

        acknowledged: list[tuple[str, httpx.Response]] = []
        unexpected: list[tuple[str, int, str]] = []
        lock = threading.Lock()
        enough = threading.Event()

        def record(name: str, response: httpx.Response | None) -> None:
            with lock:
                if response is None:
                    return
                if response.status_code in (200, 201):
                    acknowledged.append((name, response))
                    if len(acknowledged) >= ACKED_BEFORE_KILL:
                        enough.set()
                else:
                    unexpected.append((name, response.status_code, response.text[:300]))

        group = served.process.pid
        with ThreadPoolExecutor(max_workers=1) as runner:
            second = runner.submit(burst, served.base_url, record)
            assert enough.wait(KILL_WITHIN_S), f"{len(acknowledged)} writes acknowledged in {KILL_WITHIN_S} s"
            os.kill(served.process.pid, signal.SIGKILL)
            served.process.wait(timeout=GONE_WITHIN_S)
            second.result(timeout=REQUEST_TIMEOUT_S + GONE_WITHIN_S)
        deadline = time.monotonic() + GONE_WITHIN_S
        while living_group_members(group) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert living_group_members(group) == [], "processes of the killed server left behind"
        assert unexpected == [], unexpected
        with lock:
            kept = list(acknowledged)
        assert ACKED_BEFORE_KILL <= len(kept) < BURST, "the kill came in the middle of the burst"

    (tmp_path / "second").mkdir()
    with serve_headroom(tmp_path / "second", env=env) as restarted:
        assert_present(restarted.base_url, kept)
