"""Body of `POST /v1/fleet-plans`: many workloads over a day (or
any number) of periods, on reserved, on-demand and spot GPUs within inventory.

Units are in the field names: rates in requests per second, prices in USD per GPU-hour, costs in
USD, latencies in ms (TTFT, TPOT) or s (E2E). Cross-field checks (every workload giving the same
number of periods, unique names, per-period inventory lists of that length) are made by
`FleetPlanRequest.field_errors()`, so a bad body is one 422 listing every bad field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Slug
from api.schemas.classes import MAX_CLASSES, TrafficClassSpec
from api.schemas.plans import OneEngineSpec, PlanPrecision, PlanSlo
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
