"""GET /metrics over several worker processes (issue 21): with PROMETHEUS_MULTIPROC_DIR set before
they start, every process writes its values to files there and /metrics sums them all, whichever
process answers it. prometheus_client reads the variable once, at its import, so every process
here is a real subprocess with its own interpreter; each wait is bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from api.observability import MULTIPROC_DIR_ENV, MetricsRegistry
from tests.api.conftest import ROOT, SERVE_STARTUP_TIMEOUT_S, ServedHeadroom, free_port
from tests.api.test_observability import EXPOSITION_SHAPE, HTTP_LE, WORK_LE, exposition_shape, parse_exposition, sample

#: Bound on one subprocess: an interpreter importing the app, a few in-process requests, exit.
PROCESS_TIMEOUT_S = 120.0

#: A process that serves `healthz` GET /healthz requests and records planner work, then exits
#: (argv: database URL, healthz, plans, then solver and simulation seconds as comma lists); with
#: `--scrape` it prints GET /metrics instead.
_WORKER = textwrap.dedent(
    """
    import sys
    from fastapi.testclient import TestClient
    from api.app import create_app
    from api.observability import record_plan_computed, record_simulation_time, record_solver_time
    from api.settings import Settings

    url, healthz, plans, solver_s, simulation_s = sys.argv[1:6]
    app = create_app(Settings(database_url=url))
    client = TestClient(app)
    for _ in range(int(healthz)):
        assert client.get("/healthz").status_code == 200
    record_plan_computed(app, int(plans))
    for seconds in filter(None, solver_s.split(",")):
        record_solver_time(app, float(seconds))
    for seconds in filter(None, simulation_s.split(",")):
        record_simulation_time(app, float(seconds))
    if "--scrape" in sys.argv:
        response = client.get("/metrics")
        assert response.status_code == 200
        sys.stdout.write(response.text)
    """
)


def _environment(metrics_dir: Path, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        MULTIPROC_DIR_ENV: str(metrics_dir),
        "HEADROOM_DATABASE_URL": f"sqlite:///{tmp_path / 'headroom.db'}",
        "HEADROOM_LOG_LEVEL": "warning",
    }


def _start_worker(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", _WORKER, env["HEADROOM_DATABASE_URL"], *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> str:
    try:
        stdout, stderr = process.communicate(timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate(timeout=PROCESS_TIMEOUT_S)
        raise
    assert process.returncode == 0, stderr
    return stdout


@pytest.mark.slow
def test_one_scrape_sums_the_processes_that_wrote_to_the_directory(tmp_path: Path) -> None:
    """Two processes write at once, then exit; a third scrapes. Hand-computed: 3 + 4 GET /healthz,
    2 + 5 plans, solves of 0.3 s (le=0.5, not le=0.25) and 45 s (le=60 only), one 2 ms simulation."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = _environment(metrics_dir, tmp_path)
    writers = [_start_worker(env, "3", "2", "0.3", ""), _start_worker(env, "4", "5", "45.0", "0.002")]
    for writer in writers:
        _finish(writer)
    value_files = {path.name for path in metrics_dir.glob("*.db")}
    assert {f"counter_{w.pid}.db" for w in writers} | {f"histogram_{w.pid}.db" for w in writers} <= value_files

    text = _finish(_start_worker(env, "0", "0", "", "", "--scrape"))
    shape, le_values = exposition_shape(text)
    assert shape == EXPOSITION_SHAPE, "the help texts, types and labels survive the files"
    assert le_values == {
        "headroom_http_request_duration_seconds_bucket": HTTP_LE,
        "headroom_solver_seconds_bucket": WORK_LE,
        "headroom_simulation_seconds_bucket": WORK_LE,
    }
    samples = parse_exposition(text)
    healthz = {"method": "GET", "route": "/healthz"}
    assert sample(samples, "headroom_http_requests_total", **healthz, status="200") == 7
    assert sample(samples, "headroom_http_request_duration_seconds_count", **healthz) == 7
    assert sample(samples, "headroom_http_request_duration_seconds_bucket", **healthz, le="+Inf") == 7
    assert sample(samples, "headroom_plans_computed_total") == 7
    assert sample(samples, "headroom_solver_seconds_count") == 2
    assert sample(samples, "headroom_solver_seconds_sum") == pytest.approx(45.3)
    assert sample(samples, "headroom_solver_seconds_bucket", le="0.25") == 0
    assert sample(samples, "headroom_solver_seconds_bucket", le="0.5") == 1
    assert sample(samples, "headroom_solver_seconds_bucket", le="30.0") == 1
    assert sample(samples, "headroom_solver_seconds_bucket", le="60.0") == 2
    assert sample(samples, "headroom_simulation_seconds_count") == 1
    assert sample(samples, "headroom_simulation_seconds_bucket", le="0.005") == 1
    assert 'headroom_http_requests_total{method="GET",route="/healthz",status="200"} 7\n' in text


def test_setting_the_directory_after_prometheus_client_was_imported_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This test process imported prometheus_client without the variable: its values stay in
    memory, so a /metrics reading the directory would miss them. Refused rather than wrong."""
    assert MetricsRegistry().multiprocess is False
    monkeypatch.setenv(MULTIPROC_DIR_ENV, str(tmp_path))
    with pytest.raises(RuntimeError, match=MULTIPROC_DIR_ENV):
        MetricsRegistry()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_uvicorn_workers_share_one_count(tmp_path: Path) -> None:
    """The documented deployment (docs/reliability.md): `uvicorn --factory api.app:create_app
    --workers 2` over an emptied directory. Both workers keep files there, and every scrape, which
    either worker may answer, counts all 12 requests, whichever worker served them."""
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    port = free_port()
    log_path = tmp_path / "uvicorn.out"
    command = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app", "--workers", "2"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
            cwd=ROOT, env=_environment(metrics_dir, tmp_path), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    served = ServedHeadroom(base_url=f"http://127.0.0.1:{port}", process=process, stdout_path=log_path, stderr_path=log_path)
    try:
        served.wait_ready("/healthz")
        deadline = time.monotonic() + SERVE_STARTUP_TIMEOUT_S
        while len(list(metrics_dir.glob("counter_*.db"))) < 2:  # the second worker may still be importing
            assert time.monotonic() < deadline and process.poll() is None, served.output()
            time.sleep(0.1)
        for _ in range(11):  # a new connection each: the workers take turns accepting
            assert httpx.get(f"{served.base_url}/healthz", timeout=30.0).status_code == 200
        scrapes = [parse_exposition(httpx.get(f"{served.base_url}/metrics", timeout=30.0).text) for _ in range(6)]
    finally:
        served.stop()
    healthz = {"method": "GET", "route": "/healthz", "status": "200"}
    assert [sample(samples, "headroom_http_requests_total", **healthz) for samples in scrapes] == [12] * 6, served.output()
    scraped = [
        sample(samples, "headroom_http_requests_total", method="GET", route="/metrics", status="200") for samples in scrapes[1:]
    ]
    assert scraped == [1, 2, 3, 4, 5], "each scrape counts the ones before it"
