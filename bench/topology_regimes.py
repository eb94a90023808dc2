"""Which topology wins over a grid of (TTFT, TPOT) SLO pairs: the regime map of docs/disaggregation.md.

    .venv/bin/python -m bench.topology_regimes            # prints the tables and writes them into docs/disaggregation.md

Every cell is one POST /v1/plans with constraints.topology `any` on the shipped reference catalog
(in process, a fresh SQLite database, `verify` false so each cell is one analytic plan of either
topology) and reads `disaggregation.chosen` and the saving (with the pools always searched: `any` skips
them where a lower bound on their cost already loses, which picks the same winner but gives no saving). Two models, long-prompt traffic (prompts
mean 3,000, p99 8,000; outputs 250, 1,000): Llama-3.1-8B at 20 req/s, Llama-3.1-70B at 4 req/s.
Speculative decoding is off in every cell (the published comparison has none, and separate pools do
not speculate yet); with the API's default `auto`, Llama-3.1-8B's strict-TPOT corner goes to an
aggregated pool with an EAGLE head instead.
"""

from __future__ import annotations

import argparse
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

from api.app import create_app
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog

KEY = "bench-admin-key-0123456789"
TTFT_MS = (300, 1000, 3000, 10000)
TPOT_MS = (15, 25, 50, 100)
MODELS = (("llama-3.1-8b", 20.0), ("llama-3.1-70b", 4.0))
PROMPT, OUTPUT = {"mean": 3000, "p99": 8000}, {"mean": 250, "p99": 1000}
MARK_BEGIN, MARK_END = "<!-- topology-regimes:begin -->", "<!-- topology-regimes:end -->"


def body(model: str, rate: float, ttft_ms: float, tpot_ms: float) -> dict[str, Any]:
    return {
        "model": model,
        "workload": {"arrival_rate_rps": rate, "prompt_tokens": PROMPT, "output_tokens": OUTPUT},
        "slo": {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms},
        # The published regime result has no speculative decoding, and separate pools do not speculate
        # here: with the API's default (auto) the aggregated arm alone would get a draft head.
        "constraints": {"topology": "any", "speculative": "off"},
        "verify": False,
        "store": False,
    }


def cell(answer: dict[str, Any], status: int) -> str:
    """`D −23 %` (disaggregated, 23 % cheaper), `A −5 %`, `A only`/`D only`, or `none`."""
    if status not in (200, 201):  # 200: a dry run (store false)
        return "none"
    section = answer["disaggregation"]
    letter = "D" if section["chosen"] == "disaggregated" else "A"
    if section["saving_fraction"] is None:
        return f"{letter} only"
    return f"{letter} −{section['saving_fraction']:.0%}"


def regime_map() -> dict[str, dict[tuple[int, int], str]]:
    logging.disable(logging.CRITICAL)
    from api import disagg_plans

    disagg_plans.SKIP_BOUNDED_SEARCH = False  # every cell's saving needs both topologies' plans, not a bound that loses
    from tests.api.client import ApiClient

    out: dict[str, dict[tuple[int, int], str]] = {}
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
        try:
            for model, rate in MODELS:
                out[model] = {}
                for ttft in TTFT_MS:
                    for tpot in TPOT_MS:
                        response = client.post(
                            "/v1/plans", json=body(model, rate, ttft, tpot), headers={"Authorization": f"Bearer {KEY}"}
                        )
                        out[model][(ttft, tpot)] = cell(response.json(), response.status_code)
                        print(model, ttft, tpot, out[model][(ttft, tpot)], flush=True)
        finally:
            client.close()
            app.state.engine.dispose()
    return out


def table(cells: dict[tuple[int, int], str]) -> list[str]:
    lines = ["| TTFT p99 \\ TPOT p99 | " + " | ".join(f"{t} ms" for t in TPOT_MS) + " |", "|---" * (len(TPOT_MS) + 1) + "|"]
    lines += [f"| {ttft} ms | " + " | ".join(cells[(ttft, tpot)] for tpot in TPOT_MS) + " |" for ttft in TTFT_MS]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--doc", type=Path, default=Path("docs/disaggregation.md"))
    args = parser.parse_args()
    maps = regime_map()
    lines = [MARK_BEGIN]
    for model, rate in MODELS:
        lines += ["", f"**{model}**, {rate:g} req/s:", "", *table(maps[model])]
    lines.append(MARK_END)
    text = args.doc.read_text()
    pattern = re.compile(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), re.DOTALL)
    block = "\n".join(lines)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text + "\n" + block + "\n"
    args.doc.write_text(text)


if __name__ == "__main__":
    main()
