"""Latency of POST /v1/capacity (no verification) over ten varied requests on the shipped reference catalog.

Runs the real app in process (httpx ASGI transport, a fresh SQLite database seeded with
catalog/data/), posts each request of `REQUESTS` and prints p50/p90/max wall time and CPU time
(`time.process_time()`) with each request's own times. The planner's process-wide caches are
cleared before every request (as bench/plan_latency.py does), so each answer is computed cold;
one untimed request first warms the process itself (imports, first-use setup).

    .venv/bin/python -m bench.capacity_latency [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from api.app import create_app
from api.settings import Settings
from bench.plan_latency import _clear_caches
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog

CHAT = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}
RAG = {"prompt_tokens": {"mean": 4000, "p99": 12000}, "output_tokens": {"mean": 300, "p99": 1000}}
SHORT = {"prompt_tokens": 256, "output_tokens": 64}


def _request(model: str, gpu: str, gpus: int, workload: dict[str, Any], slo: dict[str, float], **pins: Any) -> dict[str, Any]:
    return {"model": model, "gpu": gpu, "gpus": gpus, "workload": workload, "slo": slo, **pins}


#: Models from 7B to 70B, four GPU types, 1 to 64 GPUs, bursty and smooth arrivals, with and without pins.
REQUESTS: tuple[dict[str, Any], ...] = (
    _request("llama-3.1-8b", "h100-sxm", 16, CHAT, {"ttft_ms": 1000, "tpot_ms": 60}),
    _request("llama-3.1-8b", "l4", 4, SHORT, {"ttft_ms": 500, "tpot_ms": 80}),
    _request("llama-3.1-70b", "h100-sxm", 16, CHAT, {"ttft_ms": 2000, "tpot_ms": 80}),
    _request("llama-3.1-70b", "h200", 8, RAG, {"ttft_ms": 3000, "tpot_ms": 100}),
    _request("mistral-7b-v0.3", "a100-80gb-sxm", 2, CHAT, {"e2e_s": 20}),
    _request("qwen2.5-7b", "l40s", 8, {**CHAT, "arrival_cv": 2.0}, {"ttft_ms": 800, "tpot_ms": 50}),
    _request("llama-3.1-8b", "h100-sxm", 64, RAG, {"ttft_ms": 1500, "tpot_ms": 40}, tp=1),
    _request("mixtral-8x7b", "h100-sxm", 8, CHAT, {"ttft_ms": 1000, "tpot_ms": 60}),
    _request("llama-3.1-70b", "mi300x", 4, CHAT, {"ttft_ms": 2000, "tpot_ms": 100}, batch_limit=64),
    _request(
        "qwen2.5-72b", "a100-80gb-sxm", 8, {**SHORT, "arrival_cv": 0.5}, {"ttft_ms": 1000, "tpot_ms": 100, "percentile": 95}
    ),
)

#: The levers of issue 18 (`--levers`): a draft model (the tests' Llama 3.1 70B drafted by Llama 3.1 8B at a
#: measured α 0.7) and multi-turn sessions (tests/api/test_capacity_sessions.py's question), each also with verify.
SESSIONS = {"sessions": {"turns": 8, "turn_tokens": 1000, "think_time_s": 10}}
SESSION_WORKLOAD = {"prompt_tokens": {"mean": 4000, "p99": 10000}, "output_tokens": {"mean": 80, "p99": 320}}
DRAFT_MODEL = {"speculative": "on", "pin": {"draft_model": "llama-3.1-8b", "acceptance_rate": 0.7}}
LEVER_REQUESTS: tuple[dict[str, Any], ...] = (
    _request("llama-3.1-70b", "h100-sxm", 8, CHAT, {"ttft_ms": 2000, "tpot_ms": 30}, constraints=DRAFT_MODEL),
    _request("llama-3.1-8b", "h100-sxm", 4, {**SESSION_WORKLOAD, "prefix_reuse": SESSIONS}, {"ttft_ms": 1000, "tpot_ms": 60}),
    _request(
        "llama-3.1-8b",
        "h100-sxm",
        4,
        {**SESSION_WORKLOAD, "prefix_reuse": SESSIONS},
        {"ttft_ms": 1000, "tpot_ms": 60},
        verify=True,
    ),
)


def run(requests: tuple[dict[str, Any], ...] = REQUESTS) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)
    from tests.api.client import ApiClient

    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'headroom.db'}"
        upgrade(url)
        engine = make_engine(url)
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
        engine.dispose()
        client = ApiClient(create_app(Settings(database_url=url)))
        results: dict[str, Any] = {"load_average_before": os.getloadavg(), "requests": []}
        client.post("/v1/capacity", json=REQUESTS[0])  # untimed: the process's first request
        for body in requests:
            _clear_caches()
            wall, cpu = time.perf_counter(), time.process_time()
            response = client.post("/v1/capacity", json=body)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            answer = response.json()
            results["requests"].append(
                {
                    "model": body["model"],
                    "gpu": body["gpu"],
                    "gpus": body["gpus"],
                    "status": response.status_code,
                    "wall_ms": wall * 1e3,
                    "cpu_ms": cpu * 1e3,
                    "max_arrival_rate_rps": answer.get("max_arrival_rate_rps"),
                    "configuration": answer.get("configuration"),
                    "binding": answer.get("binding"),
                    "configurations_evaluated": answer.get("configurations_evaluated"),
                    "configurations_considered": answer.get("configurations_considered"),
                    "problem": answer.get("detail"),
                }
            )
        results["load_average_after"] = os.getloadavg()
    for key in ("wall_ms", "cpu_ms"):
        values = [r[key] for r in results["requests"]]
        results[key] = {"p50": statistics.median(values), "p90": float(np.percentile(values, 90)), "max": max(values)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--levers", action="store_true", help="time LEVER_REQUESTS (draft model, sessions) instead")
    args = parser.parse_args()
    results = run(LEVER_REQUESTS if args.levers else REQUESTS)
    for r in results["requests"]:
        c = r["configuration"] or {}
        print(
            f"{r['model']:>16} {r['gpus']:>3} × {r['gpu']:<14} {r['status']} {r['wall_ms']:7.1f} ms wall {r['cpu_ms']:7.1f} ms cpu"
            f"  λmax={r['max_arrival_rate_rps'] or 0:9.2f} rps tp={c.get('tp')} batch={c.get('batch_limit')} "
            f"chunk={c.get('chunk_tokens')} binds={r['binding']} evaluated={r['configurations_evaluated']}/{r['configurations_considered']}"
        )
    print(
        f"wall p50 {results['wall_ms']['p50']:.1f} ms, p90 {results['wall_ms']['p90']:.1f} ms, max {results['wall_ms']['max']:.1f} ms; "
        f"cpu p50 {results['cpu_ms']['p50']:.1f} ms; load average {results['load_average_before']} → {results['load_average_after']}"
    )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
