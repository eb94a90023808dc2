"""The expert-parallel replica the search offers: ep GPUs, attention data-parallel, experts sharded.

planner/pipeline.py describes the layout and prices its communication (no all-reduce; an all-to-all
dispatch and combine per MoE layer over `tp_link`). This module gives the rest of the replica:

Step. Each of the ep ranks runs its own requests' attention with a full copy of the non-routed
weights (attention, embeddings, dense MLP layers, shared experts: `dense_weight_bytes`), so one step
reads them ep times, over ep × the bandwidth; the routed experts are read once in all (E/ep whole
experts per rank, the same distinct experts as a tensor-split replica touches); FLOPs are unchanged
(every token is computed once, on its own rank for attention and on its experts' ranks for the MoE);
the KV cache is one copy per token (each request's KV lives whole on its rank, no KV head is
replicated as tensor parallelism replicates them when tp > kv_heads, or MLA's latent at every tp).
So the step model is `build_step_model(..., tp=ep, ep=ep)` with

    dense_weight_bytes' = ep · W_dense          kv_bytes_per_token' = one copy

and everything else as built (the bandwidth and FLOP/s of ep GPUs; the comm terms from
planner/pipeline.py). Against ep = 1 on the same GPUs the trade is, per step of n tokens,

    + (ep − 1) · W_dense / (ep · BW)                                  every rank reads the dense weights
    − n · [2 L · 2(ep−1)/ep · h·a − 2 L_moe · 2 · h·a · R/ep] / B      all-reduces gone, all-to-all paid
    + (2 L_moe − 2 L) · α                                             (= 0 when every layer is MoE)

so expert parallelism wins on steps with many tokens (large batches, prefill chunks) and loses on small
decode steps (tests/planner/test_expert_parallel.py computes both by hand).

Memory. Each rank holds W_dense + W_routed/ep, so the replica holds ep · W_dense + W_routed; its KV
cache is ep · usable − that, one copy per token. A request's KV must fit its own rank.

Assumptions: requests and their tokens spread evenly over the ranks (the engine's load balancer; an
uneven split makes the busiest rank pace the step) and routed tokens spread evenly over the experts (no
expert load imbalance: EPLB-style balancing, DeepSeek-V3 §3.2). Searched at pp = 1 only.
"""

from __future__ import annotations

import dataclasses
import math

from planner.memory import MemoryFit, dense_weight_bytes, kv_bytes_per_token, usable_memory_bytes, weight_bytes
from planner.parallel import kv_head_replicas
from planner.performance import build_step_model
from planner.pipeline import valid_expert_parallel_degrees
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel


def expert_parallel_degrees(model: ModelSpec, tp: int) -> tuple[int, ...]:
    """The ep the search offers a tp-GPU replica of `model`: 1, and tp where the model is MoE and tp divides its experts."""
    return tuple(valid_expert_parallel_degrees(model, tp))


def expert_parallel_step_model(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, ep: int, efficiency: Efficiency, *, pp: int = 1
) -> StepModel:
    """The step model of an ep-GPU data-parallel-attention replica (module docstring); ep = 1 is the tp = 1 replica."""
    sm = build_step_model(gpu, model, precision, ep, efficiency, pp=pp, ep=ep)
    if ep == 1:
        return sm
    return dataclasses.replace(
        sm,
        dense_weight_bytes=ep * sm.dense_weight_bytes,  # every rank reads its copy of the non-routed weights
        kv_bytes_per_token=sm.kv_bytes_per_token / kv_head_replicas(model, ep),  # one copy: a request's KV on its rank
    )


def expert_parallel_memory_fit(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, ep: int, efficiency: Efficiency, *, context_tokens: int = 1
) -> MemoryFit:
    """Weights (ep copies of the non-routed ones) plus one request's KV against ep GPUs' usable memory, and
    the request's KV against one rank's free memory (it lives whole on its rank)."""
    available = usable_memory_bytes(gpu, ep, efficiency)
    dense = dense_weight_bytes(model, precision.weights)
    weights = ep * dense + (weight_bytes(model, precision.weights) - dense)  # ep · W_dense + W_routed
    kv = context_tokens * kv_bytes_per_token(model, precision.kv_cache)
    required = weights + kv
    per_rank_short = kv - (available - weights) / ep  # one rank's free memory after its weights
    return MemoryFit(
        available_bytes=available,
        weights_bytes=weights,
        kv_bytes_for_requirement=kv,
        required_bytes=required,
        shortfall_bytes=max(0.0, required - available, per_rank_short),
    )


def expert_parallel_kv_capacity_tokens(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, ep: int, efficiency: Efficiency
) -> int:
    """KV tokens the replica holds after ep · W_dense + W_routed (one copy per token; 0 when the weights do not fit)."""
    fit = expert_parallel_memory_fit(gpu, model, precision, ep, efficiency, context_tokens=0)
    free = fit.available_bytes - fit.weights_bytes
    return max(0, math.floor(free / kv_bytes_per_token(model, precision.kv_cache)))


def never_faster(ep_step: StepModel, twin: StepModel, *, max_tokens: float, max_kv_tokens: float) -> bool:
    """Whether the expert-parallel step is strictly slower than its ep = 1 twin's (same GPUs, precision, tp) at every
    step of 1 … `max_tokens` new tokens reading at most `max_kv_tokens` KV tokens, whatever the attention.

    The two differ only in the dense weights read (ep · W_dense against W_dense), the KV bytes per token (one copy
    against the tensor-parallel replicas) and the communication (an all-to-all against the all-reduces); FLOPs, the
    routed experts, bandwidth and the overlap are the same (anything else and this says False). With
    f(m, c) = max(m, c) + (1 − o)·min(m, c) the step's memory/compute fold, f rises by at least (1 − o)·δ when m
    rises by δ ≥ 0 and falls by at most |δ| when δ < 0, so the ep step exceeds the twin's by at least

        g(δm) + min over n ∈ {1, max_tokens} of [n·(c_ep − c_1) + (α_ep − α_1)] + (overhead_ep − overhead_1)
        δm = [ (W_dense,ep − W_dense,1) − max_kv_tokens · max(0, kv_1 − kv_ep) ] / BW

    (the comm difference is linear in n, so its minimum is at an end). True when that is > 0: no step of the range
    is faster on the ep replica, so (the queueing model's percentiles never fall as steps slow) no option of it
    whose steps stay in the range can beat the same option of its twin, which costs the same."""
    same = (
        ep_step.flops_per_token == twin.flops_per_token
        and ep_step.attention_flops_per_context_token == twin.attention_flops_per_context_token
        and ep_step.compute_flops_per_s == twin.compute_flops_per_s
        and ep_step.memory_bandwidth_bytes_per_s == twin.memory_bandwidth_bytes_per_s
        and (ep_step.expert_weight_bytes, ep_step.experts, ep_step.experts_per_token, ep_step.moe_layers)
        == (twin.expert_weight_bytes, twin.experts, twin.experts_per_token, twin.moe_layers)
        and ep_step.memory_compute_overlap == twin.memory_compute_overlap
        and 0.0 <= twin.memory_compute_overlap <= 1.0
        and ep_step.speculation is None
        and twin.speculation is None
    )
    if not same or max_tokens < 1:
        return False
    kv_saved = max(0.0, twin.kv_bytes_per_token - ep_step.kv_bytes_per_token)
    delta_memory_s = (
        ep_step.dense_weight_bytes - twin.dense_weight_bytes - max_kv_tokens * kv_saved
    ) / twin.memory_bandwidth_bytes_per_s
    fold_s = (1.0 - twin.memory_compute_overlap) * delta_memory_s if delta_memory_s >= 0 else delta_memory_s
    comm_s = min(
        n * (ep_step.comm_s_per_token - twin.comm_s_per_token) + (ep_step.comm_latency_s - twin.comm_latency_s)
        for n in (1.0, float(max_tokens))
    )
    return fold_s + comm_s + (ep_step.step_overhead_s - twin.step_overhead_s) > 0.0
