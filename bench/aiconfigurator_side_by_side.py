"""Headroom's answers to AIConfigurator's questions (bench/aiconfigurator_runs.json), side by side.

    .venv/bin/python -m bench.aiconfigurator_side_by_side                     # aggregated plans
    .venv/bin/python -m bench.aiconfigurator_side_by_side --topology any      # aggregated or disaggregated

The same question to both: model, GPU type, fixed prompt and output lengths, TTFT and TPOT targets,
BF16 weights and KV (AIConfigurator's default for these models). AIConfigurator answers with a
steady-state average at a concurrency it chooses; Headroom plans for an arrival rate at a
percentile. To ask Headroom the same thing, the arrival rate is the one AIConfigurator's chosen
configuration serves on its GPUs (its output tokens/s per GPU × GPUs ÷ output tokens), with Poisson
arrivals, and the SLO percentile is 50 (AIConfigurator's figures are averages; Headroom's p50 is
the closest of its figures to an average). Compared: topology, prefill/decode workers, GPUs, and
output tokens/s per GPU (Headroom: that rate × output tokens ÷ its GPUs).

A plan buys whole replicas, so at a demand equal to exactly what AIConfigurator's configuration
serves, a step model even 1 % slower buys a second replica and halves the plan's tokens/s per GPU.
The per-GPU throughput is therefore also compared without that rounding: POST /v1/capacity for
AIConfigurator's own aggregated configuration (its GPU count and tp pinned, batch and chunking
searched) at the same SLO, p50 — Headroom's sustainable tokens/s per GPU for the same hardware.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from api.app import create_app
from api.settings import Settings
from bench.fleet_api_benchmark import seeded_database

RUNS = Path(__file__).with_name("aiconfigurator_runs.json")
KEY = "bench-admin-key-0123456789"


def demand_rps(answer: dict[str, Any]) -> float:
    """The request rate AIConfigurator's chosen configuration serves: tokens/s/GPU × GPUs / output."""
    best = answer["agg"] if answer["chosen"] == "aggregated" else answer["disagg"]
    return float(best["output_tokens_per_s_per_gpu"] * best["gpus"] / answer["output_tokens"])


def plan_request(answer: dict[str, Any], topology: str | None) -> dict[str, Any]:
    constraints: dict[str, Any] = {"gpus": [answer["gpu"]], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]}
    if topology is not None:
        constraints["topology"] = topology
    return {
        "model": answer["model"],
        "workload": {
            "arrival_rate_rps": round(demand_rps(answer), 4),
            "prompt_tokens": answer["prompt_tokens"],
            "output_tokens": answer["output_tokens"],
        },
        "slo": {"ttft_ms": answer["ttft_ms"], "tpot_ms": answer["tpot_ms"], "percentile": 50},
        "constraints": constraints,
        "store": False,
    }


def capacity_request(answer: dict[str, Any]) -> dict[str, Any]:
    agg = answer["agg"]
    return {
        "model": answer["model"],
        "gpu": answer["gpu"],
        "gpus": agg["gpus"],
        "tp": agg["tp"],
        "precision": {"weights": "bf16", "kv_cache": "bf16"},
        "workload": {"prompt_tokens": answer["prompt_tokens"], "output_tokens": answer["output_tokens"]},
        "slo": {"ttft_ms": answer["ttft_ms"], "tpot_ms": answer["tpot_ms"], "percentile": 50},
    }


def headroom_row(answer: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    body = plan["plan"]
    pools = body.get("pools") or []
    gpus = sum(pool["replicas"] * pool["tp"] * pool.get("pp", 1) for pool in pools) if pools else body["replicas"] * body["tp"]
    prefill = [pool for pool in pools if pool["role"] == "prefill"]
    decode = [pool for pool in pools if pool["role"] == "decode"]
    return {
        "topology": body.get("topology", "aggregated"),
        "gpus": gpus,
        "tp": body.get("tp"),
        "prefill": f"{prefill[0]['replicas']} × tp{prefill[0]['tp']}" if prefill else None,
        "decode": f"{decode[0]['replicas']} × tp{decode[0]['tp']}" if decode else None,
        "output_tokens_per_s_per_gpu": demand_rps(answer) * answer["output_tokens"] / gpus,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topology", choices=["aggregated", "disaggregated", "any"], help="constraints.topology to send")
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    from tests.api.client import ApiClient

    runs = json.loads(RUNS.read_text())
    with tempfile.TemporaryDirectory() as folder:
        url = seeded_database(Path(folder))
        app = create_app(Settings(database_url=url, admin_key=KEY))
        client = ApiClient(app)
        print(
            "| question | AIC topology | AIC workers (P / D or replicas) | AIC tok/s/GPU | Headroom topology | "
            "Headroom pools | Headroom tok/s/GPU | Headroom ÷ AIC | AIC agg config: AIC tok/s/GPU | Headroom capacity "
            "tok/s/GPU | ÷ |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        try:
            for answer in runs["answers"]:
                if answer["chosen"] is None:
                    continue
                response = client.post(
                    "/v1/plans", json=plan_request(answer, args.topology), headers={"Authorization": f"Bearer {KEY}"}
                )
                question = (
                    f"{answer['id']} {answer['model']} {answer['gpu']} {answer['prompt_tokens']}/{answer['output_tokens']} "
                    f"TTFT {answer['ttft_ms']:g} ms TPOT {answer['tpot_ms']:g} ms @ {demand_rps(answer):.2f} req/s"
                )
                best = answer["agg"] if answer["chosen"] == "aggregated" else answer["disagg"]
                workers = (
                    f"{best['prefill_workers']} × tp{best['prefill_tp']} / {best['decode_workers']} × tp{best['decode_tp']}"
                    if answer["chosen"] == "disaggregated"
                    else f"{best['gpus'] // best['tp']} × tp{best['tp']}"
                )
                aic = best["output_tokens_per_s_per_gpu"]
                capacity = client.post("/v1/capacity", json=capacity_request(answer), headers={"Authorization": f"Bearer {KEY}"})
                aic_agg = answer["agg"]["output_tokens_per_s_per_gpu"]
                if capacity.status_code == 200:
                    found = capacity.json()
                    ours_agg = found["output_tokens_per_s"] / answer["agg"]["gpus"]
                    setting = f"batch {found['configuration']['batch_limit']}, {found['binding']} binds"
                    same_hardware = f"{aic_agg:,.0f} (batch {answer['agg']['batch']}) | {ours_agg:,.0f} ({setting}) | {ours_agg / aic_agg:.2f}"
                else:
                    same_hardware = f"{aic_agg:,.0f} | {capacity.status_code}: {capacity.json().get('title')} | "
                if response.status_code not in (200, 201):
                    status = f"{response.status_code}: {response.json().get('title')}"
                    print(f"| {question} | {answer['chosen']} | {workers} | {aic:,.0f} | {status} | | | | {same_hardware} |")
                    continue
                row = headroom_row(answer, response.json())
                pools = (
                    f"P {row['prefill']} / D {row['decode']}"
                    if row["topology"] == "disaggregated"
                    else f"{row['gpus'] // row['tp']} × tp{row['tp']}"
                )
                ours = row["output_tokens_per_s_per_gpu"]
                ratio = f"{ours / aic:.2f}"
                print(
                    f"| {question} | {answer['chosen']} | {workers} | {aic:,.0f} | {row['topology']} | {pools} | {ours:,.0f} | "
                    f"{ratio} | {same_hardware} |"
                )
        finally:
            client.close()
            app.state.engine.dispose()


if __name__ == "__main__":
    main()
