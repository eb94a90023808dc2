"""Writes the reference charts in docs/charts/ from real answers of the API: every chart route, SVG
and PNG, on the shipped reference catalog.

Runs the real app in process (httpx ASGI transport, a fresh SQLite database seeded with
catalog/data/, the bootstrap admin key), creates a verified plan, a fleet plan over a day, asks a
what-if sweep and a capacity question, and saves what each chart route answers:

    docs/charts/plan-{wall,knee,cost,alternatives}.{svg,png}
    docs/charts/fleet-day.{svg,png}, what-if-sweep.{svg,png}, capacity-wall.{svg,png}

    .venv/bin/python -m bench.render_charts [--out docs/charts]

The SVGs are deterministic (api/charts.py): the same catalog and code draw the same bytes, so a
diff in docs/charts/ is a change in a plan or in a chart.
"""

from __future__ import annotations

import argparse
import logging
import math
import tempfile
from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from api.charts import FORMATS, PLAN_CHARTS
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog
from tests.api.client import ApiClient  # as bench/plan_latency.py drives the app: in process, over httpx's ASGI transport

ADMIN_KEY = "render-charts-admin-key"
HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}
CHAT = {"prompt_tokens": {"mean": 800, "p99": 3000}, "output_tokens": {"mean": 200, "p99": 700}}

#: Chat on an 8B model at 40 requests/s on any GPU type, verified: several replicas (a staircase
#: with steps), every other GPU type as an alternative, the simulator's points on the wall.
PLAN: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {"arrival_rate_rps": 40, **CHAT},
    "slo": {"ttft_ms": 1500, "tpot_ms": 60},
    "verify": True,
}

#: A day in 24 hourly periods: chat that peaks in the afternoon (a cosine from 4 to 16 requests/s)
#: and a batch workload that runs at night.
DAY: dict[str, Any] = {
    "workloads": [
        {"name": "chat", "model": "llama-3.1-8b", **CHAT, "slo": {"ttft_ms": 2000, "tpot_ms": 60},
         "demand_rps": [round(10 - 6 * math.cos(2 * math.pi * (h - 3) / 24), 2) for h in range(24)]},
        {"name": "batch", "model": "llama-3.1-8b", **CHAT, "slo": {"e2e_s": 60},
         "demand_rps": [12.0 if h < 6 else 1.0 for h in range(24)]},
    ],
    "constraints": {"gpus": ["l40s", "h100-sxm"], "precisions": [{"weights": "fp8", "kv_cache": "fp8"}]},
    "search": {"tp_degrees": [1, 2], "batch_limits": [32, 128], "chunk_budgets": [None, 2048]},
}  # fmt: skip

#: Cost against arrival rate on H100s and on L40S, each planned alone.
SWEEP: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": CHAT,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "sweep": {"arrival_rates_rps": [2, 5, 10, 20, 40, 60, 80, 120], "gpus": ["h100-sxm", "l40s"]},
}

#: "How much chat traffic do 16 H100s hold?", verified in the simulator.
CAPACITY: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "h100-sxm",
    "gpus": 16,
    "workload": CHAT,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "verify": True,
}


def _client(folder: Path) -> ApiClient:
    """The app over a fresh SQLite database seeded with the reference catalog, with the admin key."""
    url = f"sqlite:///{folder / 'headroom.db'}"
    upgrade(url, "head")
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            Catalog(session).load_reference_catalog()
            session.commit()
    finally:
        engine.dispose()
    return ApiClient(create_app(Settings(database_url=url, admin_key=ADMIN_KEY)), headers=HEADERS)


def _created(response: httpx.Response) -> str:
    if response.status_code not in (200, 201):
        raise SystemExit(f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}")
    identifier: str = response.json()["id"]
    return identifier


def _save(response: httpx.Response, path: Path) -> None:
    if response.status_code != 200:
        raise SystemExit(f"{response.request.url.path}: {response.status_code} {response.text}")
    path.write_bytes(response.content)
    print(f"{path} ({len(response.content)} bytes)")


def render(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    logging.disable(logging.CRITICAL)  # the access log of every request
    with tempfile.TemporaryDirectory() as folder, _client(Path(folder)) as client:
        plan_id = _created(client.post("/v1/plans", json=PLAN))
        fleet_id = _created(client.post("/v1/fleet-plans", json=DAY))
        for fmt in FORMATS:
            for name in PLAN_CHARTS:
                _save(client.get(f"/v1/plans/{plan_id}/charts/{name}.{fmt}"), out / f"plan-{name}.{fmt}")
            _save(client.get(f"/v1/fleet-plans/{fleet_id}/charts/day.{fmt}"), out / f"fleet-day.{fmt}")
            _save(client.post(f"/v1/what-if/charts/sweep.{fmt}", json=SWEEP), out / f"what-if-sweep.{fmt}")
            _save(client.post(f"/v1/capacity/charts/wall.{fmt}", json=CAPACITY), out / f"capacity-wall.{fmt}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/charts"), help="Folder to write the charts into.")
    render(parser.parse_args().out)


if __name__ == "__main__":
    main()
