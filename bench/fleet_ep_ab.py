"""What offering expert parallelism costs a fleet's candidate tables: each MoE workload shape's table
(planner/fleet_candidates.py `candidate_table`) built cold with the ep groups offered and without, alternately,
twice each, keeping each arm's minimum process CPU (the same code and machine load for both).

    PYTHONPATH=. .venv/bin/python -m bench.fleet_ep_ab [--json results.json]

Shapes (illustrative): chat (200/400 tokens, TTFT 1 s, TPOT 50 ms) and long prompts (4,000/100, TTFT 10 s, TPOT
200 ms) on Mixtral-8x7B and Qwen3-30B-A3B; GPUs l40s, h100-sxm, h200 from the reference catalog; precisions bf16
and fp8; the fleet API's default grid (api/schemas/fleet_plans.py). Dense models are unaffected (no ep group is
offered to them), so they are not measured. Prints each table's CPU, options, μ searches and which candidates it
kept (gpu, tp, ep) both ways.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from api.schemas.fleet_plans import SearchGrid
from bench.fidelity import open_reference_catalog
from planner.fleet_candidates import CandidateGrid, candidate_table, clear_caches
from planner.workload import LognormalLength, Slo, Workload

MODELS = ("mixtral-8x7b", "qwen3-30b-a3b")
GPUS = ("l40s", "h100-sxm", "h200")
PRECISIONS = (("bf16", "bf16"), ("fp8", "fp8"))
SHAPES: dict[str, tuple[Workload, Slo]] = {
    "chat": (
        Workload(
            arrival_rate_rps=1.0,
            prompt_tokens=LognormalLength(mean_tokens=200, p99_tokens=600),
            output_tokens=LognormalLength(mean_tokens=400, p99_tokens=1200),
        ),
        Slo(ttft_s=1.0, tpot_s=0.05),
    ),
    "long": (
        Workload(
            arrival_rate_rps=1.0,
            prompt_tokens=LognormalLength(mean_tokens=4000, p99_tokens=8000),
            output_tokens=LognormalLength(mean_tokens=100, p99_tokens=300),
        ),
        Slo(ttft_s=10.0, tpot_s=0.2),
    ),
}


def ab() -> list[dict[str, Any]]:
    logging.disable(logging.CRITICAL)
    base = SearchGrid().to_grid()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        catalog = open_reference_catalog(Path(folder))
        try:
            gpus = [catalog.gpu_spec(slug) for slug in GPUS]
            precisions = catalog.precisions(PRECISIONS)
            for model_slug in MODELS:
                model = catalog.model_spec(model_slug)
                for shape, (workload, slo) in SHAPES.items():
                    cpu: dict[bool, list[float]] = {False: [], True: []}
                    kept: dict[bool, Any] = {}
                    for offered in (False, True, False, True):
                        grid = CandidateGrid(
                            tp_degrees=base.tp_degrees,
                            batch_limits=base.batch_limits,
                            chunk_budgets=base.chunk_budgets,
                            expert_parallel=offered,
                        )
                        clear_caches()
                        started = time.process_time()
                        table = candidate_table(
                            model=model, gpus=gpus, precisions=precisions, workload=workload, slo=slo, grid=grid
                        )
                        cpu[offered].append(time.process_time() - started)
                        kept[offered] = {
                            "options": table.options_enumerated,
                            "mu_searches": table.mu_searches,
                            "candidates": sorted((c.gpu, c.tp, c.ep) for c in table.candidates),
                        }
                    rows.append(
                        {
                            "model": model_slug,
                            "shape": shape,
                            "without_cpu_s": min(cpu[False]),
                            "with_cpu_s": min(cpu[True]),
                            "without": kept[False],
                            "with": kept[True],
                        }
                    )
        finally:
            catalog.session.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = ab()
    for r in rows:
        w, o = r["without"], r["with"]
        eps = [c for c in o["candidates"] if c[2] > 1]
        print(
            f"{r['model']:14s} {r['shape']:5s} cpu {r['without_cpu_s']:6.2f} -> {r['with_cpu_s']:6.2f} s  "
            f"options {w['options']} -> {o['options']}  mu searches {w['mu_searches']} -> {o['mu_searches']}  ep kept {eps}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
