"""Bodies answered by `POST /v1/evaluate` and `POST /v1/simulate`: the roofline, memory picture,
step-time coefficients and, with a workload, queueing predictions or simulated percentiles
(api/schemas/performance_read.py builds them from the planner's results).

Units at the edge: bytes stay bytes, step and latency times are milliseconds (`_ms`), end-to-end
latency and time in system seconds (`_s`), rates per second (`_per_s`). The `step_model`
block keeps the planner's SI coefficients (bytes, FLOPs, seconds) so a client can recompute a step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.evaluation import Method
from api.schemas.performance import PrecisionSpec
from api.schemas.plan_response import EngineRead

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
