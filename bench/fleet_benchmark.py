"""How big and how fast the fleet MILP is on a day of 20 workloads over the seeded catalog.

    .venv/bin/python -m bench.fleet_benchmark                       # 20 workloads × 24 hours
    .venv/bin/python -m bench.fleet_benchmark --n-plus-one          # with N+1 (adds binaries)
    .venv/bin/python -m bench.fleet_benchmark --solver CBC --json out.json

The candidate tables are synthetic, because the point is the MILP, not the performance model:
for each workload (a catalog model with a traffic shape), every catalog GPU × precision
(fp16; fp8 where the GPU lists fp8 FLOP/s) × tp ∈ {1, 2, 4, 8} within a node × batch limit
∈ {16, 64, 256} that holds the weights and a full batch of KV cache in 90 % of HBM (vLLM's
default `gpu_memory_utilization`) and whose memory-bound decode step meets the workload's
TPOT target becomes a candidate, with
    decode step = (active params × bytes + batch × mean context × KV bytes/token) / (tp × HBM bandwidth)
    saturation_rps = batch / (decode step × output tokens)
    max_rps_at_slo = saturation_rps × u,  u ~ U[0.6, 0.9] (seeded; a stand-in for the queueing model)
Prices are the catalog's on-demand and 1-year reserved prices (catalog/data/gpus.json). Demand is
diurnal, d(h) = peak × (0.55 + 0.45 cos(2π(h − peak hour)/24)), with the peak a seeded 2–20 ×
the best candidate's per-replica rate; two workloads double for one hour (spikes). Inventory
caps the scarce types (a scenario, not data): h100-sxm 96, h200 64, b200 32, gb200 16, mi325x 32.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from planner.fleet_solve import solve_fleet
from planner.fleet_spec import FleetConstraints, FleetSpec, FleetWorkload, GpuPrice
from planner.milp import default_solver_name
from planner.optimizer import Candidate, candidate_id

CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "data"

#: vLLM's default `gpu_memory_utilization`: the fraction of HBM it lets weights and KV cache use.
GPU_MEMORY_UTILISATION = 0.9

BYTES = {"fp16": 2.0, "fp8": 1.0}
TENSOR_PARALLEL = (1, 2, 4, 8)
BATCH_LIMITS = (16, 64, 256)

#: Traffic shapes (prompt tokens, output tokens, TPOT target in s): illustrative scenarios.
SHAPES = {
    "chat": (1000, 250, 0.050),
    "rag": (4000, 300, 0.060),
    "summarise": (3000, 500, 0.100),
    "code": (2000, 200, 0.030),
}

SCARCE_INVENTORY = {"h100-sxm": 96, "h200": 64, "b200": 32, "gb200": 16, "mi325x": 32}


def load(name: str) -> list[dict]:
    return json.loads((CATALOG / name).read_text())


def kv_bytes_per_token(model: dict, element_bytes: float) -> float:
    if model.get("mla"):
        return (
            model["layers"] * (model["mla"]["kv_lora_rank"] + model["mla"]["rope_head_dim"]) * element_bytes
        )  # latent + rope key per layer
    return 2 * model["layers"] * model["kv_heads"] * model["head_dim"] * element_bytes  # K and V, every layer, every KV head


def synthetic_candidates(gpus: list[dict], model: dict, shape: str, rng: np.random.Generator) -> tuple[Candidate, ...]:
    prompt_tokens, output_tokens, tpot_s = SHAPES[shape]
    mean_context = prompt_tokens + output_tokens / 2
    full_context = prompt_tokens + output_tokens
    candidates = []
    for gpu in gpus:
        for precision, element_bytes in BYTES.items():
            if precision == "fp8" and not gpu["peak_tflops"].get("fp8"):
                continue
            for tp in TENSOR_PARALLEL:
                if tp > gpu["gpus_per_node"]:
                    continue
                usable_bytes = GPU_MEMORY_UTILISATION * gpu["memory_gb"] * 1e9 * tp
                weight_bytes = model["params_total"] * element_bytes
                kv_token = kv_bytes_per_token(model, element_bytes)
                fits = math.floor((usable_bytes - weight_bytes) / (full_context * kv_token))
                bandwidth = tp * gpu["memory_bandwidth_gb_per_s"] * 1e9
                for limit in BATCH_LIMITS:
                    batch = min(limit, fits)
                    if batch < 1:
                        continue
                    step_s = (model["params_active"] * element_bytes + batch * mean_context * kv_token) / bandwidth
                    if step_s > tpot_s:
                        continue
                    saturation = batch / (step_s * output_tokens)  # requests finished per second at a full batch
                    candidates.append(
                        Candidate(
                            id=candidate_id(
                                gpu=gpu["slug"],
                                weights_precision=precision,
                                kv_precision=precision,
                                tp=tp,
                                batch_limit=limit,
                                chunk_tokens=None,
                            ),
                            gpu=gpu["slug"],
                            tp=tp,
                            weights_precision=precision,
                            kv_precision=precision,
                            batch_limit=limit,
                            chunk_tokens=None,
                            gpus_per_replica=tp,
                            cost_usd_per_hour=tp * gpu["price_usd_per_hour"]["on_demand"],
                            max_rps_at_slo=saturation * float(rng.uniform(0.6, 0.9)),
                            saturation_rps=saturation,
                        )
                    )
    # Several batch limits can clip to the same memory-bound batch: keep one row per id.
    return tuple({c.id: c for c in candidates}.values())


def scenario(workloads: int, periods: int, seed: int, n_plus_one: bool) -> FleetSpec:
    rng = np.random.default_rng(seed)
    gpus = load("gpus.json")
    models = load("models.json")
    shapes = list(SHAPES)
    spiking = set(rng.choice(workloads, size=min(2, workloads), replace=False).tolist())
    fleet = []
    for index in range(workloads):
        model = models[index % len(models)]
        shape = shapes[index % len(shapes)]
        candidates = synthetic_candidates(gpus, model, shape, rng)
        best = max((c.max_rps_at_slo for c in candidates), default=1.0)
        peak = best * float(rng.uniform(2, 20))
        peak_hour = float(rng.uniform(0, 24))
        demand = [peak * (0.55 + 0.45 * math.cos(2 * math.pi * (h * 24 / periods - peak_hour) / 24)) for h in range(periods)]
        if index in spiking:
            hour = int(rng.integers(periods))
            demand[hour] *= 2
        fleet.append(FleetWorkload(name=f"{model['slug']}-{shape}-{index}", candidates=candidates, demand_rps=tuple(demand)))
    prices = {
        g["slug"]: GpuPrice(
            on_demand_usd_per_hour=g["price_usd_per_hour"]["on_demand"],
            reserved_usd_per_hour=g["price_usd_per_hour"]["reserved_1y"],
        )
        for g in gpus
    }
    return FleetSpec(
        workloads=tuple(fleet),
        prices=prices,
        inventory=SCARCE_INVENTORY,
        period_hours=24 / periods,
        constraints=FleetConstraints(min_replicas=1, n_plus_one=n_plus_one),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument("--periods", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-plus-one", action="store_true")
    parser.add_argument("--solver", default=None, help="HiGHS or CBC (default: HiGHS when installed)")
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    args = parser.parse_args()

    started = time.perf_counter()
    spec = scenario(args.workloads, args.periods, args.seed, args.n_plus_one)
    built_s = time.perf_counter() - started
    offered = sum(len(w.candidates) for w in spec.workloads)
    load_before = os.getloadavg()[0]
    started, cpu_started = time.perf_counter(), time.process_time()
    plan = solve_fleet(spec, time_limit_s=args.time_limit, solver_name=args.solver)
    total_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
    result = {
        "workloads": args.workloads,
        "periods": args.periods,
        "n_plus_one": args.n_plus_one,
        "solver": plan.solver.name,
        "status": plan.solver.status,
        "mip_gap": plan.solver.mip_gap,
        "candidates_offered": offered,
        "candidates_after_dominance": plan.model_size.candidates,
        "variables": plan.model_size.variables,
        "constraints": plan.model_size.constraints,
        "milp_solve_s": round(plan.solver.solve_s, 3),
        "solve_fleet_s": round(total_s, 3),
        "solve_fleet_cpu_s": round(cpu_s, 3),  # this process, HiGHS's threads included
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # before, after
        "candidate_tables_s": round(built_s, 3),
        "cost_usd_per_day": round(plan.cost.usd_per_day, 2),
        "reserved_usd": round(plan.cost.reserved_usd, 2),
        "on_demand_usd": round(plan.cost.on_demand_usd, 2),
        "reserved_gpus": {gpu: n for gpu, n in plan.reserved_gpus.items() if n},
        "mean_gpu_utilisation": round(sum(p.gpu_utilisation for p in plan.periods) / len(plan.periods), 3),
        "default_solver": default_solver_name(),
    }
    for key, value in result.items():
        print(f"{key:28s} {value}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
