"""Where a replica's memory goes: weights, the KV cache per token and per request, and what is left.

Per replica of `tp × pp` GPUs (docs/design.md, "Reference physics"; pp pipeline stages, planner/pipeline.py):
    M = tp · pp · memory_bytes · (1 − memory_reserve_fraction)
    W = params_total · weight_bytes_per_param
    kv_bytes_per_token = 2 · layers · kv_heads · head_dim · kv_element_bytes      (MHA/GQA)
                       = layers · (kv_lora_rank + rope_head_dim) · kv_element_bytes (MLA latent)
    capacity_tokens    = floor((M − W) / (kv_bytes_per_token · kv copies))
    max batch at context c = floor(capacity_tokens / c)
KV copies: when tp exceeds the KV heads (or always, for MLA) each KV head is replicated over
tp / kv_heads GPUs, and every copy costs memory and is read each step (planner/parallel.py).
Pipeline stages split the layers, so the weights and each token's KV divide over the stages: the
replica's totals (W, KV per token) do not change with pp, only the memory that holds them. The
stage holding the embeddings or the LM head holds a little more than 1/pp; that imbalance is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import ModelDoesNotFitError
from planner.parallel import check_tensor_parallel, kv_head_replicas, valid_tensor_parallel_degrees
from planner.pipeline import PP_DEGREES
from planner.precision import supports_precision
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision, QuantSpec
from planner.units import GB


def weight_bytes(model: ModelSpec, weights: QuantSpec) -> float:
    """All weights of one copy of the model."""
    return model.params_total * weights.weight_bytes_per_param  # params × bytes/param (scales included)


def expert_weight_bytes(model: ModelSpec, weights: QuantSpec) -> float:
    """One routed expert in one MoE layer (0 for a dense model)."""
    if model.moe is None:
        return 0.0
    return model.moe.expert_params * weights.weight_bytes_per_param  # expert params × bytes/param


def dense_weight_bytes(model: ModelSpec, weights: QuantSpec) -> float:
    """Weights every step reads: everything but the routed experts (attention, embeddings, shared experts)."""
    routed_params = model.moe.routed_params if model.moe is not None else 0.0
    return (model.params_total - routed_params) * weights.weight_bytes_per_param  # non-routed params × bytes/param


def weight_bytes_per_gpu(model: ModelSpec, weights: QuantSpec, tp: int) -> float:
    """Weights each GPU of a tp-way replica holds (an even split)."""
    return weight_bytes(model, weights) / tp  # W / tp


def kv_bytes_per_token(model: ModelSpec, kv_cache: QuantSpec) -> float:
    """KV-cache bytes one token adds to one copy of the cache (no tensor-parallel replication)."""
    if model.mla is not None:
        return (
            model.layers * (model.mla.kv_lora_rank + model.mla.rope_head_dim) * kv_cache.element_bytes
        )  # L × (latent + RoPE key) × bytes
    return (
        2 * model.layers * model.kv_heads * model.head_dim * kv_cache.element_bytes
    )  # K and V × L × kv heads × head dim × bytes


def replica_kv_bytes_per_token(model: ModelSpec, kv_cache: QuantSpec, tp: int) -> float:
    """KV-cache bytes one token costs a tp-way replica, counting replicated KV heads."""
    return kv_bytes_per_token(model, kv_cache) * kv_head_replicas(model, tp)  # one copy × copies


def kv_bytes_per_request(model: ModelSpec, kv_cache: QuantSpec, tp: int, context_tokens: int) -> float:
    """KV-cache bytes of one request holding `context_tokens` tokens on a tp-way replica."""
    return context_tokens * replica_kv_bytes_per_token(model, kv_cache, tp)  # tokens × bytes/token


def usable_memory_bytes(gpu: GpuSpec, tp: int, efficiency: Efficiency, *, pp: int = 1) -> float:
    """Memory a tp × pp replica offers to weights and KV cache after the reserve."""
    return tp * pp * gpu.memory_bytes * (1.0 - efficiency.memory_reserve_fraction)  # tp·pp × HBM × (1 − reserve)


def kv_capacity_tokens(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, efficiency: Efficiency, *, pp: int = 1
) -> int:
    """KV-cache tokens a replica holds after its weights (0 when the weights alone do not fit)."""
    free_bytes = usable_memory_bytes(gpu, tp, efficiency, pp=pp) - weight_bytes(model, precision.weights)  # M − W
    return max(0, math.floor(free_bytes / replica_kv_bytes_per_token(model, precision.kv_cache, tp)))


def max_batch_by_memory(capacity_tokens: int, context_tokens: int) -> int:
    """Requests of `context_tokens` tokens whose KV cache fits in `capacity_tokens` at once."""
    return capacity_tokens // context_tokens  # floor(capacity / c)


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFit:
    """How a replica's memory divides for one request size; `shortfall_bytes` > 0 means it does not fit."""

    available_bytes: float
    weights_bytes: float
    kv_bytes_for_requirement: float
    required_bytes: float
    shortfall_bytes: float

    @property
    def fits(self) -> bool:
        return self.shortfall_bytes <= 0.0


def memory_fit(
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    efficiency: Efficiency,
    *,
    context_tokens: int = 1,
    pp: int = 1,
) -> MemoryFit:
    """Weights plus the KV cache of one `context_tokens` request against the replica's usable memory."""
    available = usable_memory_bytes(gpu, tp, efficiency, pp=pp)
    weights = weight_bytes(model, precision.weights)
    kv = kv_bytes_per_request(model, precision.kv_cache, tp, context_tokens)
    required = weights + kv  # W + one request's KV
    return MemoryFit(
        available_bytes=available,
        weights_bytes=weights,
        kv_bytes_for_requirement=kv,
        required_bytes=required,
        shortfall_bytes=max(0.0, required - available),
    )


def check_fit(
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    efficiency: Efficiency,
    *,
    context_tokens: int = 1,
    candidate_precisions: Sequence[Precision] = (),
    pp: int = 1,
) -> MemoryFit:
    """Return the fit, or raise `ModelDoesNotFitError` when weights plus one request exceed memory.

    The error's extensions carry the shortfall (bytes and GB), the smallest valid tp (up to
    `gpus_per_node`) at which the same precision fits, and every precision among
    `candidate_precisions` the GPU runs that fits at this tp, fewest-bytes-saved first
    (the least aggressive quantisation that would do), and the smallest pipeline degree of
    planner/pipeline.py PP_DEGREES that fits at this tp (`smallest_fitting_pp`).
    """
    check_tensor_parallel(gpu, model, tp)
    fit = memory_fit(gpu, model, precision, tp, efficiency, context_tokens=context_tokens, pp=pp)
    if fit.fits:
        return fit
    smallest_pp = next(
        (
            more
            for more in PP_DEGREES
            if more > pp
            and more <= model.layers
            and memory_fit(gpu, model, precision, tp, efficiency, context_tokens=context_tokens, pp=more).fits
        ),
        None,
    )
    smallest_tp = next(
        (
            larger
            for larger in valid_tensor_parallel_degrees(gpu, model)
            if larger > tp and memory_fit(gpu, model, precision, larger, efficiency, context_tokens=context_tokens, pp=pp).fits
        ),
        None,
    )
    fitting = sorted(
        (
            candidate
            for candidate in candidate_precisions
            if supports_precision(gpu, candidate)
            and memory_fit(gpu, model, candidate, tp, efficiency, context_tokens=context_tokens, pp=pp).fits
        ),
        key=lambda candidate: -weight_bytes(model, candidate.weights),
    )
    suggestions = []
    if smallest_tp is not None:
        suggestions.append(f"tp={smallest_tp} would fit")
    if smallest_pp is not None:
        suggestions.append(f"tp={tp} × pp={smallest_pp} ({tp * smallest_pp} GPUs in pipeline stages) would fit")
    if fitting:
        suggestions.append(f"{fitting[0].weights.slug} weights with a {fitting[0].kv_cache.slug} KV cache would fit at tp={tp}")
    advice = (
        "; ".join(suggestions)
        if suggestions
        else f"no tp up to {gpu.gpus_per_node}, no pp up to {PP_DEGREES[-1]} and no candidate precision fits"
    )
    raise ModelDoesNotFitError(
        f"{model.slug} in {precision.weights.slug} on {tp * pp} × {gpu.slug}{f' (tp={tp}, pp={pp})' if pp > 1 else ''} needs {fit.required_bytes / GB:.1f} GB "
        f"(weights {fit.weights_bytes / GB:.1f} GB + KV {fit.kv_bytes_for_requirement / GB:.2f} GB for one "
        f"{context_tokens:,}-token request) but has {fit.available_bytes / GB:.1f} GB after the "
        f"{efficiency.memory_reserve_fraction:.0%} reserve: {fit.shortfall_bytes / GB:.1f} GB short. {advice}.",
        gpu=gpu.slug,
        model=model.slug,
        tp=tp,
        pp=pp,
        context_tokens=context_tokens,
        available_bytes=fit.available_bytes,
        weights_bytes=fit.weights_bytes,
        required_bytes=fit.required_bytes,
        shortfall_bytes=fit.shortfall_bytes,
        shortfall_gb=fit.shortfall_bytes / GB,
        smallest_fitting_tp=smallest_tp,
        smallest_fitting_pp=smallest_pp,
        fitting_precisions=[{"weights": p.weights.slug, "kv_cache": p.kv_cache.slug} for p in fitting],
    )
