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

`--per-table` computes every candidate table of FLEET_50X24 (12 distinct shapes × every GPU type
of the reference catalog) one by one in process, the queueing caches cleared first, and prints
the mean and slowest table's time: the cost per table the fleet plan's estimate multiplies
(api/fleet_operation.py TABLE_COST_S).

    .venv/bin/python -m bench.operations --per-table

`--per-pool-plan` times one planner/plan_disagg.py run (verify false) as a fleet pool option makes
them (planner/fleet_pools.py), for FLEET_50X24's shapes with a TTFT target at their lowest, middle
and highest demand, on each GPU type alone and on all of them together, caches cleared first: the
cost per run the fleet plan's estimate multiplies (api/fleet_operation.py POOL_PLAN_COST_S).
    .venv/bin/python -m bench.operations --per-pool-plan
`--fleet REDIS_URL` plans FLEET_50X24 (50 workloads × 24 hourly periods) in process (the
synchronous route's `plan_fleet`, its tables in the table worker processes, caches cold), then as
an operation on that Redis with 1 and then 2 `headroom worker` processes of one thread each, and
prints each wall time and the plan's cost (the same every time).

    .venv/bin/python -m bench.operations --fleet redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import contextlib
import math
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

from api import fleet_inputs, fleet_operation, fleet_plans, fleet_tables, what_if
from api.disagg_plans import LINK
from api.observability import Deadline
from api.schemas.fleet_plans import FleetPlanRequest
from api.schemas.what_if import WhatIfRequest
from api.settings import Settings
from api.tasks import TaskEngine
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.operations import Operations
from catalog.repository import Catalog
from planner.errors import InfeasiblePlanError, UnstableLoadError
from planner.fleet_candidates import CandidateTable, clear_caches, gpu_candidate_table, merged_tables
from planner.plan_disagg import plan_disaggregated

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


def operation_s(database_url: str, redis_url: str, worker_count: int, folder: Path, *, fleet: bool = False) -> tuple[float, Any]:
    """The 1,000-point sweep (or with `fleet` FLEET_50X24) as an operation on `worker_count`
    workers: creation to finished_at, and its result."""
    namespace = f"headroom-bench-{uuid.uuid4().hex[:8]}"
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_BROKER_URL": redis_url, "HEADROOM_BROKER_NAMESPACE": namespace}
    settings = Settings(database_url=database_url, broker_url=redis_url, broker_namespace=namespace)
    tasks = TaskEngine(settings)
    with workers(worker_count, env, folder):
        if fleet:
            engine = make_engine(database_url)
            try:
                with make_session_factory(engine)() as session:
                    body = FleetPlanRequest.model_validate(fleet_50x24())
                    operation = fleet_operation.start_operation(body, Catalog(session), settings, tasks)
            finally:
                engine.dispose()
        else:
            sweep = WhatIfRequest.model_validate(SWEEP_1000)
            operation = tasks.submit(
                kind=what_if.OPERATION_KIND, request=what_if.operation_request(sweep, settings),
                units_total=what_if.sweep_unit_count(sweep),
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
    return (now.finished_at - now.created_at).total_seconds(), now.result


HOURS = 24
#: Request mixes and SLOs (illustrative, as bench/fleet_api_benchmark.py's).
MIXES: dict[str, dict[str, Any]] = {
    "chat": {"prompt_tokens": {"mean": 1000, "p99": 4000}, "output_tokens": {"mean": 250, "p99": 1000},
             "slo": {"ttft_ms": 2000, "tpot_ms": 60}},
    "summarise": {"prompt_tokens": {"mean": 3000, "p99": 8000}, "output_tokens": {"mean": 300, "p99": 800}, "slo": {"e2e_s": 60}},
    "code": {"prompt_tokens": {"mean": 2000, "p99": 6000}, "output_tokens": {"mean": 200, "p99": 600},
             "slo": {"ttft_ms": 1000, "tpot_ms": 40}},
    "rag": {"prompt_tokens": {"mean": 4000, "p99": 8000}, "output_tokens": {"mean": 300, "p99": 900},
            "slo": {"ttft_ms": 3000, "tpot_ms": 80}},
}  # fmt: skip
FLEET_MODELS = ("llama-3.1-8b", "qwen2.5-7b", "llama-3.1-70b")


def fleet_50x24() -> dict[str, Any]:
    """50 workloads × 24 hourly periods: 3 models × 4 mixes = 12 distinct shapes (the request bound,
    MAX_DISTINCT_SHAPES), each in up to 5 regions whose diurnal peaks are 2 hours apart, on every
    catalog GPU type with the default precisions and search grid; two scarce GPU types capped."""
    shapes = [(model, mix) for model in FLEET_MODELS for mix in MIXES]
    workloads = []
    for index in range(50):
        model, mix = shapes[index % len(shapes)]
        region = index // len(shapes)
        peak = (30.0 if model != "llama-3.1-70b" else 8.0) * (1 - 0.1 * region)
        demand = [round(peak * (0.55 + 0.45 * math.cos(2 * math.pi * (h - 14 - 2 * region) / HOURS)), 4) for h in range(HOURS)]
        workloads.append({"name": f"{model}-{mix}-r{region}", "model": model, **MIXES[mix], "demand_rps": demand})
    return {"workloads": workloads, "inventory": {"h100-sxm": 64, "h200": 48}}


def fleet_in_process_s(database_url: str) -> tuple[float, str]:
    """FLEET_50X24 as the synchronous route plans it (tables in the table worker processes), caches
    cold: wall time and cost per day."""
    body = FleetPlanRequest.model_validate(fleet_50x24())
    fleet_tables.clear_table_cache()
    fleet_tables.restart_table_workers()
    clear_caches()
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            started = time.perf_counter()
            outcome = fleet_plans.plan_fleet(
                body, Catalog(session), solver_time_limit_s=Settings(database_url=database_url).solver_time_limit_s
            )
            wall_s = time.perf_counter() - started
    finally:
        engine.dispose()
        fleet_tables.stop_table_workers()
    solver = outcome.plan.solver
    summary = (
        f"${outcome.plan.cost.usd_per_day:.2f}/day  tables {outcome.candidates_ms / 1e3:.1f} s wall, MILP {solver.solve_s:.1f} s "
        f"({solver.status}, gap {solver.mip_gap or 0:.2%})"
    )
    return wall_s, summary


def per_table_cost(database_url: str) -> dict[str, float]:
    """Mean and slowest time (s) of FLEET_50X24's candidate tables, one (shape, GPU type) at a time, caches cold."""
    body = FleetPlanRequest.model_validate(fleet_50x24())
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            inputs, models = fleet_inputs.fleet_inputs(body, Catalog(session))
    finally:
        engine.dispose()
    clear_caches()
    grid = body.search.to_grid()
    times = []
    tables: dict[tuple[Any, ...], CandidateTable] = {}
    for shape in dict.fromkeys((w.model, w.to_workload().at_rate(1.0), w.slo.to_slo()) for w in body.workloads):
        model, workload, slo = shape
        parts = []
        for gpu in inputs.gpus:
            started = time.perf_counter()
            parts.append(
                gpu_candidate_table(
                    model=models[model], gpu=gpu, precisions=inputs.precisions, workload=workload, slo=slo, grid=grid
                )
            )
            times.append(time.perf_counter() - started)
        tables[shape] = merged_tables(parts)
    started = time.perf_counter()
    outcome = fleet_plans.plan_with_tables(
        body, inputs, models, started=started, deadline=None, solver_time_limit_s=Settings(database_url=database_url).solver_time_limit_s,
        tables=[tables[(w.model, w.to_workload().at_rate(1.0), w.slo.to_slo())] for w in body.workloads], candidates_ms=0.0,
    )  # fmt: skip
    milp_s = time.perf_counter() - started
    workload_periods = len(body.workloads) * body.periods
    return {
        "tables": len(times), "mean_s": statistics.fmean(times), "max_s": max(times), "wall_s": sum(times),
        "milp_s": milp_s, "workload_periods": workload_periods, "milp_status": outcome.plan.solver.status,
        "milp_gap": outcome.plan.solver.mip_gap or 0.0,
    }  # fmt: skip


def per_pool_plan_cost(database_url: str) -> dict[str, float]:
    """Mean and slowest time (s) of one planner/plan_disagg.py run (verify false) as planner/fleet_pools.py makes them
    for FLEET_50X24's shapes that have a TTFT target (3 models × chat, code, rag), at each shape's lowest, middle and
    highest demand: on each GPU type alone and on all of them together, the queueing caches cleared first."""
    body = FleetPlanRequest.model_validate(fleet_50x24())
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            inputs, models = fleet_inputs.fleet_inputs(body, Catalog(session))
    finally:
        engine.dispose()
    clear_caches()
    tps = body.search.to_grid().tp_degrees
    alone: list[float] = []
    together: list[float] = []
    cpu: dict[int, list[float]] = {id(alone): [], id(together): []}  # process CPU time, which other processes' load leaves
    shapes = {(w.model, w.to_workload().at_rate(1.0), w.slo.to_slo()): w.demand_rps for w in body.workloads}
    for (model, workload, slo), demand in shapes.items():
        if slo.ttft_s is None:
            continue
        ordered = sorted(set(demand))
        for rate in (ordered[0], ordered[len(ordered) // 2], ordered[-1]):
            for group, times in [*(((gpu,), alone) for gpu in inputs.gpus), (tuple(inputs.gpus), together)]:
                started, started_cpu = time.perf_counter(), time.process_time()
                with contextlib.suppress(InfeasiblePlanError, UnstableLoadError):
                    plan_disaggregated(
                        gpus=group, model=models[model], precisions=inputs.precisions, tps=tps,
                        workload=workload.at_rate(rate), slo=slo, link=LINK, verify=False,
                    )  # fmt: skip
                times.append(time.perf_counter() - started)
                cpu[id(times)].append(time.process_time() - started_cpu)
    return {
        "gpu_types": len(inputs.gpus), "alone_runs": len(alone), "alone_mean_s": statistics.fmean(alone),
        "alone_max_s": max(alone), "together_runs": len(together), "together_mean_s": statistics.fmean(together),
        "together_max_s": max(together), "alone_cpu_mean_s": statistics.fmean(cpu[id(alone)]),
        "together_cpu_mean_s": statistics.fmean(cpu[id(together)]),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-point", action="store_true", help="a what-if point's plan time, verify false and true")
    parser.add_argument("--workers", metavar="REDIS_URL", help="a 1,000-point sweep in process and on 1 and 2 workers")
    parser.add_argument("--per-table", action="store_true", help="a fleet candidate table's time (one shape, one GPU type)")
    parser.add_argument(
        "--per-pool-plan", action="store_true", help="a fleet pool option's plan_disagg run (one GPU group, one demand)"
    )
    parser.add_argument(
        "--fleet", metavar="REDIS_URL", help="a 50-workload × 24-period fleet plan in process and on 1 and 2 workers"
    )
    args = parser.parse_args()
    if not (args.per_point or args.workers or args.per_table or args.per_pool_plan or args.fleet):
        parser.error("choose a measurement: --per-point, --workers REDIS_URL, --per-table, --per-pool-plan or --fleet REDIS_URL")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'bench.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
        engine.dispose()
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        if args.per_pool_plan:
            cost = per_pool_plan_cost(url)
            print(
                f"plan_disagg on one GPU type: {cost['alone_runs']:.0f} runs, mean={cost['alone_mean_s']:.4f} s, "
                f"slowest={cost['alone_max_s']:.3f} s; on all {cost['gpu_types']:.0f} types: {cost['together_runs']:.0f} runs, "
                f"mean={cost['together_mean_s']:.4f} s, slowest={cost['together_max_s']:.3f} s"
            )
            print(
                f"CPU time per run: one type {cost['alone_cpu_mean_s']:.4f} s, all types {cost['together_cpu_mean_s']:.4f} s; "
                f"load average after: {os.getloadavg()[0]:.2f}"
            )
            return
        if args.per_table:
            cost = per_table_cost(url)
            print(
                f"tables={cost['tables']:.0f}  mean={cost['mean_s']:.3f} s/table  slowest={cost['max_s']:.3f} s  "
                f"all={cost['wall_s']:.1f} s"
            )
            print(
                f"MILP of {cost['workload_periods']:.0f} workload-periods: {cost['milp_s']:.1f} s "
                f"({cost['milp_s'] / cost['workload_periods'] * 1e3:.1f} ms each; {cost['milp_status']}, gap {cost['milp_gap']:.2%})"
            )
            print(f"load average after: {os.getloadavg()[0]:.2f}")
            return
        if args.fleet:
            local_s, local_cost = fleet_in_process_s(url)
            print(f"fleet 50x24 in process: {local_s:.1f} s  {local_cost}  (load {os.getloadavg()[0]:.2f})")
            for count in (1, 2):
                wall_s, answer = operation_s(url, args.fleet, count, Path(folder), fleet=True)
                print(f"fleet 50x24 on {count} worker(s): {wall_s:.1f} s  ${answer['cost']['usd_per_day']:.2f}/day  "
                      f"tables {answer['candidate_search']['ms'] / 1e3:.1f} s of work, MILP {answer['solver']['solve_ms'] / 1e3:.1f} s "
                      f"({answer['solver']['status']}, gap {answer['solver']['gap'] or 0:.2%})  (load {os.getloadavg()[0]:.2f})")  # fmt: skip
            return
        if args.workers:
            points = WhatIfRequest.model_validate(SWEEP_1000).sweep.point_count()
            local_s = in_process_s(url)
            one_s, _ = operation_s(url, args.workers, 1, Path(folder))
            two_s, _ = operation_s(url, args.workers, 2, Path(folder))
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
