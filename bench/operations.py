"""What a what-if point costs, for the threshold past which POST /v1/what-if answers 202 and runs
as an operation (api/tasks.py, docs/operations.md); and what the engine costs and gains.

`--per-point` plans a 70B model over every GPU type of the shipped reference catalog at 20 arrival
rates (1 … 400 req/s, log-spaced), in process on a fresh seeded SQLite database, the planner's
caches cold at the start as a new sweep would find them, with `verify` false and then true, and
prints the mean and the slowest point's plan time for each. The mean is what the service's
estimate multiplies by a sweep's points.

    .venv/bin/python -m bench.operations --per-point

`--workers REDIS_URL` runs a 1,000-point sweep (llama-3.1-8b on H100s, 50 rates × 20 TPOT targets,
verify false) in process, then as an operation on that Redis with 1 and then 2 `headroom worker`
processes of one thread each (a fresh namespace and fresh worker processes each time), and prints
each wall time, the speed-up of 2 workers over 1, and the engine's overhead per task: (1 worker's
time − in-process time) / points. The operation's time runs from its creation to its
`finished_at`, the workers already started and warm.

    .venv/bin/python -m bench.operations --workers redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from api import what_if
from api.observability import Deadline
from api.schemas.what_if import WhatIfRequest
from api.settings import Settings
from api.tasks import TaskEngine
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.operations import Operations
from catalog.repository import Catalog

#: A sweep finance would ask for: a 70B chat model, every GPU type, rates from 1 to 400 req/s.
PER_POINT_SWEEP: dict[str, Any] = {
    "model": "llama-3.1-70b",
    "workload": {"prompt_tokens": {"mean": 1000, "p99": 4000}, "output_tokens": {"mean": 250, "p99": 1000}},
    "slo": {"ttft_ms": 2000, "tpot_ms": 80},
    "sweep": {"arrival_rate_range": {"start_rps": 1, "stop_rps": 400, "steps": 20, "spacing": "log"}},
}


def per_point_cost(database_url: str, *, verify: bool) -> dict[str, float]:
    """Mean and slowest plan time of the sweep's points (s), caches cold at its start."""
    body = WhatIfRequest.model_validate({**PER_POINT_SWEEP, "verify": verify})
    settings = Settings(database_url=database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            inputs, pricing = what_if._inputs_for_gpus(body, Catalog(session), settings.default_price_provider)
    finally:
        engine.dispose()
    deadline = Deadline(timeout_s=3600, expires_at_s=time.monotonic() + 3600)
    started = time.perf_counter()
    points = what_if.sweep_points(body, inputs, pricing, solver_time_limit_s=settings.solver_time_limit_s, deadline=deadline)
    wall_s = time.perf_counter() - started
    plan_s = [point["plan_ms"] / 1e3 for point in points]
    return {"points": len(points), "mean_s": statistics.fmean(plan_s), "max_s": max(plan_s), "wall_s": wall_s}


#: The benchmark's sweep: 1,000 cheap points (about 20 ms each in process), all feasible.
SWEEP_1000: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}},
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"]},
    "verify": False,
    "sweep": {
        "arrival_rate_range": {"start_rps": 1, "stop_rps": 200, "steps": 50},
        "slo": {"metric": "tpot_ms", "values": [30 + 4 * i for i in range(20)]},
    },
}
#: Bound on one measured operation.
OPERATION_TIMEOUT_S = 600.0


def in_process_s(database_url: str) -> float:
    body = WhatIfRequest.model_validate(SWEEP_1000)
    settings = Settings(database_url=database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            inputs, pricing = what_if._inputs_for_gpus(body, Catalog(session), settings.default_price_provider)
    finally:
        engine.dispose()
    deadline = Deadline(timeout_s=3600, expires_at_s=time.monotonic() + 3600)
    started = time.perf_counter()
    what_if.sweep_points(body, inputs, pricing, solver_time_limit_s=settings.solver_time_limit_s, deadline=deadline)
    return time.perf_counter() - started


@contextlib.contextmanager
def workers(count: int, env: dict[str, str], folder: Path) -> Iterator[None]:
    """`count` headroom worker processes of one thread, started and ready; killed after."""
    processes = []
    for index in range(count):
        log = folder / f"worker-{uuid.uuid4().hex[:6]}-{index}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "api.cli", "worker", "--threads", "1"], env={**os.environ, **env},
                stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        processes.append((process, log))
    try:
        for process, log in processes:
            while b"worker running" not in log.read_bytes():
                if process.poll() is not None:
                    raise RuntimeError(log.read_text())
                time.sleep(0.1)
        yield
    finally:
        for process, _log in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def operation_s(database_url: str, redis_url: str, worker_count: int, folder: Path) -> float:
    """The 1,000-point sweep as an operation on `worker_count` workers: creation to finished_at."""
    namespace = f"headroom-bench-{uuid.uuid4().hex[:8]}"
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_BROKER_URL": redis_url, "HEADROOM_BROKER_NAMESPACE": namespace}
    settings = Settings(database_url=database_url, broker_url=redis_url, broker_namespace=namespace)
    tasks = TaskEngine(settings)
    body = WhatIfRequest.model_validate(SWEEP_1000)
    with workers(worker_count, env, folder):
        operation = tasks.submit(
            kind=what_if.OPERATION_KIND, request=what_if.operation_request(body, settings),
            units_total=what_if.sweep_unit_count(body),
        )  # fmt: skip
        engine = make_engine(database_url)
        deadline = time.monotonic() + OPERATION_TIMEOUT_S
        try:
            while True:
                with make_session_factory(engine)() as session:
                    now = Operations(session).get(operation.id)
                if now.state not in ("queued", "running"):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not finished in {OPERATION_TIMEOUT_S} s: {now.units_done}/{now.units_total}")
                time.sleep(0.2)
        finally:
            engine.dispose()
    if now.state != "succeeded" or now.finished_at is None:
        raise RuntimeError(f"operation {now.state}: {now.problem}")
    return (now.finished_at - now.created_at).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-point", action="store_true", help="a what-if point's plan time, verify false and true")
    parser.add_argument("--workers", metavar="REDIS_URL", help="a 1,000-point sweep in process and on 1 and 2 workers")
    args = parser.parse_args()
    if not args.per_point and not args.workers:
        parser.error("choose a measurement: --per-point or --workers REDIS_URL")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
        engine.dispose()
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        if args.workers:
            points = WhatIfRequest.model_validate(SWEEP_1000).sweep.point_count()
            local_s = in_process_s(url)
            one_s = operation_s(url, args.workers, 1, Path(folder))
            two_s = operation_s(url, args.workers, 2, Path(folder))
            print(f"{points} points  in process {local_s:.1f} s  1 worker {one_s:.1f} s  2 workers {two_s:.1f} s")
            print(f"speed-up of 2 workers over 1: {one_s / two_s:.2f}x")
            print(f"engine overhead per task: {(one_s - local_s) / points * 1e3:.1f} ms")
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            return
        for verify in (False, True):
            cost = per_point_cost(url, verify=verify)
            print(
                f"verify={str(verify).lower():5}  points={cost['points']:.0f}  mean={cost['mean_s']:.3f} s/point  "
                f"slowest={cost['max_s']:.3f} s  sweep={cost['wall_s']:.1f} s"
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
