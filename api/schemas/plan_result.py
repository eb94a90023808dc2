"""Response models of a plan's predicted figures, verification, provenance and justification: one
model per record of planner/plan_result.py, field for field, so the OpenAPI document describes
every member a plan carries.

The justification and verification keep the planner's SI names (`*_s`, `*_bytes`, `*_rps`); only
the headline prediction converts at this edge, to `ttft_ms` and `tpot_ms` (`e2e_s` stays in
seconds), as SLOs are usually stated. Every model validates planner records directly
(`from_attributes`) and forbids members it does not declare, so a key the planner emits without a
schema fails a test rather than reaching a client undescribed. Members added after plans were
first stored have defaults, so a stored plan still reads back.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.plan_result import (
    Bound,
    ConstraintFamily,
    ConstraintUnit,
    FigureOfRecord,
    Justification,
    Method,
    Metric,
    Miss,
    Percentiles,
    Predicted,
    Provenance,
    SlotsLimitedBy,
    Verification,
)
from planner.units import MS_PER_S


class _Read(BaseModel):
    model_config = ConfigDict(extra="forbid", from_attributes=True, populate_by_name=True, serialize_by_alias=True)


# --- shared ------------------------------------------------------------------------------------------


class ConfigurationRead(_Read):
    """What one replica runs."""

    gpu: str = Field(description="GPU type (catalog slug).")
    tp: int = Field(description="Tensor-parallel degree: GPUs per replica.")
    weights_precision: str = Field(description="Quantization scheme of the weights (catalog slug).")
    kv_precision: str = Field(description="Quantization scheme of the KV cache (catalog slug).")
    batch_limit: int = Field(description="vLLM max_num_seqs.")
    chunk_tokens: int | None = Field(description="vLLM max_num_batched_tokens with chunked prefill; null = no chunking.")
    pp: int = Field(default=1, description="Pipeline stages (vLLM pipeline_parallel_size): a replica is tp × pp GPUs.")
    ep: int = Field(default=1, description="Expert-parallel degree of an MoE model; 1 = experts tensor-split.")


class PercentilesRead(_Read):
    """Latency percentiles of one metric, in the unit its key names (`ttft_s`: seconds, `ttft_ms`: milliseconds)."""

    p50: float | None = Field(description="Median.")
    p99: float | None = Field(description="99th percentile.")
    at_percentile: float | None = Field(description="At the SLO's percentile.")


# --- predicted -----------------------------------------------------------------------------------------


class FigureOfRecordRead(_Read):
    """The latency a plan is held to for one metric, at the SLO's percentile, and how it was found."""

    value: float = Field(description="In the unit its key names.")
    method: Method = Field(
        description="`analytic` (queueing model) or `simulated` (the simulator, where the analytic model flags the point outside its validated region)."
    )
    ci_low: float | None = Field(
        default=None, description="Lower end of the simulator's confidence interval; null for analytic figures."
    )
    ci_high: float | None = Field(
        default=None, description="Upper end of the simulator's confidence interval; null for analytic figures."
    )


class FiguresOfRecordRead(_Read):
    ttft_ms: FigureOfRecordRead = Field(description="Time to first token, ms.")
    tpot_ms: FigureOfRecordRead = Field(description="Time per output token after the first, ms.")
    e2e_s: FigureOfRecordRead = Field(description="Arrival to last token, s.")


class PlanPredicted(_Read):
    """The queueing model's percentiles at the planned per-replica load, and the figures of record."""

    percentile: float = Field(description="Percentile the SLOs apply to.")
    per_replica_rate_rps: float = Field(description="Arrival rate one replica of the largest row serves, requests/s.")
    ttft_ms: PercentilesRead = Field(description="Time to first token, ms.")
    tpot_ms: PercentilesRead = Field(description="Time per output token after the first, ms.")
    e2e_s: PercentilesRead = Field(description="Arrival to last token, s.")
    output_tokens_per_s: float = Field(description="Output tokens the whole plan produces per second.")
    reliable: bool = Field(description="Whether the point lies inside the analytic model's validated region.")
    fidelity_note: str | None = Field(
        description="Why the analytic figures may be off, or where the figures of record come from."
    )
    of_record: FiguresOfRecordRead | None = Field(
        default=None,
        description="Per metric, the figure the plan is held to and its method; null on plans stored before it existed.",
    )


# --- verification ----------------------------------------------------------------------------------------


class P99IntervalsRead(_Read):
    """Batch-means confidence intervals of the simulated p99s, [low, high] in seconds (null: too few requests)."""

    ttft: tuple[float | None, float | None]
    tpot: tuple[float | None, float | None]
    e2e: tuple[float | None, float | None]


class SimulatedFiguresRead(_Read):
    """One replica simulated at its share of the traffic; seconds."""

    percentile: float = Field(description="Percentile the SLOs apply to.")
    ttft_s: PercentilesRead = Field(description="Time to first token, s.")
    tpot_s: PercentilesRead = Field(description="Time per output token after the first, s.")
    e2e_s: PercentilesRead = Field(description="Arrival to last token, s.")
    p99_ci_s: P99IntervalsRead
    mean_occupancy: float = Field(description="Sequences in service, time-averaged.")
    stable: bool = Field(description="Whether the simulated queue stayed bounded.")


class VerificationRowRead(_Read):
    gpu: str = Field(description="GPU type of the row.")
    replicas: int
    meets_slo: bool = Field(description="Whether the simulator finds every SLO met for this row.")


class AddReplicaRead(_Read):
    """Verification found a miss and added replicas to the same configuration."""

    action: Literal["add_replica"] = "add_replica"
    configuration: ConfigurationRead
    from_replicas: int
    to_replicas: int
    because: str


class NextCandidateRead(_Read):
    """Verification found a miss and moved the plan to another configuration (null: none was left)."""

    action: Literal["next_candidate"] = "next_candidate"
    from_: ConfigurationRead = Field(alias="from", description="The configuration that missed.")
    to: ConfigurationRead | None = Field(description="The configuration tried next; null when none was left.")
    because: str


class SingleConfigurationRead(_Read):
    """A mixed fleet the simulator made dearer than one configuration it also accepts gave way to it."""

    action: Literal["single_configuration"] = "single_configuration"
    to: ConfigurationRead
    replicas: int
    because: str


AdjustmentRead = Annotated[AddReplicaRead | NextCandidateRead | SingleConfigurationRead, Field(discriminator="action")]


class VerificationRead(_Read):
    """The simulator's figures for the plan's largest row next to the SLOs, and what verification changed."""

    simulated: SimulatedFiguresRead
    misses: list[Miss] = Field(description="SLOs (and `stability`) the simulator finds missed.")
    meets_slo: bool
    requests_simulated: int
    replicas_simulated: int = Field(description="Replicas simulated (one, at its share of the traffic).")
    per_replica_rate_rps: float = Field(description="Arrival rate of the simulated replica, requests/s.")
    wall_time_s: float = Field(description="Wall time of the simulation, s.")
    rows: list[VerificationRowRead] = Field(default_factory=list, description="The verdict for every row of the plan.")
    adjustments: list[AdjustmentRead] = Field(default_factory=list, description="What verification changed, in order.")
    seed: int | None = Field(
        default=None, description="Seed of the simulator's random streams; null on plans stored before it was recorded."
    )


# --- justification: step model, memory, roofline -------------------------------------------------------------


class SpeculationRead(_Read):
    """A draft's per-pass costs: the verify step is step_s(d·(k+1) + p, kv, d·((k+1)·c̄ + k(k+1)/2) + attended_p)
    plus k × combine((W_d + kv · kv_d)/BW, (d · f_d + kv · a_d)/F); SI units."""

    method: str
    draft_tokens: int = Field(description="k: tokens drafted per sequence and step.")
    acceptance_rate: float = Field(description="α: per-token acceptance rate.")
    draft_weight_bytes: float = Field(description="W_d: bytes the draft reads per pass.")
    draft_kv_bytes_per_token: float = Field(description="kv_d: the draft's KV bytes per token of context.")
    draft_flops_per_token: float = Field(description="f_d: the draft's FLOPs per sequence and pass.")
    draft_attention_flops_per_context_token: float = Field(description="a_d: the draft's attention FLOPs per context token.")
    resident_bytes: float = Field(description="Memory the draft holds beside the target's weights, bytes.")


class StepModelSectionRead(_Read):
    """The step-time formula of the chosen configuration with every coefficient; SI units."""

    dense_weight_bytes: float = Field(description="Weight bytes every step reads whatever its tokens.")
    expert_weight_bytes: float = Field(description="Bytes of one routed expert in one MoE layer (0 for a dense model).")
    experts: int
    experts_per_token: int
    moe_layers: int
    kv_bytes_per_token: float = Field(description="KV-cache bytes per token of context, per replica.")
    flops_per_token: float = Field(description="FLOPs per new token, linear layers.")
    attention_flops_per_context_token: float = Field(description="Attention FLOPs per new token per token of context.")
    memory_bandwidth_bytes_per_s: float = Field(description="Effective HBM bandwidth of the replica, bytes/s.")
    compute_flops_per_s: float = Field(description="Effective peak of the replica at the weights' precision, FLOP/s.")
    comm_s_per_token: float = Field(description="Tensor-parallel all-reduce time per new token, s.")
    comm_latency_s: float = Field(description="Fixed all-reduce latency per step, s.")
    step_overhead_s: float = Field(description="Scheduler and launch overhead per step, s.")
    memory_compute_overlap: float = Field(description="1 combines memory and compute time as max(a, b), 0 as a + b.")
    weight_bytes: float = Field(description="All weights of the replica, bytes.")
    break_even_flops_per_byte: float = Field(description="Arithmetic intensity where compute time equals memory time.")
    formula: str
    speculation: SpeculationRead | None = Field(
        default=None,
        description="The draft the configuration verifies (plan.speculative), with its per-pass costs: a decode step is "
        "then the verify step (planner/step_model.py); null without speculation.",
    )


class MemorySectionRead(_Read):
    """Where the replica's memory goes and how many sequences it holds."""

    usable_bytes: float = Field(description="tp × HBM × (1 − reserve fraction), bytes.")
    weights_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_request: float = Field(description="KV-cache bytes of a mean request at full length.")
    mean_request_tokens: float = Field(description="Mean prompt + mean output tokens.")
    kv_capacity_tokens: int = Field(description="Tokens of KV cache that fit beside the weights.")
    concurrency_limit_by_kv: int = Field(description="Mean-length sequences the KV cache holds.")
    batch_limit: int = Field(description="vLLM max_num_seqs.")
    concurrency_limit: int = Field(description="Sequences in service at most: the smaller of the two limits.")
    batch_limited_by: SlotsLimitedBy


class DecodeRooflineRead(_Read):
    """One decode step at a batch size and the mean context."""

    at: Literal["batch_1", "at_plan_occupancy", "at_concurrency_limit"]
    batch: int = Field(description="Sequences decoding.")
    context_tokens: int = Field(description="Mean context of each sequence.")
    step_s: float
    memory_s: float
    compute_s: float
    comm_s: float
    flops_per_byte: float = Field(description="Arithmetic intensity of the step, attention included.")
    bound: Bound
    output_tokens_per_s: float


class PrefillRooflineRead(_Read):
    """The prefill of a mean prompt."""

    prompt_tokens: int
    time_s: float
    linear_time_s: float
    attention_time_s: float
    weight_read_s: float
    bound: Bound


class RooflineSectionRead(_Read):
    decode: list[DecodeRooflineRead]
    prefill: PrefillRooflineRead
    break_even_flops_per_byte: float


# --- justification: queueing ---------------------------------------------------------------------------------


class LittlesLawRead(_Read):
    occupancy: float = Field(description="L: mean sequences in service.")
    arrival_rate_rps: float = Field(description="λ, requests/s.")
    time_in_service_s: float = Field(description="W, s.")
    check: str = Field(description="L = λ·W with the three numbers written out.")


class RhoPointRead(_Read):
    """Latencies at the SLO's percentile at one utilisation, seconds (null where the queue is unstable)."""

    utilisation: float = Field(description="Arrival rate / saturation rate of one replica.")
    arrival_rate_rps: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    meets_slo: bool
    at: Literal["plan", "max_rps_at_slo"] | None = Field(default=None, description="Marks the plan's own point and μ's.")


class QueueingSectionRead(_Read):
    """One replica's queue at the plan's per-replica load."""

    arrival_rate_rps: float
    arrival_cv: float = Field(description="Coefficient of variation of the inter-arrival times.")
    service_s: float = Field(description="Mean time in service of a request, s.")
    steps_per_request: float
    mean_step_s: float
    utilisation: float
    saturation_rps: float
    slots: int = Field(description="Sequences in service at most.")
    slots_limited_by: SlotsLimitedBy
    littles_law: LittlesLawRead
    wait_probability: float = Field(description="Probability an arrival waits for a slot.")
    mean_wait_s: float
    wait_at_percentile_s: float
    formula: str
    rho_curve: list[RhoPointRead]
    slo_lines_s: dict[Metric, float] = Field(description="The SLO targets the request set, by metric, s.")
    percentile: float


class UnstableQueueingRead(_Read):
    """The queueing model has no steady state at the plan's load."""

    unstable: Literal[True]


# --- justification: binding constraints ----------------------------------------------------------------------


class SloBindingRead(_Read):
    """One SLO at the plan, and what relaxing it by `relax_by` would save."""

    kind: Literal["slo"] = "slo"
    constraint: Literal["slo_ttft", "slo_tpot", "slo_e2e"]
    binding: bool = Field(description="Whether this SLO sets the replica rate.")
    target_s: float
    predicted_at_plan_s: float
    slack_s: float = Field(description="target_s − predicted_at_plan_s.")
    predicted_at_max_rps_s: float = Field(description="At max_rps_at_slo, the largest per-replica rate meeting every SLO.")
    relax_by: float = Field(description="Fraction the SLO is relaxed by to price it.")
    relaxed_cost_usd_per_hour: float | None = Field(
        default=None, description="The plan re-solved at the relaxed SLO; null: not re-solved."
    )
    relaxed_saving_usd_per_hour: float | None = Field(
        description="This plan's cost less the relaxed plan's; null: not re-solved."
    )
    note: str | None = None


class CapacityBindingRead(_Read):
    """Whether saturation or the concurrency cap sets the replica rate."""

    kind: Literal["capacity"] = "capacity"
    constraint: Literal["saturation", "concurrency"]
    binding: bool
    limited_by: SlotsLimitedBy
    concurrency_limit: int
    detail: str


class ConstraintBindingRead(_Read):
    """One MILP constraint at the optimum: its value, its limit and the slack, in `unit`."""

    kind: ConstraintFamily
    constraint: str = Field(description="The constraint's name in the MILP, e.g. gpu_inventory__h100_sxm.")
    binding: bool = Field(description="Less room than one replica step is left.")
    value: float
    limit: float
    slack: float = Field(description="≥ 0 in the constraint's own direction.")
    unit: ConstraintUnit


BindingEntryRead = Annotated[SloBindingRead | CapacityBindingRead | ConstraintBindingRead, Field(discriminator="kind")]


# --- justification: alternatives, sensitivity, candidates ----------------------------------------------------


class AlternativeRead(_Read):
    """The best plan on another GPU type or precision and why it lost."""

    kind: Literal["gpu", "precision", "engine"]
    name: str = Field(description="The GPU slug, `weights/kv` precisions, or the engine (its best plan on that engine).")
    gpu: str | None = Field(default=None, description="GPU type of its best plan; null when it was not priced.")
    tp: int | None = None
    weights_precision: str | None = None
    kv_precision: str | None = None
    batch_limit: int | None = None
    chunk_tokens: int | None = None
    replicas: int | None = None
    gpus: int | None = None
    cost_usd_per_hour: float | None = Field(description="Its exact cost; null when it was not priced or cannot serve.")
    cost_at_least_usd_per_hour: float | None = Field(
        default=None, description="A proven lower bound on its cost when it was not priced."
    )
    exact: bool = Field(description="Whether the entry is exact (priced or proven impossible) rather than a bound.")
    verified: bool | None = Field(default=None, description="The simulator's verdict at its load; null when not simulated.")
    reason: str
    confidence: str | None = Field(default=None, description="Calibration grade of the GPU's efficiencies.")


class SameConfigurationRead(_Read):
    """The plan's own configuration grown to the traffic level."""

    replicas: int
    gpus: int
    cost_usd_per_hour: float


class SensitivityEntryRead(_Read):
    """One traffic level re-planned (a mixed fleet: every row scaled); plan members null where none serves it."""

    traffic_factor: float = Field(description="Multiple of the request's arrival rate.")
    arrival_rate_rps: float
    gpu: str | None = None
    tp: int | None = None
    weights_precision: str | None = None
    kv_precision: str | None = None
    batch_limit: int | None = None
    chunk_tokens: int | None = None
    replicas: int | None = None
    gpus: int | None = None
    cost_usd_per_hour: float | None = None
    cost_increase_usd_per_hour: float | None = Field(default=None, description="Over this plan's cost.")
    within_limits: bool | None = None
    breaks: str | None = Field(default=None, description="The limit the level's plan breaks when nothing within them serves it.")
    same_configuration: SameConfigurationRead | None = None
    note: str | None = None


class SensitivityRead(_Read):
    traffic: list[SensitivityEntryRead]
    max_arrival_rate_rps_within_slo: float
    fails_by_arrival_rate_rps: float | None = Field(description="A rate known to miss an SLO (single configuration only).")
    headroom_fraction: float = Field(description="max_arrival_rate_rps_within_slo / arrival rate − 1.")
    method: str | None = Field(
        default=None, description="How the levels were found; null on plans stored before it was recorded."
    )


class CandidatesSectionRead(_Read):
    """How much of the search space the plan looked at."""

    enumerated: int
    groups: int = Field(description="(GPU, precision, tp) groups.")
    dropped_before_queueing: int
    queueing_predictions: int
    queueing_root_finds: int
    in_milp: int
    search_exhaustive: bool
    simulations: int = 0


class SpeculativeRead(_Read):
    """The speculative decoding a plan deploys: a draft head proposes `draft_tokens` tokens per step and the
    target verifies them in one step, emitting `tokens_per_step` = (1 − α^(k+1))/(1 − α) per sequence on average."""

    method: Literal["eagle", "mtp", "medusa", "draft_model"] = Field(description="The draft method.")
    draft_tokens: int = Field(description="k: tokens drafted per sequence and step.")
    acceptance_rate: float = Field(description="α: the per-token acceptance rate assumed (the method's default for chat).")
    acceptance_source: str = Field(description="Where α comes from.")
    tokens_per_step: float = Field(description="E = (1 − α^(k+1))/(1 − α): tokens emitted per sequence and verify step.")
    crossover_batch: int | None = Field(
        description="Running sequences per replica (at the workload's mean decode context) from which the verify step "
        "turns compute-bound enough that speculation stops paying (verify step / E ≥ plain step); null: it pays at any batch."
    )


class SpeculativeTrialRead(_Read):
    method: str
    draft_tokens: int
    tokens_per_step: float
    crossover_batch: int | None
    tpot_s: float | None = Field(description="Predicted TPOT at the SLO's percentile; null when the queue is unstable with it.")
    meets_slo: bool


class SpeculativeSectionRead(_Read):
    """How constraints.speculative was decided: speculation is a candidate of the search (the cheapest plan
    wins, with or without it); the plan's configuration's speculating variants at its per-replica load,
    against its TPOT without speculation."""

    mode: Literal["auto", "off", "on"]
    context_tokens: float = Field(description="E[prompt] + E[output]/2: the decode context the crossover batches are at.")
    mean_running_sequences: float = Field(description="Sequences running per replica as planned (Little's L).")
    tpot_s_without: float | None = Field(
        description="The plan's configuration's predicted TPOT at the SLO's percentile without speculation, at the plan's "
        "per-replica load; null when that load is unstable without it."
    )
    trials: list[SpeculativeTrialRead] = Field(
        description="The configuration's speculating variants the search offered, each predicted at the plan's per-replica load."
    )
    chosen: SpeculativeRead | None
    reason: str
    cost_usd_per_hour_without: float | None = Field(
        default=None,
        description="When the search chose speculation (auto): what the cheapest plan without speculation costs per hour.",
    )
    replicas_without: int | None = Field(default=None, description="… and its replicas.")


class PrefixCachingRead(_Read):
    """The prefix cache a plan deploys (workload.prefix_reuse; docs/prefix-caching.md)."""

    hit_rate: float = Field(
        description="Fraction of the requests carrying a shared prefix that find it cached (Che approximation of the LRU; "
        "a measured hit rate as given)."
    )
    cache_tokens: int = Field(
        description="KV tokens each replica sets aside for the cache (its running sequences have that much less)."
    )
    routing: Literal["random", "prefix_aware", "as_measured"] = Field(
        description="`prefix_aware`: route each prefix to one replica (llm-d prefix-cache scorer, SGLang router, Dynamo KV "
        "router); `random`: any load balancer; `as_measured`: the routing the hit rate was measured under."
    )
    prefill_tokens_saved_fraction: float = Field(description="Fraction of prompt tokens not prefilled.")


class PrefixCachingTrialRead(_Read):
    routing: str
    cache_fraction: float = Field(description="Of the per-replica working set.")
    cache_tokens: int
    hit_rate: float
    prefill_tokens_saved_fraction: float
    replicas: int | None
    cost_usd_per_hour: float | None = Field(
        description="The trial's plan cost; null when no plan with this cache costs less than the plan without a cache "
        "and every smaller cache tried before it (such a trial is not searched to the end)."
    )


class PrefixCachingSectionRead(_Read):
    """How the prefix cache was decided: each cache size planned, and the plan with and without a cache."""

    model: str
    working_set_tokens: int = Field(description="Tokens of every shared prefix one replica sees (whole 16-token blocks).")
    trials: list[PrefixCachingTrialRead]
    chosen: PrefixCachingRead | None
    reason: str
    ttft_s_without: float | None = Field(description="Predicted TTFT at the SLO's percentile without a cache.")
    ttft_s_with: float | None = Field(description="Predicted TTFT at the SLO's percentile with the chosen cache.")
    cost_usd_per_hour_without: float
    cost_usd_per_hour_with: float | None
    simulated_hit_rate: float | None = Field(description="The simulator's LRU hit rate on the plan's busiest replica.")


class ParallelSectionRead(_Read):
    """A plan in pipeline stages or with expert parallelism (planner/pipeline.py): the layout, every communication
    term, one stage's time within a decode step at the plan's occupancy, and a lone prompt through all stages."""

    tp: int
    pp: int
    ep: int
    gpus_per_replica: int = Field(description="tp × pp.")
    nodes_per_replica: int = Field(description="Nodes one replica spans (stages packed whole into nodes).")
    stage_layers: int = Field(description="Layers of the largest stage: ⌈layers / pp⌉.")
    stage_imbalance: float = Field(description="pp · ⌈L/pp⌉ / L: how much the largest stage slows the pipeline.")
    tp_link: str = Field(description="The link the tensor-parallel all-reduce is priced on.")
    hop_links: list[str] = Field(description="The link of each of the pp − 1 stage-to-stage hops.")
    tp_comm_s_per_token: float = Field(description="All-reduce time per new token of a step, s.")
    tp_comm_latency_s: float = Field(description="All-reduce latency per step, s.")
    hop_s_per_token: float = Field(description="Stage-hop transfer time per new token of a step, s.")
    hop_latency_s: float = Field(description="Stage-hop latency per step, s.")
    ep_comm_s_per_token: float = Field(description="Expert-parallel all-to-all (dispatch + combine) per new token, s.")
    ep_comm_latency_s: float = Field(description="Expert-parallel all-to-all latency per step, s.")
    decode_batch: int = Field(description="Sequences of the decode step shown (the plan's mean occupancy).")
    context_tokens: int = Field(description="Context of each sequence in that step.")
    decode_step_s: float = Field(description="That decode step: pp stage times plus the hops, s.")
    stage_s: float = Field(description="One stage on one micro-batch of that step, s.")
    hops_s: float = Field(description="The hops of one micro-batch in that step, s.")
    prompt_tokens: int = Field(description="The mean prompt.")
    lone_prefill_s: float = Field(description="That prompt alone through all stages in turn (TTFT with no load), s.")
    lone_bubble_fraction: float = Field(description="(pp − 1)/pp: the stages a lone request leaves idle (GPipe, m = 1).")
    formula: str


class JustificationRead(_Read):
    """Why this plan: the step model, memory, roofline, queueing, binding constraints, alternatives,
    sensitivity to traffic and the size of the search; SI units in every name."""

    step_model: StepModelSectionRead
    memory: MemorySectionRead
    roofline: RooflineSectionRead
    queueing: QueueingSectionRead | UnstableQueueingRead
    binding: list[BindingEntryRead]
    alternatives: list[AlternativeRead]
    sensitivity: SensitivityRead
    candidates: CandidatesSectionRead
    speculative: SpeculativeSectionRead | None = Field(
        default=None, description="With constraints.speculative auto or on: what was tried and why it was chosen or not."
    )
    prefix_caching: PrefixCachingSectionRead | None = Field(
        default=None, description="With workload.prefix_reuse: the cache sizes planned, the hit rates assumed, and why."
    )
    parallel: ParallelSectionRead | None = Field(
        default=None,
        description="A plan in pipeline stages or with expert parallelism: per-stage time, bubble and communication terms.",
    )


# --- provenance and infeasibility ----------------------------------------------------------------------------


class EfficiencyRead(_Read):
    """The efficiencies a GPU was planned with (planner/specs.py Efficiency)."""

    name: str
    memory: float = Field(description="η_mem: fraction of datasheet HBM bandwidth reached.")
    compute: float = Field(description="η_compute: fraction of datasheet peak FLOP/s reached.")
    step_overhead_s: float = Field(description="Added to every continuous-batching step, s.")
    memory_reserve_fraction: float = Field(description="Fraction of HBM unavailable to weights and KV cache.")
    include_comm: bool = Field(description="Whether tensor-parallel all-reduce time is modelled.")
    memory_compute_overlap: float
    low_precision_factors: list[tuple[str, float]] = Field(
        default_factory=list,
        description="(datatype, factor): realised / datasheet rate of that datatype's matrix multiplies under the plan's "
        "engine (docs/engines.md); a datatype not listed runs at its datasheet peak.",
    )
    source: str


class PlanProvenance(_Read):
    catalog_version: int
    solver: str
    status: str = Field(description="Solver status.")
    mip_gap: float | None
    solve_ms: float = Field(description="MILP solve time, ms.")
    plan_ms: float = Field(description="Whole planning time, ms.")
    efficiency_profile: str
    efficiencies: dict[str, EfficiencyRead] = Field(description="By GPU slug, for the GPUs the plan uses.")
    created_at: str = Field(description="ISO 8601, UTC.")


class RelaxationRead(_Read):
    """One constraint of an infeasible request moved, in the request's own field name and unit."""

    constraint: str = Field(
        description="The request's field, e.g. `slo.ttft_ms`, `constraints.max_gpus`.", examples=["slo.ttft_ms"]
    )
    current: bool | int | float | str | None = Field(description="The value the request gave; null where it set none.")
    value: bool | int | float | str = Field(description="The value that works.")
    unit: str | None
    cost_usd_per_hour: float | None = Field(default=None, description="What the plan costs once relaxed.")
    note: str | None = None


# --- from planner records ------------------------------------------------------------------------------------


def _scaled(percentiles: Percentiles, scale: float) -> PercentilesRead:
    def times(value: float | None) -> float | None:
        return None if value is None else value * scale

    return PercentilesRead(p50=times(percentiles.p50), p99=times(percentiles.p99), at_percentile=times(percentiles.at_percentile))


def _figure(figure: FigureOfRecord, scale: float) -> FigureOfRecordRead:
    return FigureOfRecordRead(
        value=figure.value * scale,
        method=figure.method,
        ci_low=None if figure.ci_low is None else figure.ci_low * scale,
        ci_high=None if figure.ci_high is None else figure.ci_high * scale,
    )


def predicted_read(predicted: Predicted) -> PlanPredicted:
    """The prediction at the edge: TTFT and TPOT in ms, E2E in s."""
    record = predicted.of_record
    return PlanPredicted(
        percentile=predicted.percentile,
        per_replica_rate_rps=predicted.per_replica_rate_rps,
        ttft_ms=_scaled(predicted.ttft_s, MS_PER_S),
        tpot_ms=_scaled(predicted.tpot_s, MS_PER_S),
        e2e_s=_scaled(predicted.e2e_s, 1.0),
        output_tokens_per_s=predicted.output_tokens_per_s,
        reliable=predicted.reliable,
        fidelity_note=predicted.fidelity_note,
        of_record=FiguresOfRecordRead(
            ttft_ms=_figure(record.ttft_s, MS_PER_S), tpot_ms=_figure(record.tpot_s, MS_PER_S), e2e_s=_figure(record.e2e_s, 1.0)
        ),
    )


def justification_read(justification: Justification) -> JustificationRead:
    return JustificationRead.model_validate(justification, from_attributes=True)


def verification_read(verification: Verification | None) -> VerificationRead | None:
    return None if verification is None else VerificationRead.model_validate(verification, from_attributes=True)


def provenance_read(provenance: Provenance) -> PlanProvenance:
    return PlanProvenance.model_validate(provenance, from_attributes=True)
