"""What searching expert parallelism costs a plan: bench/plan_latency.py's 24 requests planned in process
with the ep groups offered and without, alternately, cold, twice each, keeping each one's minimum CPU
time (the same code and machine load for both, as `--grid-ab` does for the grid).

    PYTHONPATH=. .venv/bin/python -m bench.ep_latency_ab [--verify] [--prune-ab] [--json results.json]

"without" calls planner/candidates.py `enumerate_groups` with `expert_parallel=False` (what main did);
"with" as planner/planning.py calls it. Prints each request's CPU ms both ways, the p50 over all
requests and over the MoE ones, and every request whose plan (cost or ep) differs.

With `--prune-ab` the two arms are instead the MoE requests with the ep groups offered both ways:
"without" leaves every expert-parallel setting in (planner/candidates.py `_beaten_by_twin` answering
False, what ep14 did), "with" prunes the settings its ep = 1 twin is sure to beat.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from api.settings import Settings
from bench.fidelity import open_reference_catalog
from bench.plan_latency import REQUESTS, _clear_caches
from planner import candidates, planning
from planner.errors import HeadroomError

MOE = ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "deepseek-v3")


def ab(*, verify: bool, prune_ab: bool = False) -> dict[str, Any]:
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest

    logging.disable(logging.CRITICAL)
    original = candidates.enumerate_groups
    beaten = candidates._beaten_by_twin

    def without_ep(**kwargs: Any) -> Any:
        return original(**{**kwargs, "expert_parallel": False})

    def never_beaten(*_: Any) -> bool:
        return False

    def arm(name: str) -> None:
        if prune_ab:
            candidates._beaten_by_twin = never_beaten if name == "without" else beaten  # type: ignore[assignment]
        else:
            planning.enumerate_groups = without_ep if name == "without" else original  # type: ignore[assignment]

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        catalog = open_reference_catalog(Path(folder))  # a fresh SQLite catalog with the reference data
        try:
            for body in [b for b in REQUESTS if b["model"] in MOE] if prune_ab else REQUESTS:
                request = PlanRequest.model_validate({**body, "verify": verify})
                inputs, _ = planning_inputs(request, catalog, default_provider=Settings().default_price_provider)
                runs: dict[str, list[float]] = {"without": [], "with": []}
                plans: dict[str, Any] = {}
                for name in ("without", "with", "without", "with"):
                    arm(name)
                    planning_request = planning.PlanningRequest(
                        workload=request.traffic(),
                        slo=request.targets(),
                        constraints=request.constraints.to_constraints(),
                        verify=verify,
                    )
                    _clear_caches()
                    started = time.process_time()
                    plan = None
                    with contextlib.suppress(HeadroomError):  # an impossible request is timed like any other
                        result = planning.plan_capacity(planning_request, inputs)
                        plan = (round(result.cost_usd_per_hour, 6), [(r.gpu, r.tp, r.ep, r.replicas) for r in result.rows])
                    runs[name].append((time.process_time() - started) * 1e3)
                    plans[name] = plan
                planning.enumerate_groups = original  # type: ignore[assignment]
                candidates._beaten_by_twin = beaten  # type: ignore[assignment]
                rows.append(
                    {
                        "model": body["model"],
                        "without_ms": min(runs["without"]),
                        "with_ms": min(runs["with"]),
                        "plan_without": plans["without"],
                        "plan_with": plans["with"],
                    }
                )
        finally:
            catalog.session.close()

    def p50(key: str, only_moe: bool) -> float:
        return statistics.median(r[key] for r in rows if not only_moe or r["model"] in MOE)

    return {
        "verify": verify,
        "prune_ab": prune_ab,
        "p50_without_ms": p50("without_ms", False),
        "p50_with_ms": p50("with_ms", False),
        "moe_p50_without_ms": p50("without_ms", True),
        "moe_p50_with_ms": p50("with_ms", True),
        "requests": rows,
        "plans_that_differ": [i for i, r in enumerate(rows) if r["plan_without"] != r["plan_with"]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--prune-ab", action="store_true", help="MoE requests, ep settings unpruned vs pruned")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = ab(verify=args.verify, prune_ab=args.prune_ab)
    for i, r in enumerate(result["requests"]):
        print(f"{i:2d} {r['model']:16s} {r['without_ms']:8.1f} {r['with_ms']:8.1f}  {r['plan_without']} -> {r['plan_with']}")
    print(json.dumps({k: v for k, v in result.items() if k != "requests"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
