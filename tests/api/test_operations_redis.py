"""Operations on a real Redis broker (HEADROOM_TEST_REDIS_URL; `.ci/run` starts Redis and sets it):
an API process that only enqueues and two `headroom worker` processes, each test under a Redis
namespace of its own. A 500-point what-if sweep gives the points the synchronous sweep gives in
process, and SIGKILL of one worker mid-operation loses nothing: Redis hands the messages it held
to the other once its heartbeat is HEARTBEAT_TIMEOUT_S old (checked on every broker command here,
HEADROOM_BROKER_MAINTENANCE_CHANCE=1000000). The other worker then stops cleanly on SIGTERM. A
fleet plan's tables fan out over two workers to the synchronous plan; an operation queued before
an API restart is reported by the next API process and run by a worker started later."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api import what_if
from api.cli import main
from api.observability import Deadline
from api.schemas.what_if import WhatIfRequest
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from tests.api.conftest import ADMIN_KEY, ROOT, serve_headroom
from tests.api.test_operations import ASYNC, FLEET_SHAPES, SHAPE, SWEEP, without_fleet_timings, without_timings

REDIS_URL_ENV = "HEADROOM_TEST_REDIS_URL"
#: A worker silent this long is taken for dead and its messages redelivered (Dramatiq's default is 60 s).
HEARTBEAT_TIMEOUT_S = 3.0
#: Bounds on a worker's start (warming the queueing kernels) and on the whole 500-point operation.
WORKER_START_TIMEOUT_S = 60.0
OPERATION_TIMEOUT_S = 120.0
#: How long an idle worker may take to stop on SIGTERM (its consumers wait up to 1 s for messages).
STOP_TIMEOUT_S = 20.0
#: 50 rates × 10 TPOT targets of an 8B model on H100s: about 20 ms a point in process, all feasible.
SWEEP_500: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": SHAPE,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "verify": False,
    "sweep": {
        "arrival_rate_range": {"start_rps": 1, "stop_rps": 200, "steps": 50},
        "slo": {"metric": "tpot_ms", "values": [30, 35, 40, 45, 50, 55, 60, 70, 80, 100]},
    },
}

pytestmark = pytest.mark.slow


@pytest.fixture
def redis_url() -> str:
    url = os.environ.get(REDIS_URL_ENV)
    if not url:
        reason = f"Redis tests need {REDIS_URL_ENV} (e.g. redis://127.0.0.1:6379/0)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so they must run, not skip")
        pytest.skip(reason)
    return url


@pytest.fixture
def broker_env(redis_url: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of the API and its workers: one SQLite file, Redis under a fresh namespace
    (its keys deleted after), short heartbeats, maintenance on every broker command."""
    namespace = f"headroom-test-{uuid.uuid4().hex[:12]}"
    yield {
        "HEADROOM_BROKER_URL": redis_url,
        "HEADROOM_BROKER_NAMESPACE": namespace,
        "HEADROOM_BROKER_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
        "HEADROOM_BROKER_MAINTENANCE_CHANCE": "1000000",
        "HEADROOM_DATABASE_URL": f"sqlite:///{tmp_path / 'headroom.db'}",
        "HEADROOM_WORKER_THREADS": "1",
    }
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        for key in client.scan_iter(f"{namespace}*"):
            client.delete(key)
    finally:
        client.close()


@contextlib.contextmanager
def worker(folder: Path, env: dict[str, str], name: str) -> Iterator[subprocess.Popen[bytes]]:
    """`headroom worker` in a process group of its own, output in a file; killed on exit."""
    log = folder / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "api.cli", "worker"], cwd=ROOT, env={**os.environ, **env, "HEADROOM_ADMIN_KEY": ADMIN_KEY},
            stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        while b"worker running" not in log.read_bytes():
            assert process.poll() is None, f"headroom worker exited {process.returncode}: {log.read_text()}"
            assert time.monotonic() < deadline, f"headroom worker did not start: {log.read_text()}"
            time.sleep(0.1)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def synchronous_sweep(database_url: str) -> dict[str, Any]:
    """The sweep computed in this process, as the synchronous route computes it."""
    body = WhatIfRequest.model_validate(SWEEP_500)
    settings = Settings(database_url=database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            inputs, pricing, engine_read = what_if._inputs_for_gpus(body, Catalog(session), settings.default_price_provider)
    finally:
        engine.dispose()
    deadline = Deadline(timeout_s=600, expires_at_s=time.monotonic() + 600)
    points = what_if.sweep_points(body, inputs, pricing, solver_time_limit_s=settings.solver_time_limit_s, deadline=deadline)
    answer = what_if.sweep_response(
        body,
        points,
        catalog_version=inputs.catalog_version,
        provider=pricing.provider,
        notes=list(pricing.notes),
        sweep_ms=0,
        engine=engine_read,
    )
    return answer.model_dump(mode="json")


def test_two_workers_on_redis_give_the_in_process_points_and_survive_a_kill_9(tmp_path: Path, broker_env: dict[str, str]) -> None:
    with (
        serve_headroom(tmp_path, env=broker_env) as served,
        httpx.Client(base_url=served.base_url, timeout=30) as client,
        worker(tmp_path, broker_env, "worker-a") as first,
        worker(tmp_path, broker_env, "worker-b") as second,
    ):
        accepted = client.post("/v1/what-if", json=SWEEP_500, headers=ASYNC)
        assert accepted.status_code == 202, accepted.text
        location = accepted.headers["Location"]
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        while (progress := client.get(location).json()["progress"])["done"] < 50:
            assert time.monotonic() < deadline, progress
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)  # mid-operation: its unacknowledged messages stay in Redis
        first.wait(timeout=10)
        while (operation := client.get(location).json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"not finished in {OPERATION_TIMEOUT_S} s: {operation['progress']}"
            time.sleep(0.1)
        assert operation["state"] == "succeeded", operation
        assert operation["progress"] == {"done": 500, "total": 500, "eta_s": None}
        second.send_signal(signal.SIGTERM)  # a clean stop: exit 0 once its threads are idle
        assert second.wait(timeout=STOP_TIMEOUT_S) == 0
        assert b"worker stopping (SIGTERM)" in (tmp_path / "worker-b.log").read_bytes()
    expected = synchronous_sweep(broker_env["HEADROOM_DATABASE_URL"])
    assert without_timings(operation["result"]) == without_timings(expected)


def test_a_fleet_plans_tables_fan_out_over_two_workers_on_redis_to_the_synchronous_plan(
    tmp_path: Path, broker_env: dict[str, str]
) -> None:
    """FLEET_SHAPES' 2 shapes × 2 GPU types: four table units spread over two worker processes,
    the MILP's unit sent once all four are stored; the plan equals the one the API answers at once."""
    with (
        serve_headroom(tmp_path, env=broker_env) as served,
        httpx.Client(base_url=served.base_url, timeout=60) as client,
        worker(tmp_path, broker_env, "worker-a"),
        worker(tmp_path, broker_env, "worker-b"),
    ):
        accepted = client.post("/v1/fleet-plans", json=FLEET_SHAPES, headers=ASYNC)
        assert accepted.status_code == 202, accepted.text
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        while (operation := client.get(accepted.headers["Location"]).json())["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, f"not finished in {OPERATION_TIMEOUT_S} s: {operation['progress']}"
            time.sleep(0.1)
        assert operation["state"] == "succeeded", operation
        assert operation["progress"] == {"done": 5, "total": 5, "eta_s": None}
        synchronous = client.post("/v1/fleet-plans", json=FLEET_SHAPES, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert synchronous.status_code == 201, synchronous.text
    assert without_fleet_timings(operation["result"]) == without_fleet_timings(synchronous.json())


def test_an_operation_queued_before_an_api_restart_is_reported_after_it_and_run_by_a_later_worker(
    tmp_path: Path, broker_env: dict[str, str]
) -> None:
    """No worker yet: a sweep is queued (its 20 messages in Redis), the API is killed (SIGKILL) and
    started again; the new process reports the operation as it was (queued, 0/20, not resumed: the
    messages are the broker's, not the process's), and a worker started afterwards runs it to the
    synchronous route's points."""
    with serve_headroom(tmp_path, env=broker_env) as served, httpx.Client(base_url=served.base_url, timeout=30) as client:
        accepted = client.post("/v1/what-if", json=SWEEP, headers=ASYNC)
        assert accepted.status_code == 202, accepted.text
        location = accepted.headers["Location"]
        os.killpg(served.process.pid, signal.SIGKILL)
        served.process.wait(timeout=10)
    with serve_headroom(tmp_path, env=broker_env) as served, httpx.Client(base_url=served.base_url, timeout=30) as client:
        before = client.get(location).json()
        assert (before["state"], before["progress"]["done"], before["progress"]["total"], before["attempts"]) == (
            "queued", 0, 20, 1,
        ), before  # fmt: skip
        with worker(tmp_path, broker_env, "worker-late"):
            deadline = time.monotonic() + OPERATION_TIMEOUT_S
            while (operation := client.get(location).json())["state"] in ("queued", "running"):
                assert time.monotonic() < deadline, f"not finished in {OPERATION_TIMEOUT_S} s: {operation['progress']}"
                time.sleep(0.1)
        assert operation["state"] == "succeeded", operation
        synchronous = client.post("/v1/what-if", json=SWEEP, headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert synchronous.status_code == 200, synchronous.text
    assert without_timings(operation["result"]) == without_timings(synchronous.json())


def test_operations_a_broker_lost_are_sent_again_by_operations_resume(
    tmp_path: Path, broker_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Redis loses its data (the namespace's keys deleted) while a sweep is queued: its 20 messages
    are gone. `headroom operations resume --idle 3600` leaves it (changed within the hour);
    `--idle 0` sends its units again, and a worker started then runs it to the end."""
    import redis

    for name, value in broker_env.items():
        monkeypatch.setenv(name, value)
    with serve_headroom(tmp_path, env=broker_env) as served, httpx.Client(base_url=served.base_url, timeout=30) as client:
        location = client.post("/v1/what-if", json=SWEEP, headers=ASYNC).headers["Location"]
        lost = redis.Redis.from_url(broker_env["HEADROOM_BROKER_URL"])
        try:
            keys = list(lost.scan_iter(f"{broker_env['HEADROOM_BROKER_NAMESPACE']}*"))
            assert keys, "the sweep's messages were in Redis"
            lost.delete(*keys)
        finally:
            lost.close()
        capsys.readouterr()
        assert main(["operations", "resume", "--idle", "3600"]) == 0
        assert json.loads(capsys.readouterr().out) == {"resumed": 0}
        assert main(["operations", "resume", "--idle", "0"]) == 0
        assert json.loads(capsys.readouterr().out) == {"resumed": 1}
        with worker(tmp_path, broker_env, "worker-after-loss"):
            deadline = time.monotonic() + OPERATION_TIMEOUT_S
            while (operation := client.get(location).json())["state"] in ("queued", "running"):
                assert time.monotonic() < deadline, f"not finished in {OPERATION_TIMEOUT_S} s: {operation['progress']}"
                time.sleep(0.1)
    assert operation["state"] == "succeeded", operation
    assert operation["progress"] == {"done": 20, "total": 20, "eta_s": None} and operation["attempts"] == 2
