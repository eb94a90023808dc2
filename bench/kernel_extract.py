"""Extract the kernel timings Headroom fits its operation-level step terms to (bench/kernel_measurements.json).

    python3 -m venv /tmp/pq && /tmp/pq/bin/pip install pyarrow
    /tmp/pq/bin/pip download aiconfigurator-core==0.12.0 --no-deps -d /tmp/aicwheel
    /tmp/pq/bin/python bench/kernel_extract.py /tmp/aicwheel/aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl

Source: NVIDIA AIConfigurator's published performance database, shipped in the `aiconfigurator-core`
0.12.0 wheel (PyPI; github.com/ai-dynamo/aiconfigurator, `systems/data/<gpu>/<op>/<framework>/<version>/`),
licensed Apache-2.0 (the wheel's LICENSE; each table's collection_meta.yaml carries
`SPDX-License-Identifier: Apache-2.0`). Kernels timed by NVIDIA on each GPU under TensorRT-LLM
(`torch_flow` kernel source, release 1.3.0rc20 for H100/H200/B200, 1.0.0 for A100). A subset is kept:

- GEMM (`gemm_perf`): BF16 and FP8 (per-tensor), M in powers of two 1..16384, N and K in {1024, 2048,
  4096, 8192, 16384}; latency in ms.
- Decode attention (`generation_attention_perf`): 8 query heads, 1 KV head, head dim 128 (a 70B model's
  layer at tp 8), BF16 KV, every batch and context the table has; latency in ms for one layer.
- All-reduce (`custom_allreduce_perf`): BF16, TensorRT-LLM's custom all-reduce, 2/4/8 GPUs; message size
  in elements (AIConfigurator's `CustomAllReduce` op passes tokens × hidden), latency in ms.
- MoE layer (`moe_perf`): the grouped expert GEMMs of one MoE layer (TensorRT-LLM's CUTLASS fused MoE,
  `moe_torch_flow_cutlass`), balanced routing, every expert tensor-parallel and expert-parallel
  degree, for three shapes (`MOE_SHAPES`): Mixtral-8x7B and Qwen3-30B-A3B in BF16, DeepSeek-V3 in
  block-scaled FP8 (its released datatype); latency in ms for one layer.

Not imported by anything: pyarrow is not a Headroom dependency. The output is committed.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-not-found]

OUT = Path(__file__).with_name("kernel_measurements.json")
PREFIX = "aiconfigurator_core/systems/data/"
TABLES = {
    ("h100_sxm", "1.3.0rc20"): "h100-sxm",
    ("h200_sxm", "1.3.0rc20"): "h200",
    ("b200_sxm", "1.3.0rc20"): "b200",
    ("a100_sxm", "1.0.0"): "a100-80gb-sxm",
}
SIZES = {1024, 2048, 4096, 8192, 16384}
#: (hidden, expert intermediate, experts per token, experts) -> (model, MoE datatype kept); model configs
#: on Hugging Face (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B, deepseek-ai/DeepSeek-V3).
MOE_SHAPES = {
    (4096, 14336, 2, 8): ("mixtral-8x7b", "bfloat16"),
    (2048, 768, 8, 128): ("qwen3-30b-a3b", "bfloat16"),
    (7168, 2048, 8, 256): ("deepseek-v3", "fp8_block"),
}
POWERS = {2**i for i in range(15)}


def _table(wheel: zipfile.ZipFile, path: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(io.BytesIO(wheel.read(path))).to_pylist()
    return rows


def main(wheel_path: str) -> int:
    wheel = zipfile.ZipFile(wheel_path)
    names = set(wheel.namelist())
    gemm: list[list[Any]] = []
    attention: list[list[Any]] = []
    allreduce: list[list[Any]] = []
    moe: list[list[Any]] = []
    for (system, version), slug in TABLES.items():
        path = f"{PREFIX}{system}/gemm/trtllm/{version}/gemm_perf.parquet"
        for r in _table(wheel, path):
            wanted = r["kernel_source"] == "torch_flow" and r["gemm_dtype"] in ("bfloat16", "fp8")
            if wanted and r["m"] in POWERS and r["n"] in SIZES and r["k"] in SIZES:
                gemm.append([slug, r["gemm_dtype"], r["m"], r["n"], r["k"], round(r["latency"], 6)])
        path = f"{PREFIX}{system}/attention/trtllm/{version}/generation_attention_perf.parquet"
        for r in _table(wheel, path):
            layout = (r["num_heads"], r["num_key_value_heads"], r["head_dim"], r["kv_cache_dtype"])
            if layout == (8, 1, 128, "bfloat16") and r["window_size"] in (0, None) and r["beam_width"] in (1, None):
                attention.append([slug, r["batch_size"], r["isl"] + r["step"], round(r["latency"], 6)])
        path = f"{PREFIX}{system}/comm/trtllm/{version}/custom_allreduce_perf.parquet"
        if path in names:
            for r in _table(wheel, path):
                if r["allreduce_dtype"] == "bfloat16":
                    allreduce.append([slug, r["num_gpus"], r["message_size"], round(r["latency"], 6)])
        path = f"{PREFIX}{system}/moe/trtllm/{version}/moe_perf.parquet"
        if path in names:
            for r in _table(wheel, path):
                shape = MOE_SHAPES.get((r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]))
                kept = r["kernel_source"] == "moe_torch_flow_cutlass" and r["distribution"] == "balanced"
                if shape is not None and kept and r["moe_dtype"] == shape[1]:
                    moe.append(
                        [
                            slug,
                            shape[0],
                            r["moe_dtype"],
                            r["moe_tp_size"],
                            r["moe_ep_size"],
                            r["num_tokens"],
                            round(r["latency"], 6),
                        ]
                    )
    document = {
        "source": (
            "NVIDIA AIConfigurator performance database, aiconfigurator-core 0.12.0 wheel (PyPI), "
            "https://github.com/ai-dynamo/aiconfigurator systems/data; Apache-2.0. TensorRT-LLM torch_flow "
            "kernels: 1.3.0rc20 on H100/H200/B200 SXM, 1.0.0 on A100 SXM. Extracted by bench/kernel_extract.py."
        ),
        "gemm_columns": ["gpu", "dtype", "m", "n", "k", "latency_ms"],
        "gemm": gemm,
        "decode_attention_layout": "8 query heads, 1 KV head, head_dim 128, BF16 KV; one layer",
        "decode_attention_columns": ["gpu", "batch", "context_tokens", "latency_ms"],
        "decode_attention": attention,
        "allreduce_columns": ["gpu", "gpus", "message_elements_bf16", "latency_ms"],
        "allreduce": allreduce,
        "moe_columns": ["gpu", "model", "dtype", "expert_tensor_parallel", "expert_parallel", "tokens", "latency_ms"],
        "moe": moe,
    }
    OUT.write_text(json.dumps(document, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{len(gemm)} GEMM, {len(attention)} attention, {len(allreduce)} all-reduce, {len(moe)} MoE rows -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
