"""The roofline performance model: a replica's step-time coefficients, prefill, decode and throughput.

`build_step_model` turns (GPU, model, precision, tp, efficiency) into the `StepModel` every other
part of the planner consumes; `evaluate` adds the memory picture, a prefill, decode rows at chosen
batch sizes and a throughput curve — everything `POST /v1/evaluate` returns, as plain floats in SI
units (bytes, seconds, FLOP/s, tokens/s).

Per replica of `tp` GPUs (docs/design.md, "Reference physics"):
    BW = tp · hbm_bandwidth · η_mem           F = tp · peak_flops(compute dtype) · η_compute
    flops_per_token = 2 · params_active        (one multiply and one add per active weight)
    attention_flops_per_context_token = 4 · layers · heads · head_dim   (QKᵀ and PV, 2 FLOPs each)
MLA models attend in the latent space (weight absorption, DeepSeek-V2 arXiv 2405.04434 §2.1.2;
vLLM and FlashMLA decode this way): per head the score is a dot product over kv_lora_rank +
rope_head_dim values and the output a weighted sum over kv_lora_rank values, so
    attention_flops_per_context_token = 2 · layers · heads · (2 · kv_lora_rank + rope_head_dim).
Prefill kernels may use the unabsorbed form (fewer FLOPs), so this overstates MLA prefill attention.

MoE expert GEMMs (issue 14 §3): a routed expert's grouped GEMM runs at r(i) = i / (i + i½) of the dense
GEMM rate, i the expert's intermediate size per GPU (I / tp with the experts split over tp; I with
expert parallelism). NVIDIA AIConfigurator's MoE layer timings (bench/kernel_measurements.json,
`python -m bench.kernel_fit`: Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3 at every expert tp) show the rate
falling with i from ~1 at Mixtral's 14,336 to 0.1 at 48-128, whatever the model. `flops_per_token` counts
it as dense-GEMM-equivalent FLOPs: 2 · (params_active + routed_active · (1/r − 1)), routed_active =
moe_layers · experts_per_token · expert_params, so η_compute stays the dense GEMM's. `build_step_model`
does not use it yet (2 · params_active): it is the `moe` step variant of `python -m bench.engine_profiles
--variant` (bench/step_variants.py; results in docs/operation-terms.md) until the refit ships it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from planner.errors import ConvergenceError, PlannerInputError, UnsupportedConfigurationError
from planner.memory import (
    check_fit,
    dense_weight_bytes,
    expert_weight_bytes,
    kv_bytes_per_request,
    kv_bytes_per_token,
    kv_capacity_tokens,
    max_batch_by_memory,
    replica_kv_bytes_per_token,
    usable_memory_bytes,
    weight_bytes,
    weight_bytes_per_gpu,
)
from planner.parallel import kv_head_replicas
from planner.pipeline import check_pipeline_parallel, parallel_terms
from planner.precision import activation_bytes, check_precision, compute_peak_flops_per_s
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel

Bound = Literal["memory", "compute"]

#: Throughput-curve grid: four points per doubling of the batch (then rounded to integers).
CURVE_POINTS_PER_DOUBLING = 4

#: Search bound for the knee: batch / step_s tends to its ceiling, so half of it is reached at a
#: finite batch; 2^40 sequences only guards against a non-finite coefficient.
MAX_KNEE_BATCH = 2**40


def attention_flops_per_context_token(model: ModelSpec) -> float:
    """FLOPs one new token spends per context token it attends to, over all layers."""
    if model.mla is not None:
        return (
            2 * model.layers * model.attention_heads * (2 * model.mla.kv_lora_rank + model.mla.rope_head_dim)
        )  # L × H × (QK over r+rope, PV over r) × 2
    return 4 * model.layers * model.attention_heads * model.head_dim  # L × H × d × (QKᵀ + PV) × 2


#: i½ (expert intermediate per GPU) of the grouped expert GEMM's rate relative to the dense GEMM rate, per
#: (architecture, compute class): fitted by `python -m bench.kernel_fit` (least squares on the log rate ratio) on
#: TensorRT-LLM 1.3.0rc20's CUTLASS fused-MoE timings: hopper BF16 H100/H200 22 groups 6.1 % median error,
#: hopper FP8 on DeepSeek-V3's block-scaled FP8 10 groups 4.9 %, blackwell BF16 B200 11 groups 8.7 %, and
#: all BF16 groups pooled (9.2 %) for an architecture or datatype without its own.
EXPERT_GEMM_HALF_INTERMEDIATE: dict[tuple[str, str], float] = {
    ("hopper", "bf16"): 565.0,
    ("hopper", "fp8"): 1646.0,
    ("blackwell", "bf16"): 838.0,
    ("pooled", "bf16"): 648.0,
}


def expert_gemm_rate(gpu: GpuSpec, model: ModelSpec, compute_dtype: str, tp: int, ep: int) -> float:
    """r(i) = i / (i + i½): the routed experts' GEMM rate relative to a dense GEMM's (1 for a dense model)."""
    if model.moe is None:
        return 1.0
    intermediate = model.moe.expert_params / (3.0 * model.hidden_size)  # gate, up, down: 3 · h · I parameters
    per_gpu = intermediate / tp if ep == 1 else intermediate  # tp splits every expert; ep keeps experts whole
    arch = gpu.architecture.lower()
    dtype = "fp8" if compute_dtype == "fp8" else "bf16"
    half = EXPERT_GEMM_HALF_INTERMEDIATE.get(
        (arch, dtype), EXPERT_GEMM_HALF_INTERMEDIATE.get((arch, "bf16"), EXPERT_GEMM_HALF_INTERMEDIATE[("pooled", "bf16")])
    )
    return per_gpu / (per_gpu + half)


def flops_per_token(gpu: GpuSpec, model: ModelSpec, compute_dtype: str, tp: int, ep: int) -> float:
    """Dense-GEMM-equivalent FLOPs per new token: 2 · active params, the routed experts' at their rate r(i)."""
    if model.moe is None:
        return 2.0 * model.params_active  # multiply + add per active weight
    routed_active = model.moe.moe_layers * model.moe.experts_per_token * model.moe.expert_params
    rate = expert_gemm_rate(gpu, model, compute_dtype, tp, ep)
    return 2.0 * (model.params_active + routed_active * (1.0 / rate - 1.0))  # experts' FLOPs at the dense rate


def build_step_model(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, efficiency: Efficiency, *, pp: int = 1, ep: int = 1
) -> StepModel:
    """The step-time coefficients of one tp × pp replica (expert-parallel `ep`); raises on an unsupported
    precision or layout.

    Communication is two ring all-reduces per layer (planner/parallel.py), the pipeline's stage hops
    and the expert-parallel all-to-all (planner/pipeline.py), counted only when `efficiency.include_comm`
    and the replica has more than one GPU. With pp > 1 the coefficients are the pipeline's fold
    (planner/pipeline.py, eq. (1)): one step is the pp micro-batches each going through its stage.
    """
    check_pipeline_parallel(gpu, model, tp, pp, ep)
    check_precision(gpu, precision)
    terms = parallel_terms(gpu, model, tp, pp, ep, activation_bytes(precision.weights))
    with_comm = efficiency.include_comm and tp * pp > 1
    imbalance = terms.stage_imbalance  # s = pp·⌈L/pp⌉/L: the slowest stage paces the pipeline
    moe = model.moe
    return StepModel(
        dense_weight_bytes=pp * dense_weight_bytes(model, precision.weights),  # each stage once per micro-batch
        expert_weight_bytes=pp * expert_weight_bytes(model, precision.weights),
        experts=moe.experts if moe is not None else 0,
        experts_per_token=moe.experts_per_token if moe is not None else 0,
        moe_layers=moe.moe_layers if moe is not None else 0,
        kv_bytes_per_token=float(replica_kv_bytes_per_token(model, precision.kv_cache, tp)),
        flops_per_token=2.0 * model.params_active,  # multiply + add per active weight (one η: see `flops_per_token`)
        attention_flops_per_context_token=float(attention_flops_per_context_token(model)),
        memory_bandwidth_bytes_per_s=pp
        * tp
        * gpu.hbm_bandwidth_bytes_per_s
        * efficiency.memory
        / imbalance,  # pp·tp × HBM BW × η_mem / s
        compute_flops_per_s=pp
        * tp
        * compute_peak_flops_per_s(gpu, precision.weights)
        * efficiency.peak_factor(precision.weights.compute_dtype)
        * efficiency.compute
        / imbalance,  # pp·tp × peak × low-precision factor × η_compute / s
        comm_s_per_token=terms.comm_s_per_token if with_comm else 0.0,
        comm_latency_s=terms.comm_latency_s if with_comm else 0.0,
        step_overhead_s=efficiency.step_overhead_s,
        memory_compute_overlap=efficiency.memory_compute_overlap,
    )


def _bound(memory_s: float, compute_s: float) -> Bound:
    return "compute" if compute_s > memory_s else "memory"


@dataclass(frozen=True, slots=True, kw_only=True)
class Prefill:
    """One prompt of `tokens` tokens processed in one step, against one weight read.

    `time_s` is the whole step (linear and attention FLOPs, comm, overhead); `linear_time_s` is
    the linear FLOPs alone at F (docs/design.md's 70.8 ms); `weight_read_s` one read of the weights.
    """

    tokens: int
    time_s: float
    linear_time_s: float
    attention_time_s: float
    weight_read_s: float
    comm_s: float
    linear_flops: float
    attention_flops: float
    kv_bytes_written: float
    bound: Bound
    fits_in_memory: bool


def prefill(step_model: StepModel, prompt_tokens: int, *, kv_capacity_tokens: int | None = None) -> Prefill:
    """Prefill of a fresh prompt: p new tokens, no KV read, attending to p(p+1)/2 context tokens."""
    if prompt_tokens < 1:
        raise PlannerInputError(f"prompt_tokens must be >= 1, got {prompt_tokens}", prompt_tokens=prompt_tokens)
    attended = prompt_tokens * (prompt_tokens + 1) / 2  # token i attends to i tokens, i = 1..p
    memory_s = step_model.memory_s(prompt_tokens, 0.0)
    compute_s = step_model.compute_s(prompt_tokens, attended)
    return Prefill(
        tokens=prompt_tokens,
        time_s=step_model.step_s(prompt_tokens, 0.0, attended),
        linear_time_s=prompt_tokens * step_model.flops_per_token / step_model.compute_flops_per_s,  # 2·active·p / F
        attention_time_s=attended * step_model.attention_flops_per_context_token / step_model.compute_flops_per_s,
        weight_read_s=memory_s,
        comm_s=step_model.comm_s(prompt_tokens),
        linear_flops=prompt_tokens * step_model.flops_per_token,  # p × 2·active
        attention_flops=attended * step_model.attention_flops_per_context_token,  # p(p+1)/2 × attention FLOPs per context token
        kv_bytes_written=prompt_tokens * step_model.kv_bytes_per_token,
        bound=_bound(memory_s, compute_s),
        fits_in_memory=kv_capacity_tokens is None or prompt_tokens <= kv_capacity_tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeStep:
    """One decode step of `batch` sequences each at `context_tokens` of context.

    `flops_per_byte` counts the linear FLOPs (2·active per sequence) over every byte read
    (weights and KV cache) — the intensity docs/design.md quotes (≈ 59 for Llama-2-70B at batch 134);
    `flops_per_byte_with_attention` adds the attention FLOPs. `bound` compares the memory and
    compute times, i.e. `flops_per_byte_with_attention` against the break-even F / BW.
    `fits_in_memory` is False when the batch's KV cache exceeds the replica's capacity: the row
    then says what the step would take if it fit, and a server could not run it.
    """

    batch: int
    context_tokens: int
    step_s: float
    memory_s: float
    compute_s: float
    comm_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_request: float
    weight_bytes_read: float
    kv_bytes: float
    bytes_read: float
    linear_flops: float
    attention_flops: float
    flops_per_byte: float
    flops_per_byte_with_attention: float
    bound: Bound
    fits_in_memory: bool


def decode_step(step_model: StepModel, *, batch: int, context_tokens: int, kv_capacity_tokens: int | None = None) -> DecodeStep:
    """Decode step for `batch` sequences at `context_tokens`: step_s(B, B·c, B·c)."""
    if batch < 1:
        raise PlannerInputError(f"batch must be >= 1, got {batch}", batch=batch)
    if context_tokens < 1:
        raise PlannerInputError(f"context_tokens must be >= 1, got {context_tokens}", context_tokens=context_tokens)
    kv_tokens = batch * context_tokens  # every sequence reads and attends to its whole context
    if step_model.speculation is None:
        new_tokens, attended = batch, float(kv_tokens)
        step_s = step_model.step_s(batch, kv_tokens, kv_tokens)
    else:
        # a speculative replica's decode step is the verify step: k + 1 tokens per sequence and the draft's passes
        v = step_model.verify_tokens
        new_tokens, attended = batch * v, v * kv_tokens + batch * (v - 1) * v / 2.0  # (k+1)·c + k(k+1)/2 per sequence
        step_s = step_model.verify_step_s(batch, kv_tokens)
    emitted = step_model.tokens_per_step  # tokens per sequence and step: E with speculation, else 1
    memory_s = step_model.memory_s(new_tokens, kv_tokens)
    compute_s = step_model.compute_s(new_tokens, attended)
    weight_read = step_model.weight_bytes_read(new_tokens)
    kv_bytes = kv_tokens * step_model.kv_bytes_per_token  # B × c × bytes/token
    bytes_read = weight_read + kv_bytes
    linear_flops = new_tokens * step_model.flops_per_token  # B(k+1) × 2·active
    attention_flops = attended * step_model.attention_flops_per_context_token  # attended tokens × attention FLOPs
    return DecodeStep(
        batch=batch,
        context_tokens=context_tokens,
        step_s=step_s,
        memory_s=memory_s,
        compute_s=compute_s,
        comm_s=step_model.comm_s(new_tokens),
        output_tokens_per_s=batch * emitted / step_s,  # E tokens per sequence per step (1 without speculation)
        output_tokens_per_s_per_request=emitted / step_s,
        weight_bytes_read=weight_read,
        kv_bytes=kv_bytes,
        bytes_read=bytes_read,
        linear_flops=linear_flops,
        attention_flops=attention_flops,
        flops_per_byte=linear_flops / bytes_read,
        flops_per_byte_with_attention=(linear_flops + attention_flops) / bytes_read,
        bound=_bound(memory_s, compute_s),
        fits_in_memory=kv_capacity_tokens is None or kv_tokens <= kv_capacity_tokens,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputPoint:
    batch: int
    step_s: float
    output_tokens_per_s: float
    output_tokens_per_s_per_request: float
    bound: Bound


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputCurve:
    """Decode throughput against batch at one context, from batch 1 to the memory limit.

    `ceiling_tokens_per_s` is the limit of batch / step_s as the batch grows without bound: every
    extra sequence adds c·kv_bytes_per_token of reads, flops_per_token + c·attention FLOPs and
    comm_s_per_token, while the weight read is shared. `knee_batch` is the smallest batch reaching
    half that ceiling — past it, a larger batch can at most double throughput while every request
    slows (for a dense, memory-bound model it is where the KV reads equal the weight read). Either may lie beyond
    `memory_limit_batch`, which is when memory, not the roofline, caps throughput.
    """

    context_tokens: int
    memory_limit_batch: int
    ceiling_tokens_per_s: float
    knee_batch: int
    points: tuple[ThroughputPoint, ...]


def batch_grid(max_batch: int, points_per_doubling: int = CURVE_POINTS_PER_DOUBLING) -> tuple[int, ...]:
    """Integer batches 1..max_batch, spaced evenly in log scale, always ending at max_batch."""
    if max_batch < 1:
        return ()
    steps = math.ceil(math.log2(max_batch) * points_per_doubling) if max_batch > 1 else 0
    grid = {min(max_batch, round(2.0 ** (i / points_per_doubling))) for i in range(steps + 1)}
    grid.add(max_batch)
    return tuple(sorted(grid))


def _ceiling_tokens_per_s(step_model: StepModel, context_tokens: int) -> float:
    memory_per_sequence_s = context_tokens * step_model.kv_bytes_per_token / step_model.memory_bandwidth_bytes_per_s
    compute_per_sequence_s = (
        step_model.flops_per_token + context_tokens * step_model.attention_flops_per_context_token
    ) / step_model.compute_flops_per_s
    hi, lo = max(memory_per_sequence_s, compute_per_sequence_s), min(memory_per_sequence_s, compute_per_sequence_s)
    return 1.0 / (
        hi + (1.0 - step_model.memory_compute_overlap) * lo + step_model.comm_s_per_token
    )  # 1 / marginal step time per sequence


def _knee_batch(step_model: StepModel, context_tokens: int, ceiling: float) -> int:
    """Smallest batch whose throughput reaches half the ceiling (throughput rises with batch)."""

    def throughput(batch: int) -> float:
        return batch / step_model.step_s(batch, batch * context_tokens, batch * context_tokens)

    low, high = 1, 1
    while throughput(high) < ceiling / 2:
        if high > MAX_KNEE_BATCH:
            raise ConvergenceError(
                f"throughput did not reach half its ceiling ({ceiling:.4g} tokens/s) by batch {MAX_KNEE_BATCH:,}",
                ceiling_tokens_per_s=ceiling,
            )
        low, high = high, high * 2
    if throughput(low) >= ceiling / 2:
        return low
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if throughput(middle) < ceiling / 2 else (low, middle)
    return high


def throughput_curve(step_model: StepModel, *, context_tokens: int, max_batch: int) -> ThroughputCurve:
    """Throughput at batches 1..`max_batch` (log-spaced) plus the curve's ceiling and knee."""
    ceiling = _ceiling_tokens_per_s(step_model, context_tokens)
    points = []
    for batch in batch_grid(max_batch):
        row = decode_step(step_model, batch=batch, context_tokens=context_tokens)
        points.append(
            ThroughputPoint(
                batch=batch,
                step_s=row.step_s,
                output_tokens_per_s=row.output_tokens_per_s,
                output_tokens_per_s_per_request=row.output_tokens_per_s_per_request,
                bound=row.bound,
            )
        )
    return ThroughputCurve(
        context_tokens=context_tokens,
        memory_limit_batch=max_batch,
        ceiling_tokens_per_s=ceiling,
        knee_batch=_knee_batch(step_model, context_tokens, ceiling),
        points=tuple(points),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Evaluation:
    """Everything `POST /v1/evaluate` returns for one configuration; SI units, plain numbers.

    Memory is per replica of `tp` GPUs. `kv_bytes_per_token` is what the replica stores per token
    (`kv_bytes_per_token_one_copy` × `kv_copies`, the copies being KV heads replicated across GPUs);
    `notes` state such assumptions in words.
    """

    gpu: str
    model: str
    weights_precision: str
    kv_cache_precision: str
    tp: int
    efficiency: str
    context_tokens: int
    usable_memory_bytes: float
    weights_bytes: float
    weights_bytes_per_gpu: float
    kv_bytes_per_token: float
    kv_bytes_per_token_one_copy: float
    kv_copies: int
    kv_bytes_per_request: float
    kv_capacity_tokens: int
    max_batch_by_memory: int
    break_even_flops_per_byte: float
    prefill: Prefill
    decode: tuple[DecodeStep, ...]
    throughput_curve: ThroughputCurve
    step_model: StepModel
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict; `step_model` also carries `weight_bytes` and the break-even."""
        data = asdict(self)
        data["step_model"]["weight_bytes"] = self.step_model.weight_bytes
        data["step_model"]["break_even_flops_per_byte"] = self.step_model.break_even_flops_per_byte
        return data


def evaluate(
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    efficiency: Efficiency,
    *,
    context_tokens: int,
    batch_sizes: Sequence[int],
    prompt_tokens: int,
    candidate_precisions: Sequence[Precision] = (),
) -> Evaluation:
    """Evaluate one configuration; raises `UnsupportedConfigurationError` or `ModelDoesNotFitError`.

    Fitting means the weights plus one `context_tokens` request fit; `candidate_precisions` are
    the alternatives the does-not-fit error may suggest.
    """
    for name, tokens in (("context_tokens", context_tokens), ("prompt_tokens", prompt_tokens)):
        if tokens < 1:
            raise PlannerInputError(f"{name} must be >= 1, got {tokens}", field=name)
        if tokens > model.max_context_tokens:
            raise UnsupportedConfigurationError(
                f"{name}={tokens:,} exceeds {model.slug}'s context window of {model.max_context_tokens:,} tokens",
                field=name,
                max_context_tokens=model.max_context_tokens,
            )
    if any(batch < 1 for batch in batch_sizes):
        raise PlannerInputError(f"batch sizes must be >= 1, got {list(batch_sizes)}", field="batch_sizes")
    step_model = build_step_model(gpu, model, precision, tp, efficiency)
    check_fit(gpu, model, precision, tp, efficiency, context_tokens=context_tokens, candidate_precisions=candidate_precisions)
    capacity = kv_capacity_tokens(gpu, model, precision, tp, efficiency)
    max_batch = max_batch_by_memory(capacity, context_tokens)
    copies = kv_head_replicas(model, tp)
    notes = []
    if copies > 1:
        what = "the MLA latent is" if model.mla is not None else f"each of the {model.kv_heads} KV heads is"
        notes.append(f"at tp={tp} {what} replicated on {copies} GPUs, so each token's KV cache costs {copies}× one copy")
    too_big = [batch for batch in batch_sizes if batch > max_batch]
    if too_big:
        notes.append(
            f"batch sizes {too_big} exceed the memory limit of {max_batch} requests at {context_tokens:,} tokens of "
            "context: their rows (fits_in_memory = false) show the step time if the KV cache fit"
        )
    if prompt_tokens > capacity:
        notes.append(f"a {prompt_tokens:,}-token prompt needs more KV cache than the replica holds ({capacity:,} tokens)")
    return Evaluation(
        gpu=gpu.slug,
        model=model.slug,
        weights_precision=precision.weights.slug,
        kv_cache_precision=precision.kv_cache.slug,
        tp=tp,
        efficiency=efficiency.name,
        context_tokens=context_tokens,
        usable_memory_bytes=usable_memory_bytes(gpu, tp, efficiency),
        weights_bytes=weight_bytes(model, precision.weights),
        weights_bytes_per_gpu=weight_bytes_per_gpu(model, precision.weights, tp),
        kv_bytes_per_token=step_model.kv_bytes_per_token,
        kv_bytes_per_token_one_copy=float(kv_bytes_per_token(model, precision.kv_cache)),
        kv_copies=copies,
        kv_bytes_per_request=float(kv_bytes_per_request(model, precision.kv_cache, tp, context_tokens)),
        kv_capacity_tokens=capacity,
        max_batch_by_memory=max_batch,
        break_even_flops_per_byte=step_model.break_even_flops_per_byte,
        prefill=prefill(step_model, prompt_tokens, kv_capacity_tokens=capacity),
        decode=tuple(
            decode_step(step_model, batch=batch, context_tokens=context_tokens, kv_capacity_tokens=capacity)
            for batch in batch_sizes
        ),
        throughput_curve=throughput_curve(step_model, context_tokens=context_tokens, max_batch=max_batch),
        step_model=step_model,
        notes=tuple(notes),
    )
