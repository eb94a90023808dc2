"""The typed plan result: the predicted figures, the simulator's verification, the provenance and
every section of the justification, as frozen records the API mirrors field for field.

Field names are the JSON keys, SI units in every name (the API converts TTFT and TPOT to ms at its
edge). `as_dict(record)` gives the JSON-ready dict; a field whose key is a Python keyword (`from`)
names its key in `metadata["json"]`. Optional members default to None so that a section says what
it knows and nothing more (an alternative that was never priced has no configuration).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from planner.errors import PlannerInputError
from planner.pipeline import ParallelSection
from planner.specs import Efficiency
from planner.step_model import OPERATION_TERMS, Speculation, StepModel

Metric = Literal["ttft", "tpot", "e2e"]
Method = Literal["analytic", "simulated"]
Bound = Literal["memory", "compute"]
SlotsLimitedBy = Literal["batch_limit", "kv_cache"]
Miss = Literal["ttft", "tpot", "e2e", "stability"]
#: The MILP's constraint families as planner/optimizer.py's `plan_constraint_slacks` names them.
ConstraintFamily = Literal["meet_demand", "n_plus_one", "min_replicas", "max_gpus", "budget", "gpu_inventory"]
ConstraintUnit = Literal["rps", "replicas", "gpus", "usd_per_hour"]


def as_dict(record: Any) -> Any:
    """`record` as JSON-ready data: records → dicts keyed by their JSON names, tuples → lists."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.metadata.get("json", f.name): as_dict(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, Mapping):
        return {key: as_dict(value) for key, value in record.items()}
    if isinstance(record, tuple | list):
        return [as_dict(value) for value in record]
    return record


# --- shared ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration:
    """What one replica runs: GPU type, tensor parallelism, precisions and the vLLM batch settings."""

    gpu: str
    tp: int
    weights_precision: str
    kv_precision: str
    batch_limit: int  # vLLM max_num_seqs
    chunk_tokens: int | None  # vLLM max_num_batched_tokens with chunked prefill; None = no chunking
    pp: int = 1  # pipeline stages (vLLM pipeline_parallel_size); a replica is tp × pp GPUs
    ep: int = 1  # expert-parallel degree of an MoE model (1: experts tensor-split)


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentiles:
    """Latency percentiles of one metric, in the unit the enclosing key names (`ttft_s`: seconds)."""

    p50: float | None
    p99: float | None
    at_percentile: float  # at the SLO's percentile


# --- predicted ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FigureOfRecord:
    """The latency a plan is held to for one metric at the SLO's percentile, and how it was found:
    the queueing model's (`analytic`), or the simulator's with its confidence interval where the
    analytic model marks the point outside its validated region (`simulated`)."""

    value: float
    method: Method
    ci_low: float | None = None
    ci_high: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FiguresOfRecord:
    ttft_s: FigureOfRecord
    tpot_s: FigureOfRecord
    e2e_s: FigureOfRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class Predicted:
    """The queueing model's percentiles at the plan's per-replica load, and the figures of record."""

    percentile: float
    per_replica_rate_rps: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    output_tokens_per_s: float
    reliable: bool  # inside the analytic model's validated region
    fidelity_note: str | None
    of_record: FiguresOfRecord


# --- verification --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class P99Intervals:
    """Batch-means confidence intervals of the simulated p99s, [low, high] in seconds (None: too few requests)."""

    ttft: tuple[float | None, float | None]
    tpot: tuple[float | None, float | None]
    e2e: tuple[float | None, float | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulatedFigures:
    """One replica simulated at its share of the traffic."""

    percentile: float
    ttft_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    p99_ci_s: P99Intervals
    mean_occupancy: float  # sequences in service, time-averaged
    stable: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class VerificationRow:
    gpu: str
    replicas: int
    meets_slo: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class AddReplica:
    """Verification found a miss and added replicas to the same configuration."""

    action: Literal["add_replica"] = "add_replica"
    configuration: Configuration
    from_replicas: int
    to_replicas: int
    because: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NextCandidate:
    """Verification found a miss and moved the plan to another configuration (None: none was left)."""

    action: Literal["next_candidate"] = "next_candidate"
    from_: Configuration = dataclasses.field(metadata={"json": "from"})
    to: Configuration | None
    because: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SingleConfiguration:
    """A mixed fleet the simulator made dearer than one configuration it also accepts gave way to it."""

    action: Literal["single_configuration"] = "single_configuration"
    to: Configuration
    replicas: int
    because: str


Adjustment = AddReplica | NextCandidate | SingleConfiguration


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    """The simulator's figures for the plan's largest row next to the SLOs, and what it changed."""

    simulated: SimulatedFigures
    misses: tuple[Miss, ...]
    meets_slo: bool
    requests_simulated: int
    replicas_simulated: int
    per_replica_rate_rps: float
    wall_time_s: float
    rows: tuple[VerificationRow, ...]
    adjustments: tuple[Adjustment, ...] = ()
    seed: int

    def __post_init__(self) -> None:
        if self.meets_slo == bool(self.misses):
            raise PlannerInputError(f"verification meets_slo={self.meets_slo} contradicts misses {list(self.misses)}")


# --- justification: step model, memory, roofline ---------------------------------------------------------

#: The step model's coefficients, as `StepModelSection` repeats them.
STEP_MODEL_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(StepModel) if f.name != "speculation" and f.name not in OPERATION_TERMS
)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepModelSection:
    """The step-time formula of the chosen configuration with every coefficient (planner/step_model.py)."""

    dense_weight_bytes: float
    expert_weight_bytes: float
    experts: int
    experts_per_token: int
    moe_layers: int
    kv_bytes_per_token: float
    flops_per_token: float
    attention_flops_per_context_token: float
    memory_bandwidth_bytes_per_s: float
    compute_flops_per_s: float
    comm_s_per_token: float
    comm_latency_s: float
    step_overhead_s: float
    memory_compute_overlap: float
    weight_bytes: float
    break_even_flops_per_byte: float
    formula: str
    #: The draft the configuration verifies (planner/step_model.py `Speculation`, its k, α and per-pass
    #: costs), so a client recomputes the verify step too; None without speculation.
    speculation: Speculation | None = None

    @classmethod
    def of(cls, sm: StepModel, *, formula: str) -> StepModelSection:
        return cls(
            **{name: getattr(sm, name) for name in STEP_MODEL_FIELDS},
            weight_bytes=sm.weight_bytes,
            break_even_flops_per_byte=sm.break_even_flops_per_byte,
            formula=formula,
            speculation=sm.speculation,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySection:
    usable_bytes: float  # tp × HBM × (1 − reserve)
    weights_bytes: float
    kv_bytes_per_token: float
    kv_bytes_per_request: float
    mean_request_tokens: float
    kv_capacity_tokens: int
    concurrency_limit_by_kv: int
    batch_limit: int
    concurrency_limit: int
    batch_limited_by: SlotsLimitedBy


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodeRoofline:
    """One decode step at a batch size and the mean context."""

    at: Literal["batch_1", "at_plan_occupancy", "at_concurrency_limit"]
    batch: int
    context_tokens: int
    step_s: float
    memory_s: float
    compute_s: float
    comm_s: float
    flops_per_byte: float
    bound: Bound
    output_tokens_per_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefillRoofline:
    """The prefill of a mean prompt."""

    prompt_tokens: int
    time_s: float
    linear_time_s: float
    attention_time_s: float
    weight_read_s: float
    bound: Bound


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineSection:
    decode: tuple[DecodeRoofline, ...]
    prefill: PrefillRoofline
    break_even_flops_per_byte: float


# --- justification: queueing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class LittlesLaw:
    occupancy: float
    arrival_rate_rps: float
    time_in_service_s: float
    check: str  # "L = λ·W: …", the three numbers written out


@dataclass(frozen=True, slots=True, kw_only=True)
class RhoPoint:
    """Latencies at the SLO's percentile at one utilisation (None where the queue is unstable)."""

    utilisation: float
    arrival_rate_rps: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    meets_slo: bool
    at: Literal["plan", "max_rps_at_slo"] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueingSection:
    """One replica's queue at the plan's per-replica load."""

    arrival_rate_rps: float
    arrival_cv: float
    service_s: float
    steps_per_request: float
    mean_step_s: float
    utilisation: float
    saturation_rps: float
    slots: int
    slots_limited_by: SlotsLimitedBy
    littles_law: LittlesLaw
    wait_probability: float
    mean_wait_s: float
    wait_at_percentile_s: float
    formula: str
    rho_curve: tuple[RhoPoint, ...]
    slo_lines_s: Mapping[Metric, float]  # the SLO targets the request set, by metric
    percentile: float


@dataclass(frozen=True, slots=True, kw_only=True)
class UnstableQueueing:
    """The queueing model has no steady state at the plan's load."""

    unstable: Literal[True] = True


# --- justification: binding constraints --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SloBinding:
    """One SLO at the plan, and what relaxing it by `relax_by` would save (None: not re-solved)."""

    kind: Literal["slo"] = "slo"
    constraint: Literal["slo_ttft", "slo_tpot", "slo_e2e"]
    binding: bool
    target_s: float
    predicted_at_plan_s: float
    slack_s: float
    predicted_at_max_rps_s: float
    relax_by: float  # fraction
    relaxed_cost_usd_per_hour: float | None = None
    relaxed_saving_usd_per_hour: float | None
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityBinding:
    """Whether saturation (every SLO holds up to it) or the concurrency cap sets the replica rate."""

    kind: Literal["capacity"] = "capacity"
    constraint: Literal["saturation", "concurrency"]
    binding: bool
    limited_by: SlotsLimitedBy
    concurrency_limit: int
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstraintBinding:
    """One MILP constraint at the optimum (planner/optimizer.py's ConstraintSlack)."""

    kind: ConstraintFamily
    constraint: str  # the constraint's name, e.g. gpu_inventory__h100_sxm
    binding: bool
    value: float
    limit: float
    slack: float
    unit: ConstraintUnit


BindingEntry = SloBinding | CapacityBinding | ConstraintBinding


# --- justification: alternatives, sensitivity, candidates --------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """The best plan on another GPU type or precision and why it lost: `exact` with its configuration
    when it was priced, a lower bound (`cost_at_least_usd_per_hour`) when the search proved it dearer
    without pricing it, or no cost and the reason it cannot serve."""

    kind: Literal["gpu", "precision"]
    name: str  # the GPU slug, or "weights/kv" precisions
    gpu: str | None = None
    tp: int | None = None
    weights_precision: str | None = None
    kv_precision: str | None = None
    batch_limit: int | None = None
    chunk_tokens: int | None = None
    replicas: int | None = None
    gpus: int | None = None
    cost_usd_per_hour: float | None
    cost_at_least_usd_per_hour: float | None = None
    exact: bool
    verified: bool | None = None  # the simulator's verdict at its load; None when not simulated
    reason: str
    confidence: str | None = None  # calibration grade of the GPU's efficiencies


@dataclass(frozen=True, slots=True, kw_only=True)
class SameConfiguration:
    """The plan's own configuration grown to a traffic level."""

    replicas: int
    gpus: int
    cost_usd_per_hour: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SensitivityEntry:
    """One traffic level re-planned (a mixed fleet: every row scaled); no plan fields where none serves it."""

    traffic_factor: float
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
    cost_increase_usd_per_hour: float | None = None
    within_limits: bool | None = None
    breaks: str | None = None  # the limit the level's plan breaks when nothing within them serves it
    same_configuration: SameConfiguration | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Sensitivity:
    traffic: tuple[SensitivityEntry, ...]
    max_arrival_rate_rps_within_slo: float
    fails_by_arrival_rate_rps: float | None  # a rate known to miss (single configuration only)
    headroom_fraction: float
    method: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidatesSection:
    """How much of the search space the plan looked at."""

    enumerated: int
    groups: int
    dropped_before_queueing: int
    queueing_predictions: int
    queueing_root_finds: int
    in_milp: int
    search_exhaustive: bool
    simulations: int = 0


# --- speculative decoding -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeChoice:
    """The speculative decoding a plan deploys (planner/speculative.py): the draft method, k, the
    acceptance rate assumed and its source, E tokens per step, and the batch (at the workload's mean
    decode context) from which speculation would stop paying."""

    method: str
    draft_tokens: int
    acceptance_rate: float
    acceptance_source: str
    tokens_per_step: float
    crossover_batch: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeTrial:
    """One (method, k) the plan's configuration was predicted with at its load."""

    method: str
    draft_tokens: int
    tokens_per_step: float
    crossover_batch: int | None
    tpot_s: float | None  # at the SLO's percentile; None when the load is unstable with it
    meets_slo: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeSection:
    """How `constraints.speculative` was decided: the search's choice, and the plan's configuration's
    speculating variants at its per-replica load."""

    mode: str
    context_tokens: float  # the mean decode context the crossover batches are computed at
    mean_running_sequences: float  # the plan's predicted occupancy, as planned
    tpot_s_without: float | None  # at the SLO's percentile, the plan's configuration without speculation; None: unstable
    trials: tuple[SpeculativeTrial, ...]
    chosen: SpeculativeChoice | None
    reason: str
    #: When the search chose speculation (auto): the cheapest plan without it, its cost and replicas.
    cost_usd_per_hour_without: float | None = None
    replicas_without: int | None = None


# --- prefix caching ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCaching:
    """The prefix cache a plan deploys (planner/plan_prefix.py): its hit rate, the KV tokens each
    replica gives it, the routing it needs and the fraction of prompt tokens it saves from prefill."""

    hit_rate: float
    cache_tokens: int
    routing: str  # "random" (any load balancer) or "prefix_aware" (llm-d, SGLang router, Dynamo KV router)
    prefill_tokens_saved_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCachingTrial:
    """One (cache size, routing) planned: its assumed hit rate and, when a plan was found, its cost."""

    routing: str
    cache_fraction: float  # of the per-replica working set
    cache_tokens: int
    hit_rate: float
    prefill_tokens_saved_fraction: float
    replicas: int | None
    cost_usd_per_hour: float | None  # None: no plan with this cache cheaper than the plan without one and every earlier trial


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCachingSection:
    """How the prefix cache was decided: the model, the trials, the plan with and without caching."""

    model: str
    working_set_tokens: int
    trials: tuple[PrefixCachingTrial, ...]
    chosen: PrefixCaching | None
    reason: str
    ttft_s_without: float | None  # predicted, at the SLO's percentile
    ttft_s_with: float | None
    cost_usd_per_hour_without: float
    cost_usd_per_hour_with: float | None
    simulated_hit_rate: float | None  # the simulator's LRU on the chosen plan's busiest replica


@dataclass(frozen=True, slots=True, kw_only=True)
class Justification:
    step_model: StepModelSection
    memory: MemorySection
    roofline: RooflineSection
    queueing: QueueingSection | UnstableQueueing
    binding: tuple[BindingEntry, ...]
    alternatives: tuple[Alternative, ...]
    sensitivity: Sensitivity
    candidates: CandidatesSection
    #: With `constraints.speculative` auto or on: what speculation was tried and why it was chosen or not.
    speculative: SpeculativeSection | None = None
    #: With `workload.prefix_reuse`: the cache sizes and routings planned and what was chosen.
    prefix_caching: PrefixCachingSection | None = None
    #: A plan in pipeline stages or with expert parallelism: per-stage time, bubble and communication terms
    #: (planner/pipeline.py); None for a replica of tp GPUs alone.
    parallel: ParallelSection | None = None


# --- provenance and infeasibility ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Provenance:
    catalog_version: int
    solver: str
    status: str
    mip_gap: float | None
    solve_ms: float
    plan_ms: float
    efficiency_profile: str
    efficiencies: Mapping[str, Efficiency]  # by GPU slug, the GPUs the plan uses
    created_at: str  # ISO 8601, UTC


@dataclass(frozen=True, slots=True, kw_only=True)
class Relaxation:
    """One constraint of an infeasible request moved: the request's field (`slo.ttft_ms`,
    `constraints.max_gpus`, …), the value it gave, the value that works, in the field's own unit."""

    constraint: str
    current: bool | int | float | str | None
    value: bool | int | float | str
    unit: str | None
    cost_usd_per_hour: float | None = None  # what the plan costs once relaxed
    note: str | None = None


__all__ = [
    "AddReplica",
    "Adjustment",
    "Alternative",
    "BindingEntry",
    "CandidatesSection",
    "CapacityBinding",
    "Configuration",
    "ConstraintBinding",
    "DecodeRoofline",
    "FigureOfRecord",
    "FiguresOfRecord",
    "Justification",
    "LittlesLaw",
    "MemorySection",
    "NextCandidate",
    "P99Intervals",
    "Percentiles",
    "Predicted",
    "PrefillRoofline",
    "Provenance",
    "QueueingSection",
    "Relaxation",
    "RhoPoint",
    "RooflineSection",
    "SameConfiguration",
    "Sensitivity",
    "SensitivityEntry",
    "SimulatedFigures",
    "SingleConfiguration",
    "SloBinding",
    "StepModelSection",
    "UnstableQueueing",
    "Verification",
    "VerificationRow",
    "as_dict",
]
