"""Bodies of `POST /v1/evaluate` and `POST /v1/simulate`: one replica configuration (catalog
slugs, tp, precision, efficiency) in; the roofline, memory picture, step-time coefficients and,
with a workload, queueing predictions or simulated percentiles out.

Units at the edge: bytes stay bytes, step and latency times are milliseconds (`_ms`), end-to-end
latency and time in system seconds (`_s`), rates per second (`_rps`, `_per_s`). The `step_model`
block keeps the planner's SI coefficients (bytes, FLOPs, seconds) so a client can recompute a step.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.evaluation import Configuration, LatencyEstimate, Method, PrefixSetup
from api.schemas.catalog import Slug
from api.schemas.plan_response import EngineRead
from api.schemas.plans import OneEngineSpec
from api.schemas.workload import ServingSpec, WorkloadSpec
from planner.performance import DecodeStep, Evaluation, Prefill, ThroughputCurve
from planner.queueing import FORMULA, Latency, Prediction, RhoPoint
from planner.simulator import CI_LEVEL, Percentiles, SimulationResult
from planner.simulator_prefix import PrefixSimulation
from planner.step_model import StepModel
from planner.units import MS_PER_S

Bound = Literal["memory", "compute"]

STEP_FORMULA = """\
One step of continuous batching that processes n new tokens (one per decoding sequence plus
prefill tokens), reads kv_tokens_read tokens of KV cache and attends over attended_tokens:

    t_step    = max(t_mem, t_compute) + (1 − memory_compute_overlap) · min(t_mem, t_compute) + t_comm + step_overhead_s
    t_mem     = (weight_bytes_read(n) + kv_tokens_read · kv_bytes_per_token) / memory_bandwidth_bytes_per_s
    t_compute = (n · flops_per_token + attended_tokens · attention_flops_per_context_token) / compute_flops_per_s
    t_comm    = n · comm_s_per_token + comm_latency_s   (0 when n = 0)

Dense models: weight_bytes_read(n) = dense_weight_bytes (= weight_bytes). MoE models:
weight_bytes_read(n) = dense_weight_bytes + moe_layers · experts · (1 − (1 − experts_per_token/experts)^n) · expert_weight_bytes
(the expected number of distinct routed experts n tokens touch, per MoE layer).
A decode step of B sequences at context c is t_step(n = B, kv_tokens_read = B·c, attended_tokens = B·c);
a prefill of p tokens is t_step(n = p, kv_tokens_read = 0, attended_tokens = p(p+1)/2).
Break-even intensity = compute_flops_per_s / memory_bandwidth_bytes_per_s (FLOP/byte)."""


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PrecisionSpec(_Input):
    """Numeric formats of the weights and the KV cache (catalog quantization slugs, chosen independently
    within what the weights scheme allows)."""

    weights: Slug = Field(description="Quantization scheme of the weights (a catalog slug).", examples=["fp16"])
    kv_cache: Slug = Field(description="Quantization scheme of the KV cache (a catalog slug).", examples=["fp16"])


_Fraction = Annotated[float | None, Field(default=None, allow_inf_nan=False)]


class EfficiencyOverrides(_Input):
    """Values that replace the named efficiency profile's, for this request only."""

    memory_efficiency: _Fraction = Field(gt=0, le=1, description="η_mem: achieved / datasheet memory bandwidth, in (0, 1].")
    compute_efficiency: _Fraction = Field(gt=0, le=1, description="η_compute: achieved / datasheet peak FLOP/s, in (0, 1].")
    step_overhead_ms: _Fraction = Field(ge=0, le=1e4, description="Fixed time added to every step (scheduler, launches), ms.")
    memory_reserve_fraction: _Fraction = Field(
        ge=0, lt=1, description="Fraction of GPU memory unavailable to weights and KV cache, in [0, 1)."
    )
    include_comm: bool | None = Field(
        default=None, description="Count tensor-parallel all-reduce time (two ring all-reduces per layer)."
    )
    memory_compute_overlap: _Fraction = Field(
        ge=0, le=1, description="How memory and compute time combine: 1 = max of the two (full overlap), 0 = their sum."
    )


class ConfigurationSpec(_Input):
    """One replica shape: `tp` GPUs of one type holding one copy of the model."""

    model: Slug = Field(description="Model (a catalog slug).", examples=["llama-2-70b"])
    gpu: Slug = Field(description="GPU type (a catalog slug).", examples=["h100-sxm"])
    tp: int = Field(default=1, ge=1, le=64, description="Tensor-parallel degree: GPUs per replica.", examples=[4])
    precision: PrecisionSpec
    efficiency_profile: Slug = Field(
        default="calibrated",
        description="`ideal` (η = 1, no reserve, no communication, no overhead), `calibrated` (the GPU's fitted "
        "efficiencies, communication on) or the name of a profile stored by POST /v1/calibrations.",
        examples=["calibrated"],
    )
    overrides: EfficiencyOverrides | None = Field(default=None, description="Replace some of the profile's values.")
    engine: OneEngineSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serving engine, optionally naming its release generation (`vllm@0.11`; `trt-llm@all`: pooled over "
        "releases; bare: its newest generation with a profile of its own): with the `calibrated` profile, the GPU's "
        "efficiency under it (its per (GPU, engine, generation) profile and low-precision factors, or the documented "
        "fallback; the answer's `engine.profile` and `efficiency.source` say which, docs/engines.md). A generation no "
        "profile of the engine has is a 422 naming the known ones. One engine: a configuration runs on one. Omitted: "
        "the engine-agnostic calibration.",
    )

    def override_values(self) -> dict[str, float | bool]:
        return {} if self.overrides is None else self.overrides.model_dump(exclude_none=True)


class PrefixCacheSpec(_Input):
    """The prefix cache the deployment runs for `workload.prefix_reuse` (the decision `plan.prefix_caching` reports):
    each replica's cache size and the routing. Either member left out takes the plan's default."""

    cache_tokens: int | None = Field(
        default=None,
        ge=0,
        le=10_000_000,
        multiple_of=16,
        description="KV tokens each replica gives the prefix cache, whole 16-token blocks (taken from its KV capacity); "
        "default: the whole per-replica working set (the system prompt plus the prefixes one replica sees), the largest "
        "cache a plan tries.",
        examples=[8192],
    )
    routing: Literal["random", "prefix_aware"] | None = Field(
        default=None,
        description="`random`: every replica sees every prefix; `prefix_aware`: each prefix pinned to one replica "
        "(llm-d, SGLang router, Dynamo KV router). Default: the plan's, prefix_aware with more than one replica "
        "and more than one distinct prefix, else random.",
    )


class EvaluateRequest(ConfigurationSpec):
    """A configuration to evaluate at a context length, batch sizes and a prompt length; with
    `serving` and `workload` (both or neither) also its queueing latencies."""

    context_tokens: int = Field(
        ge=1,
        le=10_000_000,
        description="Tokens of context each decoding sequence holds (KV cache read per step).",
        examples=[4096],
    )
    batch_sizes: list[Annotated[int, Field(ge=1, le=1_000_000)]] = Field(
        default=[1],
        min_length=1,
        max_length=64,
        description="Batch sizes (sequences per step) to report decode rows for.",
        examples=[[1, 32, 134]],
    )
    prompt_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Prompt length of the prefill row in tokens; default `context_tokens`.",
        examples=[2000],
    )
    serving: ServingSpec | None = Field(
        default=None, description="Serving shape; with `workload`, adds `predicted` and `queueing`."
    )
    workload: WorkloadSpec | None = Field(default=None, description="Traffic; with `serving`, adds `predicted` and `queueing`.")
    prefix_cache: PrefixCacheSpec | None = Field(
        default=None,
        description="With workload.prefix_reuse: the cache size and routing evaluated (each member defaults to the plan's). "
        "The prediction then plans the prompt tokens prefilled on the KV left beside the cache, and `prefix_cache` "
        "in the response gives the hit rate, the KV given to the cache and the cached prefill step.",
    )

    @model_validator(mode="after")
    def _serving_with_workload(self) -> Self:
        if (self.serving is None) != (self.workload is None):
            given, missing = ("serving", "workload") if self.workload is None else ("workload", "serving")
            raise ValueError(f"{given} is given without {missing}: the queueing prediction needs both (or leave out both)")
        _check_prefix_cache(self.workload, self.serving, self.prefix_cache)
        return self


class SimulateRequest(ConfigurationSpec):
    """A configuration, serving shape and workload to run through the discrete-event simulator."""

    serving: ServingSpec
    workload: WorkloadSpec
    requests: int = Field(
        default=20_000,
        ge=100,
        description="Arrivals to simulate (warm-up included). The service refuses more than its configured "
        "maximum (HEADROOM_MAX_SIMULATED_REQUESTS, default 200,000) with a 422.",
    )
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Random seed: the same request and seed give the same answer.")
    warmup_fraction: float = Field(
        default=0.1, ge=0, le=0.9, description="Leading fraction of requests (by arrival) left out of the statistics."
    )

    prefix_cache: PrefixCacheSpec | None = Field(
        default=None,
        description="With workload.prefix_reuse: the cache size and routing simulated (each member defaults to the plan's). "
        "The simulator then runs replica 0 — the busiest under prefix-aware routing — with its own LRU, as a plan's "
        "verification does, and `prefix_cache` in the response gives its measured hit rate.",
    )

    @model_validator(mode="after")
    def _prefix_cache_with_reuse(self) -> Self:
        _check_prefix_cache(self.workload, self.serving, self.prefix_cache)
        return self


def _check_prefix_cache(workload: WorkloadSpec | None, serving: ServingSpec | None, cache: PrefixCacheSpec | None) -> None:
    """Refused rather than ignored: a cache without reuse to fill it, a cache size or routing for a measured hit
    rate (measured with the engine's own cache and routing), or a router the prefix simulation does not model."""
    reuse = None if workload is None else workload.prefix_reuse
    if reuse is None:
        if cache is not None:
            raise ValueError("prefix_cache is given without workload.prefix_reuse: describe the reuse the cache serves")
        return
    if reuse.hit_rate is not None and cache is not None and (cache.cache_tokens or cache.routing is not None):
        raise ValueError(
            "prefix_cache with a measured prefix_reuse.hit_rate: the rate was measured with the engine's own cache and "
            "routing, which are taken as they were (leave out prefix_cache, or describe the prefixes instead)"
        )
    if serving is not None and serving.replicas > 1 and serving.router != "random":
        raise ValueError(
            f"serving.router {serving.router!r} with workload.prefix_reuse: a prefix cache is evaluated on replica 0 of a "
            "random split of the arrivals (prefix-aware routing pins the prefixes, the rest split at random), as a plan "
            "verifies it; use router random and prefix_cache.routing for the prefixes"
        )


# ---- responses ----------------------------------------------------------------------------------


class EfficiencyUsed(BaseModel):
    """The efficiencies the numbers were computed with, and where they come from."""

    profile: str = Field(description="`ideal`, `calibrated` or a stored profile name.")
    memory: float = Field(description="η_mem applied to the datasheet memory bandwidth.")
    compute: float = Field(description="η_compute applied to the datasheet peak FLOP/s.")
    step_overhead_ms: float = Field(description="Fixed time added to every step, ms.")
    memory_reserve_fraction: float = Field(description="Fraction of GPU memory kept from weights and KV cache.")
    include_comm: bool = Field(description="Whether tensor-parallel all-reduce time is counted.")
    memory_compute_overlap: float = Field(description="1 = max(memory, compute) time, 0 = their sum.")
    source: str = Field(description="Where the values come from (fit, datasheet, request overrides).")
    overridden: list[str] = Field(description="Override fields the request set.")


class StepModelRead(BaseModel):
    __doc__ = (
        "Every coefficient of the step-time formula as used (SI units), so a client can recompute any step.\n\n" + STEP_FORMULA
    )

    weight_bytes: float = Field(description="All weight bytes of the replica, bytes.")
    dense_weight_bytes: float = Field(
        description="Weight bytes every step reads whatever its tokens (all of them for a dense model), bytes."
    )
    expert_weight_bytes: float = Field(description="Bytes of one routed expert in one MoE layer (0 for a dense model).")
    experts: int = Field(description="Routed experts per MoE layer (0 for a dense model).")
    experts_per_token: int = Field(description="Routed experts each token activates (0 for a dense model).")
    moe_layers: int = Field(description="Layers with routed experts (0 for a dense model).")
    kv_bytes_per_token: float = Field(description="KV-cache bytes the replica stores and reads per token of context, bytes.")
    flops_per_token: float = Field(description="Linear FLOPs per new token: 2 × active parameters.")
    attention_flops_per_context_token: float = Field(
        description="Attention FLOPs a new token spends per context token it attends to."
    )
    memory_bandwidth_bytes_per_s: float = Field(description="Effective bandwidth: tp × HBM bandwidth × η_mem, bytes/s.")
    compute_flops_per_s: float = Field(
        description="Effective compute: tp × peak FLOP/s of the compute datatype × its low-precision factor (1 unless an "
        "engine's is measured, docs/engines.md) × η_compute, FLOP/s."
    )
    comm_s_per_token: float = Field(description="All-reduce transfer time per new token, s.")
    comm_latency_s: float = Field(description="All-reduce latency per step, s.")
    step_overhead_s: float = Field(description="Fixed time per step, s.")
    memory_compute_overlap: float = Field(description="1 = max(memory, compute), 0 = their sum.")
    break_even_flops_per_byte: float = Field(description="compute_flops_per_s / memory_bandwidth_bytes_per_s, FLOP/byte.")


class PrefillRead(BaseModel):
    """One prompt prefilled in one step against one weight read."""

    tokens: int = Field(description="Prompt length, tokens.")
    time_ms: float = Field(description="The whole prefill step (linear and attention FLOPs, comm, overhead), ms.")
    linear_time_ms: float = Field(description="Linear FLOPs alone at the effective FLOP/s, ms.")
    attention_time_ms: float = Field(description="Attention FLOPs alone at the effective FLOP/s, ms.")
    weight_read_ms: float = Field(description="One read of the weights at the effective bandwidth, ms.")
    comm_ms: float = Field(description="Tensor-parallel communication of the step, ms.")
    linear_flops: float = Field(description="2 × active parameters × tokens, FLOP.")
    attention_flops: float = Field(description="Attention FLOPs over p(p+1)/2 attended tokens, FLOP.")
    kv_bytes_written: float = Field(description="KV cache the prompt writes, bytes.")
    bound: Bound = Field(description="Whether memory or compute time is the larger.")
    fits_in_memory: bool = Field(description="Whether the prompt's KV cache fits the replica.")


class DecodeRow(BaseModel):
    """One decode step of `batch` sequences each at `context_tokens` of context."""

    batch: int = Field(description="Sequences in the step.")
    context_tokens: int = Field(description="Context of each sequence, tokens.")
    step_ms: float = Field(description="Step time, ms.")
    memory_ms: float = Field(description="Bytes read / effective bandwidth, ms.")
    compute_ms: float = Field(description="FLOPs / effective FLOP/s, ms.")
    comm_ms: float = Field(description="Tensor-parallel communication, ms.")
    output_tokens_per_s: float = Field(description="Output tokens per second over all sequences: batch / step.")
    output_tokens_per_s_per_request: float = Field(description="Output tokens per second of one sequence: 1 / step.")
    weight_bytes_read: float = Field(description="Weight bytes the step reads, bytes.")
    kv_bytes: float = Field(description="KV-cache bytes the step reads: batch × context × KV bytes per token.")
    bytes_read: float = Field(description="Weights plus KV cache read, bytes.")
    linear_flops: float = Field(description="batch × 2 × active parameters, FLOP.")
    attention_flops: float = Field(description="Attention FLOPs of the step, FLOP.")
    flops_per_byte: float = Field(description="Arithmetic intensity counting KV reads: linear FLOPs / bytes read, FLOP/byte.")
    flops_per_byte_with_attention: float = Field(description="(linear + attention FLOPs) / bytes read, FLOP/byte.")
    bound: Bound = Field(description="`memory` below the break-even intensity, else `compute`.")
    fits_in_memory: bool = Field(
        description="False when the batch's KV cache exceeds the replica's capacity (the row is then hypothetical)."
    )


class CurvePoint(BaseModel):
    batch: int = Field(description="Sequences per step.")
    step_ms: float = Field(description="Decode step time, ms.")
    output_tokens_per_s: float = Field(description="Output tokens per second, all sequences.")
    output_tokens_per_s_per_request: float = Field(description="Output tokens per second of one sequence.")
    bound: Bound


class ThroughputCurveRead(BaseModel):
    """Decode throughput against batch at `context_tokens`, from 1 to the memory limit, log-spaced."""

    context_tokens: int = Field(description="Context of each sequence, tokens.")
    memory_limit_batch: int = Field(description="Largest batch whose KV cache fits.")
    ceiling_tokens_per_s: float = Field(description="Limit of batch / step as the batch grows without bound, tokens/s.")
    knee_batch: int = Field(description="Smallest batch reaching half the ceiling (may exceed the memory limit).")
    points: list[CurvePoint]


class PercentilesMs(BaseModel):
    """Latency percentiles in milliseconds; null when the load is unstable."""

    p50: float | None = Field(description="Median, ms.")
    p90: float | None = Field(description="90th percentile, ms.")
    p99: float | None = Field(description="99th percentile, ms.")


class PercentilesS(BaseModel):
    """Latency percentiles in seconds; null when the load is unstable."""

    p50: float | None = Field(description="Median, s.")
    p90: float | None = Field(description="90th percentile, s.")
    p99: float | None = Field(description="99th percentile, s.")


class Predicted(BaseModel):
    """Latencies at the workload's rate, per request of one replica (arrivals split over `replicas`)."""

    method: Method = Field(
        description="`analytic` (the queueing model) or `simulated` (the discrete-event simulator, used where the analytic "
        "model is outside the region its fidelity study validated)."
    )
    unstable: bool = Field(
        description="Offered load at or above saturation (ρ ≥ 1): queues grow without bound, percentiles are null."
    )
    utilisation: float | None = Field(
        description="ρ = per-replica arrival rate / saturation_rps; null when saturation_rps is 0 (a replica's KV cache cannot hold "
        "one request of the mix)."
    )
    saturation_rps: float = Field(description="Largest sustainable arrival rate of one replica for this request mix, requests/s.")
    max_deployment_rps: float = Field(description="saturation_rps × replicas: the most the deployment sustains, requests/s.")
    arrival_rate_rps_per_replica: float = Field(description="λ each replica sees, requests/s.")
    ttft_ms: PercentilesMs = Field(description="Time to first token: arrival → end of the step that finishes the prompt.")
    tpot_ms: PercentilesMs = Field(description="Time per output token after the first: (E2E − TTFT) / (output − 1).")
    e2e_s: PercentilesS = Field(description="End-to-end latency: arrival → last token.")
    throughput_rps: float = Field(description="Requests completed per second per replica (λ when stable, saturation when not).")
    output_tokens_per_s: float = Field(description="Output tokens per second per replica.")
    fidelity_note: str | None = Field(description="Why the analytic model was not trusted here (method `simulated`).")
    simulated_requests: int | None = Field(description="Requests the simulator ran (method `simulated`).")


class LittlesLaw(BaseModel):
    """Little's law L = λ · W: a mean count, the arrival rate and the mean time (what they count is said where used)."""

    occupancy: float = Field(description="L: mean number of requests counted.")
    arrival_rate_rps: float = Field(description="λ: arrivals per second.")
    time_in_service_s: float = Field(description="W: mean time a request spends counted, s.")


class RhoCurvePoint(BaseModel):
    utilisation: float = Field(description="ρ.")
    arrival_rate_rps: float = Field(description="Per-replica rate at that ρ, requests/s.")
    ttft_p99_ms: float | None = Field(description="p99 time to first token, ms.")
    tpot_p99_ms: float | None = Field(description="p99 time per output token, ms.")
    e2e_p99_s: float | None = Field(description="p99 end-to-end latency, s.")


class QueueingRead(BaseModel):
    """The analytic queueing model's numbers for one replica (null members when the load is unstable)."""

    method: Literal["analytic"] = "analytic"
    reliable: bool = Field(description="False where the fidelity study found the analytic p99s off by more than 10 %.")
    formula: str = Field(description="The waiting-time model used.")
    arrival_rate_rps: float = Field(description="λ per replica, requests/s.")
    arrival_cv: float | None = Field(description="Coefficient of variation of inter-arrival times per replica, after the router.")
    utilisation: float | None = Field(description="ρ = λ / saturation_rps; null when saturation_rps is 0.")
    saturation_rps: float = Field(description="Largest sustainable per-replica rate, requests/s.")
    service_time_s: float | None = Field(description="Mean time a request holds its slot, s.")
    mean_step_ms: float | None = Field(description="Mean step time at the operating point, ms.")
    steps_per_request: float | None = Field(description="Steps a request runs: prefill steps + output − 1.")
    slots: int | None = Field(description="Sequences one replica can run at once.")
    slots_limited_by: str | None = Field(description="`batch_limit` or `kv_cache`.")
    littles_law: LittlesLaw | None = Field(
        description="L = running sequences of one replica, λ per replica, W = admission → last token."
    )
    wait_probability: float | None = Field(description="Probability an arrival waits for admission.")
    mean_wait_ms: float | None = Field(description="Mean wait for admission, ms.")
    p99_wait_ms: float | None = Field(description="99th percentile of the wait for admission, ms.")
    rho_curve: list[RhoCurvePoint] = Field(
        description="p99 latencies against utilisation (at fixed ρ values and the operating point)."
    )


class CachedPrefillRead(BaseModel):
    """One class of requests' prefill of a `prompt_tokens` prompt with its cached prefix (StepModel.cached_prefill_s)."""

    requests_fraction: float = Field(description="Fraction of the requests that find this many tokens cached.")
    cached_tokens: int = Field(description="Prompt tokens found in the cache (whole blocks, at most ⌊(p − 1)/16⌋·16).")
    prompt_tokens: int = Field(description="The prompt's tokens (the evaluated prefill's `prompt_tokens`).")
    time_ms: float = Field(
        description="The step prefilling the prompt's other tokens: GEMMs over them only, the cached KV read and attended, ms."
    )
    uncached_time_ms: float = Field(description="The same prompt prefilled whole, ms.")


class PrefixCacheRead(BaseModel):
    """The prefix cache behind the prediction (workload.prefix_reuse with `prefix_cache`; docs/prefix-caching.md)."""

    routing: Literal["random", "prefix_aware", "as_measured"] = Field(
        description="The routing the hit rate assumes (`as_measured`: a measured hit rate, taken as given)."
    )
    cache_tokens: int = Field(description="KV tokens each replica gives the cache (0 for a measured rate).")
    working_set_tokens: int = Field(
        description="Tokens one replica must cache to hold every prefix it sees (0 for a measured rate)."
    )
    kv_capacity_tokens: int = Field(description="KV tokens left to each replica's sequences: its capacity less the cache.")
    hit_rate: float = Field(
        description="Fraction of the requests carrying a shared prefix that find it cached (Che's approximation of the LRU, "
        "averaged over the replicas), or the measured token hit rate."
    )
    prefill_tokens_saved_fraction: float = Field(description="Fraction of the prompt tokens not prefilled.")
    cached_prefill: list[CachedPrefillRead] = Field(
        description="The prefill step of the evaluated prompt for each class of requests that finds a prefix cached."
    )


class EvaluateResponse(BaseModel):
    """Memory, roofline and step-time coefficients of one configuration; with a workload, predicted latencies."""

    gpu: str
    model: str
    tp: int
    precision: PrecisionSpec
    efficiency: EfficiencyUsed
    catalog_version: int = Field(description="Version of the catalog the numbers were read from.")
    engine: EngineRead | None = Field(
        default=None,
        description="The engine the GPU was priced on (request `engine`): its profile, release generation and why "
        "(`profile.generation`); null when the request named none.",
    )
    context_tokens: int = Field(description="Context of each decoding sequence, tokens.")
    usable_memory_bytes: float = Field(description="tp × GPU memory × (1 − reserve), bytes.")
    weights_bytes: float = Field(description="All weights of the model at this precision (with scale overhead), bytes.")
    weights_bytes_per_gpu: float = Field(description="Weights one GPU holds, bytes.")
    kv_bytes_per_token: float = Field(description="KV cache the replica stores per token, bytes.")
    kv_bytes_per_token_one_copy: float = Field(description="KV bytes per token of one copy (before KV-head replication), bytes.")
    kv_copies: int = Field(description="Copies of each KV head across the tp GPUs (1 unless tp exceeds the KV heads).")
    kv_bytes_per_request: float = Field(description="KV cache of one request at `context_tokens`, bytes.")
    kv_capacity_tokens: int = Field(description="KV-cache tokens the replica holds after its weights.")
    max_batch_by_memory: int = Field(
        description="floor(kv_capacity_tokens / context_tokens): requests whose KV cache fits at once."
    )
    break_even_flops_per_byte: float = Field(
        description="F / BW: below this arithmetic intensity a step is memory-bound, FLOP/byte."
    )
    prefill: PrefillRead
    decode: list[DecodeRow] = Field(description="One row per requested batch size.")
    step_model: StepModelRead
    throughput_curve: ThroughputCurveRead
    notes: list[str] = Field(description="Assumptions and caveats in words.")
    predicted: Predicted | None = Field(
        default=None, description="Latencies at the workload's rate (when serving and workload are given)."
    )
    queueing: QueueingRead | None = Field(
        default=None, description="The queueing model's numbers (when serving and workload are given)."
    )
    prefix_cache: PrefixCacheRead | None = Field(
        default=None, description="With workload.prefix_reuse: the cache the prediction assumes; null without."
    )


class PrefixCacheSimulated(BaseModel):
    """The simulated replica's prefix cache: what it was given and what its LRU found (planner/simulator_prefix.py)."""

    routing: Literal["random", "prefix_aware", "as_measured"] = Field(description="The routing simulated.")
    cache_tokens: int = Field(description="KV tokens the replica gives the cache (0 for a measured rate).")
    working_set_tokens: int = Field(description="Tokens one replica must cache to hold every prefix it sees.")
    kv_capacity_tokens: int = Field(description="KV tokens left to the replica's sequences: its capacity less the cache.")
    replica: int = Field(
        description="The replica simulated: 0, which under prefix-aware routing owns the most popular prefix (the "
        "busiest). Every figure of the response is this replica's alone, at its share of the arrivals."
    )
    arrival_share: float = Field(description="Fraction of the deployment's arrivals the replica receives.")
    arrival_rate_rps: float = Field(description="The replica's arrival rate, requests/s.")
    hit_rate: float = Field(
        description="Of the measured requests carrying a shared prefix, the fraction whose prefix the LRU held "
        "(a measured hit rate: of all measured requests, those that found tokens cached)."
    )
    predicted_hit_rate: float = Field(
        description="The hit rate a plan assumes for this cache (Che's approximation), or the measured one."
    )
    prefill_tokens_saved_fraction: float = Field(description="Of the measured prompt tokens, the fraction not prefilled.")


class SimulatedPercentiles(BaseModel):
    """Percentiles over the measured requests, with a 95 % confidence interval for the p99 (batch means);
    percentiles null when the load is unstable or no request has the metric."""

    p50: float | None
    p90: float | None
    p99: float | None
    p99_ci_low: float | None = Field(
        description="Lower end of the p99's confidence interval (null with too few requests for the blocks)."
    )
    p99_ci_high: float | None = Field(description="Upper end of the p99's confidence interval.")
    samples: int = Field(description="Requests the percentiles are taken over.")


class SimulateResponse(BaseModel):
    """Simulated latencies of the deployment (percentiles in ms, except `e2e_s` and time in system in s)."""

    gpu: str
    model: str
    tp: int
    precision: PrecisionSpec
    efficiency: EfficiencyUsed
    catalog_version: int
    engine: EngineRead | None = Field(
        default=None,
        description="The engine the GPU was priced on (request `engine`): its profile, release generation and why "
        "(`profile.generation`); null when the request named none.",
    )
    kv_capacity_tokens: int = Field(description="KV-cache tokens one replica holds after its weights.")
    requests: int = Field(description="Arrivals simulated (warm-up included).")
    measured_requests: int = Field(description="Arrivals after the warm-up, which the statistics cover.")
    seed: int
    unstable: bool = Field(
        description="A replica's admission queue never emptied in the late half of the run: arrivals outpace service, "
        "and the latency percentiles (null) would only describe a growing backlog."
    )
    utilisation: float | None = Field(
        description="ρ: per-replica arrival rate / the analytic saturation rate (null when a replica cannot hold one mean request)."
    )
    saturation_rps: float = Field(description="Analytic saturation rate of one replica, requests/s.")
    ttft_ms: SimulatedPercentiles = Field(description="Time to first token, ms.")
    tpot_ms: SimulatedPercentiles = Field(
        description="Time per output token after the first, ms (requests with > 1 output token)."
    )
    e2e_s: SimulatedPercentiles = Field(description="End-to-end latency, s.")
    queue_wait_ms: SimulatedPercentiles = Field(description="Wait from arrival to admission, ms.")
    mean_occupancy: float = Field(description="Time-average sequences running per replica.")
    occupancy_fraction: float = Field(description="mean_occupancy / batch_limit.")
    busy_fraction: float = Field(description="Fraction of time a replica spends stepping.")
    littles_law: LittlesLaw = Field(
        description="L (requests in the deployment, waiting + running), λ (deployment arrivals/s), W (mean time in system, s)."
    )
    throughput_rps: float = Field(description="Requests finished per second, deployment.")
    output_tokens_per_s: float = Field(description="Output tokens per second, deployment.")
    backlog_at_end: int = Field(description="Requests still waiting for admission at the last arrival.")
    steps: int = Field(description="Steps executed by all replicas together.")
    simulated_duration_s: float = Field(description="Simulated time from the first arrival to the last finish, s.")
    wall_time_ms: float = Field(description="CPU time the simulation took, ms.")
    ci_method: str = Field(description="How the confidence intervals are computed.")
    ci_level: float = Field(description="Confidence level of the intervals.")
    prefix_cache: PrefixCacheSimulated | None = Field(
        default=None,
        description="With workload.prefix_reuse: replica 0 simulated with its prefix cache (every figure above is that "
        "replica's); null without.",
    )


# ---- translation --------------------------------------------------------------------------------


def _ms(seconds: float) -> float:
    return seconds * MS_PER_S


def efficiency_used(config: Configuration) -> EfficiencyUsed:
    eff = config.efficiency.efficiency
    return EfficiencyUsed(
        profile=eff.name,
        memory=eff.memory,
        compute=eff.compute,
        step_overhead_ms=_ms(eff.step_overhead_s),
        memory_reserve_fraction=eff.memory_reserve_fraction,
        include_comm=eff.include_comm,
        memory_compute_overlap=eff.memory_compute_overlap,
        source=eff.source,
        overridden=list(config.efficiency.overridden),
    )


def _precision(config: Configuration) -> PrecisionSpec:
    return PrecisionSpec(weights=config.precision.weights.slug, kv_cache=config.precision.kv_cache.slug)


def _latency_ms(latency: Latency | None) -> PercentilesMs:
    if latency is None:
        return PercentilesMs(p50=None, p90=None, p99=None)
    return PercentilesMs(p50=_ms(latency.p50_s), p90=_ms(latency.p90_s), p99=_ms(latency.p99_s))


def _latency_s(latency: Latency | None) -> PercentilesS:
    if latency is None:
        return PercentilesS(p50=None, p90=None, p99=None)
    return PercentilesS(p50=latency.p50_s, p90=latency.p90_s, p99=latency.p99_s)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _simulated(p: Percentiles, scale: float, *, stable: bool) -> SimulatedPercentiles:
    def value(v: float | None) -> float | None:
        return None if v is None or not stable or not math.isfinite(v) else v * scale

    return SimulatedPercentiles(
        p50=value(p.p50),
        p90=value(p.p90),
        p99=value(p.p99),
        p99_ci_low=value(p.p99_ci_low),
        p99_ci_high=value(p.p99_ci_high),
        samples=p.samples,
    )


def _predicted(estimate: LatencyEstimate, replicas: int) -> Predicted:
    p = estimate.prediction
    sim = estimate.simulation
    simulated = 1 if estimate.one_replica else replicas  # the replicas the simulation's totals cover
    if sim is None:
        ttft, tpot, e2e = _latency_ms(p.ttft), _latency_ms(p.tpot), _latency_s(p.e2e)
        unstable = p.unstable
    else:
        unstable = not sim.stable
        ttft_sim, tpot_sim, e2e_sim = (
            _simulated(x, s, stable=sim.stable) for x, s in ((sim.ttft_s, MS_PER_S), (sim.tpot_s, MS_PER_S), (sim.e2e_s, 1.0))
        )
        ttft = PercentilesMs(p50=ttft_sim.p50, p90=ttft_sim.p90, p99=ttft_sim.p99)
        tpot = PercentilesMs(p50=tpot_sim.p50, p90=tpot_sim.p90, p99=tpot_sim.p99)
        e2e = PercentilesS(p50=e2e_sim.p50, p90=e2e_sim.p90, p99=e2e_sim.p99)
    return Predicted(
        method=estimate.method,
        unstable=unstable,
        utilisation=_finite(p.utilisation),
        saturation_rps=p.saturation_rps,
        max_deployment_rps=p.saturation_rps * replicas,
        arrival_rate_rps_per_replica=p.arrival_rate_rps,
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_s=e2e,
        throughput_rps=p.throughput_rps if sim is None else sim.throughput_rps / simulated,
        output_tokens_per_s=p.output_tokens_per_s if sim is None else sim.output_tokens_per_s / simulated,
        fidelity_note=p.fidelity_note,
        simulated_requests=None if sim is None else sim.requests,
    )


def _curve_point(point: RhoPoint) -> RhoCurvePoint:
    return RhoCurvePoint(
        utilisation=point.utilisation,
        arrival_rate_rps=point.arrival_rate_rps,
        ttft_p99_ms=None if point.ttft_s is None else _ms(point.ttft_s),
        tpot_p99_ms=None if point.tpot_s is None else _ms(point.tpot_s),
        e2e_p99_s=point.e2e_s,
    )


def _queueing(prediction: Prediction, curve: tuple[RhoPoint, ...]) -> QueueingRead:
    q = prediction.queueing
    common: dict[str, Any] = {
        "reliable": prediction.reliable,
        "arrival_rate_rps": prediction.arrival_rate_rps,
        "utilisation": _finite(prediction.utilisation),
        "saturation_rps": prediction.saturation_rps,
        "rho_curve": [_curve_point(point) for point in curve],
    }
    if q is None:
        return QueueingRead(
            formula=FORMULA,
            arrival_cv=None,
            service_time_s=None,
            mean_step_ms=None,
            steps_per_request=None,
            slots=None,
            slots_limited_by=None,
            littles_law=None,
            wait_probability=None,
            mean_wait_ms=None,
            p99_wait_ms=None,
            **common,
        )
    occupancy, lam, service_s = q.littles_law
    return QueueingRead(
        formula=q.formula,
        arrival_cv=q.arrival_cv,
        service_time_s=q.service_s,
        mean_step_ms=_ms(q.mean_step_s),
        steps_per_request=q.steps_per_request,
        slots=q.slots,
        slots_limited_by=q.slots_limited_by,
        littles_law=LittlesLaw(occupancy=occupancy, arrival_rate_rps=lam, time_in_service_s=service_s),
        wait_probability=q.wait_probability,
        mean_wait_ms=_ms(q.mean_wait_s),
        p99_wait_ms=_ms(q.wait_at_percentile_s),
        **common,
    )


def _queueing_notes(estimate: LatencyEstimate | None, kv_capacity_tokens: int) -> list[str]:
    if estimate is None or estimate.prediction.saturation_rps > 0:
        return []
    return [
        (
            f"the KV cache ({kv_capacity_tokens:,} tokens per replica) cannot hold one request of the workload's mix "
            "(prompt + output): no arrival rate is sustainable on this configuration"
        )
    ]


def prefix_cache_read(setup: PrefixSetup, step_model: StepModel, prompt_tokens: int) -> PrefixCacheRead:
    return PrefixCacheRead(
        routing=setup.routing,
        cache_tokens=setup.cache_tokens,
        working_set_tokens=setup.working_set_tokens,
        kv_capacity_tokens=setup.kv_capacity_tokens,
        hit_rate=setup.hit_rate,
        prefill_tokens_saved_fraction=setup.prefill_tokens_saved_fraction,
        cached_prefill=[
            CachedPrefillRead(
                requests_fraction=row.requests_fraction,
                cached_tokens=row.cached_tokens,
                prompt_tokens=row.prompt_tokens,
                time_ms=_ms(row.time_s),
                uncached_time_ms=_ms(row.uncached_time_s),
            )
            for row in setup.cached_prefills(step_model, prompt_tokens)
        ],
    )


def prefix_cache_simulated(setup: PrefixSetup, simulation: PrefixSimulation, *, share: float) -> PrefixCacheSimulated:
    return PrefixCacheSimulated(
        routing=setup.routing,
        cache_tokens=setup.cache_tokens,
        working_set_tokens=setup.working_set_tokens,
        kv_capacity_tokens=setup.kv_capacity_tokens,
        replica=0,
        arrival_share=share,
        arrival_rate_rps=simulation.rate_rps,
        hit_rate=simulation.hit_rate,
        predicted_hit_rate=setup.hit_rate,
        prefill_tokens_saved_fraction=simulation.prefill_tokens_saved_fraction,
    )


def evaluate_response(
    config: Configuration,
    evaluation: Evaluation,
    estimate: LatencyEstimate | None,
    *,
    replicas: int,
    prefix_cache: PrefixCacheRead | None = None,
) -> EvaluateResponse:
    ev = evaluation
    return EvaluateResponse(
        gpu=ev.gpu,
        model=ev.model,
        tp=ev.tp,
        precision=_precision(config),
        efficiency=efficiency_used(config),
        catalog_version=config.catalog_version,
        engine=config.engine,
        context_tokens=ev.context_tokens,
        usable_memory_bytes=ev.usable_memory_bytes,
        weights_bytes=ev.weights_bytes,
        weights_bytes_per_gpu=ev.weights_bytes_per_gpu,
        kv_bytes_per_token=ev.kv_bytes_per_token,
        kv_bytes_per_token_one_copy=ev.kv_bytes_per_token_one_copy,
        kv_copies=ev.kv_copies,
        kv_bytes_per_request=ev.kv_bytes_per_request,
        kv_capacity_tokens=ev.kv_capacity_tokens,
        max_batch_by_memory=ev.max_batch_by_memory,
        break_even_flops_per_byte=ev.break_even_flops_per_byte,
        prefill=_prefill_read(ev.prefill),
        decode=[_decode_row(row) for row in ev.decode],
        step_model=_step_model_read(ev.step_model),
        throughput_curve=_throughput_curve_read(ev.throughput_curve),
        notes=list(ev.notes) + _queueing_notes(estimate, ev.kv_capacity_tokens),
        predicted=None if estimate is None else _predicted(estimate, replicas),
        queueing=None if estimate is None else _queueing(estimate.prediction, estimate.curve),
        prefix_cache=prefix_cache,
    )


def _prefill_read(pre: Prefill) -> PrefillRead:
    return PrefillRead(
        tokens=pre.tokens,
        time_ms=_ms(pre.time_s),
        linear_time_ms=_ms(pre.linear_time_s),
        attention_time_ms=_ms(pre.attention_time_s),
        weight_read_ms=_ms(pre.weight_read_s),
        comm_ms=_ms(pre.comm_s),
        linear_flops=pre.linear_flops,
        attention_flops=pre.attention_flops,
        kv_bytes_written=pre.kv_bytes_written,
        bound=pre.bound,
        fits_in_memory=pre.fits_in_memory,
    )


def _decode_row(row: DecodeStep) -> DecodeRow:
    return DecodeRow(
        batch=row.batch,
        context_tokens=row.context_tokens,
        step_ms=_ms(row.step_s),
        memory_ms=_ms(row.memory_s),
        compute_ms=_ms(row.compute_s),
        comm_ms=_ms(row.comm_s),
        output_tokens_per_s=row.output_tokens_per_s,
        output_tokens_per_s_per_request=row.output_tokens_per_s_per_request,
        weight_bytes_read=row.weight_bytes_read,
        kv_bytes=row.kv_bytes,
        bytes_read=row.bytes_read,
        linear_flops=row.linear_flops,
        attention_flops=row.attention_flops,
        flops_per_byte=row.flops_per_byte,
        flops_per_byte_with_attention=row.flops_per_byte_with_attention,
        bound=row.bound,
        fits_in_memory=row.fits_in_memory,
    )


def _step_model_read(sm: StepModel) -> StepModelRead:
    """The planner's SI coefficients as they are, so a client can recompute a step (see STEP_FORMULA)."""
    return StepModelRead(
        weight_bytes=sm.weight_bytes,
        dense_weight_bytes=sm.dense_weight_bytes,
        expert_weight_bytes=sm.expert_weight_bytes,
        experts=sm.experts,
        experts_per_token=sm.experts_per_token,
        moe_layers=sm.moe_layers,
        kv_bytes_per_token=sm.kv_bytes_per_token,
        flops_per_token=sm.flops_per_token,
        attention_flops_per_context_token=sm.attention_flops_per_context_token,
        memory_bandwidth_bytes_per_s=sm.memory_bandwidth_bytes_per_s,
        compute_flops_per_s=sm.compute_flops_per_s,
        comm_s_per_token=sm.comm_s_per_token,
        comm_latency_s=sm.comm_latency_s,
        step_overhead_s=sm.step_overhead_s,
        memory_compute_overlap=sm.memory_compute_overlap,
        break_even_flops_per_byte=sm.break_even_flops_per_byte,
    )


def _throughput_curve_read(curve: ThroughputCurve) -> ThroughputCurveRead:
    return ThroughputCurveRead(
        context_tokens=curve.context_tokens,
        memory_limit_batch=curve.memory_limit_batch,
        ceiling_tokens_per_s=curve.ceiling_tokens_per_s,
        knee_batch=curve.knee_batch,
        points=[
            CurvePoint(
                batch=p.batch,
                step_ms=_ms(p.step_s),
                output_tokens_per_s=p.output_tokens_per_s,
                output_tokens_per_s_per_request=p.output_tokens_per_s_per_request,
                bound=p.bound,
            )
            for p in curve.points
        ],
    )


def simulate_response(
    config: Configuration,
    sim: SimulationResult,
    *,
    kv_capacity_tokens: int,
    seed: int,
    saturation_rps: float,
    arrival_rate_rps_per_replica: float,
    prefix_cache: PrefixCacheSimulated | None = None,
) -> SimulateResponse:
    stable = sim.stable
    return SimulateResponse(
        gpu=config.gpu.slug,
        model=config.model.slug,
        tp=config.tp,
        precision=_precision(config),
        efficiency=efficiency_used(config),
        catalog_version=config.catalog_version,
        engine=config.engine,
        kv_capacity_tokens=kv_capacity_tokens,
        requests=sim.requests,
        measured_requests=sim.measured_requests,
        seed=seed,
        unstable=not stable,
        utilisation=arrival_rate_rps_per_replica / saturation_rps if saturation_rps > 0 else None,
        saturation_rps=saturation_rps,
        ttft_ms=_simulated(sim.ttft_s, MS_PER_S, stable=stable),
        tpot_ms=_simulated(sim.tpot_s, MS_PER_S, stable=stable),
        e2e_s=_simulated(sim.e2e_s, 1.0, stable=stable),
        queue_wait_ms=_simulated(sim.queue_wait_s, MS_PER_S, stable=stable),
        mean_occupancy=sim.mean_occupancy,
        occupancy_fraction=sim.occupancy_fraction,
        busy_fraction=sim.busy_fraction,
        littles_law=LittlesLaw(
            occupancy=sim.mean_in_system,
            arrival_rate_rps=sim.measured_arrival_rate_rps,
            time_in_service_s=sim.mean_time_in_system_s,
        ),
        throughput_rps=sim.throughput_rps,
        output_tokens_per_s=sim.output_tokens_per_s,
        backlog_at_end=sim.backlog_at_end,
        steps=sim.steps,
        simulated_duration_s=sim.simulated_duration_s,
        wall_time_ms=_ms(sim.wall_time_s),
        ci_method=sim.ci_method,
        ci_level=CI_LEVEL,
        prefix_cache=prefix_cache,
    )
