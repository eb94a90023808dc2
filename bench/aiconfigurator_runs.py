"""Runs NVIDIA AIConfigurator's aggregated-vs-disaggregated search on a fixed set of questions and
keeps its answers as data (bench/aiconfigurator_runs.json), so Headroom's answers to the same
questions can be set beside them (docs/disaggregation.md) without AIConfigurator installed.

AIConfigurator is not a dependency: install it into a separate environment and point at its CLI.

    python3 -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator==0.12.0
    .venv/bin/python -m bench.aiconfigurator_runs --aic /tmp/aic/bin/aiconfigurator

Each question is `aiconfigurator cli default` (its documented agg-vs-disagg comparison) with the
model's Hugging Face id, the system, the input/output lengths and the TTFT/TPOT targets, the
TensorRT-LLM backend and its default precision (BF16 GEMMs and KV for these models), on at most 8
GPUs. AIConfigurator reports steady-state averages at a concurrency it chooses (it has no arrival
process and no percentile): what is compared is its choice of topology, the number of prefill and
decode workers and their parallelism, and its predicted output tokens/s per GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).with_name("aiconfigurator_runs.json")

#: (question id, Headroom model slug, AIConfigurator model id, Headroom GPU slug, AIConfigurator
#: system, prompt tokens, output tokens, TTFT ms, TPOT ms). Chosen to span the regime map: tight
#: TTFT with relaxed TPOT, strict TPOT with relaxed TTFT, long prompts, long outputs, a MoE model
#: (Mixtral-8x7B was asked too: this AIConfigurator build tried to download its config and failed
#: offline, so it is not among them).
QUESTIONS: tuple[tuple[str, str, str, str, str, int, int, float, float], ...] = (
    ("q01", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h200", "h200_sxm", 4000, 500, 1000, 20),
    ("q02", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h200", "h200_sxm", 1000, 250, 300, 50),
    ("q03", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h100-sxm", "h100_sxm", 4000, 500, 2000, 10),
    ("q04", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "h100-sxm", "h100_sxm", 2000, 200, 300, 40),
    ("q05", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h200", "h200_sxm", 4000, 500, 1000, 30),
    ("q06", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h100-sxm", "h100_sxm", 2000, 500, 2000, 20),
    ("q07", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h100-sxm", "h100_sxm", 8000, 300, 3000, 40),
    ("q08", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h200", "h200_sxm", 1000, 1000, 500, 25),
    ("q09", "qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "h200", "h200_sxm", 4000, 500, 1000, 20),
    ("q10", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "h200", "h200_sxm", 2000, 200, 5000, 15),
    ("q11", "llama-3.1-70b", "meta-llama/Meta-Llama-3.1-70B", "b200", "b200_sxm", 4000, 500, 1000, 20),
    ("q12", "llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", "b200", "b200_sxm", 8000, 200, 2000, 15),
)
TOTAL_GPUS = 8
BACKEND = "trtllm"


def _float(row: dict[str, str], key: str) -> float:
    return float(row[key])


def _agg_row(row: dict[str, str]) -> dict[str, Any]:
    return {
        "tp": int(row["tp"]),
        "pp": int(row["pp"]),
        "gpus": int(row["num_total_gpus"]),
        "batch": int(float(row["bs"])),
        "concurrency": _float(row, "concurrency"),
        "ttft_ms": _float(row, "ttft"),
        "tpot_ms": _float(row, "tpot"),
        "output_tokens_per_s_per_gpu": _float(row, "tokens/s/gpu"),
        "precision": row["gemm"],
    }


def _disagg_row(row: dict[str, str]) -> dict[str, Any]:
    return {
        "prefill_workers": int(row["(p)workers"]),
        "prefill_tp": int(row["(p)tp"]),
        "prefill_batch": int(float(row["(p)bs"])),
        "decode_workers": int(row["(d)workers"]),
        "decode_tp": int(row["(d)tp"]),
        "decode_batch": int(float(row["(d)bs"])),
        "gpus": int(row["num_total_gpus"]),
        "concurrency": _float(row, "concurrency"),
        "ttft_ms": _float(row, "ttft"),
        "tpot_ms": _float(row, "tpot"),
        "output_tokens_per_s_per_gpu": _float(row, "tokens/s/gpu"),
        "precision": row["(p)gemm"],
    }


def _best(directory: Path, mode: str) -> dict[str, Any] | None:
    found = list(directory.rglob(f"{mode}/best_config_topn.csv"))
    if not found:
        return None
    with found[0].open() as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        return None
    return _agg_row(rows[0]) if mode == "agg" else _disagg_row(rows[0])


def run_question(aic: str, question: tuple[str, str, str, str, str, int, int, float, float]) -> dict[str, Any]:
    qid, slug, hf_id, gpu, system, isl, osl, ttft_ms, tpot_ms = question
    with tempfile.TemporaryDirectory() as directory:
        command = [
            aic, "cli", "default", "--model-path", hf_id, "--system", system, "--total-gpus", str(TOTAL_GPUS),
            "--isl", str(isl), "--osl", str(osl), "--ttft", str(ttft_ms), "--tpot", str(tpot_ms),
            "--backend", BACKEND, "--save-dir", directory, "--log-level", "ERROR", "--no-color",
        ]  # fmt: skip
        started = time.perf_counter()
        finished = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
        wall_s = time.perf_counter() - started
        agg, disagg = _best(Path(directory), "agg"), _best(Path(directory), "disagg")
    answer: dict[str, Any] = {
        "id": qid,
        "model": slug,
        "aiconfigurator_model": hf_id,
        "gpu": gpu,
        "system": system,
        "prompt_tokens": isl,
        "output_tokens": osl,
        "ttft_ms": ttft_ms,
        "tpot_ms": tpot_ms,
        "agg": agg,
        "disagg": disagg,
        "wall_s": round(wall_s, 1),
        "exit_code": finished.returncode,
    }
    rates = {mode: best["output_tokens_per_s_per_gpu"] for mode, best in (("aggregated", agg), ("disaggregated", disagg)) if best}
    answer["chosen"] = max(rates, key=lambda mode: rates[mode]) if rates else None
    if finished.returncode != 0:
        answer["stderr_tail"] = finished.stderr[-2000:]
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aic", required=True, help="path of the aiconfigurator executable")
    parser.add_argument("--only", nargs="*", help="question ids to run (default: all)")
    args = parser.parse_args()
    version = subprocess.run([args.aic, "version"], capture_output=True, text=True, check=False).stdout.strip()
    answers = []
    for question in QUESTIONS:
        if args.only and question[0] not in args.only:
            continue
        answer = run_question(args.aic, question)
        print(json.dumps(answer), flush=True)
        answers.append(answer)
    if args.only and OUTPUT.exists():  # a partial run replaces those questions' answers, keeps the rest
        kept = {a["id"]: a for a in json.loads(OUTPUT.read_text())["answers"]}
        kept.update({a["id"]: a for a in answers})
        answers = [kept[q[0]] for q in QUESTIONS if q[0] in kept]
    OUTPUT.write_text(
        json.dumps(
            {"aiconfigurator_version": version, "backend": BACKEND, "total_gpus": TOTAL_GPUS, "answers": answers}, indent=1
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
