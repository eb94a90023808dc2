"""What searching expert parallelism costs a plan: bench/plan_latency.py's 24 requests planned in process
with the ep groups offered and without, alternately, cold, twice each, keeping each one's minimum CPU
time (the same code and machine load for both, as `--grid-ab` does for the grid).

    PYTHONPATH=. .venv/bin/python -m bench.ep_latency_ab [--verify] [--json results.json]

"without" calls planner/candidates.py `enumerate_groups` with `expert_parallel=False` (what main did);
"with" as planner/planning.py calls it. Prints each request's CPU ms both ways, the p50 over all
requests and over the MoE ones, and every request whose plan (cost or ep) differs.
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
from bench.plan_latency import REQUESTS, _clear_caches
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog
from planner import candidates, planning
from planner.errors import HeadroomError

MOE = ("mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "deepseek-v3")


def ab(*, verify: bool) -> dict[str, Any]:
    from api.inputs import planning_inputs
    from api.schemas.plans import PlanRequest

    logging.disable(logging.CRITICAL)
    original = candidates.enumerate_groups

    def without_ep(**kwargs: Any) -> Any:
        return original(**{**kwargs, "expert_parallel": False})

    rows: list[dict[str, Any]] = []
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
                runs: dict[str, list[float]] = {"without": [], "with": []}
                plans: dict[str, Any] = {}
                for name in ("without", "with", "without", "with"):
                    planning.enumerate_groups = without_ep if name == "without" else original  # type: ignore[assignment]
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
                rows.append(
                    {
                        "model": body["model"],
                        "without_ms": min(runs["without"]),
                        "with_ms": min(runs["with"]),
                        "plan_without": plans["without"],
                        "plan_with": plans["with"],
                    }
                )
        engine.dispose()

    def p50(key: str, only_moe: bool) -> float:
        return statistics.median(r[key] for r in rows if not only_moe or r["model"] in MOE)

    return {
        "verify": verify,
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
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = ab(verify=args.verify)
    for i, r in enumerate(result["requests"]):
        print(f"{i:2d} {r['model']:16s} {r['without_ms']:8.1f} {r['with_ms']:8.1f}  {r['plan_without']} -> {r['plan_with']}")
    print(json.dumps({k: v for k, v in result.items() if k != "requests"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
