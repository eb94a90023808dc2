"""Parallel requests against a live server (uvicorn on 127.0.0.1, real threads, real connections)
on SQLite and PostgreSQL (issue 7 §4): concurrent writes all land or fail cleanly, the catalog
version counts exactly the writes that landed, readers never see a torn page, and racing
conditional updates let exactly one win."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import uvicorn

from api.app import create_app
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY, GPU_RECORD
from tests.api.reference_catalog import seed_reference_catalog

WRITES = 20
WRITER_THREADS = 5
READER_THREADS = 2
RACERS = 6
STARTUP_TIMEOUT_S = 20.0


@pytest.fixture
def live_url(migrated_database_url: str) -> Iterator[str]:
    """The app served by uvicorn on an ephemeral 127.0.0.1 port, in a thread of this process."""
    app = create_app(Settings(database_url=migrated_database_url, admin_key=ADMIN_KEY, log_level="warning"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT_S)
        sock.close()
        app.state.engine.dispose()
    assert not thread.is_alive(), "uvicorn did not stop"


def catalog_version(database_url: str) -> int:
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            return Catalog(session).catalog_version()
    finally:
        engine.dispose()


def gpu(index: int) -> dict[str, Any]:
    record = copy.deepcopy(GPU_RECORD)
    record["slug"] = f"gpu-{index:02d}"
    record["memory_gb"] = 40 + index  # each record distinct, so a mixed-up write shows
    return record


def test_parallel_writes_and_reads(live_url: str, migrated_database_url: str) -> None:
    version_before = catalog_version(migrated_database_url)
    writing = threading.Event()
    writing.set()
    pages: list[list[tuple[int, int, int]]] = [[] for _ in range(READER_THREADS)]

    def read(reader: int) -> None:
        with httpx.Client(base_url=live_url, timeout=30.0) as client:
            while writing.is_set() or not pages[reader]:
                response = client.get("/v1/gpus", params={"limit": 100})
                body = response.json()
                pages[reader].append((response.status_code, body.get("total", -1), len(body.get("items", []))))

    def write(index: int) -> httpx.Response:
        with httpx.Client(base_url=live_url, timeout=30.0) as client:
            return client.post("/v1/gpus", json=gpu(index), headers=ADMIN_HEADERS)

    readers = [threading.Thread(target=read, args=(reader,)) for reader in range(READER_THREADS)]
    for thread in readers:
        thread.start()
    try:
        with ThreadPoolExecutor(max_workers=WRITER_THREADS) as pool:
            responses = list(pool.map(write, range(WRITES)))
    finally:
        writing.clear()
        for thread in readers:
            thread.join(timeout=60)

    statuses = [response.status_code for response in responses]
    assert statuses == [201] * WRITES, [(r.status_code, r.text[:200]) for r in responses if r.status_code != 201]
    assert catalog_version(migrated_database_url) == version_before + WRITES

    listed = httpx.get(f"{live_url}/v1/gpus", params={"limit": 100}, timeout=30.0).json()
    assert listed["total"] == WRITES
    stored = {item["slug"]: item for item in listed["items"]}
    for index in range(WRITES):
        record = stored[f"gpu-{index:02d}"]
        assert (record["memory_gb"], record["version"]) == (40 + index, 1)

    for reader_pages in pages:
        assert reader_pages, "a reader never got an answer"
        assert all(status == 200 for status, _, _ in reader_pages), reader_pages
        assert all(total == items for _, total, items in reader_pages), "a page disagrees with its own total"
        totals = [total for _, total, _ in reader_pages]
        assert totals == sorted(totals), "a later read saw fewer GPUs than an earlier one"


def test_racing_conditional_updates_let_exactly_one_win(live_url: str, migrated_database_url: str) -> None:
    created = httpx.post(f"{live_url}/v1/gpus", json=gpu(0), headers=ADMIN_HEADERS, timeout=30.0)
    assert created.status_code == 201 and created.headers["etag"] == '"1"'
    version_before = catalog_version(migrated_database_url)
    start = threading.Barrier(RACERS)

    def update(racer: int) -> httpx.Response:
        with httpx.Client(base_url=live_url, timeout=30.0) as client:
            start.wait(timeout=30)
            return client.patch(
                "/v1/gpus/gpu-00",
                json={"memory_gb": 100 + racer},
                headers={**ADMIN_HEADERS, "If-Match": '"1"', "X-Request-ID": f"racer-{racer}"},
            )

    with ThreadPoolExecutor(max_workers=RACERS) as pool:
        responses = list(pool.map(update, range(RACERS)))

    winners = [racer for racer, response in enumerate(responses) if response.status_code == 200]
    assert len(winners) == 1, [(r.status_code, r.text[:200]) for r in responses]
    for racer, response in enumerate(responses):
        assert response.headers["x-request-id"] == f"racer-{racer}"
        if racer != winners[0]:
            assert response.status_code == 412, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert response.json()["type"] == "urn:headroom:problem:version-conflict"
    stored = httpx.get(f"{live_url}/v1/gpus/gpu-00", timeout=30.0)
    assert stored.headers["etag"] == '"2"'
    assert stored.json()["memory_gb"] == 100 + winners[0]
    assert catalog_version(migrated_database_url) == version_before + 1

    metrics = httpx.get(f"{live_url}/metrics", timeout=30.0).text
    assert 'headroom_http_requests_total{method="PATCH",route="/v1/gpus/{slug}",status="200"} 1' in metrics
    assert f'headroom_http_requests_total{{method="PATCH",route="/v1/gpus/{{slug}}",status="412"}} {RACERS - 1}' in metrics


#: Chat on an 8B model over two GPU types (tests/api/test_plans.py's request), at three rates.
PLAN_RATES_RPS = (5, 15, 40)


def plan_body(rate_rps: float) -> dict[str, Any]:
    return {
        "model": "llama-3.1-8b",
        "workload": {
            "arrival_rate_rps": rate_rps,
            "prompt_tokens": {"mean": 800, "p99": 3000},
            "output_tokens": {"mean": 200, "p99": 700},
        },
        "slo": {"ttft_ms": 1000, "tpot_ms": 60},
        "constraints": {"gpus": ["h100-sxm", "a100-80gb-sxm"]},
        "verify": False,
        "name": f"chat-{rate_rps}",
    }


@pytest.fixture
def seeded_live_url(migrated_database_url: str, live_url: str) -> str:
    seed_reference_catalog(migrated_database_url)
    return live_url


@pytest.mark.slow
def test_parallel_plans_do_not_mix_and_match_plans_made_alone(seeded_live_url: str, migrated_database_url: str) -> None:
    """Plans computed at the same time equal the same plans computed one by one afterwards, each is
    stored under its own id with its own request, and cost never falls as the rate rises."""

    def create(rate_rps: float) -> httpx.Response:
        with httpx.Client(base_url=seeded_live_url, timeout=120.0) as client:
            return client.post("/v1/plans", json=plan_body(rate_rps), headers=ADMIN_HEADERS)

    with ThreadPoolExecutor(max_workers=len(PLAN_RATES_RPS)) as pool:
        parallel = list(pool.map(create, PLAN_RATES_RPS))
    assert [response.status_code for response in parallel] == [201] * len(PLAN_RATES_RPS), [r.text[:300] for r in parallel]
    alone = [create(rate_rps) for rate_rps in PLAN_RATES_RPS]
    assert [response.status_code for response in alone] == [201] * len(PLAN_RATES_RPS)

    plans = [response.json() for response in parallel]
    assert len({plan["id"] for plan in plans + [response.json() for response in alone]}) == 2 * len(PLAN_RATES_RPS)
    for plan, baseline in zip(plans, (response.json() for response in alone), strict=True):
        assert (plan["plan"], plan["cost"], plan["predicted"]) == (baseline["plan"], baseline["cost"], baseline["predicted"])
    for rate_rps, response, plan in zip(PLAN_RATES_RPS, parallel, plans, strict=True):
        stored = httpx.get(f"{seeded_live_url}{response.headers['location']}", timeout=30.0)
        assert stored.json() == plan
        assert plan["name"] == f"chat-{rate_rps}"
    costs = [plan["cost"]["usd_per_hour"] for plan in plans]
    assert costs == sorted(costs), costs

    metrics = httpx.get(f"{seeded_live_url}/metrics", timeout=30.0).text
    assert f'headroom_http_requests_total{{method="POST",route="/v1/plans",status="201"}} {2 * len(PLAN_RATES_RPS)}' in metrics


#: Concurrent clients in the bursts below (issue 22 §3 reported 412s and 409s at these sizes).
BURST = 50
BURST_THREADS = 25


def test_unconditional_writes_to_one_record_all_land(live_url: str, migrated_database_url: str) -> None:
    """PUT and PATCH without If-Match on one record, 50 at once: every one lands (last writer
    wins, a lost race is retried inside), none is a 412 the client never asked for; then racing
    unconditional DELETEs: one 204, the rest 404 (gone), no 412."""
    assert httpx.post(f"{live_url}/v1/gpus", json=gpu(0), headers=ADMIN_HEADERS, timeout=30.0).status_code == 201
    version_before = catalog_version(migrated_database_url)

    def write(index: int) -> httpx.Response:
        with httpx.Client(base_url=live_url, timeout=60.0) as client:
            if index % 2:
                return client.patch("/v1/gpus/gpu-00", json={"memory_gb": 100 + index}, headers=ADMIN_HEADERS)
            replacement = {key: value for key, value in gpu(0).items() if key != "slug"} | {"memory_gb": 100 + index}
            return client.put("/v1/gpus/gpu-00", json=replacement, headers=ADMIN_HEADERS)

    with ThreadPoolExecutor(max_workers=BURST_THREADS) as pool:
        responses = list(pool.map(write, range(BURST)))
    assert [r.status_code for r in responses] == [200] * BURST, [
        (r.status_code, r.text[:200]) for r in responses if r.status_code != 200
    ]
    stored = httpx.get(f"{live_url}/v1/gpus/gpu-00", timeout=30.0)
    assert stored.headers["etag"] == f'"{1 + BURST}"'
    assert sorted(int(r.headers["etag"].strip('"')) for r in responses) == list(range(2, 2 + BURST))  # each wrote a version
    assert catalog_version(migrated_database_url) == version_before + BURST

    def delete(_: int) -> httpx.Response:
        with httpx.Client(base_url=live_url, timeout=60.0) as client:
            return client.delete("/v1/gpus/gpu-00", headers=ADMIN_HEADERS)

    with ThreadPoolExecutor(max_workers=RACERS) as pool:
        statuses = sorted(r.status_code for r in pool.map(delete, range(RACERS)))
    assert statuses == [204] + [404] * (RACERS - 1)


def test_parallel_idempotent_creates_all_answer_the_one_record(live_url: str, migrated_database_url: str) -> None:
    """50 creates at once with one Idempotency-Key and one body: one creates, 49 replay its 201
    (waiting for it rather than racing it into a 409), and one record exists."""
    headers = {**ADMIN_HEADERS, "Idempotency-Key": "burst-create-1"}

    def create(_: int) -> httpx.Response:
        with httpx.Client(base_url=live_url, timeout=60.0) as client:
            return client.post("/v1/gpus", json=gpu(7), headers=headers)

    with ThreadPoolExecutor(max_workers=BURST_THREADS) as pool:
        responses = list(pool.map(create, range(BURST)))
    assert [r.status_code for r in responses] == [201] * BURST, [
        (r.status_code, r.text[:200]) for r in responses if r.status_code != 201
    ]
    assert sum("idempotent-replayed" not in r.headers for r in responses) == 1
    assert len({r.text for r in responses}) == 1
    assert httpx.get(f"{live_url}/v1/gpus", timeout=30.0).json()["total"] == 1


#: Parallel plans for one deployment name (issue 22 §3: 13 x 412 and 2 x 409 on PostgreSQL).
NAMED_PLANS = 20


@pytest.mark.slow
def test_parallel_plans_for_one_deployment_name_all_land(seeded_live_url: str) -> None:
    body = {**plan_body(5), "name": "shared", "constraints": {"gpus": ["h100-sxm"]}}

    def create(_: int) -> httpx.Response:
        with httpx.Client(base_url=seeded_live_url, timeout=120.0) as client:
            return client.post("/v1/plans", json=body, headers=ADMIN_HEADERS)

    with ThreadPoolExecutor(max_workers=NAMED_PLANS) as pool:
        responses = list(pool.map(create, range(NAMED_PLANS)))
    assert [r.status_code for r in responses] == [201] * NAMED_PLANS, [
        (r.status_code, r.text[:200]) for r in responses if r.status_code != 201
    ]
    deployment = httpx.get(f"{seeded_live_url}/v1/deployments/shared", timeout=30.0).json()
    assert deployment["plans_total"] == NAMED_PLANS
    assert deployment["current_plan_id"] in {r.json()["id"] for r in responses}
    assert deployment["version"] == NAMED_PLANS  # created once, then each later plan adopted in turn
