"""What a what-if point costs, for the threshold past which POST /v1/what-if answers 202 and runs
as an operation (api/tasks.py, docs/operations.md).

`--per-point` plans a 70B model over every GPU type of the shipped reference catalog at 20 arrival
rates (1 … 400 req/s, log-spaced), in process on a fresh seeded SQLite database, the planner's
caches cold at the start as a new sweep would find them, with `verify` false and then true, and
prints the mean and the slowest point's plan time for each. The mean is what the service's
estimate multiplies by a sweep's points.

    .venv/bin/python -m bench.operations --per-point
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from api import what_if
from api.observability import Deadline
from api.schemas.what_if import WhatIfRequest
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-point", action="store_true", help="a what-if point's plan time, verify false and true")
    args = parser.parse_args()
    if not args.per_point:
        parser.error("choose a measurement: --per-point")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
        engine.dispose()
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        for verify in (False, True):
            cost = per_point_cost(url, verify=verify)
            print(
                f"verify={str(verify).lower():5}  points={cost['points']:.0f}  mean={cost['mean_s']:.3f} s/point  "
                f"slowest={cost['max_s']:.3f} s  sweep={cost['wall_s']:.1f} s"
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
