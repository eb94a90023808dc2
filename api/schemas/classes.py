"""Schemas of class-aware plans: `POST /v1/plans` with `classes` instead of `workload`, stored
like a one-workload plan and read back by `GET /v1/plans/{id}`.

Times at the edge are milliseconds for TTFT/TPOT and seconds for end-to-end, as in api/schemas/plans.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Slug
from api.schemas.plan_response import PrecisionRead
from api.schemas.plan_result import EfficiencyRead, ParallelSectionRead
from api.schemas.plans import PlanConstraintsSpec, PlanSlo
from api.schemas.prices import PriceOverride
from api.schemas.workload import TokenLengths, length_distribution
from planner.plan_refusals import class_plan_refusals
from planner.traffic_classes import TrafficClass
from planner.workload import MAX_ARRIVAL_CV, MIN_ARRIVAL_CV

#: Most classes one request may carry: each adds single-class plans to the comparison.
MAX_CLASSES = 8
#: Most periods in a class's day profile: quarter-hours. The deferral schedule's MILP
#: (planner/plan_deferral.py) has four variables per period.
MAX_DAY_PERIODS = 96


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TrafficClassSpec(_Input):
    """One class of traffic: its own rate, lengths and either latency SLOs or a completion deadline."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$", examples=["chat"])
    arrival_rate_rps: float = Field(gt=0, le=1e7, allow_inf_nan=False, description="Arrivals per second of this class.")
    prompt_tokens: TokenLengths = Field(description="Prompt length: an integer, {mean, p99} or {tokens, weights}.")
    output_tokens: TokenLengths = Field(description="Output length: an integer, {mean, p99} or {tokens, weights}.")
    arrival_cv: float = Field(default=1.0, ge=MIN_ARRIVAL_CV, le=MAX_ARRIVAL_CV, allow_inf_nan=False)
    slo: PlanSlo | None = Field(default=None, description="Latency targets (an interactive class); or give deadline_h.")
    deadline_h: float | None = Field(
        default=None,
        gt=0,
        le=24,
        allow_inf_nan=False,
        description="Each request done within this many hours (a background class).",
    )
    priority: int = Field(default=0, ge=0, le=9, description="0 is served first on a shared pool.")
    max_shed_fraction: float = Field(default=0.0, ge=0, lt=1, description="How much of the class may be refused at peak.")
    demand_rps: list[Annotated[float, Field(ge=0, le=1e7, allow_inf_nan=False)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DAY_PERIODS,
        description=(
            "The class's day profile: its rate in each of P equal periods of a day (24/P hours each; every class "
            "with one gives the same P), none above arrival_rate_rps, the peak the pools are sized for. With "
            "profiles the deferred arrangement is priced."
        ),
    )

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if (self.slo is None) == (self.deadline_h is None):
            raise ValueError("give exactly one of slo and deadline_h")
        if self.demand_rps is not None and max(self.demand_rps) > self.arrival_rate_rps:
            raise ValueError("demand_rps may not exceed arrival_rate_rps (the peak the pools are sized for)")
        return self

    def to_class(self) -> TrafficClass:
        return TrafficClass(
            name=self.name,
            arrival_rate_rps=self.arrival_rate_rps,
            prompt_tokens=length_distribution(self.prompt_tokens),
            output_tokens=length_distribution(self.output_tokens),
            arrival_cv=self.arrival_cv,
            slo=None if self.slo is None else self.slo.to_slo(),
            deadline_h=self.deadline_h,
            priority=self.priority,
            max_shed_fraction=self.max_shed_fraction,
            demand_rps=None if self.demand_rps is None else tuple(self.demand_rps),
        )


class ClassesPlanRequest(_Input):
    """Plan several traffic classes of one model: the cheapest arrangement of pools, stored like a one-workload plan."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    classes: list[TrafficClassSpec] = Field(min_length=1, max_length=MAX_CLASSES)
    constraints: PlanConstraintsSpec = Field(default_factory=PlanConstraintsSpec)
    efficiency_profile: Slug = Field(default="calibrated")
    verify: bool = Field(
        default=True,
        description="Check the chosen arrangement's pools with the simulator (the class simulator for a priority pool).",
    )
    provider: Slug | None = Field(default=None)
    prices: dict[Slug, PriceOverride] = Field(default_factory=dict)
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[^/\x00-\x1f]+$",
        description="Deployment this class plan is for, as a one-workload plan's `name`: the plan becomes its current plan "
        "(GET /v1/deployments/{name}), and POST /v1/deployments/{name}/replan plans its classes again.",
    )
    store: bool = Field(
        default=True,
        exclude=True,  # a request's switch, not part of the request stored with a plan
        description="As a one-workload plan's: true (the default) stores the plan (201 and Location; role planner), "
        "false is a dry run answered with 200 that writes nothing.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if len({k.name for k in self.classes}) != len(self.classes):
            raise ValueError("class names must be unique")
        if len({len(k.demand_rps) for k in self.classes if k.demand_rps is not None}) > 1:
            raise ValueError("every class's demand_rps must give the same number of periods")
        if refusals := class_plan_refusals(self.constraints.to_constraints(), topology=self.constraints.topology):
            raise ValueError(refusals[0])
        return self


class ArrangementRead(BaseModel):
    name: str
    cost_usd_per_hour: float | None
    reason: str
    saving_vs_no_shedding_usd_per_hour: float | None = Field(
        default=None,
        description="shared_priority_shedding only: shared_priority's cost less this one's (what the admission limit saves); "
        "null when either is not priced.",
    )


class Arrangement(BaseModel):
    chosen: str
    compared: list[ArrangementRead]


class ClassPoolRead(BaseModel):
    name: str
    classes: list[str]
    gpu: str
    tp: int
    pp: int = Field(default=1, description="Pipeline-parallel stages per replica: a replica is tp × pp GPUs.")
    ep: int = Field(default=1, description="Expert-parallel degree (MoE): 1 = experts tensor-split; tp = experts sharded.")
    replicas: int = Field(description="Replicas of the pool; the deferred pool's is the most it rents in any period.")
    batch_limit: int
    chunk_tokens: int | None
    cost_usd_per_hour: float
    utilisation: float
    precision: PrecisionRead
    scheduling: Literal["fcfs", "priority"] = Field(
        description="`priority`: the pool's classes share it, the lower `priority` value served first; `fcfs` otherwise."
    )
    parallel: ParallelSectionRead | None = Field(
        default=None,
        description="A pool in pipeline stages or expert-parallel: per-stage time, bubble and communication terms, as an "
        "aggregated plan's justification.parallel, its decode step at the pool's mean occupancy (null at pp 1 ep 1).",
    )


class ClassRead(BaseModel):
    name: str
    pool: str
    priority: int = Field(description="The class's priority as requested: on a priority pool 0 is served first.")
    percentile: float
    ttft_ms: float
    tpot_ms: float
    e2e_s: float
    deadline_h: float | None
    meets_target: bool
    shed_fraction: float
    admission_limit: int | None = Field(
        default=None,
        description="The class is admitted only while a replica holds fewer than this many requests (running + waiting); "
        "null: always admitted.",
    )
    deferred_fraction: float = Field(
        default=0.0,
        description="The share of the class's requests served in a later period of the day than they arrived in "
        "(the deferred pool's schedule); 0 in other arrangements.",
    )


class ClassVerificationRead(BaseModel):
    """One class of a priority pool: the queueing model's wait for a slot against the step-level class simulator's."""

    name: str
    wait_model_ms: float
    wait_simulated_ms: float
    ttft_simulated_ms: float = Field(description="The class's simulated TTFT at the plan's percentile.")
    e2e_simulated_s: float
    shed_fraction_simulated: float
    meets_target: bool
    tpot_simulated_ms: float = Field(default=0.0, description="The class's simulated TPOT at the plan's percentile.")


class InteractivePeriodRead(BaseModel):
    name: str
    ttft_ms: float
    tpot_ms: float
    e2e_s: float


class PeriodVerificationRead(BaseModel):
    """One period of a deferred plan's day run (planner/simulator_classes_day.py)."""

    period: int
    interactive_rps: float
    background_in_pool_rps: float = Field(description="Background work served on the interactive pool's idle capacity.")
    extra_replicas: int
    interactive: list[InteractivePeriodRead] = Field(
        description="Each interactive class on its pool in this period, simulated at step level with the background in it."
    )
    background_completion_h: float = Field(description="The longest arrival-to-done time of the work arriving in the period.")
    meets_target: bool


class ClassesVerification(BaseModel):
    method: str
    interactive_wait_model_ms: float
    interactive_wait_simulated_ms: float
    classes: list[ClassVerificationRead] = Field(default_factory=list)
    refuted: list[str] = Field(
        default_factory=list, description="Pools the simulator refused on the way (configuration × replicas: why)."
    )
    periods: list[PeriodVerificationRead] = Field(
        default_factory=list, description="A deferred plan's day run, period by period; empty for other arrangements."
    )


class ClassesProvenance(BaseModel):
    catalog_version: int
    efficiency_profile: str
    efficiencies: dict[str, EfficiencyRead] = Field(description="By GPU slug, for the GPUs the pools use.")
    created_at: str = Field(description="ISO 8601, UTC.")


def is_classes_plan(response: Mapping[str, Any]) -> bool:
    """Whether a stored plan's response is a class plan's (it compares arrangements; a one-workload plan has `plan`)."""
    return "arrangement" in response


class ClassesPlanResponse(BaseModel):
    id: str = Field(description="The stored plan's id (GET /v1/plans/{id}); a dry run's is fresh and never stored.")
    name: str | None = Field(default=None, description="The deployment the plan was made for; null for none.")
    model: str
    arrangement: Arrangement
    cost_usd_per_hour: float
    pools: list[ClassPoolRead]
    classes: list[ClassRead]
    verification: ClassesVerification | None
    provenance: ClassesProvenance
