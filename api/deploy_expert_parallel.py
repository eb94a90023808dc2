"""The expert-parallel replica's engine flags (planner/expert_parallel.py: ep GPUs, attention
data-parallel, experts sharded, an all-to-all per MoE layer), kept apart from api/deploy_engines.py's
other flags.

- vLLM: `--tensor-parallel-size 1 --data-parallel-size ep --enable-expert-parallel`; its all-to-all
  kernels run only with data parallelism (vllm/model_executor/layers/fused_moe/config.py
  `use_all2all_kernels = dp_size > 1 and use_ep`). Each data-parallel rank is its own engine core
  with its own scheduler, so the replica's batch limit and chunk budget are split over the ranks
  (`--max-num-seqs` and `--max-num-batched-tokens` per rank, rounded down, at least 1). The all-to-all
  kernel is chosen by the environment variable `VLLM_ALL2ALL_BACKEND` (vLLM v0.11's; later releases
  also take `--all2all-backend`), set as vLLM's docs/serving/expert_parallel_deployment.md "Backend
  Selection Guide" says: `pplx` for a replica inside one node, `deepep_low_latency` for decode and
  `deepep_high_throughput` for a prefill pool across nodes. Without it vLLM runs its default (`naive`
  or `allgather_reducescatter`, by release), which sends every token to every rank instead of each to
  its experts' ranks — more bytes than the all-to-all the plan priced (planner/pipeline.py).
- SGLang: `--tp-size ep --dp-size ep --enable-dp-attention --ep-size ep --moe-a2a-backend deepep`
  (docs.sglang.io "Expert Parallelism": the default `--moe-a2a-backend none` "uses All-Reduce or
  All-Gather for token dispatch"; "Server Arguments": `--ep-size`, `--enable-dp-attention`).
- TensorRT-LLM: `--tp_size ep --ep_size ep` with `enable_attention_dp: true` in the LLM API options.
"""

from __future__ import annotations

from typing import Any


def _replace_value(argv: list[str], flag: str, value: str) -> None:
    if flag in argv:
        argv[argv.index(flag) + 1] = value


def vllm_expert_parallel(argv: list[str], ep: int) -> list[str]:
    """A vLLM argv for an ep-GPU replica: tp 1 per data-parallel rank, ep ranks, limits per rank; unchanged at ep 1."""
    if ep <= 1:
        return argv
    out = list(argv)
    _replace_value(out, "--tensor-parallel-size", "1")
    for flag in ("--max-num-seqs", "--max-num-batched-tokens"):
        if flag in out:
            _replace_value(out, flag, str(max(1, int(out[out.index(flag) + 1]) // ep)))
    at = out.index("--tensor-parallel-size") + 2
    return [*out[:at], "--data-parallel-size", str(ep), "--enable-expert-parallel", *out[at:]]


#: vLLM's all-to-all backends by where the ranks are (vllm-project/vllm docs/serving/expert_parallel_deployment.md,
#: "Backend Selection Guide": pplx "Single node"; deepep_high_throughput "Multi-node prefill"; deepep_low_latency
#: "Multi-node decode"). Each needs its kernels installed (that page's prerequisites: vLLM's tools/ep_kernels).
VLLM_ALL2ALL_SINGLE_NODE = "pplx"
VLLM_ALL2ALL_MULTI_NODE_PREFILL = "deepep_high_throughput"
VLLM_ALL2ALL_MULTI_NODE_DECODE = "deepep_low_latency"


def vllm_expert_parallel_env(ep: int, *, nodes: int, role: str) -> dict[str, str]:
    """The environment an ep-GPU vLLM replica over `nodes` nodes runs with (its `role`: mixed, prefill or decode):
    VLLM_ALL2ALL_BACKEND as vLLM documents it for the data-parallel-attention + EP form; none at ep 1."""
    if ep <= 1:
        return {}
    if nodes <= 1:
        backend = VLLM_ALL2ALL_SINGLE_NODE
    else:
        backend = VLLM_ALL2ALL_MULTI_NODE_PREFILL if role == "prefill" else VLLM_ALL2ALL_MULTI_NODE_DECODE
    return {"VLLM_ALL2ALL_BACKEND": backend}


def sglang_expert_parallel(ep: int) -> list[str]:
    """SGLang's data-parallel attention with DeepEP all-to-all over ep GPUs (its --tp-size stays ep); none at ep 1."""
    if ep <= 1:
        return []
    return ["--dp-size", str(ep), "--enable-dp-attention", "--ep-size", str(ep), "--moe-a2a-backend", "deepep"]


def trtllm_expert_parallel(ep: int) -> tuple[list[str], dict[str, Any]]:
    """TensorRT-LLM's `--ep_size` and the LLM API's `enable_attention_dp`; none at ep 1."""
    if ep <= 1:
        return [], {}
    return ["--ep_size", str(ep)], {"enable_attention_dp": True}
