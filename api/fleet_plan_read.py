"""From a solved `FleetPlan` (with the specs and candidate tables it was made from: `FleetOutcome`)
back to the response body: periods, cost, topologies, levers, classes, notes and warnings, rounded
as served and stored (api/rounding.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from api.fleet_inputs import FleetInputs
from api.fleet_tables import table_levers
from api.rounding import rounded
from api.schemas.fleet_plan_response import (
    AssignmentRead,
    CandidateRead,
    CandidateSearchRead,
    ClassPoolsAssignmentRead,
    CostRead,
    DemandShadowPriceRead,
    FleetClassesRead,
    FleetClassPoolRead,
    FleetClassRead,
    FleetLeversRead,
    FleetPlanResponse,
    FleetPoolRead,
    FleetTopologyRead,
    GpuPriceRead,
    InventoryShadowPriceRead,
    ModelSizeRead,
    PeriodRead,
    PoolAssignmentRead,
    ShadowPricesRead,
    SolverRead,
)
from api.schemas.fleet_plans import FleetPlanRequest
from api.schemas.plan_response import PlanWarning, PrecisionRead
from api.schemas.plan_result import PrefixCachingRead, SpeculativeRead
from planner.fleet_candidates import CandidateTable
from planner.fleet_levers import NO_LEVERS, CandidateLevers
from planner.fleet_spec import ClassFigure, FleetClassAssignment, FleetPlan, PoolConfig
from planner.optimizer import Candidate
from planner.planning import HOURS_PER_MONTH, SECONDS_PER_HOUR
from planner.units import MS_PER_S


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetOutcome:
    plan: FleetPlan
    inputs: FleetInputs
    tables: dict[str, CandidateTable]  # workload name → its table (shared between equal shapes)
    distinct_tables: int
    candidates_ms: float
    plan_ms: float
    pool_options_offered: dict[str, int] = field(default_factory=dict)  # workload name → pool options offered
    arrangements_offered: dict[str, tuple[str, ...]] = field(default_factory=dict)  # workload name → class arrangements


def _pool_read(pool: PoolConfig, grades: dict[str, str]) -> FleetPoolRead:
    return FleetPoolRead(
        role="prefill" if pool.role == "prefill" else "decode",
        gpu=pool.gpu,
        tp=pool.tp,
        pp=pool.pp,
        replicas=pool.replicas,
        gpus=pool.gpus,
        precision=PrecisionRead(weights=pool.weights_precision, kv_cache=pool.kv_precision),
        batch_limit=pool.batch_limit,
        chunk_tokens=pool.chunk_tokens,
        rho=pool.rho,
        binding=pool.binding,
        spare_replicas=pool.spare_replicas,
        calibration_grade=grades.get(pool.gpu),
    )


def _topologies(body: FleetPlanRequest, plan: FleetPlan, offered: dict[str, int]) -> dict[str, FleetTopologyRead]:
    """Each workload's requested and chosen topology and the pool option it runs (one for every period)."""
    chosen = {pair.workload: pair.option for period in plan.periods for pair in period.pools}
    return {
        w.name: FleetTopologyRead(
            requested=w.topology,
            chosen="disaggregated" if w.name in chosen else "aggregated",
            pool_option=chosen.get(w.name),
            pool_options_offered=offered.get(w.name, 0),
        )
        for w in body.workloads
    }


def _precision(candidate: Candidate) -> PrecisionRead:
    return PrecisionRead(weights=candidate.weights_precision, kv_cache=candidate.kv_precision)


def _candidate_read(candidate: Candidate) -> CandidateRead:
    return CandidateRead(
        id=candidate.id,
        gpu=candidate.gpu,
        tp=candidate.tp,
        pp=candidate.pp,
        ep=candidate.ep,
        precision=_precision(candidate),
        batch_limit=candidate.batch_limit,
        chunk_tokens=candidate.chunk_tokens,
        gpus_per_replica=candidate.gpus_per_replica,
        max_rps_at_slo=candidate.max_rps_at_slo,
        saturation_rps=candidate.saturation_rps,
    )


def _per_unit_costs(body: FleetPlanRequest, total_usd: float, horizon_hours: float, period_hours: float) -> dict[str, Any]:
    """Cost per hour and per month (730 h) of the schedule, and per million output tokens demanded."""
    streams = [(w.day_demand(body.periods), w.to_workload().output_tokens.mean) for w in body.workloads if w.classes is None]
    streams += [
        (list(k.to_class().day_rps(body.periods)), k.to_class().output_tokens.mean)
        for w in body.workloads
        for k in w.classes or ()
    ]  # a workload with classes: each class's rate and mean output per period
    output_tokens = sum(
        rate * period_hours * SECONDS_PER_HOUR * mean for rates, mean in streams for rate in rates
    )  # Σ λ_wp · h · 3600 s/h · mean output tokens
    usd_per_hour = total_usd / horizon_hours if horizon_hours > 0 else 0.0
    return {
        "usd_per_hour": usd_per_hour,
        "usd_per_month": usd_per_hour * HOURS_PER_MONTH,
        "usd_per_million_output_tokens": total_usd / output_tokens * 1e6 if output_tokens > 0 else None,
    }


def _lever_reads(levers: CandidateLevers) -> dict[str, Any]:
    """A candidate's `prefix_caching` and `speculative` as the response reads them (null without)."""
    prefix, draft = levers.prefix_caching, levers.speculative
    return {
        "prefix_caching": None if prefix is None else PrefixCachingRead.model_validate(prefix, from_attributes=True),
        "speculative": None if draft is None else SpeculativeRead.model_validate(draft, from_attributes=True),
    }


def _candidate_levers(tables: dict[str, CandidateTable], workload: str, candidate: Candidate) -> CandidateLevers:
    table = tables.get(workload)
    return NO_LEVERS if table is None else table.levers.get(candidate.id, NO_LEVERS)


def _levers(body: FleetPlanRequest, plan: FleetPlan, tables: dict[str, CandidateTable]) -> dict[str, FleetLeversRead]:
    """Each workload with replicas: its speculative mode, whether it gave prefix_reuse, and the levers of the
    configuration serving its most GPU-hours (the first such in schedule order on a tie)."""
    gpu_periods: dict[str, dict[str, int]] = {}
    first: dict[str, Candidate] = {}
    for period in plan.periods:
        for a in period.assignments:
            used = gpu_periods.setdefault(a.workload, {})
            used[a.candidate.id] = used.get(a.candidate.id, 0) + a.gpus
            first.setdefault(f"{a.workload}\0{a.candidate.id}", a.candidate)
    out: dict[str, FleetLeversRead] = {}
    for w in body.workloads:
        served = gpu_periods.get(w.name)
        if not served:
            continue
        top = max(served, key=lambda cid: served[cid])  # dicts keep schedule order: max takes the first of equals
        chosen = _candidate_levers(tables, w.name, first[f"{w.name}\0{top}"])
        drafting = chosen.speculative is not None and chosen.speculative.method == "draft_model"
        out[w.name] = FleetLeversRead(
            speculative_mode=table_levers(body, w)[0],
            prefix_reuse=w.prefix_reuse is not None,
            draft_model=w.draft_model if drafting else None,
            **_lever_reads(chosen),
        )
    return out


def _class_rates(body: FleetPlanRequest) -> dict[tuple[str, str], list[float]]:
    """(workload, class) → the class's rate in each period, for the workloads with classes."""
    return {(w.name, k.name): list(k.to_class().day_rps(body.periods)) for w in body.workloads for k in w.classes or ()}


def _class_read(figure: ClassFigure, demand_rps: float) -> FleetClassRead:
    return FleetClassRead(
        name=figure.name,
        pool=figure.pool,
        demand_rps=demand_rps,
        percentile=figure.percentile,
        ttft_ms=figure.ttft_s * MS_PER_S,
        tpot_ms=figure.tpot_s * MS_PER_S,
        e2e_s=figure.e2e_s,
        deadline_h=figure.deadline_h,
        meets_target=figure.meets_target,
        shed_fraction=figure.shed_fraction,
    )


def _class_pools_read(
    arranged: FleetClassAssignment, grades: dict[str, str], rates: dict[tuple[str, str], list[float]]
) -> ClassPoolsAssignmentRead:
    by_pool: dict[str, list[str]] = {}
    here = [pool.role for pool in arranged.pools]
    for figure in arranged.classes:
        # a deferred class in a period without extra replicas is served by the interactive pool's idle capacity
        by_pool.setdefault(figure.pool if figure.pool in here else here[0], []).append(figure.name)
    return ClassPoolsAssignmentRead(
        name=arranged.workload,
        arrangement=arranged.arrangement,
        pools=[
            FleetClassPoolRead(
                name=pool.role,
                classes=by_pool.get(pool.role, []),
                gpu=pool.gpu,
                tp=pool.tp,
                pp=pool.pp,
                ep=pool.ep,
                replicas=pool.replicas,
                gpus=pool.gpus,
                precision=PrecisionRead(weights=pool.weights_precision, kv_cache=pool.kv_precision),
                batch_limit=pool.batch_limit,
                chunk_tokens=pool.chunk_tokens,
                utilisation=pool.rho,
                scheduling="priority" if pool.binding == "priority" else "fcfs",
                calibration_grade=grades.get(pool.gpu),
            )
            for pool in arranged.pools
        ],
        classes=[
            _class_read(figure, rates.get((arranged.workload, figure.name), [0.0] * (arranged.period + 1))[arranged.period])
            for figure in arranged.classes
        ],
        gpus=dict(arranged.gpus),
        demand_rps=arranged.offered_rps,
    )


def _classes(body: FleetPlanRequest, outcome: FleetOutcome, periods: list[PeriodRead]) -> dict[str, FleetClassesRead]:
    """Each workload with classes: the arrangement run (one option for the whole day) and its classes' figures
    in the period of its peak demand (the first such)."""
    out: dict[str, FleetClassesRead] = {}
    for w in body.workloads:
        if w.classes is None:
            continue
        served = [
            (period.demand_rps.get(w.name, 0.0), -period.period, arranged)
            for period in periods
            for arranged in period.class_pools
            if arranged.name == w.name
        ]
        if not served:
            continue
        peak = max(served, key=lambda item: item[:2])[2]
        out[w.name] = FleetClassesRead(
            arrangement=peak.arrangement, offered=list(outcome.arrangements_offered.get(w.name, ())), classes=peak.classes
        )
    return out


def _periods_read(
    plan: FleetPlan,
    grades: dict[str, str],
    tables: dict[str, CandidateTable] | None = None,
    rates: dict[tuple[str, str], list[float]] | None = None,
) -> list[PeriodRead]:
    """Each period's GPUs and workloads' assignments, as served."""
    tables = {} if tables is None else tables
    rates = {} if rates is None else rates
    periods = []
    for period in plan.periods:
        periods.append(
            PeriodRead(
                period=period.index,
                start_hour=period.index * plan.period_hours,
                demand_rps=dict(period.demand_rps),
                on_demand_gpus=dict(period.on_demand_gpus),
                spot_gpus=dict(period.spot_gpus),
                gpus_held=dict(period.gpus_held),
                gpus_used=dict(period.gpus_used),
                workloads=[
                    AssignmentRead(
                        name=a.workload,
                        gpu=a.candidate.gpu,
                        tp=a.candidate.tp,
                        pp=a.candidate.pp,
                        ep=a.candidate.ep,
                        precision=_precision(a.candidate),
                        batch_limit=a.candidate.batch_limit,
                        chunk_tokens=a.candidate.chunk_tokens,
                        replicas=a.replicas,
                        gpus=a.gpus,
                        max_rps_at_slo=a.candidate.max_rps_at_slo,
                        capacity_rps=a.capacity_rps,
                        demand_rps=period.demand_rps[a.workload],
                        offered_rps=a.offered_rps,
                        target_rho=a.target_rho,
                        calibration_grade=grades.get(a.candidate.gpu),
                        **_lever_reads(_candidate_levers(tables, a.workload, a.candidate)),
                    )
                    for a in period.assignments
                ],
                class_pools=[_class_pools_read(arranged, grades, rates) for arranged in period.class_pools],
                pools=[
                    PoolAssignmentRead(
                        name=pair.workload,
                        option=pair.option,
                        ratio=f"{pair.prefill.replicas}P{pair.decode.replicas}D",
                        prefill=_pool_read(pair.prefill, grades),
                        decode=_pool_read(pair.decode, grades),
                        gpus=dict(pair.gpus),
                        demand_rps=period.demand_rps[pair.workload],
                    )
                    for pair in period.pools
                ],
                cost_usd=period.cost_usd,
                utilisation=period.gpu_utilisation,
            )
        )
    return periods


def _notes(inputs: FleetInputs, plan: FleetPlan, tables: list[CandidateTable]) -> list[str]:
    """The inputs' notes, and what the search and the solver could not promise."""
    notes = list(inputs.notes)
    if not all(t.exhaustive for t in tables):
        notes.append("the candidate search hit its root-find bound for some workload: a better configuration may exist")
    if plan.solver.status == "feasible":
        notes.append(
            f"the solver's time limit stopped the search: the plan is within {plan.solver.mip_gap:.2%} of optimal"
            if plan.solver.mip_gap is not None
            else "the solver's time limit stopped the search before a proof"
        )
    return notes


def _low_confidence_warnings(plan: FleetPlan, grades: dict[str, str]) -> list[PlanWarning]:
    """A warning for each scheduled GPU type whose calibration is graded low."""
    scheduled = sorted(
        {a.candidate.gpu for period in plan.periods for a in period.assignments}
        | {gpu for period in plan.periods for pair in period.pools for gpu in pair.gpus}
        | {gpu for period in plan.periods for arranged in period.class_pools for gpu in arranged.gpus}
    )
    return [
        PlanWarning(
            code="low_confidence_plan",
            gpu=gpu,
            grade="low",
            message=(
                f"the schedule runs on {gpu}, whose calibration is graded low (GET /v1/gpus/{gpu}: efficiency.confidence): "
                "its capacity may be off by more than the calibration's usual error; constraints.min_confidence leaves such GPUs out"
            ),
        )
        for gpu in scheduled
        if grades.get(gpu) == "low"
    ]


def _prices_read(inputs: FleetInputs, gpus_priced: set[str]) -> dict[str, GpuPriceRead]:
    """The prices of the GPU types some candidate uses, with where each came from."""
    return {
        gpu: GpuPriceRead(
            on_demand_usd_per_hour=price.on_demand_usd_per_hour,
            reserved_usd_per_hour=price.reserved_usd_per_hour,
            spot_usd_per_hour=(
                price.on_demand_usd_per_hour * (1 - inputs.spot[gpu].discount_fraction)  # on-demand less the discount
                if gpu in inputs.spot
                else None
            ),
            source="request" if inputs.price_sources.get(gpu) == "request" else "catalog",
            provider=inputs.chosen_prices[gpu].provider,
            as_of=inputs.chosen_prices[gpu].as_of,
            price_source=inputs.chosen_prices[gpu].source,
        )
        for gpu, price in sorted(inputs.prices.items())
        if gpu in gpus_priced
    }


def fleet_plan_response(
    body: FleetPlanRequest, outcome: FleetOutcome, *, plan_id: str, created_at: datetime
) -> FleetPlanResponse:
    plan, inputs = outcome.plan, outcome.inputs
    grades = {gpu.slug: gpu.calibration_grade for gpu in inputs.gpus}
    periods = _periods_read(plan, grades, outcome.tables, _class_rates(body))
    cost = plan.cost
    shadow = plan.shadow_prices
    tables = list({id(t): t for t in outcome.tables.values()}.values())
    notes = _notes(inputs, plan, tables)
    gpus_priced = (
        {c.gpu for t in tables for c in t.candidates}
        | {gpu for period in plan.periods for pair in period.pools for gpu in pair.gpus}
        | {gpu for period in plan.periods for arranged in period.class_pools for gpu in arranged.gpus}
    )
    warnings = _low_confidence_warnings(plan, grades)
    response = FleetPlanResponse(
        id=plan_id,
        created_at=created_at.astimezone(UTC).isoformat(),
        catalog_version=inputs.catalog_version,
        efficiency_profile=body.efficiency_profile,
        period_hours=plan.period_hours,
        reserved_gpus={gpu: n for gpu, n in plan.reserved_gpus.items() if n},
        prices=_prices_read(inputs, gpus_priced),
        periods=periods,
        cost=CostRead(
            usd_total=cost.total_usd,
            usd_per_day=cost.usd_per_day,
            horizon_hours=len(plan.periods) * plan.period_hours,
            reserved_usd=cost.reserved_usd,
            on_demand_usd=cost.on_demand_usd,
            spot_usd=cost.spot_usd,
            idle_usd=cost.idle_usd,
            per_workload_usd=dict(cost.per_workload_usd),
            per_period_usd=list(cost.per_period_usd),
            **_per_unit_costs(body, cost.total_usd, len(plan.periods) * plan.period_hours, plan.period_hours),
        ),
        shadow_prices=None
        if shadow is None
        else ShadowPricesRead(
            method=shadow.method,
            demand=[
                DemandShadowPriceRead(workload=d.workload, period=d.period, usd_per_rps=d.usd_per_rps) for d in shadow.demand
            ],
            inventory=[InventoryShadowPriceRead(gpu=i.gpu, period=i.period, usd_per_gpu=i.usd_per_gpu) for i in shadow.inventory],
        ),
        solver=SolverRead(
            name=plan.solver.name, status=plan.solver.status, gap=plan.solver.mip_gap, solve_ms=plan.solver.solve_s * MS_PER_S
        ),
        model_size=ModelSizeRead(
            candidates=plan.model_size.candidates,
            candidates_dropped=plan.candidates_dropped,
            variables=plan.model_size.variables,
            constraints=plan.model_size.constraints,
        ),
        candidate_search=CandidateSearchRead(
            distinct_tables=outcome.distinct_tables,
            options_enumerated=sum(t.options_enumerated for t in tables),
            mu_searches=sum(t.mu_searches for t in tables),
            predictions=sum(t.predictions for t in tables),
            exhaustive=all(t.exhaustive for t in tables),
            ms=outcome.candidates_ms,
        ),
        plan_ms=outcome.plan_ms,
        notes=notes,
        warnings=warnings,
        engine=inputs.engine,
        candidates={name: [_candidate_read(c) for c in table.candidates] for name, table in outcome.tables.items()}
        if body.include_candidates
        else None,
        topologies=_topologies(body, plan, outcome.pool_options_offered),
        levers=_levers(body, plan, outcome.tables),
        classes=_classes(body, outcome, periods),
    )
    # what is served (and stored) is rounded (api/rounding.py); `outcome` keeps the unrounded figures
    return FleetPlanResponse.model_validate(rounded(response.model_dump(mode="json")))
