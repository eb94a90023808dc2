"""Headroom's main job: the cheapest plan that meets the p99 SLOs, with the numbers that justify it.

`plan_capacity(request, inputs)` enumerates candidates (planner/candidates.py), drops what cannot
hold the model or meet an SLO at any load, searches for the cheapest with the queueing model and
the simulator in the loop (a winner the simulator finds missing its SLOs has that rate recorded as
missed and the search runs again), lets the MILP (`planner.optimizer.solve_plan`) prove the integer
optimum and report the constraints' slacks, and explains the plan returned (planner/plan_result.py
records). An impossible request's relaxations are found by re-planning (planner/advice.py).

The work is split by responsibility:

- planner/plan_predict.py — the queueing model's and the simulator's answers, cached across requests;
- planner/plan_search.py — the branch and bound over candidates and the per-request `Planner` state;
- planner/plan_verify.py — the simulator in the search's loop and the plan's verification record;
- planner/plan_rows.py — the plan's rows and the MILP's candidates, built from options;
- planner/plan_explain.py — the justification: model sections and the re-planned ones.

This module keeps the public surface (the request, inputs and result, `plan_capacity`, the
constants other modules import) and `_plan`, which runs those steps in order: `stage_plan` up to the
verified rows, `finish_plan` the pricing and the explanation (planner/plan_prefix.py stages its trials
and finishes only the plan it deploys).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from planner.candidates import (
    BATCH_LIMITS,
    CHUNK_BUDGETS,
    TP_DEGREES,
    Drop,
    Group,
    Option,
    enumerate_all_options,
    enumerate_groups,
    packed_groups,
)
from planner.errors import (
    InfeasiblePlanError,
    PlannerInputError,
    UnsupportedConfigurationError,
)
from planner.optimizer import PlanConstraints, PlanSolution, solve_plan
from planner.packing import InstanceUse
from planner.pins import apply_pins
from planner.pipeline import PP_DEGREES, ParallelSection, replica_parallel_section
from planner.plan_explain import (
    SATURATION_BINDS,
    SLO_RELAXATION,
    TRAFFIC_FACTORS,
    _alternatives_section,
    _binding_section,
    _Context,
    _memory_section,
    _predicted_section,
    _queueing_section,
    _rho_curve,
    _roofline_section,
    _sensitivity_section,
    _step_model_section,
)
from planner.plan_predict import cached_prediction, option_prediction, option_serving, predicted_at
from planner.plan_result import (
    Adjustment,
    CandidatesSection,
    Justification,
    Predicted,
    PrefixCaching,
    Provenance,
    QueueingSection,
    SpeculativeChoice,
    SpeculativeSection,
    Verification,
    as_dict,
)
from planner.plan_rows import FleetRow, _candidate, _row, candidate_id_of
from planner.plan_search import CURVE_UTILISATIONS, MAX_EVALUATIONS, Planner, SinglePlan, _Outcome, single_plan
from planner.plan_speculative import (
    cheapest_without,
    latency_choice,
    search_groups,
    speculative_choice,
    speculative_section,
)
from planner.plan_verify import (
    MAX_VERIFY_ROUNDS,
    _Fleet,
    _single_report,
    _verification_record,
    _Verified,
    _verified_mixed,
    _verified_search,
)
from planner.queueing import Prediction
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec, Precision
from planner.units import GB, HOURS_PER_MONTH, MS_PER_S, SECONDS_PER_HOUR
from planner.workload import Slo, Workload

#: Simulated requests per verification: 4,000 (3,600 after the 10 % warm-up) put 36 requests beyond
#: a p99 — the simulator's own batch-means CI rests on 200 requests per block — while one simulation
#: of one replica stays within a few hundred milliseconds (docs/plan-benchmark.md).
VERIFY_REQUESTS = 4_000
#: The capacity answer's verification (planner/capacity.py): at most this many steps down from the
#: rate found, each dividing it by VERIFY_CAPACITY_STEP, before it gives the rate up as unverifiable.
MAX_VERIFY_ADJUSTMENTS = 4
VERIFY_CAPACITY_STEP = 1.10


# --- request and inputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningInputs:
    """What the API gathered from the catalog: specs with prices and the chosen efficiencies."""

    model: ModelSpec
    gpus: tuple[GpuSpec, ...]
    precisions: tuple[Precision, ...]
    efficiency_profile: str = "calibrated"
    catalog_version: int = 0
    #: The catalog's GPU types and precisions the request did not allow: an impossible request's
    #: advice tries adding each (planner/advice.py); empty when the request allowed everything.
    other_gpus: tuple[GpuSpec, ...] = ()
    other_precisions: tuple[Precision, ...] = ()
    #: The provider's instance types, for plans in whole instances (`PlanConstraints.unit` "instance").
    instance_types: tuple[InstanceTypeSpec, ...] = ()
    #: Draft methods with a published head for the model (the service's deploy table); speculation is
    #: offered only with those (and MTP where the model ships it). None: every head the planner can cost.
    draft_methods: frozenset[str] | None = None
    #: The catalog model `constraints.pin.draft_model` names, drafting instead of a head; None: a head.
    draft_model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if not self.gpus:
            raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
        if not self.precisions:
            raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningRequest:
    """The workload, its SLOs and the limits on the plan, plus the search grids."""

    workload: Workload
    slo: Slo
    constraints: PlanConstraints = field(default_factory=PlanConstraints)
    verify: bool = True
    verify_requests: int = VERIFY_REQUESTS
    seed: int = 0
    tp_degrees: tuple[int, ...] = TP_DEGREES
    #: Pipeline stages searched where no in-node replica holds the model (planner/candidates.py enumerate_groups).
    pp_degrees: tuple[int, ...] = PP_DEGREES
    #: Expert-parallel degrees kept (a pinned ep, planner/pins.py); None offers ep 1 and ep = tp to an MoE model.
    ep_degrees: tuple[int, ...] | None = None
    batch_limits: tuple[int, ...] = BATCH_LIMITS
    chunk_budgets: tuple[int | None, ...] = CHUNK_BUDGETS
    solver_time_limit_s: float = 10.0
    #: KV tokens each replica sets aside for a prefix cache (planner/plan_prefix.py's trials); its
    #: sequences have that much less. 0: no cache (today's plans).
    prefix_cache_tokens: int = 0
    #: Only plans strictly cheaper than this count (planner/plan_prefix.py's trials: a cache size that
    #: cannot undercut the plan without a cache is not searched to the end); none is an InfeasiblePlanError.
    below_usd_per_hour: float = math.inf
    #: On an infeasible request, re-plan to find the relaxations that work (planner/advice.py).
    advise: bool = True
    #: Build the justification's re-planned sections (binding's relaxations, alternatives,
    #: sensitivity); the advice's trial plans need only feasibility and cost.
    explain: bool = True
    #: Called between the search's steps and the advice's re-plans; raises to stop the work (the
    #: service passes its request deadline's, so a plan its 503 abandoned stops). The planner reads no clock.
    checkpoint: Callable[[], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not (self.workload.arrival_rate_rps > 0 and math.isfinite(self.workload.arrival_rate_rps)):
            raise PlannerInputError(
                f"arrival_rate_rps must be > 0 to plan for, got {self.workload.arrival_rate_rps}",
                constraint="arrival_rate_rps",
            )
        if self.verify_requests < 100:
            raise PlannerInputError(f"verify_requests must be >= 100, got {self.verify_requests}")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    """A plan and its justification; SI units with the unit in every name (the API converts)."""

    rows: tuple[FleetRow, ...]
    replicas: int
    gpus_total: int
    target_rho: float
    cost_usd_per_hour: float
    cost_usd_per_month: float
    cost_usd_per_million_output_tokens: float
    #: None only on the advice's trial plans (`PlanningRequest.explain` False), which need feasibility and cost alone
    predicted: Predicted | None
    justification: Justification | None
    verification: Verification | None
    provenance: Provenance | None
    #: The speculative decoding the plan deploys (planner/plan_speculative.py); None without.
    speculative: SpeculativeChoice | None = None
    #: The prefix cache the plan deploys (planner/plan_prefix.py); None without `workload.prefix_reuse` or when it does not pay.
    prefix_caching: PrefixCaching | None = None

    @property
    def row(self) -> FleetRow:
        """The largest row (the only one in a single-configuration plan)."""
        return max(self.rows, key=lambda r: r.offered_rps)

    @property
    def instances(self) -> tuple[InstanceUse, ...]:
        """Every row's instances (empty unless the plan is in whole instances)."""
        return tuple(use for row in self.rows for use in row.instances)


# --- infeasibility ----------------------------------------------------------------------------------


def _describe(gpu: str, weights: str, kv: str, tp: int | None) -> str:
    precision = weights if weights == kv else f"{weights} weights, {kv} KV"
    return f"{gpu}, {precision}" + ("" if tp is None else f", tp {tp}")


def infeasible_from_drops(
    drops: Sequence[Drop], slo: Slo, slo_predicted: Sequence[tuple[str, float, str]]
) -> InfeasiblePlanError:
    """No candidate survives: name the constraint and the smallest relaxation that would admit one."""
    latency = [
        (d.constraint, d.bound_s, _describe(d.gpu, d.weights_precision, d.kv_precision, d.tp))
        for d in drops
        if d.constraint in ("ttft", "tpot", "e2e") and d.bound_s is not None
    ]
    latency += list(slo_predicted)
    if latency:
        by_metric: dict[str, tuple[float, str]] = {}
        for metric, bound, where in latency:
            if metric not in by_metric or bound < by_metric[metric][0]:
                by_metric[metric] = (bound, where)
        metric, (bound, where) = min(by_metric.items(), key=lambda kv: kv[1][0] / getattr(slo, f"{kv[0]}_s"))
        target = getattr(slo, f"{metric}_s")
        unit, scale = ("s", 1.0) if metric == "e2e" else ("ms", MS_PER_S)
        return InfeasiblePlanError(
            f"{metric}_{unit} {target * scale:.4g} is below the fastest {metric.upper()} any allowed configuration reaches "
            f"even unloaded: {bound * scale:.4g} {unit} on {where}",
            constraint=metric,
            target=target * scale,
            smallest_feasible=bound * scale,
            unit=unit,
            configuration=where,
            alternatives_dropped=len(drops),
        )
    memory = [d for d in drops if d.constraint == "memory"]
    if memory:
        best = max(memory, key=lambda d: (d.available_bytes or 0) / (d.needed_bytes or 1))
        return InfeasiblePlanError(
            f"no allowed configuration can hold the model; the closest is {_describe(best.gpu, best.weights_precision, best.kv_precision, best.tp)}: "
            f"{best.reason}. Allow GPUs with more memory, a lower precision or a higher tp",
            constraint="memory",
            needed_gb=(best.needed_bytes or 0) / GB,
            available_gb=(best.available_bytes or 0) / GB,
            configuration=_describe(best.gpu, best.weights_precision, best.kv_precision, best.tp),
        )
    first = drops[0] if drops else None
    return InfeasiblePlanError(
        "no allowed configuration can serve this model: "
        + (
            "; ".join(sorted({f"{_describe(d.gpu, d.weights_precision, d.kv_precision, d.tp)}: {d.reason}" for d in drops})[:6])
            or "nothing to plan with"
        ),
        constraint=first.constraint if first else "candidates",
    )


# --- the plan ----------------------------------------------------------------------------------------


def plan_capacity(request: PlanningRequest, inputs: PlanningInputs) -> PlanResult:
    """The cheapest verified plan for `request` on `inputs`, with its justification.

    Raises InfeasiblePlanError (the culprit constraints and, with `request.advise`, the smallest
    relaxations that were re-planned and found to work, planner/advice.py) when no plan exists,
    PlannerInputError on malformed input, SolverError when the MILP gives no answer.
    """
    try:
        if request.workload.prefix_reuse is not None:
            from planner.plan_prefix import prefix_plan

            return prefix_plan(request, inputs, stage_plan)
        return _plan(request, inputs)
    except InfeasiblePlanError as error:
        if not request.advise:
            raise
        from planner.advice import advised

        raise advised(error, request, inputs, _plan) from None


def _plan(request: PlanningRequest, inputs: PlanningInputs) -> PlanResult:
    """Enumerate, search with the simulator in the loop, let the MILP prove the optimum, verify the
    rows it chose, then price and explain the plan. Each step's order matters: the search's caches
    (what each option is known to meet or miss) carry from one step to the next."""
    return finish_plan(stage_plan(request, inputs))


@dataclass(frozen=True, slots=True, kw_only=True)
class StagedPlan:
    """A plan searched, solved and verified but not yet priced or explained: `finish_plan` completes
    it into exactly what `_plan` returns. planner/plan_prefix.py stages the plan without a cache and
    reads its cost, replicas and verification moves first: when a cache wins, that plan's
    justification is never built (only its predicted TTFT, `staged_ttft_s`)."""

    request: PlanningRequest
    inputs: PlanningInputs
    planner: Planner | None = None
    space: _Space | None = None
    fleet: _Fleet | None = None
    solve_ms: float = 0.0
    started: float = 0.0
    #: The finished plan when staging already made it (auto speculation refuted in every round: planned again without).
    done: PlanResult | None = None
    #: What the search handed the MILP, kept while the winner's μ is not yet narrowed (`stage_plan(refine=False)`).
    unrefined: _Searched | None = None

    @property
    def cost_usd_per_hour(self) -> float:
        if self.done is not None:
            return self.done.cost_usd_per_hour
        assert self.fleet is not None
        return sum(r.cost_usd_per_hour for r in self.fleet.rows)

    @property
    def replicas(self) -> int:
        """The largest row's replicas (`PlanResult.row.replicas`: a same-cost speculating variant keeps them)."""
        if self.done is not None:
            return self.done.row.replicas
        assert self.fleet is not None
        return max(self.fleet.rows, key=lambda r: r.offered_rps).replicas

    @property
    def row(self) -> FleetRow:
        """The largest row as verification left it (the finished plan's `row` but for its `max_rps_at_slo`)."""
        if self.done is not None:
            return self.done.row
        assert self.fleet is not None
        return max(self.fleet.rows, key=lambda r: r.offered_rps)

    @property
    def total_replicas(self) -> int:
        """Every row's replicas (`PlanResult.replicas`)."""
        if self.done is not None:
            return self.done.replicas
        assert self.fleet is not None
        return sum(r.replicas for r in self.fleet.rows)

    @property
    def adjustments(self) -> tuple[Adjustment, ...]:
        """The moves verification made (`PlanResult.verification.adjustments`; none when nothing was simulated)."""
        if self.done is not None:
            return () if self.done.verification is None else self.done.verification.adjustments
        assert self.fleet is not None
        return () if self.fleet.verification is None else tuple(self.fleet.adjustments)


def stage_plan(
    request: PlanningRequest, inputs: PlanningInputs, *, space: _Space | None = None, refine: bool = True
) -> StagedPlan:
    """`_plan` up to the verified rows (see StagedPlan). `space`: `search_space(request, inputs)` already
    enumerated (planner/plan_prefix.py's re-plans of one trial, which differ only in min_replicas and the
    cost bound, neither of which enters it); the same options, so the same plan. Without `refine` (an
    unverified single-configuration plan whose cost and replicas are all a caller may need) the winner's
    μ is left unnarrowed until `refined_stage`, which makes the very StagedPlan `refine` would have."""
    started = time.perf_counter()
    request, inputs = apply_pins(request, inputs)
    space = _search_space(request, inputs) if space is None else space
    planner = Planner(space.options, request.workload, checkpoint=request.checkpoint)
    try:
        searched = _search(planner, space, request)
    except InfeasiblePlanError as error:
        if request.constraints.speculative != "auto" or error.extensions.get("constraint") != "verification":
            raise
        # the simulator refuted every plan the search proposed with speculation offered (the rounds
        # are few and speculating variants crowd the cheapest plans): auto never answers worse than off
        done = _planned_without(request, inputs, len(error.extensions.get("adjustments", ())))
        return StagedPlan(request=request, inputs=inputs, done=done)
    # the MILP's μ of a single configuration's winner, narrowed now unless deferred (`refined_stage`)
    deferred = searched.verified is not None and not refine and not request.verify
    if searched.verified is not None and not deferred:
        searched = replace(searched, pool=_pool(planner, searched.outcome, request.slo, refine=True))
    fleet, solve_ms = _solved(planner, space, searched, request)
    fleet = _verified_plan(planner, space, searched, fleet, request)
    return StagedPlan(
        request=request,
        inputs=inputs,
        planner=planner,
        space=space,
        fleet=fleet,
        solve_ms=solve_ms,
        started=started,
        unrefined=searched if deferred else None,
    )


def refined_stage(staged: StagedPlan) -> StagedPlan:
    """`staged` as `stage_plan` with `refine` makes it: the winner's μ narrowed (the same predictions in the
    same order, nothing having asked its planner anything since) and the MILP solved on it again."""
    searched = staged.unrefined
    if searched is None:
        return staged
    planner, space = staged.planner, staged.space
    assert planner is not None and space is not None
    searched = replace(searched, pool=_pool(planner, searched.outcome, staged.request.slo, refine=True))
    fleet, solve_ms = _solved(planner, space, searched, staged.request)
    fleet = _verified_plan(planner, space, searched, fleet, staged.request)
    return replace(staged, fleet=fleet, solve_ms=solve_ms, unrefined=None)


def finish_plan(staged: StagedPlan) -> PlanResult:
    """The staged plan priced and, with `request.explain`, explained: what `_plan` returns."""
    if staged.done is not None:
        return staged.done
    request, inputs, planner, space, fleet = staged.request, staged.inputs, staged.planner, staged.space, staged.fleet
    assert planner is not None and space is not None and fleet is not None
    started, solve_ms = staged.started, staged.solve_ms
    if request.constraints.speculative == "off":
        return _result(planner, space, fleet, request, inputs, started=started, solve_ms=solve_ms)
    # speculation was a candidate of the search; at the same cost it may still buy latency (auto)
    chosen = latency_choice(planner, fleet, request) if request.explain else None
    fleet = fleet if chosen is None else chosen.fleet
    result = _result(planner, space, fleet, request, inputs, started=started, solve_ms=solve_ms)
    main_option = space.by_id[candidate_id_of(result.row)]
    result = replace(result, speculative=speculative_choice(main_option, request.workload))
    if result.justification is None or len(result.rows) != 1:
        return result
    without = cheapest_without(planner, request) if result.speculative is not None else None
    section = speculative_section(
        result, main_option, planner, request, inputs, reason=None if chosen is None else chosen.reason, without=without
    )
    return replace(result, justification=replace(result.justification, speculative=section))


def staged_ttft_s(staged: StagedPlan) -> float | None:
    """The finished plan's `predicted.ttft_s.at_percentile` (None unexplained) without building its
    justification: the same speculative variant chosen for latency and the same prediction of its
    largest row at its load that `finish_plan` makes (`_result`'s `_main_prediction`)."""
    if staged.done is not None:
        return None if staged.done.predicted is None else staged.done.predicted.ttft_s.at_percentile
    request, planner, space, fleet = staged.request, staged.planner, staged.space, staged.fleet
    assert planner is not None and space is not None and fleet is not None
    if not request.explain:
        return None
    if request.constraints.speculative != "off":
        chosen = latency_choice(planner, fleet, request)
        fleet = fleet if chosen is None else chosen.fleet
    main = max(fleet.rows, key=lambda r: r.offered_rps)
    main_option = space.by_id[candidate_id_of(main)]
    planner.max_rate(main_option, request.slo, curve=True)  # as `_result` asks it first: the planner's state is the same
    prediction = _main_prediction(planner, main_option, main, request, single=len(fleet.rows) == 1)
    return predicted_at(prediction, "ttft")


def _planned_without(request: PlanningRequest, inputs: PlanningInputs, refuted: int) -> PlanResult:
    """The plan without speculation, saying why auto fell back to it."""
    result = _plan(replace(request, constraints=replace(request.constraints, speculative="off")), inputs)
    if result.justification is None or result.predicted is None:
        return result
    queueing = result.justification.queueing
    section = SpeculativeSection(
        mode="auto",
        context_tokens=request.workload.prompt_tokens.mean + request.workload.output_tokens.mean / 2.0,
        mean_running_sequences=queueing.littles_law.occupancy if isinstance(queueing, QueueingSection) else 0.0,
        tpot_s_without=result.predicted.tpot_s.at_percentile,
        trials=(),
        chosen=None,
        reason=f"the simulator refuted every plan the search proposed with speculation offered ({refuted} tried); "
        "planned again without it",
    )
    return replace(result, justification=replace(result.justification, speculative=section))


@dataclass(frozen=True, slots=True, kw_only=True)
class _Space:
    """What enumeration leaves to search: the (GPU, precision, tp) groups, what was dropped before
    queueing (the infeasibility messages cite it), and every option (group × batch × chunk) by id."""

    groups: Sequence[Group]
    drops: Sequence[Drop]
    options: Sequence[Option]
    by_id: Mapping[str, Option]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Searched:
    """What the search hands the MILP: (option, μ) pairs, why the others failed an SLO, the search
    outcome, and for a single configuration what verification did on the way."""

    outcome: _Outcome
    pool: Sequence[tuple[Option, float]]
    slo_failures: Mapping[str, tuple[str, str, float | None]]
    verified: _Verified | None


def search_space(request: PlanningRequest, inputs: PlanningInputs) -> _Space:
    """The search space `stage_plan` enumerates for `request` (its pins applied first, as there):
    it reads the workload, SLOs, grid, cache reserve and constraints but not min_replicas, the cost
    bound, verify, explain or advise."""
    request, inputs = apply_pins(request, inputs)
    return _search_space(request, inputs)


def _search_space(request: PlanningRequest, inputs: PlanningInputs) -> _Space:
    """Every candidate configuration (packed into whole instances when the plan is in instances);
    raises InfeasiblePlanError when enumeration leaves none."""
    workload, slo, constraints = request.workload, request.slo, request.constraints
    groups, drops = enumerate_groups(
        model=inputs.model,
        gpus=inputs.gpus,
        precisions=inputs.precisions,
        workload=workload,
        slo=slo,
        tp_degrees=request.tp_degrees,
        min_confidence=constraints.min_confidence,
        pp_degrees=request.pp_degrees,
        expert_parallel=True,
        ep_degrees=request.ep_degrees,
    )
    if constraints.unit == "instance":
        if not inputs.instance_types:
            raise PlannerInputError(
                "a plan in whole instances needs the provider's instance types; none were given", constraint="unit"
            )
        groups, unpacked = packed_groups(groups, inputs.instance_types)
        drops = [*drops, *unpacked]
    groups = search_groups(groups, request, inputs)
    if request.prefix_cache_tokens:  # after the draft's variants: a speculating replica's cache sits beside its draft
        groups, short = with_prefix_cache(groups, workload, request.prefix_cache_tokens)
        drops = [*drops, *short]
    options = enumerate_all_options(groups, workload, batch_limits=request.batch_limits, chunk_budgets=request.chunk_budgets)
    if not options:
        raise infeasible_from_drops(drops, slo, ())
    return _Space(groups=groups, drops=drops, options=options, by_id={o.id: o for o in options})


def with_prefix_cache(groups: Sequence[Group], workload: Workload, cache_tokens: int) -> tuple[list[Group], list[Drop]]:
    """Each group with `cache_tokens` of its KV capacity given to the prefix cache; a group left unable
    to hold the p99 prompt and output together is dropped (as enumeration drops one that cannot hold the model's)."""
    kept: list[Group] = []
    dropped: list[Drop] = []
    need = workload.prompt_tokens.quantile(0.99) + workload.output_tokens.quantile(0.99)
    mean = workload.prompt_tokens.mean + workload.output_tokens.mean
    for group in groups:
        capacity = group.kv_capacity_tokens - cache_tokens
        if capacity < need:
            dropped.append(
                Drop(
                    gpu=group.gpu.slug,
                    weights_precision=group.precision.weights.slug,
                    kv_precision=group.precision.kv_cache.slug,
                    tp=group.tp,
                    constraint="kv_cache",
                    reason=f"a prefix cache of {cache_tokens} tokens leaves {capacity} KV tokens, fewer than the p99 request's {need:.0f}",
                )
            )
            continue
        kept.append(replace(group, kv_capacity_tokens=capacity, kv_slots=math.floor(capacity / mean)))
    return kept, dropped


def _search(planner: Planner, space: _Space, request: PlanningRequest) -> _Searched:
    """The candidates the MILP chooses among, with their μ (a single configuration's winner's not yet
    narrowed: `_pool`); raises InfeasiblePlanError when none is left."""
    searched = _search_mixed(planner, request) if request.constraints.mixed_fleet else _search_single(planner, request)
    if not searched.pool:
        raise _no_plan(searched, space, request.slo)
    return searched


def _search_mixed(planner: Planner, request: PlanningRequest) -> _Searched:
    slo, lam = request.slo, request.workload.arrival_rate_rps
    outcome = planner.search(slo, lam, request.constraints, below_usd_per_hour=request.below_usd_per_hour)
    # A mixed fleet costs at most the best single configuration, so a group whose single
    # replica already costs more can hold no row of it: only the others are searched. Under a cost
    # bound with no single configuration below it (a prefix trial), only fleets strictly cheaper than
    # the bound count, so a group whose least fleet already costs the bound is not searched either.
    strictly = outcome.best is None and math.isfinite(request.below_usd_per_hour)
    ceiling = outcome.best.cost_usd_per_hour if outcome.best is not None else request.below_usd_per_hour
    best_groups, mixed_drops = planner.best_per_group(
        slo, ceiling_usd_per_hour=ceiling, arrival_rate_rps=lam, strictly_below=strictly
    )
    pool = [(opt, mu) for opt, mu in best_groups.values()]
    return _Searched(outcome=outcome, pool=pool, slo_failures=mixed_drops, verified=None)


def _search_single(planner: Planner, request: PlanningRequest) -> _Searched:
    """The search's winner is simulated before anything is built on it; a miss moves it (more
    replicas or another configuration) and the search runs again, so the plan, its MILP and every
    section of the justification describe the configuration the simulator agreed with."""
    workload, slo, constraints = request.workload, request.slo, request.constraints
    verified = _verified_search(
        planner, workload, slo, workload.arrival_rate_rps, constraints, request, below_usd_per_hour=request.below_usd_per_hour
    )
    outcome = verified.outcome
    if verified.exhausted:
        raise InfeasiblePlanError(
            f"the simulator finds the SLOs missed at every plan the search proposed ({len(verified.adjustments)} "
            "tried); the SLOs are too close to what these configurations reach at this load",
            constraint="verification",
            adjustments=[as_dict(a) for a in verified.adjustments],
        )
    pool = _pool(planner, outcome, slo, refine=False)
    return _Searched(outcome=outcome, pool=pool, slo_failures=outcome.slo_drops, verified=verified)


def _pool(planner: Planner, outcome: _Outcome, slo: Slo, *, refine: bool) -> list[tuple[Option, float]]:
    """μ for the MILP: the largest per-replica rate verified to meet the SLOs — within 1 % of μ for
    the cheapest candidate (λ/r until `refine`), λ/r for the others (enough to decide their replica
    counts; a larger μ could only make the winner win by more)."""
    best = outcome.best
    best_option = best.option if best is not None else None
    refined = planner.max_rate(best.option, slo, curve=True)[0] if best is not None and refine else None
    return [
        (p.option, refined if refined is not None and p.option is best_option else p.mu_rps)
        for p in outcome.priced
        if best is None or p.option is best.option or p.cost_usd_per_hour > best.cost_usd_per_hour
    ]


def _no_plan(searched: _Searched, space: _Space, slo: Slo) -> InfeasiblePlanError:
    """Why the search left nothing for the MILP: a limit every candidate breaks, else the SLO misses."""
    outcome = searched.outcome
    if outcome.limit_drops and not searched.slo_failures:
        # every candidate breaks a limit at the replicas it needs: the search has proved it, so no
        # second estimate of μ is consulted (one that disagreed could find a "plan" the search refused)
        families = sorted(set(outcome.limit_drops.values()))
        return InfeasiblePlanError(
            f"every allowed configuration breaks {' or '.join(families)} at the replicas the SLOs need",
            constraint=families[0],
            families=families,
        )
    predicted = [
        (c, pred, _describe(*space.by_id[i].group.key))
        for i, (c, _, pred) in searched.slo_failures.items()
        if pred is not None and c in ("ttft", "tpot", "e2e")
    ]
    return infeasible_from_drops(space.drops, slo, predicted)


def _solved(planner: Planner, space: _Space, searched: _Searched, request: PlanningRequest) -> tuple[_Fleet, float]:
    """The MILP's optimum over the pool, as rows, and the milliseconds the solver took."""
    candidates = [_candidate(opt, mu, planner) for opt, mu in searched.pool]
    solve_started = time.perf_counter()
    lam = request.workload.arrival_rate_rps
    solution = solve_plan(candidates, lam, request.constraints, time_limit_s=request.solver_time_limit_s)
    solve_ms = (time.perf_counter() - solve_started) * MS_PER_S
    rows = [
        _row(space.by_id[r.candidate.id], r.replicas, r.candidate.max_rps_at_slo, r.candidate.saturation_rps, r.offered_rps)
        for r in solution.rows
    ]
    return _Fleet(solution=solution, candidates=candidates, rows=rows, outcome=searched.outcome), solve_ms


def _verified_plan(planner: Planner, space: _Space, searched: _Searched, fleet: _Fleet, request: PlanningRequest) -> _Fleet:
    """The rows with the simulator's report: a single configuration was verified during the search;
    a mixed fleet is verified now (and may give way to a single configuration)."""
    if searched.verified is not None:
        return _single_report(planner, space.by_id, searched.verified, fleet, request)
    if request.verify:
        return _verified_mixed(planner, space.by_id, searched.pool, fleet, request)
    return fleet


def _result(
    planner: Planner,
    space: _Space,
    fleet: _Fleet,
    request: PlanningRequest,
    inputs: PlanningInputs,
    *,
    started: float,
    solve_ms: float,
) -> PlanResult:
    """The plan priced and, with `request.explain`, predicted and justified. The calls run in the
    order the justification's figures were first measured in: each re-plan reuses what the
    earlier ones taught the search (and `candidates` counts the predictions they all made)."""
    workload, slo = request.workload, request.slo
    rows = fleet.rows
    main = max(rows, key=lambda r: r.offered_rps)
    main_option = space.by_id[candidate_id_of(main)]
    mu_met, mu_missed = planner.max_rate(main_option, slo, curve=True)
    if len(rows) == 1:
        rows = [replace(main, max_rps_at_slo=max(main.max_rps_at_slo, mu_met))]
        main = rows[0]
    record = None if fleet.verification is None else _verification_record(fleet.verification, fleet.adjustments, request.seed)
    priced = _priced(rows, workload, record)
    if not request.explain:
        return priced  # the prediction and ρ curve below are the justification's alone
    prediction = _main_prediction(planner, main_option, main, request, single=len(rows) == 1)
    curve = _rho_curve(planner, main_option, slo, main.offered_rps / main.replicas, mu_met)
    context = _Context(
        planner=planner, request=request, inputs=inputs, by_id=space.by_id, drops=space.drops, cost=priced.cost_usd_per_hour
    )
    justification = Justification(
        step_model=_step_model_section(main_option.group.step_model),
        memory=_memory_section(main_option, inputs.model, workload, prediction),
        roofline=_roofline_section(main_option, workload, prediction),
        queueing=_queueing_section(prediction, slo, curve),
        binding=_binding_section(context, fleet.solution, main_option, main, prediction, mu_met),
        alternatives=_alternatives_section(context, fleet.outcome, main),
        sensitivity=_sensitivity_section(context, rows, (mu_met, mu_missed)),
        candidates=_candidates_section(planner, space, fleet),
        parallel=_parallel_section(main_option, inputs.model, workload, prediction),
    )
    output_tokens_per_s = workload.arrival_rate_rps * workload.output_tokens.mean
    return replace(
        priced,
        predicted=_predicted_section(prediction, slo, main, output_tokens_per_s, record),
        justification=justification,
        provenance=_provenance(inputs, fleet.solution, rows, solve_ms=solve_ms, started=started),
    )


def _parallel_section(option: Option, model: ModelSpec, workload: Workload, prediction: Prediction) -> ParallelSection | None:
    """A pipeline or expert-parallel group's terms at the plan's occupancy and mean prompt (as the roofline section's)."""
    g = option.group
    occupancy = prediction.queueing.mean_occupancy if prediction.queueing else 1.0
    return replica_parallel_section(
        g.gpu, model, g.precision.weights, g.step_model, tp=g.tp, pp=g.pp, ep=g.ep, batch=occupancy, workload=workload
    )


def _main_prediction(planner: Planner, option: Option, main: FleetRow, request: PlanningRequest, *, single: bool) -> Prediction:
    """The queueing model's prediction for the plan's largest row at its load."""
    workload, slo = request.workload, request.slo
    if workload.arrival_cv == 1.0 and single:
        # a random split of Poisson arrivals is Poisson: one replica at λ/r, the very rate the search probed
        return cached_prediction(
            option.group.step_model,
            planner.mix,
            option_serving(option),
            option.group.kv_capacity_tokens,
            workload.arrival_rate_rps / main.replicas,
            slo.percentile,
        )
    return option_prediction(option, workload, main.offered_rps, main.replicas, slo.percentile, curve=False)


def _priced(rows: Sequence[FleetRow], workload: Workload, record: Verification | None) -> PlanResult:
    """The plan's rows, totals and costs, without the figures only an explained plan carries."""
    lam = workload.arrival_rate_rps
    cost = sum(r.cost_usd_per_hour for r in rows)
    output_tokens_per_s = lam * workload.output_tokens.mean
    return PlanResult(
        rows=tuple(rows),
        replicas=sum(r.replicas for r in rows),
        gpus_total=sum(r.gpus for r in rows),
        target_rho=lam / sum(r.replicas * r.saturation_rps for r in rows),  # λ / Σ replicas · saturation
        cost_usd_per_hour=cost,
        cost_usd_per_month=cost * HOURS_PER_MONTH,
        cost_usd_per_million_output_tokens=cost / (output_tokens_per_s * SECONDS_PER_HOUR) * 1e6,  # $/h ÷ tokens/h × 1e6
        predicted=None,
        justification=None,
        verification=record,
        provenance=None,
    )


def _candidates_section(planner: Planner, space: _Space, fleet: _Fleet) -> CandidatesSection:
    """How much the plan searched; read last, so it counts the re-planned sections' predictions too."""
    return CandidatesSection(
        enumerated=len(space.options),
        groups=len(space.groups),
        dropped_before_queueing=len(space.drops),
        queueing_predictions=planner.predictions,
        queueing_root_finds=planner.root_finds,
        in_milp=len(fleet.candidates),
        search_exhaustive=fleet.outcome.exhaustive,
        simulations=planner.simulations,
    )


def _provenance(
    inputs: PlanningInputs, solution: PlanSolution, rows: Sequence[FleetRow], *, solve_ms: float, started: float
) -> Provenance:
    return Provenance(
        catalog_version=inputs.catalog_version,
        solver=solution.solver.name,
        status=solution.solver.status,
        mip_gap=solution.solver.mip_gap,
        solve_ms=solve_ms,
        plan_ms=(time.perf_counter() - started) * MS_PER_S,
        efficiency_profile=inputs.efficiency_profile,
        efficiencies={g.slug: g.efficiency for g in inputs.gpus if g.slug in {r.gpu for r in rows}},
        created_at=datetime.now(UTC).isoformat(),
    )


__all__ = [
    "BATCH_LIMITS",
    "CHUNK_BUDGETS",
    "CURVE_UTILISATIONS",
    "HOURS_PER_MONTH",
    "MAX_EVALUATIONS",
    "MAX_VERIFY_ADJUSTMENTS",
    "MAX_VERIFY_ROUNDS",
    "SATURATION_BINDS",
    "SECONDS_PER_HOUR",
    "SLO_RELAXATION",
    "TP_DEGREES",
    "TRAFFIC_FACTORS",
    "VERIFY_CAPACITY_STEP",
    "VERIFY_REQUESTS",
    "FleetRow",
    "PlanResult",
    "PlanningInputs",
    "PlanningRequest",
    "SinglePlan",
    "UnsupportedConfigurationError",
    "candidate_id_of",
    "plan_capacity",
    "single_plan",
]
