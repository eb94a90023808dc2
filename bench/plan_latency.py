"""Latency of POST /v1/plans over varied requests on the shipped reference catalog.

Runs the real app in process (httpx ASGI transport, a fresh SQLite database seeded with
catalog/data/), posts every request of `REQUESTS` with `verify` false and then true, and prints
p50/p99 wall time and CPU time (`time.process_time()`, which a busy shared machine does not
inflate the way it inflates wall time) per mode, plus each request's times and how many queueing
predictions it made; the load average is recorded before and after.
The planner's process-wide caches are cleared before every request (`--warm` keeps them), so each
number is a cold plan, as a new forecast would see it; one untimed request first warms the process
itself (imports, the solver library), as a running service is.

    .venv/bin/python -m bench.plan_latency [--warm] [--repeat N] [--json results.json] [--responses DIR]
    .venv/bin/python -m bench.plan_latency --grid-ab [--verify]
    .venv/bin/python -m bench.plan_latency --prefix-reuse   # every request's workload with PREFIX_REUSE
    .venv/bin/python -m bench.plan_latency --prefix-ab [--verify]   # without against with it, interleaved
    .venv/bin/python -m bench.plan_latency --prefix-dump plans.json   # every prefix plan, both verify settings
    .venv/bin/python -m bench.plan_latency --prefix-compare before.json after.json   # field by field

`--prefix-dump` plans the 24 requests with PREFIX_REUSE in process (cold, both verify settings) and
writes each `PlanResult` (`planner.plan_result.as_dict`, the timings plan_ms, solve_ms, created_at and
wall_time_s left out) or its refusal, with each plan's CPU ms; `--prefix-compare` lists the plans that
differ between two dumps (two versions of the planner: a speed change must change none), and
among them those whose decision differs (`decision`: cost, rows, cache and hit rate, verdict — a
change that only re-explains a plan is not one).

`--prefix-reuse` offers prefix caching on every request (`PREFIX_REUSE` in its workload): the plan
is then made without a cache and with each cache size (planner/plan_prefix.py), so it measures what
offering the lever costs.
    .venv/bin/python -m bench.plan_latency --topology aggregated|disaggregated|any
    .venv/bin/python -m bench.plan_latency --topology-ab [--verify]   # aggregated against any, interleaved

`--topology` sets constraints.topology on every request: separate pools honour N+1, budgets,
inventories, replica floors, GPU caps and mixed fleets, so every request is timed under each
topology (a request the pools still refuse, e.g. a pinned replica count, answers its aggregated
plan under `any` and a 422 under `disaggregated`, timed like any other answer).

`--grid-ab` isolates what the search grid costs: every request planned in process (`plan_capacity`
on the app's own planning inputs) with the grid before 2026-12-02 (batch limits to 256, chunk
budgets to 8,192) and with today's, alternately, twice each, cold, keeping each one's minimum CPU
time — the same code and the same machine load for both, which back-to-back runs of the whole
bench on a shared machine cannot give.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from api.app import create_app, freeze_startup_heap
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog
from planner import planning
from planner.errors import HeadroomError

KEY = "bench-admin-key-0123456789"


def _request(model: str, rate: float, prompt: Any, output: Any, slo: dict[str, float], **constraints: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "workload": {"arrival_rate_rps": rate, "prompt_tokens": prompt, "output_tokens": output},
        "slo": slo,
    }
    if constraints:
        body["constraints"] = constraints
    return body


CHAT_IN, CHAT_OUT = {"mean": 1000, "p99": 4000}, {"mean": 250, "p99": 1000}
RAG_IN, RAG_OUT = {"mean": 6000, "p99": 16000}, {"mean": 300, "p99": 800}
SUM_IN, SUM_OUT = {"mean": 3000, "p99": 8000}, {"mean": 400, "p99": 1000}

#: 24 requests: five models (dense 7–72 B, two MoE), chat / RAG / summarisation mixes, TTFT+TPOT,
#: TPOT-only and E2E-only SLOs, GPU subsets, N+1, budgets, inventories, a mixed fleet, a histogram.
REQUESTS: tuple[dict[str, Any], ...] = (
    _request("llama-3.1-8b", 20, CHAT_IN, CHAT_OUT, {"ttft_ms": 500, "tpot_ms": 50}),
    _request("llama-3.1-8b", 200, CHAT_IN, CHAT_OUT, {"ttft_ms": 500, "tpot_ms": 50}),
    _request("llama-3.1-8b", 5, 512, 128, {"tpot_ms": 20}),
    _request("llama-3.1-8b", 30, SUM_IN, SUM_OUT, {"e2e_s": 60}),
    _request("llama-3.1-8b", 50, CHAT_IN, CHAT_OUT, {"ttft_ms": 800, "tpot_ms": 40}, n_plus_one=True),
    _request("llama-3.1-70b", 4, RAG_IN, RAG_OUT, {"ttft_ms": 3000, "tpot_ms": 80}),
    _request("llama-3.1-70b", 10, CHAT_IN, CHAT_OUT, {"ttft_ms": 1000, "tpot_ms": 50}),
    _request("llama-3.1-70b", 2, CHAT_IN, CHAT_OUT, {"ttft_ms": 2000, "tpot_ms": 20}, gpus=["h100-sxm", "h200", "a100-80gb-sxm"]),
    _request(
        "llama-3.1-70b", 10, CHAT_IN, CHAT_OUT, {"ttft_ms": 1000, "tpot_ms": 60}, gpus=["h100-sxm"], inventory={"h100-sxm": 64}
    ),
    _request("llama-3.1-70b", 20, SUM_IN, SUM_OUT, {"e2e_s": 120}, budget_usd_per_hour=500),
    _request("qwen2.5-7b", 30, SUM_IN, SUM_OUT, {"e2e_s": 120}),
    _request("qwen2.5-7b", 100, 256, 64, {"ttft_ms": 200, "tpot_ms": 30}),
    _request("qwen2.5-72b", 5, CHAT_IN, CHAT_OUT, {"ttft_ms": 1500, "tpot_ms": 60}),
    _request(
        "qwen2.5-72b",
        5,
        CHAT_IN,
        CHAT_OUT,
        {"ttft_ms": 1500, "tpot_ms": 60},
        precisions=[{"weights": "bf16", "kv_cache": "bf16"}],
    ),
    _request("mixtral-8x7b", 10, CHAT_IN, CHAT_OUT, {"ttft_ms": 1000, "tpot_ms": 60}),
    _request("mixtral-8x7b", 40, CHAT_IN, CHAT_OUT, {"ttft_ms": 1000, "tpot_ms": 60}, min_replicas=3),
    _request("qwen3-30b-a3b", 25, CHAT_IN, CHAT_OUT, {"ttft_ms": 600, "tpot_ms": 40}),
    _request("qwen3-30b-a3b", 25, CHAT_IN, CHAT_OUT, {"tpot_ms": 30}, gpus=["l40s", "l4", "a10g"]),
    _request(
        "mistral-7b-v0.3", 15, {"tokens": [128, 512, 2048], "weights": [0.5, 0.3, 0.2]}, 200, {"ttft_ms": 400, "tpot_ms": 40}
    ),
    _request("mistral-7b-v0.3", 60, CHAT_IN, CHAT_OUT, {"ttft_ms": 700, "tpot_ms": 45}, max_gpus=16),
    _request("llama-2-13b", 8, 1500, 300, {"ttft_ms": 800, "tpot_ms": 50}),
    _request("llama-2-70b", 3, 2000, 500, {"ttft_ms": 2000, "tpot_ms": 70}),
    _request(
        "llama-3.1-8b",
        20,
        CHAT_IN,
        CHAT_OUT,
        {"ttft_ms": 500, "tpot_ms": 50},
        mixed_fleet=True,
        gpus=["h100-sxm", "a100-80gb-sxm", "l40s"],
    ),
    _request("llama-3.1-8b", 20, CHAT_IN, CHAT_OUT, {"ttft_ms": 500, "tpot_ms": 50, "percentile": 95}),
)


#: The reuse `--prefix-reuse` adds to every workload: a 512-token system prompt on half the requests and
#: 200 documents of 1,024 tokens (Zipf 1) on 40 % — a RAG-with-instructions shape, not tuned to any request.
PREFIX_REUSE: dict[str, Any] = {
    "system_prompt_tokens": 512,
    "system_prompt_fraction": 0.5,
    "distinct_prefixes": 200,
    "prefix_tokens": 1024,
    "prefix_fraction": 0.4,
    "zipf_exponent": 1.0,
}


def _with_reuse(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "workload": {**body["workload"], "prefix_reuse": PREFIX_REUSE}}


def with_topology(requests: tuple[dict[str, Any], ...], topology: str) -> tuple[dict[str, Any], ...]:
    """Every request with constraints.topology set (the pools honour the constraints they once refused)."""
    return tuple({**body, "constraints": {**body.get("constraints", {}), "topology": topology}} for body in requests)


def _clear_caches() -> None:
    """Every process-wide cache of every loaded planner module (functools caches and the shared
    prediction cache: whatever instance has a `cache_clear`), so a plan starts cold. Every module,
    not a list: when planning.py was split its caches moved to plan_predict, queueing_replica,
    queueing_sample and fleet_candidates, and a fixed list went on clearing none of them."""
    modules = [module for name, module in sorted(sys.modules.items()) if name.startswith("planner.") and module]
    for module in modules:
        for value in vars(module).values():
            if not isinstance(value, type) and callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": statistics.median(values),
        "p90": float(np.percentile(values, 90)),
        "p99": float(np.percentile(values, 99)),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def run(
    *,
    warm: bool,
    responses: Path | None = None,
    repeat: int = 1,
    requests: tuple[dict[str, Any], ...] = REQUESTS,
    gc_freeze: bool = False,
) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)  # the access log would dominate the terminal
    from tests.api.client import ApiClient

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
        engine.dispose()
        app = create_app(Settings(database_url=url, admin_key=KEY))
        client = ApiClient(app)
        headers = {"Authorization": f"Bearer {KEY}"}
        results: dict[str, Any] = {"load_average_before": os.getloadavg()}
        try:
            # one untimed plan first: the first request of a process pays imports, the solver's
            # library load and the app's first-use setup (~90 ms), which no later request sees
            client.post("/v1/plans", json={**requests[0], "verify": False}, headers=headers)
            if gc_freeze:  # what the app's lifespan does at start-up under a server (this ASGI client runs none)
                freeze_startup_heap()
            for verify in (False, True):
                rows = []
                for index, body in enumerate(requests):
                    if not warm:
                        _clear_caches()
                    walls, cpus = [], []
                    for attempt in range(repeat):
                        if attempt and not warm:
                            _clear_caches()
                        started, cpu_started = time.perf_counter(), time.process_time()
                        response = client.post("/v1/plans", json={**body, "verify": verify}, headers=headers)
                        walls.append((time.perf_counter() - started) * 1e3)
                        cpus.append((time.process_time() - cpu_started) * 1e3)
                    elapsed_ms, cpu_ms = statistics.median(walls), statistics.median(cpus)
                    answer = response.json()
                    if responses is not None:
                        responses.mkdir(parents=True, exist_ok=True)
                        (responses / f"{index:02d}-{'verify' if verify else 'no-verify'}.json").write_text(
                            json.dumps(answer, indent=1, sort_keys=True) + "\n", encoding="utf-8"
                        )
                    rows.append(
                        {
                            "request": index,
                            "model": body["model"],
                            "status": response.status_code,
                            "ms": elapsed_ms,
                            "cpu_ms": cpu_ms,
                            "predictions": answer["justification"]["candidates"]["queueing_predictions"]
                            if response.status_code == 201 and answer["justification"] is not None
                            else None,
                            "plan": None
                            if response.status_code != 201
                            else " + ".join(
                                f"{pool['replicas']} × {pool['gpu']} tp{pool['tp']} {pool['role']}"
                                for pool in answer["plan"]["pools"]
                            )
                            + f" {answer['plan']['precision']['weights']} ${answer['cost']['usd_per_hour']:.2f}/h"
                            + (" cached" if answer["plan"].get("prefix_caching") else ""),
                            "detail": answer.get("detail"),
                        }
                    )
                results["verify" if verify else "no_verify"] = {
                    "wall_ms": _summary([row["ms"] for row in rows]),
                    "cpu_ms": _summary([row["cpu_ms"] for row in rows]),
                    "requests": rows,
                }
        finally:
            client.close()
            app.state.engine.dispose()
    results["load_average_after"] = os.getloadavg()
    results["cpus"] = os.cpu_count()
    results["warm_caches"] = warm
    results["gc_freeze"] = gc_freeze
    results["repeat"] = repeat
    return results


#: The grid before the batch limits reached 4,096 and the chunk budgets 16,384 (2026-12-02).
OLD_GRID: dict[str, tuple[Any, ...]] = {"batch_limits": (8, 16, 32, 64, 128, 256), "chunk_budgets": (None, 512, 2048, 8192)}


def grid_ab(*, verify: bool) -> dict[str, Any]:
    """Each request's minimum CPU ms of two cold plans with OLD_GRID and two with today's, interleaved."""
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest

    logging.disable(logging.CRITICAL)
    times: dict[str, list[float]] = {"old": [], "new": []}
    costs: dict[str, list[float | None]] = {"old": [], "new": []}  # every run's plan cost (None: refused)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()
            for body in REQUESTS:
                request = PlanRequest.model_validate({**body, "verify": verify})
                inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                runs: dict[str, list[float]] = {"old": [], "new": []}
                for name in ("old", "new", "old", "new"):
                    grid = OLD_GRID if name == "old" else {}
                    planning_request = planning.PlanningRequest(
                        workload=request.traffic(),
                        slo=request.targets(),
                        constraints=request.constraints.to_constraints(),
                        verify=verify,
                        **grid,
                    )
                    _clear_caches()
                    started = time.process_time()
                    cost = None
                    with contextlib.suppress(HeadroomError):  # an impossible request is timed like any other
                        cost = planning.plan_capacity(planning_request, inputs).cost_usd_per_hour
                    runs[name].append((time.process_time() - started) * 1e3)
                    costs[name].append(cost)
                for name, kept in times.items():
                    kept.append(min(runs[name]))
        engine.dispose()
    differ = [i for i in range(len(REQUESTS)) if costs["old"][2 * i] != costs["new"][2 * i]]
    return {
        **{
            name: {"p50": statistics.median(values), "mean": statistics.fmean(values), "cpu_ms": values}
            for name, values in times.items()
        },
        "requests_whose_cost_differs": differ,
    }


def topology_ab(*, verify: bool, rounds: int = 2) -> dict[str, Any]:
    """Each request's minimum CPU ms over `rounds` cold plans with constraints.topology aggregated
    and `rounds` with any, interleaved (aggregated, any, aggregated, any) in one process, through the whole
    POST /v1/plans work (api.plan_service.create_plan, a dry run): the same code path and the same machine load
    for both, which back-to-back runs of the bench on a shared machine cannot give."""
    from api.plan_service import create_plan
    from api.schemas.plans import PlanRequest

    logging.disable(logging.CRITICAL)
    names = ("aggregated", "any")
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()
            bodies = {name: with_topology(REQUESTS, name) for name in names}
            create_plan(PlanRequest.model_validate({**bodies["any"][0], "verify": False, "store": False}), catalog)  # warm-up
            for index in range(len(bodies["any"])):
                runs: dict[str, list[float]] = {name: [] for name in names}
                for name in names * rounds:
                    request = PlanRequest.model_validate({**bodies[name][index], "verify": verify, "store": False})
                    _clear_caches()
                    started = time.process_time()
                    with contextlib.suppress(HeadroomError):  # an impossible request is timed like any other
                        create_plan(request, catalog)
                    runs[name].append((time.process_time() - started) * 1e3)
                for name in names:
                    times[name].append(min(runs[name]))
        engine.dispose()
    return {name: {"p50": statistics.median(v), "mean": statistics.fmean(v), "cpu_ms": v} for name, v in times.items()}


def prefix_ab(*, verify: bool, rounds: int = 2) -> dict[str, Any]:
    """Each request's minimum CPU ms over `rounds` cold plans without `prefix_reuse` and `rounds` with
    PREFIX_REUSE, interleaved (plain, reuse, plain, reuse) in one process through `plan_capacity` on
    the app's planning inputs: the same machine load for both, which back-to-back runs of the whole
    bench on a shared machine cannot give. The plain plan is planned on its own (not the prefix plan's
    inner plan, which is no longer explained when a cache wins)."""
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest

    logging.disable(logging.CRITICAL)
    names = ("plain", "prefix_reuse")
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()

            def planning_request(body: dict[str, Any]) -> tuple[planning.PlanningRequest, Any]:
                request = PlanRequest.model_validate({**body, "verify": verify})
                inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                return (
                    planning.PlanningRequest(
                        workload=request.traffic(),
                        slo=request.targets(),
                        constraints=request.constraints.to_constraints(),
                        verify=verify,
                    ),
                    inputs,
                )

            with contextlib.suppress(HeadroomError):  # warm-up: imports, the solver's library
                planning.plan_capacity(*planning_request(REQUESTS[0]))
            for body in REQUESTS:
                pair = {"plain": planning_request(body), "prefix_reuse": planning_request(_with_reuse(body))}
                runs: dict[str, list[float]] = {name: [] for name in names}
                for name in names * rounds:
                    _clear_caches()
                    started = time.process_time()
                    with contextlib.suppress(HeadroomError):  # an impossible request is timed like any other
                        planning.plan_capacity(*pair[name])
                    runs[name].append((time.process_time() - started) * 1e3)
                for name in names:
                    times[name].append(min(runs[name]))
        engine.dispose()
    llama = [i for i, body in enumerate(REQUESTS) if body["model"] == "llama-3.1-8b"]
    return {
        **{name: {"p50": statistics.median(v), "p90": float(np.percentile(v, 90)), "cpu_ms": v} for name, v in times.items()},
        "llama_3_1_8b": llama,
        "load_average_after": os.getloadavg(),
    }


#: Fields that time the plan rather than describe it (left out of `--prefix-dump`).
TIMING_FIELDS = frozenset({"plan_ms", "solve_ms", "created_at", "wall_time_s"})


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _untimed(item) for key, item in value.items() if key not in TIMING_FIELDS}
    if isinstance(value, list):
        return [_untimed(item) for item in value]
    return value


def prefix_dump() -> dict[str, Any]:
    """Every request with PREFIX_REUSE planned cold in process, verify false then true: each plan
    (`as_dict` without its timings) or its refusal, and its CPU ms."""
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest
    from planner.plan_result import as_dict

    logging.disable(logging.CRITICAL)
    plans: dict[str, Any] = {}
    cpu_ms: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            session.commit()
            for verify in (False, True):
                for index, body in enumerate((REQUESTS[0], *REQUESTS)):  # the first untimed: imports, compiled kernels
                    index -= 1
                    request = PlanRequest.model_validate({**_with_reuse(body), "verify": verify})
                    inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                    planning_request = planning.PlanningRequest(
                        workload=request.traffic(),
                        slo=request.targets(),
                        constraints=request.constraints.to_constraints(),
                        verify=verify,
                    )
                    _clear_caches()
                    key = f"{index:02d}-{'verify' if verify else 'no-verify'}"
                    started = time.process_time()
                    try:
                        plan: Any = _untimed(as_dict(planning.plan_capacity(planning_request, inputs)))
                    except HeadroomError as error:
                        plan = {"refused": type(error).__name__, "detail": str(error)}
                    if index >= 0:
                        plans[key], cpu_ms[key] = plan, (time.process_time() - started) * 1e3
        engine.dispose()
    return {"plans": plans, "cpu_ms": cpu_ms, "load_average_after": os.getloadavg()}


def prefix_compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The plans (keys) of two `prefix_dump`s that differ in any field."""
    keys = sorted(set(before["plans"]) | set(after["plans"]))
    return [key for key in keys if before["plans"].get(key) != after["plans"].get(key)]


def decision(plan: dict[str, Any]) -> tuple[Any, ...]:
    """What a dumped plan decides: its cost, each row's configuration and replicas, the cache and its
    hit rate, and the verification's verdict (or the refusal) — not the justification's figures."""
    if "refused" in plan:
        return ("refused", plan["refused"])
    cache = plan.get("prefix_caching")
    rows = tuple(
        (r["gpu"], r["tp"], r["weights_precision"], r["batch_limit"], r["chunk_tokens"], r["replicas"], r.get("draft"))
        for r in plan["rows"]
    )
    verified = None if plan.get("verification") is None else plan["verification"].get("meets_slo")
    return (
        round(plan["cost_usd_per_hour"], 6),
        rows,
        None if cache is None else (cache["cache_tokens"], round(cache["hit_rate"], 4)),
        verified,
    )


def prefix_decisions(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The plans (keys) of two `prefix_dump`s whose decision (`decision`) differs."""
    keys = sorted(set(before["plans"]) | set(after["plans"]))
    return [
        key
        for key in keys
        if decision(before["plans"].get(key, {"refused": "absent"})) != decision(after["plans"].get(key, {"refused": "absent"}))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="keep the planner's caches between requests")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--responses", type=Path, help="write every response body into this folder (to diff two versions)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="plan each request this many times (cold each time) and keep its median: a shared machine's noise",
    )
    parser.add_argument("--grid-ab", action="store_true", help="in process: today's grid against the grid before 2026-12-02")
    parser.add_argument(
        "--verify", action="store_true", help="with --grid-ab or --topology-ab: plan with the simulator's verification"
    )
    parser.add_argument("--prefix-reuse", action="store_true", help="offer prefix caching: PREFIX_REUSE in every workload")
    parser.add_argument(
        "--topology", choices=("aggregated", "disaggregated", "any"), help="constraints.topology on the requests pools accept"
    )
    parser.add_argument(
        "--topology-ab", action="store_true", help="in process: topology aggregated against any, interleaved (with --verify)"
    )
    parser.add_argument(
        "--prefix-ab", action="store_true", help="in process: without prefix_reuse against with it, interleaved (with --verify)"
    )
    parser.add_argument(
        "--gc-freeze", action="store_true", help="freeze the heap after the warm-up plan, as the app's lifespan does at start-up"
    )
    parser.add_argument("--prefix-dump", type=Path, help="write every prefix plan (both verify settings) here")
    parser.add_argument("--prefix-compare", type=Path, nargs=2, help="two --prefix-dump files: the plans that differ")
    args = parser.parse_args()
    if args.prefix_dump is not None:
        dump = prefix_dump()
        args.prefix_dump.write_text(json.dumps(dump, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        for verify in ("no-verify", "verify"):
            times = [ms for key, ms in dump["cpu_ms"].items() if key.endswith(f"-{verify}")]
            print(f"{verify}: p50 {statistics.median(times):.1f} ms cpu, total {sum(times):.0f} ms cpu")
        print(f"load average {dump['load_average_after']}")
        return
    if args.prefix_compare is not None:
        before, after = (json.loads(path.read_text(encoding="utf-8")) for path in args.prefix_compare)
        differ = prefix_compare(before, after)
        print(f"{len(differ)} of {len(set(before['plans']) | set(after['plans']))} plans differ: {', '.join(differ) or 'none'}")
        decided = prefix_decisions(before, after)
        print(f"{len(decided)} decide differently (cost, rows, cache, verdict): {', '.join(decided) or 'none'}")
        for key in decided:
            print(f"    {key}\n      before {decision(before['plans'][key])}\n      after  {decision(after['plans'][key])}")
        for key in sorted(before["cpu_ms"]):
            print(f"    {key} {before['cpu_ms'][key]:8.1f} -> {after['cpu_ms'].get(key, math.nan):8.1f} ms cpu")
        return
    if args.prefix_ab:
        ab = prefix_ab(verify=args.verify)
        plain, reuse = ab["plain"], ab["prefix_reuse"]
        for i, (a, b) in enumerate(zip(plain["cpu_ms"], reuse["cpu_ms"], strict=True)):
            print(f"    #{i:>2} {REQUESTS[i]['model']:<16} {a:8.1f} -> {b:8.1f} ms cpu ({b / a:.2f}x)")
        print(
            f"verify {args.verify}: p50 {plain['p50']:.1f} -> {reuse['p50']:.1f} ms cpu ({reuse['p50'] / plain['p50']:.2f}x), "
            f"p90 {plain['p90']:.1f} -> {reuse['p90']:.1f} ms cpu"
        )
        llama = ab["llama_3_1_8b"]
        ratios = [reuse["cpu_ms"][i] / plain["cpu_ms"][i] for i in llama]
        small = statistics.median(plain["cpu_ms"][i] for i in llama), statistics.median(reuse["cpu_ms"][i] for i in llama)
        print(
            f"llama-3.1-8b (both levers offered): {min(ratios):.2f}-{max(ratios):.2f}x per request, "
            f"p50 {small[0]:.1f} -> {small[1]:.1f} ms cpu ({small[1] / small[0]:.2f}x)"
        )
        print(f"load average {ab['load_average_after']}")
        return
    if args.topology_ab:
        ab = topology_ab(verify=args.verify)
        for name in ("aggregated", "any"):
            print(f"topology {name}, verify {args.verify}: p50 {ab[name]['p50']:.1f} ms cpu, mean {ab[name]['mean']:.1f} ms cpu")
        print(f"p50 ratio any / aggregated: {ab['any']['p50'] / ab['aggregated']['p50']:.2f}")
        print(f"load average {os.getloadavg()}")
        return
    if args.grid_ab:
        ab = grid_ab(verify=args.verify)
        for name in ("old", "new"):
            print(f"{name} grid, verify {args.verify}: p50 {ab[name]['p50']:.1f} ms cpu, mean {ab[name]['mean']:.1f} ms cpu")
        print(f"requests whose plan cost differs between the grids: {ab['requests_whose_cost_differs'] or 'none'}")
        print(f"load average {os.getloadavg()}")
        return
    chosen = REQUESTS if args.topology is None else with_topology(REQUESTS, args.topology)
    if args.prefix_reuse:
        chosen = tuple(_with_reuse(body) for body in chosen)
    results = run(warm=args.warm, responses=args.responses, repeat=max(1, args.repeat), requests=chosen, gc_freeze=args.gc_freeze)
    results["topology"] = args.topology
    results["prefix_reuse"] = args.prefix_reuse
    for mode in ("no_verify", "verify"):
        summary = results[mode]
        for kind in ("wall_ms", "cpu_ms"):
            s = summary[kind]
            print(
                f"{mode:>10} {kind[:-3]:>4}: p50 {s['p50']:8.1f} ms   p90 {s['p90']:8.1f} ms   p99 {s['p99']:8.1f} ms   "
                f"max {s['max']:8.1f} ms   mean {s['mean']:8.1f} ms"
            )
        for row in summary["requests"]:
            print(
                f"    #{row['request']:>2} {row['model']:<16} {row['status']} {row['ms']:8.1f} ms wall {row['cpu_ms']:8.1f} ms cpu  "
                f"{row['predictions'] if row['predictions'] is not None else '-':>5} predictions  {row['plan'] or row['detail']}"
            )
    print(
        f"load average before {results['load_average_before']}, after {results['load_average_after']}, "
        f"{results['cpus']} CPUs, warm caches: {results['warm_caches']}, median of {results['repeat']} per request"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
