"""Bodies of `POST /v1/fleet-plans` and `GET /v1/fleet-plans/{id}`: many workloads over a day (or
any number) of periods, on reserved, on-demand and spot GPUs within inventory.

Units are in the field names: rates in requests per second, prices in USD per GPU-hour, costs in
USD, latencies in ms (TTFT, TPOT) or s (E2E). Cross-field checks (every workload giving the same
number of periods, unique names, per-period inventory lists of that length) are made by
`FleetPlanRequest.field_errors()`, so a bad body is one 422 listing every bad field.
"""

from __future__ import annotations

import csv
import io
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.csv_export import CURRENCY
from api.rounding import rounded
from api.schemas.catalog import Slug
from api.schemas.classes import MAX_CLASSES, TrafficClassSpec
from api.schemas.plan_result import PrefixCachingRead, SpeculativeRead
from api.schemas.plans import EngineRead, OneEngineSpec, PlanPrecision, PlanSlo, PlanWarning, PrecisionRead
from api.schemas.prices import PriceOverride
from api.schemas.workload import (
    ARRIVAL_CV_DESCRIPTION,
    PREFIX_REUSE_DESCRIPTION,
    TASK_DESCRIPTION,
    PrefixReuseSpec,
    TokenLengths,
    length_distribution,
)
from planner.candidates import BATCH_LIMITS, CHUNK_BUDGETS, TP_DEGREES
from planner.confidence import GRADES
from planner.fleet_candidates import CandidateGrid
from planner.fleet_classes import class_demand_rps
from planner.plan_prefix import CACHE_FRACTIONS
from planner.plan_refusals import POOLS_REFUSE_PREFIX_REUSE
from planner.speculative import SEARCH_DRAFT_TOKENS
from planner.traffic_classes import merged_workload
from planner.units import HOURS_PER_MONTH
from planner.workload import MAX_ARRIVAL_CV, MIN_ARRIVAL_CV, Task, Workload

# Size bounds: not physics, but what one request may ask of the service so that an accepted plan
# fits the default request timeout (30 s) on a 2-core machine. They come from the measured cost
# model in docs/fleet-benchmark.md ("Bounded work: the cost model"); the MILP's own size (Σ
# candidates × periods) is bounded once the tables are known (api/fleet_plans.py MAX_MILP_COLUMNS).

#: Most periods one plan may have: a 31-day month of hours.
MAX_PERIODS = 744
#: Most workloads in one plan.
MAX_WORKLOADS = 200
#: Most workload-periods (workloads × periods): the MILP's demand rows and, times the candidates
#: per workload (≈ 10–20), its replica columns.
MAX_WORKLOAD_PERIODS = 5_000
#: Most distinct workload shapes (model, request mix, arrival CV, SLO): each is one candidate table.
MAX_DISTINCT_SHAPES = 12
#: Most configurations searched over all tables: distinct shapes × tp degrees × batch limits × chunk
#: budgets (× the GPU types and precisions allowed, which the catalog decides). The default grid is
#: 4 × 6 × 4 = 96 per shape.
MAX_SHAPE_OPTIONS = 12 * 96
#: Longest solver time limit a request may ask for, in seconds (the service's own limit and the
#: request's deadline bound it further).
MAX_SOLVER_TIME_LIMIT_S = 120.0


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


WorkloadName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Unique name of the workload in this plan: letters, digits, '.', '_', '-'.",
        examples=["chat"],
    ),
]


#: Poisson arrivals: a workload's arrival_cv unless it gives one (docs/design.md).
DEFAULT_ARRIVAL_CV = 1.0
#: The fields of one traffic shape, which a workload with `classes` leaves to its classes.
SHAPE_FIELDS = (
    "prompt_tokens",
    "output_tokens",
    "slo",
    "demand_rps",
    "arrival_cv",
    "prefix_reuse",
    "task",
    "speculative",
    "draft_model",
    "acceptance_rate",
)


class FleetWorkloadSpec(_Input):
    """One workload: a model, its request mix, its SLO, and its demand in each period; or a model and its
    traffic classes (`classes`), each with its own mix, target and rate."""

    name: WorkloadName
    model: Slug = Field(description="Model served (a catalog slug).", examples=["llama-3.1-8b"])
    prompt_tokens: TokenLengths | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Prompt length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram). "
        "Required unless the workload gives `classes`.",
        examples=[{"mean": 1000, "p99": 4000}],
    )
    output_tokens: TokenLengths | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Output length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram). "
        "Required unless the workload gives `classes`.",
        examples=[256],
    )
    arrival_cv: float = Field(
        default=DEFAULT_ARRIVAL_CV, ge=MIN_ARRIVAL_CV, le=MAX_ARRIVAL_CV, allow_inf_nan=False, description=ARRIVAL_CV_DESCRIPTION
    )
    slo: PlanSlo | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Latency targets, as in /v1/plans. Required unless the workload gives `classes`.",
    )
    demand_rps: list[Annotated[float, Field(ge=0, le=1e7)]] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        min_length=1,
        max_length=MAX_PERIODS,
        description="Mean arrival rate in requests/s in each period; every workload gives the same number of periods. "
        "Required unless the workload gives `classes` (whose rates are their own).",
        examples=[[4, 2, 8, 12]],
    )
    classes: list[TrafficClassSpec] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        min_length=1,
        max_length=MAX_CLASSES,
        description="Traffic classes of this workload, as POST /v1/plans' `classes` (docs/traffic-classes.md): each "
        "class's `demand_rps` is its rate per period of this plan (one per period), else `arrival_rate_rps` in every "
        "period. The fleet MILP chooses the arrangement (shared FCFS, shared priority, with shedding, or segregated "
        "pools) whose pools make the fleet cheapest; `classes` in the response and each period's `class_pools` say "
        "which, with each class's predicted p99s. A workload gives either `classes` or its own prompt_tokens, "
        "output_tokens, slo and demand_rps; with classes it runs aggregated pools without levers.",
    )  # not written back when absent: stored requests stay as they were
    topology: Literal["aggregated", "disaggregated", "any"] = Field(
        default="aggregated",
        description="`aggregated` (the default): replicas that prefill and decode. `disaggregated`: a prefill pool and a "
        "decode pool (docs/disaggregation.md), sized at each period's demand, on one GPU type or the cheapest pair of "
        "types; `any`: the fleet MILP chooses pools or replicas, whichever makes the fleet cheaper. Pools share the "
        "fleet's GPUs, inventory and budget; `topologies` and each period's `pools` say what was chosen. Needs a TTFT "
        "target; an E2E target sizes the decode pool, constraints.min_replicas floors each pool and constraints.n_plus_one "
        "gives each pool a spare replica in every period with demand (`spare_replicas`).",
    )

    prefix_reuse: PrefixReuseSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description=PREFIX_REUSE_DESCRIPTION + " A fleet offers the cache sizes as more candidates beside those without "
        'a cache (docs/prefix-caching.md "Fleet plans"); `levers` and each row\'s `prefix_caching` say what runs.',
    )  # not written back when absent: stored requests stay as they were
    task: Task | None = Field(
        default=None, exclude_if=lambda v: v is None, description=TASK_DESCRIPTION, examples=["code"]
    )  # not written back when absent: stored requests stay as they were
    speculative: Literal["auto", "off", "on"] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="This workload's speculative decoding, as a plan's constraints.speculative: `auto` offers each "
        "configuration with and without a draft head, `on` only with one, `off` none. Absent: constraints.speculative.",
    )  # not written back when absent: stored requests stay as they were
    draft_model: Slug | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="A catalog model to draft with instead of the model's draft head, as POST /v1/plans' "
        "constraints.pin.draft_model (same vocabulary as the model, fewer parameters; an unknown slug is a 404, one that "
        "cannot draft a 422): each verify step adds its k forward passes on the same GPUs, and its weights and KV cache "
        "come out of the replica's memory. Needs speculative auto or on (this workload's, else constraints.speculative); "
        "without acceptance_rate the α of the published (target, draft) pair nearest in size ratio is assumed "
        "(docs/speculative-decoding.md).",
        examples=["llama-3.1-8b"],
    )  # not written back when absent: stored requests stay as they were
    acceptance_rate: float | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        gt=0,
        lt=1,
        description="The draft's per-token acceptance rate α measured on this traffic, as POST /v1/plans' "
        "constraints.pin.acceptance_rate: used instead of the method's (or the draft pair's) default. Needs speculative "
        "auto or on.",
    )  # not written back when absent: stored requests stay as they were

    @model_validator(mode="after")
    def _one_traffic_shape(self) -> Self:
        if self.classes is not None:
            # arrival_cv has a default that a stored request writes back: only another value is the workload's own
            given = [
                name
                for name in SHAPE_FIELDS
                if name in self.model_fields_set and (name != "arrival_cv" or self.arrival_cv != DEFAULT_ARRIVAL_CV)
            ]
            if given:
                raise ValueError(
                    f"workload {self.name}: gives classes and {', '.join(given)}: a workload has either one traffic shape "
                    "(prompt_tokens, output_tokens, slo, demand_rps) or classes, each with its own; levers (prefix_reuse, "
                    "task, speculative) are not planned for classes"
                )
            if self.topology != "aggregated":
                raise ValueError(
                    f"workload {self.name}: classes are arranged on aggregated pools only (as POST /v1/plans' classes): "
                    "leave out topology or set it to aggregated"
                )
            names = [k.name for k in self.classes]
            if len(set(names)) != len(names):
                raise ValueError(f"workload {self.name}: class names must be unique")
            return self
        missing = [name for name in ("prompt_tokens", "output_tokens", "slo", "demand_rps") if getattr(self, name) is None]
        if missing:
            raise ValueError(f"workload {self.name}: needs {', '.join(missing)} (or classes instead)")
        return self

    @model_validator(mode="after")
    def _pools_take_no_levers(self) -> Self:
        if self.topology == "disaggregated" and self.prefix_reuse is not None:
            raise ValueError(f"workload {self.name}: {POOLS_REFUSE_PREFIX_REUSE}")
        if self.topology == "disaggregated" and (self.draft_model is not None or self.acceptance_rate is not None):
            raise ValueError(
                f"workload {self.name}: topology disaggregated with a draft_model or acceptance_rate: separate pools do not "
                "speculate (planner/plan_disagg.py pool_refusals); use topology aggregated or any (the draft is offered "
                "to the aggregated replicas)"
            )
        if self.topology == "disaggregated" and self.speculative == "on":
            raise ValueError(
                f"workload {self.name}: topology disaggregated with speculative on: the decode pool's step model has no "
                "draft head (planner/plan_disagg.py pool_refusals); use auto, off, or topology aggregated or any"
            )
        return self

    @model_validator(mode="after")
    def _pools_split_a_ttft_target(self) -> Self:
        if self.topology != "aggregated" and self.slo is not None and self.slo.ttft_ms is None:
            raise ValueError(f"workload {self.name}: topology {self.topology} needs slo.ttft_ms (the pools split it)")
        return self

    def given_periods(self) -> int | None:
        """The periods this workload gives: its demand_rps's, or its first class profile's; None for flat classes."""
        if self.demand_rps is not None:
            return len(self.demand_rps)
        return next((len(k.demand_rps) for k in self.classes or () if k.demand_rps is not None), None)

    def day_demand(self, periods: int) -> list[float]:
        """The workload's demand in each of `periods` periods: its demand_rps, or the sum of its classes' rates."""
        if self.demand_rps is not None:
            return list(self.demand_rps)
        return list(class_demand_rps([k.to_class() for k in self.classes or ()], periods))

    def shape_slo(self) -> PlanSlo:
        """The workload's own SLO (a workload without classes has one)."""
        if self.slo is None:
            raise ValueError(f"workload {self.name} has classes, not one SLO")
        return self.slo

    def to_workload(self) -> Workload:
        """The request mix at a unit rate (per-replica rates do not depend on demand); for a workload with
        classes, their merged mix (planner/traffic_classes.py)."""
        if self.prompt_tokens is None or self.output_tokens is None:
            return merged_workload([k.to_class() for k in self.classes or ()]).at_rate(1.0)
        return Workload(
            arrival_rate_rps=1.0,
            prompt_tokens=length_distribution(self.prompt_tokens),
            output_tokens=length_distribution(self.output_tokens),
            arrival_cv=self.arrival_cv,
            prefix_reuse=None if self.prefix_reuse is None else self.prefix_reuse.to_prefix_reuse(),
            task=self.task,
        )


class SpotSpec(_Input):
    """Spot GPUs of one type: on-demand price × (1 − discount), at most `max_gpus` per period."""

    discount: float = Field(ge=0, lt=1, description="Fraction off the on-demand price.", examples=[0.6])
    max_gpus: int = Field(ge=0, le=1_000_000, description="Most spot GPUs of this type available in any period.")


class FleetConstraintsSpec(_Input):
    """What the plan may use and must guarantee."""

    gpus: list[Slug] | None = Field(
        default=None,
        min_length=1,
        description="GPU types allowed (catalog slugs); default every catalog GPU with an on-demand price (and the named "
        "efficiency profile).",
        examples=[["h100-sxm", "l40s"]],
    )
    precisions: list[PlanPrecision] | None = Field(
        default=None,
        min_length=1,
        description="(weights, KV cache) formats allowed; default bf16/bf16 and fp8/fp8, as /v1/plans.",
    )
    min_replicas: int = Field(default=1, ge=0, le=10_000, description="Fewest replicas per workload in every period.")
    n_plus_one: bool = Field(default=False, description="Demand still met in every period with any one replica lost.")
    budget_usd_per_day: float | None = Field(
        default=None, gt=0, le=1e9, description="Most the fleet may cost per 24 h (the horizon's cost × 24 h / horizon)."
    )
    min_confidence: Literal[GRADES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="Leave out GPUs whose calibration is graded below this (low < medium < high); `notes` names them.",
    )
    speculative: Literal["auto", "off", "on"] = Field(
        default="off",
        description="Speculative decoding for every workload that does not set its own `speculative`: `auto` offers each "
        "configuration with and without the model's draft head (a published one, at each searched draft length), `on` "
        "only with it, `off` (the default) none; the MILP takes whichever is cheapest (docs/speculative-decoding.md "
        '"Fleet plans"). `levers` and each row\'s `speculative` say what runs.',
    )


#: A fleet plan's default batch/chunk grid: the one its size bounds (MAX_SHAPE_OPTIONS) and
#: docs/fleet-benchmark.md were measured on. Single plans search further (planner/candidates.py:
#: batch limits to 4,096, chunk budgets to 16,384); a fleet request may pass those within its bounds.
FLEET_BATCH_LIMITS: tuple[int, ...] = tuple(b for b in BATCH_LIMITS if b <= 256)
FLEET_CHUNK_BUDGETS: tuple[int | None, ...] = tuple(c for c in CHUNK_BUDGETS if c is None or c <= 8192)


class SearchGrid(_Input):
    """The configuration grid searched per workload (defaults: docs/design.md's)."""

    tp_degrees: list[Annotated[int, Field(ge=1, le=64)]] = Field(default=list(TP_DEGREES), min_length=1, max_length=8)
    batch_limits: list[Annotated[int, Field(ge=1, le=65_536)]] = Field(
        default=list(FLEET_BATCH_LIMITS), min_length=1, max_length=16
    )
    chunk_budgets: list[Annotated[int, Field(ge=2, le=10_000_000)] | None] = Field(
        default=list(FLEET_CHUNK_BUDGETS),
        min_length=1,
        max_length=8,
        description="Chunked-prefill budgets in tokens; null = no chunking.",
    )

    def to_grid(self) -> CandidateGrid:
        return CandidateGrid(
            tp_degrees=tuple(self.tp_degrees), batch_limits=tuple(self.batch_limits), chunk_budgets=tuple(self.chunk_budgets)
        )


class FleetPlanRequest(_Input):
    """Workloads with a demand per period; what GPUs cost and how many exist; the constraints."""

    workloads: list[FleetWorkloadSpec] = Field(min_length=1, max_length=MAX_WORKLOADS)
    period_hours: float = Field(default=1.0, gt=0, le=8_760, description="Length of each period in hours.")
    inventory: dict[Slug, int | list[Annotated[int, Field(ge=0, le=10_000_000)]]] = Field(
        default_factory=dict,
        description="Most GPUs of a type held in any period (reserved + on-demand + spot): one count for every period, "
        "or one count per period. Types not listed are unlimited.",
        examples=[{"h100-sxm": 16, "l40s": [8, 8, 4, 4]}],
    )
    provider: Slug | None = Field(
        default=None,
        description="Whose prices to plan with (GET /v1/prices lists them); default the service's default provider. "
        "GPU types this provider does not price are left out (`notes` says which), never priced from another.",
        examples=["runpod"],
    )
    prices: dict[Slug, PriceOverride] = Field(
        default_factory=dict,
        description="Per GPU type, USD per GPU-hour replacing the provider's prices (reserved_1y is the reserved price "
        "paid in every period).",
    )
    spot: dict[Slug, SpotSpec] = Field(default_factory=dict, description="Spot offers per GPU type.")
    constraints: FleetConstraintsSpec = Field(default_factory=FleetConstraintsSpec)
    share_pools: bool = Field(
        default=False,
        description="Let workloads of the same model share replicas. Not modelled in this version: each workload runs "
        "its own replicas, and the response's `notes` say so.",
    )
    include_candidates: bool = Field(default=False, description="Return each workload's candidate table.")
    efficiency_profile: str = Field(
        default="calibrated",
        min_length=1,
        max_length=64,
        description="GPU efficiencies: `calibrated`, `ideal`, or a stored profile name (per GPU).",
    )
    engine: OneEngineSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serving engine to plan on, optionally naming its release generation (`vllm@0.11`; `trt-llm@all`: "
        "pooled over releases; bare: each GPU's newest generation with a profile of its own): each GPU at its per (GPU, "
        "engine, generation) efficiency profile and low-precision factors, or the documented fallback (docs/engines.md; "
        "the answer's `engine` says which); GPUs the engine does not run on are left out. A generation no profile of "
        "the engine has is a 422 naming the known ones. One engine (a list to choose from is POST /v1/plans'); omitted: "
        "the engine-agnostic calibration.",
    )
    search: SearchGrid = Field(default_factory=SearchGrid)
    solver_time_limit_s: float = Field(
        default=10.0,
        gt=0,
        le=MAX_SOLVER_TIME_LIMIT_S,
        description="MILP time limit in s; the service's own limit (HEADROOM_SOLVER_TIME_LIMIT_S) and the time the "
        "request has left before its timeout (HEADROOM_REQUEST_TIMEOUT_S) bound it further.",
    )

    @property
    def periods(self) -> int:
        """The first period count a workload gives (1 when every workload is classes without a profile)."""
        return next((n for w in self.workloads if (n := w.given_periods()) is not None), 1)

    def field_errors(self) -> list[dict[str, Any]]:
        """Cross-field problems as pydantic-style errors (loc into the body), empty when none."""
        errors: list[dict[str, Any]] = []
        periods = self.periods
        seen: set[str] = set()
        first = next((w.name for w in self.workloads if w.given_periods() is not None), self.workloads[0].name)
        for index, workload in enumerate(self.workloads):
            if workload.demand_rps is not None and len(workload.demand_rps) != periods:
                errors.append(
                    _error(
                        ("workloads", index, "demand_rps"),
                        f"gives {len(workload.demand_rps)} periods but workload {first!r} "
                        f"gives {periods}: every workload needs the same number",
                    )
                )
            if workload.topology == "disaggregated" and workload.speculative is None and self.constraints.speculative == "on":
                errors.append(
                    _error(
                        ("workloads", index, "topology"),
                        "is disaggregated but constraints.speculative is on: the decode pool's step model has no draft "
                        "head; give this workload speculative auto or off, or another topology",
                    )
                )
            mode = self.constraints.speculative if workload.speculative is None else workload.speculative
            for pinned in ("draft_model", "acceptance_rate"):
                if mode == "off" and getattr(workload, pinned) is not None:
                    errors.append(
                        _error(
                            ("workloads", index, pinned),
                            "needs speculative auto or on (the workload's speculative, else constraints.speculative, "
                            "is off and never speculates)",
                        )
                    )
            for k_index, k in enumerate(workload.classes or ()):
                if k.demand_rps is not None and len(k.demand_rps) != periods:
                    errors.append(
                        _error(
                            ("workloads", index, "classes", k_index, "demand_rps"),
                            f"gives {len(k.demand_rps)} periods but the plan has {periods} (workload {first!r}): "
                            "a class profile gives one rate per period of the plan",
                        )
                    )
            if workload.name in seen:
                errors.append(_error(("workloads", index, "name"), f"duplicate workload name {workload.name!r}"))
            seen.add(workload.name)
        for gpu, counts in self.inventory.items():
            if isinstance(counts, list) and len(counts) != periods:
                errors.append(
                    _error(("inventory", gpu), f"gives {len(counts)} per-period counts but the plan has {periods} periods")
                )
            elif isinstance(counts, int) and not 0 <= counts <= 10_000_000:
                errors.append(_error(("inventory", gpu), "must be a whole number of GPUs in [0, 10000000]"))
        errors.extend(self.size_errors())
        return errors

    def _shape_key(self, w: FleetWorkloadSpec) -> tuple[object, ...]:
        speculative = self.constraints.speculative if w.speculative is None else w.speculative
        return (
            w.model,
            repr(w.prompt_tokens),
            repr(w.output_tokens),
            w.arrival_cv,
            repr(w.slo),
            repr(w.prefix_reuse),
            w.task,
            speculative,
            w.draft_model,
            w.acceptance_rate,
        )

    def distinct_shapes(self) -> int:
        """Workloads that need a candidate table of their own: distinct (model, mix, CV, SLO, levers); a workload
        with classes needs none (its classes' pools are planned per period: planner/fleet_classes.py)."""
        return len({self._shape_key(w) for w in self.workloads if w.classes is None})

    def lever_tables(self) -> int:
        """Tables searched over the distinct shapes, each shape's lever variants counted (planner/fleet_levers.py):
        (1 + its cache variants) × (1 + draft lengths under auto, the draft lengths alone under on)."""
        factors: dict[tuple[object, ...], int] = {}
        for w in self.workloads:
            if w.classes is not None:
                continue
            speculative = self.constraints.speculative if w.speculative is None else w.speculative
            caches = 1 if w.prefix_reuse is None else 1 + (1 if w.prefix_reuse.hit_rate is not None else len(CACHE_FRACTIONS))
            drafts = {"off": 1, "auto": 1 + len(SEARCH_DRAFT_TOKENS), "on": len(SEARCH_DRAFT_TOKENS)}[speculative]
            factors[self._shape_key(w)] = caches * drafts
        return sum(factors.values())

    def size_errors(self) -> list[dict[str, Any]]:
        """The size bounds (MAX_WORKLOAD_PERIODS, MAX_DISTINCT_SHAPES, MAX_SHAPE_OPTIONS), each
        error naming the bound it breaks."""
        errors: list[dict[str, Any]] = []
        workload_periods = len(self.workloads) * self.periods
        if workload_periods > MAX_WORKLOAD_PERIODS:
            errors.append(
                _error(
                    ("workloads",),
                    f"{len(self.workloads)} workloads × {self.periods} periods = {workload_periods} "
                    f"workload-periods, more than the bound of {MAX_WORKLOAD_PERIODS} (MAX_WORKLOAD_PERIODS): "
                    "plan fewer workloads or periods per request",
                )
            )
        shapes = self.distinct_shapes()
        if shapes > MAX_DISTINCT_SHAPES:
            errors.append(
                _error(
                    ("workloads",),
                    f"{shapes} distinct workload shapes (model, request mix, arrival_cv, slo), more "
                    f"than the bound of {MAX_DISTINCT_SHAPES} (MAX_DISTINCT_SHAPES): each needs a candidate "
                    "table of its own; split the plan",
                )
            )
        grid = len(self.search.tp_degrees) * len(self.search.batch_limits) * len(self.search.chunk_budgets)
        tables = self.lever_tables()
        if shapes <= MAX_DISTINCT_SHAPES and tables * grid > MAX_SHAPE_OPTIONS:
            levers = "" if tables == shapes else f" ({tables} with their prefix-cache and draft variants)"
            errors.append(
                _error(
                    ("search",),
                    f"{shapes} distinct shapes{levers} × {grid} grid points (tp × batch × chunk) = "
                    f"{tables * grid} configurations to search, more than the bound of {MAX_SHAPE_OPTIONS} "
                    "(MAX_SHAPE_OPTIONS): narrow the search grid or plan fewer shapes",
                )
            )
        return errors


def _error(loc: tuple[str | int, ...], message: str) -> dict[str, Any]:
    return {"loc": ("body", *loc), "msg": message, "type": "value_error", "input": None}


# --- the response -------------------------------------------------------------------------------


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


# --- CSV ----------------------------------------------------------------------------------------

#: The CSV schedule's columns, in order; units in the names. Stable: spreadsheets refer to them.
CSV_COLUMNS: tuple[str, ...] = (
    "period",
    "start_hour",
    "workload",
    "gpu",
    "tp",
    "weights_precision",
    "kv_cache_precision",
    "batch_limit",
    "chunk_tokens",
    "replicas",
    "gpus",
    "gpus_reserved",
    "gpus_on_demand",
    "gpus_spot",
    "demand_rps",
    "offered_rps",
    "capacity_rps",
    "target_rho",
    "cost_usd",
    "cost_usd_per_hour",
    "cost_usd_per_month",
    "currency",
    "calibration_grade",
    "warning",
    "pool_role",
    "class_name",
    "prefix_cache_hit_rate",
    "prefix_cache_tokens",
    "speculative_method",
    "speculative_draft_tokens",
    "prefix_cache_routing",
    "speculative_tokens_per_step",
    "speculative_acceptance_rate",
    "pp",
    "ep",
)

CSV_MEDIA_TYPE = "text/csv"

CSV_DESCRIPTION = (
    "The schedule, one row per period, workload and configuration (a workload that mixes configurations "
    "in a period has one row per configuration). Columns: " + ", ".join(CSV_COLUMNS) + ". Within a period and "
    "GPU type, rows take reserved GPUs first, then on-demand, then spot, in row order; `cost_usd` is the row's "
    "GPUs at that period's mean price per GPU held (as `cost.per_workload_usd`), so idle reserved GPUs are in "
    "no row; `cost_usd_per_hour` is that cost over the period's hours and `cost_usd_per_month` the same rate over "
    "730 h; `currency` is USD; `calibration_grade` is the row's GPU's calibration grade and `warning` the plan's "
    "warning about it, if any; `pool_role` is `mixed` for replicas that prefill and decode, `prefill` or `decode` for a "
    "workload served by separate pools (one row per pool and period, after the period's replica rows: `demand_rps` "
    "and `offered_rps` are the workload's whole demand, which both pools carry, `capacity_rps` is empty and "
    "`target_rho` is the pool's ρ; as the plan CSV's `pool_role`); `class_name` is the traffic class a class pool's row "
    "serves (empty for a plain workload): a workload with classes has one row per class and period after the period's "
    "other rows, on its arrangement's pool (`demand_rps` and `offered_rps` the class's rate, `target_rho` the pool's "
    "utilisation); a shared pool's replicas, GPUs and cost are on its first class's row, its other classes' rows "
    "carry 0; `prefix_cache_hit_rate`, `prefix_cache_tokens`, `speculative_method`, "
    "`speculative_draft_tokens`, `prefix_cache_routing`, `speculative_tokens_per_step` and `speculative_acceptance_rate` "
    "are the row's levers as the plan CSV's (empty without); `pp` and `ep` are the row's pipeline stages and "
    "expert-parallel degree, as the plan CSV's (a replica is tp × pp GPUs: `gpus` = replicas × tp × pp). Numbers are "
    "rounded as the JSON is (cents, 6 significant figures)."
)


def schedule_csv(plan: FleetPlanResponse) -> str:
    """The plan's schedule as CSV text with `CSV_COLUMNS` as the header."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")  # RFC 4180
    writer.writerow(CSV_COLUMNS)
    warnings = {w.gpu: w.message for w in plan.warnings}
    for period in plan.periods:
        left = {
            gpu: [plan.reserved_gpus.get(gpu, 0), period.on_demand_gpus.get(gpu, 0), period.spot_gpus.get(gpu, 0)]
            for gpu in period.gpus_held
        }
        for row in period.workloads:
            cells = _csv_cells(
                plan,
                period,
                left,
                name=row.name,
                gpu=row.gpu,
                tp=row.tp,
                precision=row.precision,
                batch_limit=row.batch_limit,
                chunk_tokens=row.chunk_tokens,
                replicas=row.replicas,
                gpus=row.gpus,
                rates=(row.demand_rps, row.offered_rps, row.capacity_rps, row.target_rho),
                grade=row.calibration_grade,
                warning=warnings.get(row.gpu),
                role="mixed",
                extra=_lever_cells(row),
                layout=(row.pp, row.ep),
            )
            writer.writerow(
                ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
            )
        for pair in period.pools:
            for pool in (pair.prefill, pair.decode):
                cells = _csv_cells(
                    plan,
                    period,
                    left,
                    name=pair.name,
                    gpu=pool.gpu,
                    tp=pool.tp,
                    precision=pool.precision,
                    batch_limit=pool.batch_limit,
                    chunk_tokens=pool.chunk_tokens,
                    replicas=pool.replicas,
                    gpus=pool.gpus,
                    rates=(pair.demand_rps, pair.demand_rps, None, pool.rho),  # both pools carry the whole demand
                    grade=pool.calibration_grade,
                    warning=warnings.get(pool.gpu),
                    role=pool.role,
                    layout=(pool.pp, 1),
                )
                writer.writerow(
                    ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
                )
        for arranged in period.class_pools:
            for class_pool in arranged.pools:
                for index, k in enumerate(c for c in arranged.classes if c.name in class_pool.classes):
                    first = index == 0  # a shared pool's GPUs, replicas and cost are on its first class's row
                    cells = _csv_cells(
                        plan,
                        period,
                        left if first else {},
                        name=arranged.name,
                        gpu=class_pool.gpu,
                        tp=class_pool.tp,
                        precision=class_pool.precision,
                        batch_limit=class_pool.batch_limit,
                        chunk_tokens=class_pool.chunk_tokens,
                        replicas=class_pool.replicas if first else 0,
                        gpus=class_pool.gpus if first else 0,
                        rates=(k.demand_rps, k.demand_rps, None, class_pool.utilisation),
                        grade=class_pool.calibration_grade,
                        warning=warnings.get(class_pool.gpu),
                        role="mixed",
                        extra=(k.name, *(None,) * 7),
                        layout=(class_pool.pp, class_pool.ep),
                    )
                    writer.writerow(
                        ["" if cell is None else rounded(cell, column) for cell, column in zip(cells, CSV_COLUMNS, strict=True)]
                    )
    return out.getvalue()


def _csv_cells(
    plan: FleetPlanResponse,
    period: PeriodRead,
    left: dict[str, list[int]],
    *,
    name: str,
    gpu: str,
    tp: int,
    precision: PrecisionRead,
    batch_limit: int | None,
    chunk_tokens: int | None,
    replicas: int,
    gpus: int,
    rates: tuple[float, float, float | None, float],
    grade: str | None,
    warning: str | None,
    role: str,
    extra: tuple[Any, ...] = (None,) * 8,
    layout: tuple[int, int] = (1, 1),
) -> tuple[Any, ...]:
    """One CSV row in `CSV_COLUMNS` order: its GPUs taken from what is `left` of the period's reserved, on-demand and
    spot GPUs of its type, in that order (`left` is updated); `rates` = (demand, offered, capacity, target ρ);
    `layout` = (pp, ep)."""
    bought = left.setdefault(gpu, [0, 0, 0])
    taken = []
    need = gpus
    for index in range(3):
        take = min(need, bought[index])
        bought[index] -= take
        need -= take
        taken.append(take)
    held = period.gpus_held.get(gpu, 0)
    period_gpu_usd = _period_gpu_cost(plan, period, gpu)
    demand, offered, capacity, rho = rates
    row_usd = gpus * period_gpu_usd / held if held else 0.0  # the row's share of the period's GPUs of its type
    return (
        period.period,
        _number(period.start_hour),
        name,
        gpu,
        tp,
        precision.weights,
        precision.kv_cache,
        batch_limit,
        "" if chunk_tokens is None else chunk_tokens,
        replicas,
        gpus,
        *taken,
        _number(demand),
        _number(offered),
        None if capacity is None else _number(capacity),
        _number(rho),
        _number(row_usd),
        _number(row_usd / plan.period_hours),
        _number(row_usd / plan.period_hours * HOURS_PER_MONTH),
        CURRENCY,
        grade,
        warning,
        role,
        *extra,
        *layout,
    )


def _lever_cells(row: AssignmentRead, class_name: str | None = None) -> tuple[Any, ...]:
    """`class_name` and the lever columns of a replica row."""
    prefix, draft = row.prefix_caching, row.speculative
    return (
        class_name,
        None if prefix is None else prefix.hit_rate,
        None if prefix is None else prefix.cache_tokens,
        None if draft is None else draft.method,
        None if draft is None else draft.draft_tokens,
        None if prefix is None else prefix.routing,
        None if draft is None else draft.tokens_per_step,
        None if draft is None else draft.acceptance_rate,
    )


def _period_gpu_cost(plan: FleetPlanResponse, period: PeriodRead, gpu: str) -> float:
    """USD of every GPU of type `gpu` held in `period`: reserved at the reserved price, the rest at theirs."""
    rates = _gpu_prices(plan)
    hours = plan.period_hours
    price = rates.get(gpu, {"reserved": 0.0, "on_demand": 0.0, "spot": 0.0})
    return hours * (
        plan.reserved_gpus.get(gpu, 0) * price["reserved"]
        + period.on_demand_gpus.get(gpu, 0) * price["on_demand"]
        + period.spot_gpus.get(gpu, 0) * price["spot"]
    )


def _gpu_prices(plan: FleetPlanResponse) -> dict[str, dict[str, float]]:
    return {
        gpu: {"reserved": p.reserved_usd_per_hour, "on_demand": p.on_demand_usd_per_hour, "spot": p.spot_usd_per_hour or 0.0}
        for gpu, p in plan.prices.items()
    }


def _number(value: float) -> float:
    """A computed figure; rounded by its column's unit when written (api/rounding.py)."""
    return value
