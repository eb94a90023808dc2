"""Bodies of POST /v1/what-if: one model, workload shape, SLO and constraints (the plans request's
own schemas) swept over arrival rates — and optionally over one SLO target's values or over GPU
types, each alone — answered as one flat table a finance workbook can chart: per point the
cheapest plan's GPU type, tp, replicas, GPUs, precision, costs (per hour, per month of 730 h, per
million output tokens, in USD) and target ρ, or `feasible: false` with the reason.

The CSV columns are `WhatIfPoint`'s fields, in order (`WHAT_IF_CSV_COLUMNS`).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from api.schemas.catalog import Slug
from api.schemas.classes import MAX_CLASSES, TrafficClassSpec
from api.schemas.plan_response import EngineRead
from api.schemas.plans import OneEngineSpec, PlanConstraintsSpec, PlanSlo
from api.schemas.prices import PriceOverride
from api.schemas.workload import MAX_DEADLINE_H, MAX_JOB_REQUESTS, BatchWorkloadSpec, WorkloadShape
from planner.plan_refusals import POOLS_REFUSE_PREFIX_REUSE, class_plan_refusals

#: Most points one sweep may have (rates × SLO values × GPU types). Measured on the 2-core dev
#: machine: a 10-point sweep over the 12-GPU reference catalog (8B chat) took 2.9 s in a fresh
#: process and 0.8 s with warm planner caches, so 50 points stay well inside the default 30 s
#: request timeout; a larger sweep is better split so each answer stays quick.
MAX_WHAT_IF_POINTS = 50
#: Most points a sweep run as an operation may have (`Prefer: respond-async`, api/tasks.py): its
#: points are computed by task workers and stored as they come, so no request waits on them; a
#: thousand points is the benchmark's sweep (docs/operations.md).
MAX_WHAT_IF_OPERATION_POINTS = 1000


def too_many_points(points: int, most: int, *, batch: bool) -> str:
    """Why a sweep is refused for its size: `most` is MAX_WHAT_IF_POINTS answered at once, or
    MAX_WHAT_IF_OPERATION_POINTS as an operation."""
    axes = "" if batch else " (rates × SLO values × GPU types)"
    if most == MAX_WHAT_IF_POINTS:
        return (
            f"the sweep has {points} points{axes}; at most {most} per request answered at once: send "
            f"`Prefer: respond-async` to run up to {MAX_WHAT_IF_OPERATION_POINTS} as an operation, or split it"
        )
    return f"the sweep has {points} points{axes}; at most {most} per request: split it"


#: Largest arrival rate a sweep may ask about, as WorkloadSpec bounds arrival_rate_rps.
MAX_RATE_RPS = 1e7


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class WhatIfWorkload(WorkloadShape):
    """The traffic's shape; the arrival rate is what the sweep varies."""


def _what_if_kind(value: Any) -> str:
    """A batch job (`kind: batch`, its size or deadline swept) or the traffic's shape (no `kind`)."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return "batch[kind]" if kind == "batch" else "shape[kind]"


#: The sweep's workload: the traffic's shape (rates swept), or a batch job (deadlines or job sizes swept).
WhatIfWorkloadSpec = Annotated[
    Annotated[WhatIfWorkload, Tag("shape[kind]")] | Annotated[BatchWorkloadSpec, Tag("batch[kind]")],
    Discriminator(_what_if_kind),
]


class RateRange(_Input):
    """`steps` rates from `start_rps` to `stop_rps` inclusive, evenly spaced (or geometrically with `spacing: log`)."""

    start_rps: float = Field(gt=0, le=MAX_RATE_RPS, allow_inf_nan=False, examples=[5])
    stop_rps: float = Field(gt=0, le=MAX_RATE_RPS, allow_inf_nan=False, examples=[50])
    steps: int = Field(ge=2, le=MAX_WHAT_IF_POINTS, examples=[10])
    spacing: Literal["linear", "log"] = "linear"

    @model_validator(mode="after")
    def _increasing(self) -> Self:
        if not self.stop_rps > self.start_rps:
            raise ValueError(f"stop_rps ({self.stop_rps:g}) must exceed start_rps ({self.start_rps:g})")
        return self

    def rates_rps(self) -> list[float]:
        if self.spacing == "log":
            ratio = self.stop_rps / self.start_rps
            rates = [
                self.start_rps * ratio ** (i / (self.steps - 1)) for i in range(self.steps)
            ]  # start · (stop/start)^(i/(n−1))
        else:
            width = self.stop_rps - self.start_rps
            rates = [self.start_rps + width * i / (self.steps - 1) for i in range(self.steps)]  # start + (stop − start)·i/(n−1)
        rates[-1] = self.stop_rps  # exactly the stated end, not a rounding of it
        return rates


class SloSweep(_Input):
    """Values of one SLO target to sweep; the request's `slo` gives the other targets and the percentile."""

    metric: Literal["ttft_ms", "tpot_ms", "e2e_s"] = Field(description="Which target the values replace.", examples=["tpot_ms"])
    values: list[float] = Field(
        min_length=1, max_length=MAX_WHAT_IF_POINTS, description="Target values, in the metric's unit.", examples=[[30, 50, 80]]
    )

    @model_validator(mode="after")
    def _positive(self) -> Self:
        bound = 86_400 if self.metric == "e2e_s" else 3.6e6
        for value in self.values:
            if not (math.isfinite(value) and 0 < value <= bound):
                raise ValueError(f"every {self.metric} value must be > 0 and <= {bound:g}, got {value}")
        return self


class WhatIfAxes(_Input):
    """The axes: arrival rates (a list, or a range), and optionally SLO values and GPU types.
    Points are every combination: GPU types × SLO values × rates, rates varying fastest."""

    arrival_rates_rps: list[float] | None = Field(
        default=None, min_length=1, max_length=MAX_WHAT_IF_POINTS,
        description="Arrival rates to plan for (req/s, each > 0). Give this or `arrival_rate_range`.", examples=[[5, 10, 20, 40]],
    )  # fmt: skip
    arrival_rate_range: RateRange | None = Field(
        default=None, description="Evenly spaced rates. Give this or `arrival_rates_rps`."
    )
    slo: SloSweep | None = Field(default=None, description="Sweep one SLO target over these values.")
    gpus: list[Slug] | None = Field(
        default=None, min_length=1, max_length=MAX_WHAT_IF_POINTS,
        description="Plan on each GPU type alone (catalog slugs), instead of choosing among `constraints.gpus`.",
    )  # fmt: skip
    deadlines_h: list[Annotated[float, Field(gt=0, le=MAX_DEADLINE_H, allow_inf_nan=False)]] | None = Field(
        default=None, min_length=1, max_length=MAX_WHAT_IF_POINTS,
        description="A batch job's deadlines to plan for (hours), in place of a rate axis.", examples=[[6, 24, 72]],
    )  # fmt: skip
    job_requests: list[Annotated[int, Field(ge=1, le=MAX_JOB_REQUESTS)]] | None = Field(
        default=None, min_length=1, max_length=MAX_WHAT_IF_POINTS,
        description="A batch job's sizes in requests to plan for, in place of a rate axis.", examples=[[500_000, 2_000_000]],
    )  # fmt: skip
    class_rates_rps: dict[str, list[float]] | None = Field(
        default=None, min_length=1, max_length=MAX_CLASSES,
        description="With `classes`: the mix to sweep, by class name the class's arrival rate (req/s) at each point, every "
        "list as long as the others (point i takes the i-th rate of each; a class not named keeps its own rate). A "
        "share of a fixed total is its rates and the others' summing to that total.",
        examples=[{"chat": [60, 50, 40], "summarise": [20, 30, 40]}],
    )  # fmt: skip

    @model_validator(mode="after")
    def _one_rate_axis(self) -> Self:
        if self.class_rates_rps is not None:  # a class mix (WhatIfRequest checks the names against its classes)
            others = (self.arrival_rates_rps, self.arrival_rate_range, self.slo, self.deadlines_h, self.job_requests)
            if any(axis is not None for axis in others):
                raise ValueError("a class mix sweeps class_rates_rps (and optionally gpus) only: no other rate, SLO or job axis")
            lengths = {len(rates) for rates in self.class_rates_rps.values()}
            if len(lengths) != 1 or not 1 <= lengths.pop() <= MAX_WHAT_IF_POINTS:
                raise ValueError(f"every class_rates_rps list must have the same length, 1 to {MAX_WHAT_IF_POINTS}")
            for name, rates in self.class_rates_rps.items():
                for rate in rates:
                    if not (math.isfinite(rate) and 0 < rate <= MAX_RATE_RPS):
                        raise ValueError(f"every rate of class {name} must be > 0 and <= {MAX_RATE_RPS:g} req/s, got {rate}")
            if self.gpus is not None and len(set(self.gpus)) != len(self.gpus):
                raise ValueError("gpus lists a GPU type twice")
            return self
        job_axes = (self.deadlines_h is not None) + (self.job_requests is not None)
        if job_axes:  # a batch job's sweep: one job axis, no rates (WhatIfRequest checks the workload is a job)
            if job_axes > 1 or self.arrival_rates_rps is not None or self.arrival_rate_range is not None:
                raise ValueError("a batch job sweeps exactly one of deadlines_h and job_requests, and no arrival rates")
            if self.point_count() > MAX_WHAT_IF_OPERATION_POINTS:
                raise ValueError(too_many_points(self.point_count(), MAX_WHAT_IF_OPERATION_POINTS, batch=True))
            return self
        if (self.arrival_rates_rps is None) == (self.arrival_rate_range is None):
            raise ValueError("give exactly one of arrival_rates_rps and arrival_rate_range")
        for rate in self.arrival_rates_rps or ():
            if not (math.isfinite(rate) and 0 < rate <= MAX_RATE_RPS):
                raise ValueError(f"every arrival rate must be > 0 and <= {MAX_RATE_RPS:g} req/s, got {rate}")
        if self.gpus is not None and len(set(self.gpus)) != len(self.gpus):
            raise ValueError("gpus lists a GPU type twice")
        if self.point_count() > MAX_WHAT_IF_OPERATION_POINTS:
            raise ValueError(too_many_points(self.point_count(), MAX_WHAT_IF_OPERATION_POINTS, batch=False))
        return self

    def rates_rps(self) -> list[float]:
        return list(self.arrival_rates_rps) if self.arrival_rates_rps is not None else self.arrival_rate_range.rates_rps()  # type: ignore[union-attr]

    def mix_points(self) -> int:
        """How many mixes `class_rates_rps` gives (0: none)."""
        return len(next(iter(self.class_rates_rps.values()))) if self.class_rates_rps else 0

    def point_count(self) -> int:
        if self.class_rates_rps is not None:
            return self.mix_points() * (len(self.gpus) if self.gpus else 1)
        job_axis = self.deadlines_h if self.deadlines_h is not None else self.job_requests
        if job_axis is not None:
            return len(job_axis) * (len(self.gpus) if self.gpus else 1)
        rates = len(self.arrival_rates_rps) if self.arrival_rates_rps is not None else self.arrival_rate_range.steps  # type: ignore[union-attr]
        return rates * (len(self.slo.values) if self.slo else 1) * (len(self.gpus) if self.gpus else 1)


class WhatIfRequest(_Input):
    """Sweep the cheapest plan of `model` for a workload shape and SLOs over arrival rates (and
    optionally SLO values or GPU types), or the cheapest arrangement for traffic classes over their mix
    (`classes` and `sweep.class_rates_rps`)."""

    model: Slug = Field(description="Model to serve (a catalog slug).", examples=["llama-3.1-8b"])
    workload: WhatIfWorkloadSpec | None = Field(
        default=None,
        description="The traffic's shape (rates swept), or a batch job (`kind: batch`; `sweep.deadlines_h` or "
        "`sweep.job_requests`). Give this or `classes`.",
    )
    classes: list[TrafficClassSpec] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CLASSES,
        description="Traffic classes, as POST /v1/plans takes them, instead of `workload` (no `slo`: each class carries "
        "its target); `sweep.class_rates_rps` varies their mix and each point answers the cheapest arrangement.",
    )
    slo: PlanSlo | None = Field(
        default=None, validate_default=True, description="Latency targets; required unless the workload is a batch job."
    )
    constraints: PlanConstraintsSpec = Field(default_factory=PlanConstraintsSpec)
    efficiency_profile: Slug = Field(
        default="calibrated", description="Efficiencies to plan with: `calibrated`, `ideal` or a stored profile name."
    )
    engine: OneEngineSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serving engine to plan on, optionally naming its release generation (`vllm@0.11`; `trt-llm@all`: "
        "pooled over releases; bare: each GPU's newest generation with a profile of its own): each GPU at its per (GPU, "
        "engine, generation) efficiency profile and low-precision factors, or the documented fallback (docs/engines.md; "
        "the answer's `engine` says which); GPUs the engine does not run on are left out. A generation no profile of the "
        "engine has is a 422 naming the known ones; constraints.pin.engine must match it (a bare pin matches every "
        "generation). One engine (a list to choose from is POST /v1/plans'); omitted: the engine-agnostic calibration.",
    )
    sweep: WhatIfAxes
    provider: Slug | None = Field(
        default=None,
        description="Whose prices every point is planned with (as POST /v1/plans); default the service's default provider.",
        examples=["runpod"],
    )
    prices: dict[Slug, PriceOverride] = Field(
        default_factory=dict, description="Per GPU slug, USD per GPU-hour replacing the provider's prices for the sweep."
    )
    verify: bool = Field(
        default=False,
        description="Verify each point's plan in the simulator (slow: about a second per point); default false, "
        "analytic queueing model only.",
    )

    @field_validator("slo")
    @classmethod
    def _slo_for_traffic(cls, slo: PlanSlo | None, info: ValidationInfo) -> PlanSlo | None:
        workload = info.data.get("workload")
        if slo is None and workload is not None and not isinstance(workload, BatchWorkloadSpec):
            raise PydanticCustomError("missing", "Field required")
        return slo

    @model_validator(mode="after")
    def _workload_or_classes(self) -> Self:
        """Exactly one of `workload` and `classes`; a class mix is swept by `sweep.class_rates_rps` over the
        request's classes, each swept rate at least the class's day profile (its peak)."""
        if (self.workload is None) == (self.classes is None):
            raise ValueError("give exactly one of workload and classes")
        if self.classes is None:
            if self.sweep.class_rates_rps is not None:
                raise ValueError("sweep.class_rates_rps sweeps the mix of `classes`; a workload sweeps arrival rates")
            return self
        if self.slo is not None:
            raise ValueError("with classes, each class carries its own target: leave out slo")
        if self.engine is not None:  # refused rather than ignored: the mix is planned engine-agnostic
            raise ValueError(
                "engine: a class mix is planned as POST /v1/plans plans classes, which take no engine yet; leave out engine"
            )
        if self.sweep.class_rates_rps is None:
            raise ValueError("classes are swept by sweep.class_rates_rps: each class's rate at each point")
        by_name = {k.name: k for k in self.classes}
        if len(by_name) != len(self.classes):
            raise ValueError("class names must be unique")
        unknown = sorted(set(self.sweep.class_rates_rps) - set(by_name))
        if unknown:
            raise ValueError(
                f"sweep.class_rates_rps names classes the request does not have: {', '.join(unknown)} "
                f"(it has {', '.join(by_name)})"
            )
        for name, rates in self.sweep.class_rates_rps.items():
            profile = by_name[name].demand_rps
            if profile is not None and min(rates) < max(profile):
                raise ValueError(
                    f"class {name}'s swept rates must be at least its demand_rps peak ({max(profile):g} req/s): "
                    "a rate is the peak its pools are sized for"
                )
        if len({len(k.demand_rps) for k in self.classes if k.demand_rps is not None}) > 1:
            raise ValueError("every class's demand_rps must give the same number of periods")
        if refusals := class_plan_refusals(self.constraints.to_constraints(), topology=self.constraints.topology):
            raise ValueError(refusals[0])
        return self

    def classes_at(self, index: int) -> list[TrafficClassSpec]:
        """The request's classes at mix `index` (0-based): each swept class at its rate there."""
        assert self.classes is not None and self.sweep.class_rates_rps is not None, "a class mix sweep"
        rates = self.sweep.class_rates_rps
        return [k.model_copy(update={"arrival_rate_rps": rates[k.name][index]}) if k.name in rates else k for k in self.classes]

    @model_validator(mode="after")
    def _pools_plan_traffic(self) -> Self:
        """Separate pools are planned for traffic without prefix reuse (as POST /v1/plans refuses it);
        `any` (the default) plans such a sweep's points aggregated, as the plans route does."""
        if self.constraints.topology != "disaggregated":
            return self
        reuse = getattr(self.workload, "prefix_reuse", None)  # a batch job's workload has none
        if isinstance(self.workload, BatchWorkloadSpec) or reuse is not None:
            raise ValueError(
                POOLS_REFUSE_PREFIX_REUSE
                if reuse is not None
                else "topology disaggregated does not take a batch job's sweep yet: plan it aggregated or any"
            )
        return self

    @model_validator(mode="after")
    def _job_axes_for_jobs(self) -> Self:
        job_sweep = self.sweep.deadlines_h is not None or self.sweep.job_requests is not None
        if isinstance(self.workload, BatchWorkloadSpec) != job_sweep:
            raise ValueError("a batch job sweeps sweep.deadlines_h or sweep.job_requests; traffic sweeps arrival rates")
        if job_sweep and self.sweep.slo is not None:
            raise ValueError("a batch job has no SLO to sweep")
        return self


# --- response ------------------------------------------------------------------------------------


class WhatIfClassPoint(BaseModel):
    """One class at one point of a class mix sweep: its rate there and its figures in the chosen arrangement."""

    name: str
    arrival_rate_rps: float
    pool: str
    percentile: float
    ttft_ms: float
    tpot_ms: float
    e2e_s: float
    meets_target: bool
    shed_fraction: float


class WhatIfPoint(BaseModel):
    """One point of the sweep: the cheapest plan there, or why there is none. Flat, so it is a CSV row."""

    point: int = Field(description="1-based position in the sweep.")
    arrival_rate_rps: float | None = Field(
        description="The point's arrival rate (a class mix: every class's summed); null for a batch job."
    )
    slo_percentile: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    slo_e2e_s: float | None
    gpu_allowed: str | None = Field(description="The GPU type this point was planned on alone (sweep.gpus); null: any allowed.")
    feasible: bool
    gpu: str | None = Field(description="GPU type of the plan (its largest configuration in a mixed fleet).")
    tp: int | None
    replicas: int | None = Field(description="Replicas over every configuration.")
    gpus_total: int | None
    weights_precision: str | None
    kv_cache_precision: str | None
    batch_limit: int | None
    chunk_tokens: int | None
    target_rho: float | None = Field(description="Arrival rate / saturation capacity of the whole plan.")
    fleet_rows: int | None = Field(
        description="Configurations in the plan: more than 1 with constraints.mixed_fleet, 2 for a disaggregated plan's pools."
    )
    cost_usd_per_hour: float | None
    cost_usd_per_month: float | None = Field(description="cost_usd_per_hour × 730 h.")
    cost_usd_per_million_output_tokens: float | None
    currency: Literal["USD"] = "USD"
    provider: str = Field(description="Whose prices this point was planned with.")
    price_usd_per_gpu_hour: float | None = Field(
        description="On-demand USD per GPU-hour of the plan's GPU type at that provider (or the request's override)."
    )
    ttft_p99_ms: float | None = Field(description="Predicted p99 time to first token (queueing model).")
    tpot_p99_ms: float | None
    e2e_p99_s: float | None
    verified: bool = Field(description="Whether the simulator checked this point's plan.")
    infeasible_problem: str | None = Field(
        description="Problem type of the refusal, e.g. `urn:headroom:problem:infeasible-plan`."
    )
    infeasible_constraint: str | None = Field(description="The constraint that ruled every plan out, when the planner named one.")
    infeasible_reason: str | None = Field(description="Why no plan exists at this point, in a sentence.")
    plan_ms: float = Field(description="Wall time planning this point.")
    job_requests: int | None = Field(default=None, description="A batch job's size at this point; null for traffic.")
    job_deadline_h: float | None = Field(default=None, description="A batch job's deadline at this point.")
    job_finish_h: float | None = Field(default=None, description="When the job finishes on the plan.")
    job_gpu_hours: float | None = None
    job_cost_usd: float | None = Field(default=None, description="The whole job: GPU-hours × price per GPU-hour.")
    job_throughput_rps_per_replica: float | None = None
    topology: Literal["aggregated", "disaggregated"] | None = Field(
        default=None,
        description="Whether the point's plan shares replicas (`aggregated`) or runs separate prefill and decode pools; "
        "null without a plan. With constraints.topology `any` each point answers the cheaper topology.",
    )
    prefill_gpu: str | None = Field(default=None, description="A disaggregated plan's prefill pool: GPU type.")
    prefill_tp: int | None = None
    prefill_replicas: int | None = None
    prefill_precision: str | None = Field(default=None, description="weights/KV cache.")
    prefill_chunk_tokens: int | None = Field(default=None, description="The prefill pool's token budget per step.")
    prefill_rho: float | None = None
    prefill_binding: str | None = Field(default=None, description="What set the prefill pool's size.")
    prefill_cost_usd_per_hour: float | None = None
    decode_gpu: str | None = Field(default=None, description="A disaggregated plan's decode pool: GPU type.")
    decode_tp: int | None = None
    decode_replicas: int | None = None
    decode_precision: str | None = Field(default=None, description="weights/KV cache.")
    decode_batch_limit: int | None = None
    decode_rho: float | None = None
    decode_binding: str | None = Field(default=None, description="What set the decode pool's size.")
    decode_cost_usd_per_hour: float | None = None
    arrangement: str | None = Field(
        default=None,
        description="A class mix's point: the arrangement chosen there (shared_fcfs, shared_priority, segregated, …); "
        "null for a workload's point or without a plan.",
    )
    arrangements_compared: str | None = Field(
        default=None,
        description="A class mix's point: each arrangement's cost there, e.g. `shared_fcfs $14.28/h; segregated $19.04/h; "
        "deferred n/a`.",
    )
    class_figures: str | None = Field(
        default=None,
        description="A class mix's point: each class's rate and predicted latencies at its percentile, in one cell "
        "(the CSV's form of `classes`).",
    )
    classes: list[WhatIfClassPoint] | None = Field(
        default=None, description="A class mix's point: each class's rate, pool and predicted latencies (not a CSV column)."
    )
    pool_changes: str | None = Field(
        default=None,
        description="What changed in the pools from the point before (topology, and per pool its GPU, tp, replicas, "
        "precision and limits; a mixed fleet by its largest configuration), e.g. `prefill: replicas 2 → 3`; `same pools` "
        "when nothing did; null for the first point or beside a point without a plan.",
    )
    speculative_method: str | None = Field(
        default=None,
        description="The point's plan's speculative decoding (plan.speculative.method: eagle, mtp, medusa or draft_model); "
        "null when it does not speculate (constraints.speculative, docs/speculative-decoding.md).",
    )
    speculative_draft_tokens: int | None = Field(default=None, description="k: tokens drafted per sequence and verify step.")
    speculative_tokens_per_step: float | None = Field(default=None, description="E = (1 − α^(k+1))/(1 − α).")
    speculative_acceptance_rate: float | None = Field(
        default=None, description="α assumed (the plan's acceptance_source says where it comes from)."
    )
    speculative_draft_model: str | None = Field(
        default=None, description="The catalog model drafting (constraints.pin.draft_model) when the method is draft_model."
    )
    prefix_cache_hit_rate: float | None = Field(
        default=None,
        description="The point's plan's prefix cache (plan.prefix_caching, workload.prefix_reuse): the hit rate assumed; "
        "null when no cache is deployed.",
    )
    prefix_cache_tokens: int | None = Field(default=None, description="KV tokens each replica gives the cache.")
    prefix_cache_routing: str | None = Field(default=None, description="random, prefix_aware or as_measured.")
    prefix_prefill_tokens_saved_fraction: float | None = Field(
        default=None, description="The fraction of prompt tokens the cache saves from prefill."
    )


#: The CSV's columns: the point's fields, in order.
WHAT_IF_CSV_COLUMNS: tuple[str, ...] = tuple(f for f in WhatIfPoint.model_fields if f != "classes")


class WhatIfResponse(BaseModel):
    """The sweep's table, points in order (GPU types × SLO values × rates, rates fastest)."""

    model: str
    efficiency_profile: str
    catalog_version: int
    currency: Literal["USD"] = "USD"
    provider: str = Field(description="Whose prices the sweep was planned with.")
    notes: list[str] = Field(default_factory=list, description="GPUs left out because the provider does not price them.")
    hours_per_month: float = Field(description="Hours in the month that cost_usd_per_month uses (730).")
    verify: bool = Field(description="Whether each point's plan was verified in the simulator.")
    method: str = Field(description="How each point was planned, in a sentence.")
    points_total: int
    points_feasible: int
    sweep_ms: float = Field(description="Wall time of the whole sweep.")
    engine: EngineRead | None = Field(
        default=None,
        description="The engine every point is planned on (request `engine` or constraints.pin.engine): `profiles` gives "
        "each GPU's profile, release generation and why (`profile` is the first of them); null when none was asked for.",
    )
    points: list[WhatIfPoint]
