"""End to end: POST /v1/fleet-plans for 20 workloads × 24 hourly periods over the seeded catalog.

    .venv/bin/python -m bench.fleet_api_benchmark                         # both scenarios, cold then warm
    .venv/bin/python -m bench.fleet_api_benchmark --scenario shared --json out.json

Unlike bench/fleet_benchmark.py (the MILP alone on synthetic candidates), every candidate here
comes from the real planner: planner/candidates.py enumerates GPU × precision × tp × batch ×
chunk, the queueing model's `max_rps_at_slo` rates each undominated one
(planner/fleet_candidates.py), and planner/fleet.py solves the MILP — through the real app, on
a fresh SQLite database holding the shipped reference catalog (catalog/data/).

Scenarios (illustrative traffic, not data):
- `shared`: 20 workloads = 4 products (chat and summarise on llama-3.1-8b and llama-3.1-70b)
  × 5 regions whose diurnal peaks are 0, 3, 6, 9, 12 hours apart. Workloads of one product
  share a shape, so 4 candidate tables are computed. Every catalog GPU, precisions bf16 and
  fp8 (the /v1/plans defaults), the default grid (tp 1–8, six batch limits, four chunk budgets).
- `levers`: 4 workloads on llama-3.1-8b (`levers_scenario`): chat plain and with speculative auto, RAG with
  prefix_reuse, and a workload with two traffic classes whose arrangements are planned per period.
- `distinct`: 12 workloads with 12 different shapes (four models × three request mixes/SLOs),
  on three GPU types (l40s, h100-sxm, h200) — what a fleet limited to its cloud's GPUs asks.
  Twelve is the most distinct shapes one request may plan (MAX_DISTINCT_SHAPES); the scenario
  had 20 (five models × four mixes) before that bound, and the older results were measured so.
Demand d(h) = peak × (0.55 + 0.45 cos(2π(h − peak hour)/24)) req/s, peaks 2–40 req/s.
Inventory caps two scarce types (a scenario): h100-sxm 64, h200 48.

Each scenario is posted twice: cold (queueing caches and api/fleet_tables.py's candidate-table
cache cleared first) and warm (the same request again: tables and queueing results cached; a
repeated or slightly changed plan pays only for the MILP). Candidate tables for distinct shapes
are computed in worker processes, so `process_cpu_s` (this process's CPU) leaves their CPU out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from api.fleet_tables import clear_table_cache, restart_table_workers
from api.settings import Settings
from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.repository import Catalog
from planner.fleet_candidates import clear_caches

ADMIN_KEY = "bench-admin-key-0123456789"
HOURS = 24
INVENTORY = {"h100-sxm": 64, "h200": 48}

#: Request mixes and SLOs (illustrative): prompt and output lengths (lognormal mean, p99), SLO.
MIXES: dict[str, dict[str, Any]] = {
    "chat": {
        "prompt_tokens": {"mean": 1000, "p99": 4000},
        "output_tokens": {"mean": 250, "p99": 1000},
        "slo": {"ttft_ms": 2000, "tpot_ms": 60},
    },
    "summarise": {"prompt_tokens": {"mean": 3000, "p99": 8000}, "output_tokens": {"mean": 300, "p99": 800}, "slo": {"e2e_s": 60}},
    "code": {
        "prompt_tokens": {"mean": 2000, "p99": 6000},
        "output_tokens": {"mean": 200, "p99": 600},
        "slo": {"ttft_ms": 1000, "tpot_ms": 40},
    },
    "rag": {
        "prompt_tokens": {"mean": 4000, "p99": 8000},
        "output_tokens": {"mean": 300, "p99": 900},
        "slo": {"ttft_ms": 3000, "tpot_ms": 80},
    },
}


def diurnal(peak_rps: float, peak_hour: float) -> list[float]:
    return [round(peak_rps * (0.55 + 0.45 * math.cos(2 * math.pi * (h - peak_hour) / HOURS)), 4) for h in range(HOURS)]


def shared_scenario() -> dict[str, Any]:
    workloads = []
    products = [
        ("llama-3.1-8b", "chat", 30.0),
        ("llama-3.1-8b", "summarise", 10.0),
        ("llama-3.1-70b", "chat", 12.0),
        ("llama-3.1-70b", "summarise", 4.0),
    ]
    for model, mix, peak in products:
        for region, offset in enumerate((0, 3, 6, 9, 12)):
            workloads.append(
                {
                    "name": f"{model}-{mix}-r{region}",
                    "model": model,
                    **MIXES[mix],
                    "demand_rps": diurnal(peak * (1 - 0.1 * region), 14 + offset),
                }
            )
    return {"workloads": workloads, "inventory": INVENTORY}


def distinct_scenario() -> dict[str, Any]:
    workloads = []
    models = ["llama-3.1-8b", "qwen2.5-7b", "llama-3.1-70b", "qwen2.5-72b"]
    for index, model in enumerate(models):
        for offset, mix in enumerate(("chat", "code", "rag")):
            peak = (40.0 if index < 2 else 8.0) / (1 + offset)
            workloads.append(
                {
                    "name": f"{model}-{mix}",
                    "model": model,
                    **MIXES[mix],
                    "demand_rps": diurnal(peak, (10 + 3 * offset + index) % HOURS),
                }
            )
    return {"workloads": workloads, "inventory": INVENTORY, "constraints": {"gpus": ["l40s", "h100-sxm", "h200"]}}


def levers_scenario() -> dict[str, Any]:
    """Issue 17 §4 / 18: the same chat traffic planned plain and with speculative decoding auto, a RAG workload
    with a shared system prompt (prefix_reuse), and an assistant workload with two traffic classes (chat at a
    TTFT target and summaries due within 6 h), each with a diurnal profile, on llama-3.1-8b."""
    chat = {"model": "llama-3.1-8b", **MIXES["chat"]}
    classes = [
        {"name": "chat", "arrival_rate_rps": 20.0, "prompt_tokens": MIXES["chat"]["prompt_tokens"],
         "output_tokens": MIXES["chat"]["output_tokens"], "slo": {"ttft_ms": 1000}, "demand_rps": diurnal(20.0, 14)},
        {"name": "summarise", "arrival_rate_rps": 6.0, "prompt_tokens": MIXES["summarise"]["prompt_tokens"],
         "output_tokens": MIXES["summarise"]["output_tokens"], "deadline_h": 6, "priority": 1, "demand_rps": diurnal(6.0, 20)},
    ]  # fmt: skip
    return {
        "workloads": [
            {"name": "chat-plain", **chat, "demand_rps": diurnal(8.0, 14)},
            {"name": "chat-speculative", **chat, "speculative": "auto", "demand_rps": diurnal(8.0, 14)},
            {
                "name": "rag-cached",
                "model": "llama-3.1-8b",
                **MIXES["rag"],
                "demand_rps": diurnal(10.0, 16),
                "prefix_reuse": {"system_prompt_tokens": 2000, "system_prompt_fraction": 0.8},
            },
            {"name": "assistant-classes", "model": "llama-3.1-8b", "classes": classes},
        ],
        "inventory": INVENTORY,
        "constraints": {"gpus": ["l40s", "h100-sxm", "h200"]},
    }


SCENARIOS = {"shared": shared_scenario, "distinct": distinct_scenario, "levers": levers_scenario}


def seeded_database(directory: Path) -> str:
    url = f"sqlite:///{directory / 'headroom.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    return url


async def post(app: Any, body: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        started = time.perf_counter()
        cpu_started = time.process_time()
        response = await client.post("/v1/fleet-plans", json=body, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=600)
        wall_s = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started
    if response.status_code != 201:
        raise SystemExit(f"POST /v1/fleet-plans answered {response.status_code}: {response.text[:2000]}")
    return wall_s, cpu_s, response.json()


def summary(
    name: str, run: str, wall_s: float, cpu_s: float, plan: dict[str, Any], load_before: tuple[float, float, float]
) -> dict[str, Any]:
    search = plan["candidate_search"]
    return {
        "scenario": name,
        "run": run,
        "workloads": len(plan["periods"][0]["demand_rps"]),
        "periods": len(plan["periods"]),
        "wall_s": round(wall_s, 2),
        "process_cpu_s": round(cpu_s, 2),
        "candidate_tables": search["distinct_tables"],
        "options_enumerated": search["options_enumerated"],
        "mu_searches": search["mu_searches"],
        "predictions": search["predictions"],
        "candidates_s": round(search["ms"] / 1e3, 2),
        "milp_candidates": plan["model_size"]["candidates"],
        "variables": plan["model_size"]["variables"],
        "constraints": plan["model_size"]["constraints"],
        "solver": plan["solver"]["name"],
        "status": plan["solver"]["status"],
        "gap": plan["solver"]["gap"],
        "solve_s": round(plan["solver"]["solve_ms"] / 1e3, 2),
        "usd_per_day": round(plan["cost"]["usd_per_day"], 2),
        "reserved_gpus": plan["reserved_gpus"],
        "load_average_1m_before": round(load_before[0], 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as directory:
        app = create_app(Settings(database_url=seeded_database(Path(directory)), admin_key=ADMIN_KEY, log_level="warning"))
        try:
            for name in SCENARIOS if args.scenario == "all" else [args.scenario]:
                body = SCENARIOS[name]()
                clear_caches()
                clear_table_cache()
                restart_table_workers()  # fresh workers, empty caches, started (as `headroom serve` does) before the clock
                for run in ("cold", "warm"):
                    load_before = os.getloadavg()
                    wall_s, cpu_s, plan = asyncio.run(post(app, body))
                    results.append(summary(name, run, wall_s, cpu_s, plan, load_before))
                    print(json.dumps(results[-1]), flush=True)
        finally:
            app.state.engine.dispose()
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
