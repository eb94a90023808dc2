"""Body of `GET /v1/fleet-plans/{id}` (and the answer to `POST /v1/fleet-plans`): the schedule of
replicas per workload and period, its cost, the solver's report and the candidates it chose from.

Units are in the field names, as in the request (api/schemas/fleet_plans.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.plan_response import EngineRead, PlanWarning, PrecisionRead
from api.schemas.plan_result import PrefixCachingRead, SpeculativeRead

_PP = (
    "Pipeline-parallel stages per replica: a replica is tp × pp GPUs, over several nodes when that exceeds a node "
    "(docs/design.md, Pipeline and expert parallelism)."
)
_EP = "Expert-parallel degree (MoE): 1 = experts tensor-split; tp = attention data-parallel, experts sharded."


class AssignmentRead(BaseModel):
    """Replicas of one configuration serving one workload in one period."""

    name: str = Field(description="Workload name.")
    gpu: str
    tp: int
    pp: int = Field(default=1, description=_PP)
    ep: int = Field(default=1, description=_EP)
    precision: PrecisionRead
    batch_limit: int
    chunk_tokens: int | None
    replicas: int
    gpus: int = Field(description="replicas × tp × pp.")
    max_rps_at_slo: float = Field(description="Largest per-replica rate (req/s) meeting the workload's SLOs.")
    capacity_rps: float = Field(description="replicas × max_rps_at_slo.")
    demand_rps: float = Field(description="The workload's demand in this period (req/s).")
    offered_rps: float = Field(description="The share of that demand sent to these replicas (split in proportion to capacity).")
    target_rho: float = Field(description="Per-replica offered rate / per-replica saturation rate.")
    calibration_grade: str | None = Field(default=None, description="The GPU's calibration grade (low, medium, high).")
    prefix_caching: PrefixCachingRead | None = Field(
        default=None, description="The prefix cache these replicas run (workload.prefix_reuse); null without."
    )
    speculative: SpeculativeRead | None = Field(default=None, description="The draft these replicas verify; null without.")


class FleetLeversRead(BaseModel):
    """A workload's levers: what was offered and what its replicas run (the configuration serving the most
    GPU-hours where it mixes several; each row's own are in `periods[].workloads[]`)."""

    speculative_mode: Literal["auto", "off", "on"] = Field(description="The speculative mode its table was built under.")
    prefix_reuse: bool = Field(description="Whether the workload gave prefix_reuse (cache variants offered).")
    prefix_caching: PrefixCachingRead | None = Field(description="The prefix cache run; null for none.")
    speculative: SpeculativeRead | None = Field(description="The draft verified; null for none.")
    draft_model: str | None = Field(
        default=None,
        description="The catalog model drafting (the workload's draft_model) when `speculative.method` is draft_model; "
        "else null.",
    )


class FleetPoolRead(BaseModel):
    role: Literal["prefill", "decode"]
    gpu: str
    tp: int
    pp: int = Field(default=1, description=_PP)
    replicas: int
    gpus: int = Field(description="replicas × tp × pp.")
    precision: PrecisionRead
    batch_limit: int | None = Field(description="The decode pool's vLLM max_num_seqs; null for prefill.")
    chunk_tokens: int | None = Field(description="The prefill pool's token budget per step; null for decode.")
    rho: float = Field(description="Prefill: λE[S]/c; decode: mean batch over slots, at the period's demand.")
    binding: str = Field(description="What set this pool's replicas (docs/disaggregation.md).")
    spare_replicas: int = Field(
        default=0, description="Replicas beyond what the demand needs, kept for constraints.n_plus_one (in `replicas`, priced)."
    )
    calibration_grade: str | None = Field(default=None, description="The GPU's calibration grade (low, medium, high).")


class PoolAssignmentRead(BaseModel):
    """A workload served by separate prefill and decode pools in one period (all its demand)."""

    name: str = Field(description="Workload name.")
    option: str = Field(description="The pool option: pools-<gpu> (one GPU type) or pools-any-gpus (the cheapest pair).")
    ratio: str = Field(description="xPyD: prefill replicas, decode replicas.", examples=["2P1D"])
    prefill: FleetPoolRead
    decode: FleetPoolRead
    gpus: dict[str, int] = Field(description="Both pools' GPUs per type.")
    demand_rps: float = Field(description="The workload's demand in this period, all of it served by these pools.")


class FleetClassPoolRead(BaseModel):
    """One pool of a traffic-class arrangement in one period."""

    name: str = Field(description="The pool: a class's name (segregated) or `shared`.")
    classes: list[str] = Field(description="The classes it serves.")
    gpu: str
    tp: int
    pp: int = Field(default=1, description=_PP)
    ep: int = Field(default=1, description=_EP)
    replicas: int
    gpus: int = Field(description="replicas × tp × pp.")
    precision: PrecisionRead
    batch_limit: int | None
    chunk_tokens: int | None
    utilisation: float = Field(description="The pool's planned utilisation at the period's rates.")
    scheduling: Literal["fcfs", "priority"] = Field(
        description="`priority`: the pool's classes share it, the lower `priority` value served first; `fcfs` otherwise."
    )
    calibration_grade: str | None = Field(default=None, description="The GPU's calibration grade (low, medium, high).")


class FleetClassRead(BaseModel):
    """One traffic class in one period: its rate and its predicted figures on its pool (as a class plan's `classes`)."""

    name: str
    pool: str
    demand_rps: float = Field(description="The class's rate in this period (req/s).")
    percentile: float
    ttft_ms: float
    tpot_ms: float
    e2e_s: float
    deadline_h: float | None
    meets_target: bool
    shed_fraction: float


class ClassPoolsAssignmentRead(BaseModel):
    """A workload with traffic classes in one period: its arrangement's pools and each class's figures."""

    name: str = Field(description="Workload name.")
    arrangement: str = Field(description="shared_fcfs, shared_priority, shared_priority_shedding or segregated.")
    pools: list[FleetClassPoolRead]
    classes: list[FleetClassRead]
    gpus: dict[str, int] = Field(description="Every pool's GPUs per type.")
    demand_rps: float = Field(description="The workload's demand in this period: the sum of its classes' rates.")


class FleetClassesRead(BaseModel):
    """A workload with traffic classes: the arrangement the fleet chose (the same in every period) and the others offered."""

    arrangement: str
    offered: list[str] = Field(description="Arrangements that serve every period, offered to the MILP.")
    classes: list[FleetClassRead] = Field(description="Each class's figures in the period where the workload's demand peaks.")


class FleetTopologyRead(BaseModel):
    requested: Literal["aggregated", "disaggregated", "any"]
    chosen: Literal["aggregated", "disaggregated"]
    pool_option: str | None = Field(description="The pool option run in every period; null for replicas.")
    pool_options_offered: int = Field(description="Pool options the MILP was offered for this workload.")


class PeriodRead(BaseModel):
    period: int = Field(description="Period index from 0.")
    start_hour: float = Field(description="period × period_hours.")
    demand_rps: dict[str, float] = Field(description="Each workload's demand in this period (req/s).")
    on_demand_gpus: dict[str, int]
    spot_gpus: dict[str, int]
    gpus_held: dict[str, int] = Field(description="Reserved + on-demand + spot, per GPU type.")
    gpus_used: dict[str, int] = Field(description="GPUs the replicas run on, per GPU type.")
    workloads: list[AssignmentRead]
    pools: list[PoolAssignmentRead] = Field(
        default_factory=list, description="Workloads served by separate prefill and decode pools in this period."
    )
    class_pools: list[ClassPoolsAssignmentRead] = Field(
        default_factory=list, description="Workloads with traffic classes: their arrangement's pools in this period."
    )
    cost_usd: float = Field(description="Cost of this period: every GPU held, reserved ones included.")
    utilisation: float = Field(description="GPUs used / GPUs held in this period (0 when none is held).")


class CostRead(BaseModel):
    """Costs in USD. `usd_total` covers the whole horizon; `usd_per_day` = usd_total × 24 h / horizon."""

    usd_total: float = Field(description="Cost over the whole horizon (all periods).")
    usd_per_day: float = Field(description="usd_total scaled to 24 hours (equal to usd_total for a 24 × 1 h plan).")
    horizon_hours: float
    reserved_usd: float = Field(description="Reserved GPUs over the horizon (paid in every period, used or not).")
    on_demand_usd: float
    spot_usd: float
    idle_usd: float = Field(description="GPUs held but unused (e.g. reserved GPUs idle off-peak).")
    per_workload_usd: dict[str, float] = Field(
        description="Each workload pays for the GPUs its replicas use at the period's mean price per GPU held; "
        "with idle_usd they sum to usd_total."
    )
    per_period_usd: list[float]
    usd_per_hour: float | None = Field(
        default=None, description="usd_total / horizon_hours: the mean cost of an hour of this schedule."
    )
    usd_per_month: float | None = Field(default=None, description="usd_per_hour × 730 h.")
    usd_per_million_output_tokens: float | None = Field(
        default=None,
        description="usd_total over the output tokens the demand asks for over the horizon (Σ demand_rps × period_hours × "
        "3600 s/h × mean output tokens), × 1e6; null when there is no demand.",
    )
    currency: Literal["USD"] = "USD"


class DemandShadowPriceRead(BaseModel):
    workload: str
    period: int
    usd_per_rps: float = Field(description="Marginal cost over the horizon of one more req/s here (LP relaxation).")


class InventoryShadowPriceRead(BaseModel):
    gpu: str
    period: int
    usd_per_gpu: float = Field(description="What one more GPU of inventory here would save over the horizon (LP relaxation).")


class ShadowPricesRead(BaseModel):
    method: str = Field(description="`lp_relaxation`: duals of the MILP with every integer made continuous.")
    demand: list[DemandShadowPriceRead]
    inventory: list[InventoryShadowPriceRead] = Field(
        description="Only (GPU type, period) pairs whose inventory the plan exhausts."
    )


class SolverRead(BaseModel):
    name: str
    status: Literal["optimal", "feasible"] = Field(description="`feasible`: the time limit stopped the search; see `gap`.")
    gap: float | None = Field(description="Relative MIP gap: (incumbent − best bound) / incumbent.")
    solve_ms: float


class ModelSizeRead(BaseModel):
    candidates: int = Field(description="Candidates offered to the MILP over all workloads.")
    candidates_dropped: int = Field(description="Dominated candidates the MILP presolve removed.")
    variables: int
    constraints: int


class CandidateSearchRead(BaseModel):
    """How the candidate tables were built (once per distinct model, request mix and SLO)."""

    distinct_tables: int
    options_enumerated: int = Field(description="GPU × precision × tp × batch × chunk options over the distinct tables.")
    mu_searches: int = Field(
        description="Options whose max_rps_at_slo was narrowed (bisection to 1 %); the rest were skipped by exact bounds."
    )
    predictions: int = Field(description="Queueing-model predictions asked for (cached ones included).")
    exhaustive: bool = Field(description="False when the bound on μ searches stopped a search early.")
    ms: float


class CandidateRead(BaseModel):
    id: str
    gpu: str
    tp: int
    pp: int = Field(default=1, description=_PP)
    ep: int = Field(default=1, description=_EP)
    precision: PrecisionRead
    batch_limit: int
    chunk_tokens: int | None
    gpus_per_replica: int
    max_rps_at_slo: float
    saturation_rps: float


class GpuPriceRead(BaseModel):
    """The prices this plan used (the provider's, or the request's override), USD per GPU-hour."""

    on_demand_usd_per_hour: float
    reserved_usd_per_hour: float
    spot_usd_per_hour: float | None = Field(description="On-demand × (1 − discount) where spot is offered.")
    source: Literal["catalog", "request"]
    provider: str | None = Field(
        default=None, description="Whose price list the catalog price is from (the request's `provider` or the default)."
    )
    as_of: str | None = Field(
        default=None, description="Date of the provider's price (YYYY-MM-DD); null for a price the request gave in full."
    )
    price_source: str | None = Field(default=None, description="The provider's source of the price, or `request`.")


class FleetPlanResponse(BaseModel):
    """The cheapest schedule of reserved, on-demand and spot GPUs and replicas."""

    id: str
    created_at: str
    catalog_version: int
    efficiency_profile: str
    period_hours: float
    reserved_gpus: dict[str, int] = Field(description="GPUs of each type reserved, held in every period.")
    prices: dict[str, GpuPriceRead] = Field(description="Prices of every GPU type some candidate runs on.")
    periods: list[PeriodRead]
    cost: CostRead
    shadow_prices: ShadowPricesRead | None
    solver: SolverRead
    model_size: ModelSizeRead
    candidate_search: CandidateSearchRead
    plan_ms: float = Field(description="Wall time of the whole plan: catalog reads, candidate tables, MILP.")
    notes: list[str]
    warnings: list[PlanWarning] = Field(
        default_factory=list, description="A warning per GPU the schedule runs on whose calibration is graded low."
    )
    engine: EngineRead | None = Field(
        default=None,
        description="The engine the fleet is planned on (request `engine`): `profiles` gives each GPU's profile, release "
        "generation and why (`profile` is the first of them); null when none was asked for.",
    )
    candidates: dict[str, list[CandidateRead]] | None = Field(
        default=None, description="Each workload's candidate table (with `include_candidates`)."
    )
    topologies: dict[str, FleetTopologyRead] = Field(
        default_factory=dict, description="Each workload's topology: requested, chosen, and the pool option it runs."
    )
    classes: dict[str, FleetClassesRead] = Field(
        default_factory=dict, description="Each workload with traffic classes: its arrangement and each class's p99s."
    )
    levers: dict[str, FleetLeversRead] = Field(
        default_factory=dict, description="Each aggregated workload's prefix caching and speculative decoding: offered and run."
    )
