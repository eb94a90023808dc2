"""Analytic (planner/disagg.py) against simulated (planner/simulator_disagg.py) p99 TTFT/TPOT/E2E.

    .venv/bin/python -m bench.disagg_fidelity            # prints the table and writes it into docs/disaggregation.md

Llama-2-70B fp16 on tp-4 H100 SXM replicas at the datasheet roofline (3.35 TB/s, 989 TFLOP/s per
GPU; docs/design.md's test vectors), the KV cache crossing ConnectX-7 (50 GB/s per GPU), prompts and
outputs lognormal (mean, p99) = (p̄, 4p̄) and (256, 1024), Poisson arrivals, a prefill token budget of
8,192. Load is a fraction of the deployment's capacity, the smaller of the prefill pool's R_p/E[S] and
the decode pool's R_d·s/H(s). 10,000 simulated requests per point, the first 10 % dropped.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from planner.disagg import (
    SCALE_OUT_LINKS,
    DecodePool,
    PrefillPool,
    decode_slots,
    decode_step_s,
    kv_transfer_s,
    predict_disagg,
    prefill_queue,
)
from planner.errors import UnstableLoadError
from planner.simulator_disagg import simulate_disagg
from planner.step_model import StepModel
from planner.workload import LognormalLength, Workload

LLAMA2_70B_4XH100 = StepModel(
    dense_weight_bytes=140e9,
    kv_bytes_per_token=327_680.0,
    flops_per_token=140e9,
    attention_flops_per_context_token=4 * 80 * 64 * 128,
    memory_bandwidth_bytes_per_s=4 * 3.35e12,
    compute_flops_per_s=4 * 989e12,
)
KV_CAPACITY_TOKENS = (4 * 80e9 - 140e9) / 327_680  # (4 × 80 GB − 140 GB) / 327,680 B
LINK = SCALE_OUT_LINKS["connectx7_400g"]
LOADS = (0.3, 0.6, 0.8)
RATIOS = ((1, 1), (1, 2), (2, 1))
PROMPTS = (512, 2048)
MARK_BEGIN, MARK_END = "<!-- disagg-fidelity:begin -->", "<!-- disagg-fidelity:end -->"


def workload(rate: float, prompt_mean: int) -> Workload:
    return Workload(
        arrival_rate_rps=rate,
        prompt_tokens=LognormalLength(mean_tokens=prompt_mean, p99_tokens=4 * prompt_mean),
        output_tokens=LognormalLength(mean_tokens=256, p99_tokens=1024),
    )


def capacity_rps(prefill: PrefillPool, decode: DecodePool, w: Workload) -> float:
    service = prefill_queue(prefill, w.at_rate(0.0), 0.99).service_mean_s
    slots, _ = decode_slots(decode, w)
    context = w.prompt_tokens.mean + w.output_tokens.mean / 2.0
    transfer = kv_transfer_s(prompt_tokens=w.prompt_tokens.mean, kv_bytes_per_token=327_680.0, link=LINK, gpus=4)
    hold = transfer + (w.output_tokens.mean - 1.0) * decode_step_s(decode.step_model, slots, context)
    return min(prefill.replicas / service, decode.replicas * slots / hold)  # min(R_p/E[S], R_d·s/H(s))


def rows(requests: int) -> list[str]:
    out = []
    for prompt_mean in PROMPTS:
        for rp, rd in RATIOS:
            prefill = PrefillPool(step_model=LLAMA2_70B_4XH100, replicas=rp, tp=4)
            decode = DecodePool(
                step_model=LLAMA2_70B_4XH100, replicas=rd, batch_limit=128, kv_capacity_tokens=KV_CAPACITY_TOKENS, tp=4
            )
            cap = capacity_rps(prefill, decode, workload(1.0, prompt_mean))
            for load in LOADS:
                w = workload(load * cap, prompt_mean)
                try:
                    a = predict_disagg(prefill, decode, w, link=LINK, kv_bytes_per_token=327_680.0)
                    an = (a.ttft_s, a.tpot_s, a.e2e_s)
                    rhos = f"{a.prefill.rho:.2f} / {a.decode.rho:.2f}"
                except UnstableLoadError:
                    an, rhos = (float("nan"),) * 3, "unstable"
                sim = simulate_disagg(
                    prefill, decode, w, link=LINK, kv_bytes_per_token=327_680.0, prefill_token_budget=8192, requests=requests
                ).percentile(99.0)
                err = [f"{(x - y) / y:+.0%}" for x, y in zip(an, sim, strict=True)]
                out.append(
                    f"| {prompt_mean} | {rp}P{rd}D | {load:.1f} | {w.arrival_rate_rps:.2f} | {rhos} | "
                    + " | ".join(f"{x * 1e3:.0f} / {y * 1e3:.0f} ({e})" for x, y, e in zip(an, sim, err, strict=True))
                    + " |"
                )
                print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--doc", type=Path, default=Path("docs/disaggregation.md"))
    args = parser.parse_args()
    header = [
        "| prompt mean | P:D | load | λ (req/s) | ρ prefill / decode | p99 TTFT ms analytic / sim (err) | p99 TPOT ms | p99 E2E ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table = "\n".join([MARK_BEGIN, *header, *rows(args.requests), MARK_END])
    text = args.doc.read_text()
    pattern = re.compile(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), re.DOTALL)
    text = pattern.sub(lambda _: table, text) if pattern.search(text) else text + "\n" + table + "\n"
    args.doc.write_text(text)


if __name__ == "__main__":
    main()
