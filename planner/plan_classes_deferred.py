"""The deferred arrangement of planner/plan_classes.py: the interactive pool sized for its peak,
the background work deferred within its deadline into its idle hours and extra off-peak replicas
(planner/plan_deferral.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.plan_classes_base import (
    PeriodVerified,
    PoolPlan,
    Verified,
    _Candidate,
    _Context,
    _figures,
    _NotComparable,
    _plan_one,
    _pool,
    meets_slo,
    row_parallel_section,
)
from planner.plan_classes_priority import WARMUP_FRACTION, _priority_options, _trial
from planner.plan_deferral import deferral_schedule, deferred_fraction
from planner.plan_predict import cached_saturation_rps
from planner.plan_rows import candidate_id_of
from planner.planning import PlanResult
from planner.simulator_classes_day import simulate_background_day
from planner.simulator_classes_step import StepClass, StepClassSimulated, simulate_classes_step
from planner.traffic_classes import S_PER_H, TrafficClass, merged_workload, tightest_slo
from planner.workload import Serving


def _day_periods(classes: Sequence[TrafficClass]) -> int | None:
    """The number of periods the classes' day profiles share (None: no class has one)."""
    lengths = {len(k.demand_rps) for k in classes if k.demand_rps is not None}
    if len(lengths) > 1:
        raise PlannerInputError(
            f"every class's demand_rps must give the same number of periods, got {sorted(lengths)}", field="classes"
        )
    return lengths.pop() if lengths else None


#: Fractions of a period's idle capacity tried for deferred work, largest first, until the
#: interactive classes stay on target with it in the pool (`_spare_rps`).
SPARE_STEPS = (1.0, 0.75, 0.5, 0.25)


def _spare_rps(
    ctx: _Context, interactive_plan: PlanResult, interactive_rps: Sequence[float], background: Sequence[TrafficClass]
) -> list[float]:
    """Per period, the background rate the interactive pool can take besides its interactive load.

    The pool (the interactive classes' plan at their peak) carries background work up to the
    utilisation it runs at in its peak period, never hotter: ρ_I(p) + ρ_B(p) ≤ ρ_peak, each ρ the
    rate over the pool's saturation rate for that mix (planner/queueing.py), so
    b(p) = (ρ_peak − λ_I(p)/(r·sat_I)) · r·sat_B. Each period's pool is then checked as a priority
    pool (`_trial`: the interactive classes at that period's rates, the background at b(p) below
    them, ρ ≤ RELIABLE_MAX_UTILISATION); where an interactive class would miss its target, a
    smaller share of the idle capacity is tried (SPARE_STEPS), then none."""
    periods = len(interactive_rps)
    if len(interactive_plan.rows) != 1:
        return [0.0] * periods  # a mixed fleet: which row would take the work is not modelled
    row = interactive_plan.row
    if ctx.priority_options is None:
        ctx.priority_options = _priority_options(ctx)
    option = next((o for o in ctx.priority_options if o.id == candidate_id_of(row)), None)
    if option is None:
        return [0.0] * periods  # the configuration cannot hold the merged p99 request
    interactive = [k for k in ctx.classes if k.slo is not None]
    serving = Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)
    group = option.group
    sat_i = cached_saturation_rps(group.step_model, merged_workload(interactive).at_rate(1.0), serving, group.kv_capacity_tokens)
    sat_b = cached_saturation_rps(group.step_model, merged_workload(background).at_rate(1.0), serving, group.kv_capacity_tokens)
    replicas = row.replicas
    peak_rho = interactive_plan.target_rho
    background_total = sum(k.arrival_rate_rps for k in background)
    checked: dict[tuple[float, ...], float] = {}
    spare = []
    for p in range(periods):
        rates = tuple(k.day_rps(periods)[p] for k in interactive)
        if rates in checked:
            spare.append(checked[rates])
            continue
        idle = max(0.0, peak_rho - sum(rates) / (replicas * sat_i)) * replicas * sat_b
        found = 0.0
        for step in SPARE_STEPS:
            b = idle * step
            if b <= 0.0:
                break
            period_classes = [
                replace(k, arrival_rate_rps=rate, demand_rps=None) for k, rate in zip(interactive, rates, strict=True) if rate > 0
            ]
            period_classes += [
                replace(k, arrival_rate_rps=b * k.arrival_rate_rps / background_total, demand_rps=None) for k in background
            ]
            if _trial(ctx, option, replicas, shedding=False, classes=period_classes) is not None:
                found = b
                break
        checked[rates] = found
        spare.append(found)
    return spare


def _deferred(ctx: _Context, *, verify: bool) -> _Candidate:
    """The interactive classes' pool sized for their peak all day; the background classes' work
    deferred within its deadline into that pool's idle capacity and, where that is not enough,
    into extra background replicas rented per period (planner/plan_deferral.py).

    Its pools are simulated whenever the request verifies, whatever `verify` says: a simulated
    interactive pool may have more idle capacity than the unsimulated one, so the unsimulated
    cost is no lower bound here."""
    del verify
    classes = ctx.classes
    periods = _day_periods(classes)
    if periods is None:
        raise _NotComparable("the classes carry no day profile (demand_rps), so there are no off-peak hours to defer to")
    interactive = [k for k in classes if k.slo is not None]
    background = [k for k in classes if k.slo is None]
    if not interactive or not background:
        raise _NotComparable("deferral needs at least one latency class and one deadline class")
    plan_i, prediction_i, final_i = _plan_one(ctx, interactive, tightest_slo(interactive), verify=True)
    plan_b, prediction_b, final_b = _plan_one(ctx, background, tightest_slo(background), verify=True)
    interactive_rps = [sum(k.day_rps(periods)[p] for k in interactive) for p in range(periods)]
    background_rps = [sum(k.day_rps(periods)[p] for k in background) for p in range(periods)]
    deadline_h = min(k.deadline_h for k in background if k.deadline_h is not None)
    spare = _spare_rps(ctx, plan_i, interactive_rps, background)
    # an extra replica carries what the background pool's plan verified per replica at its peak
    extra_replica_rps = sum(k.arrival_rate_rps for k in background) / plan_b.replicas
    schedule = deferral_schedule(
        arrivals_rps=background_rps,
        spare_rps=spare,
        deadline_h=deadline_h,
        extra_replica_rps=extra_replica_rps,
        extra_replica_usd_per_hour=plan_b.cost_usd_per_hour / plan_b.replicas,
    )
    verification = None
    if ctx.base.verify:
        verification = _day_run(ctx, plan_i, spare, schedule.extra_replicas, extra_replica_rps, deadline_h)
        missed = [p for p in verification.periods if not p.meets_target]
        if missed:
            raise InfeasiblePlanError(
                f"the day run misses in {len(missed)} of {periods} periods (first: period {missed[0].period}, "
                f"background done within {missed[0].background_completion_h:.2f} h of a {deadline_h:g} h deadline, "
                f"interactive {missed[0].interactive})",
                constraint="verification",
            )
    pools = [replace(_pool("interactive", interactive, plan_i, prediction_i, ctx.inputs), classes=tuple(k.name for k in classes))]
    if any(schedule.extra_replicas):
        row_b = plan_b.row
        pools.append(
            PoolPlan(
                name="deferred",
                classes=tuple(k.name for k in background),
                gpu=row_b.gpu,
                tp=row_b.tp,
                replicas=max(schedule.extra_replicas),  # the most rented in any period
                batch_limit=row_b.batch_limit,
                chunk_tokens=row_b.chunk_tokens,
                cost_usd_per_hour=schedule.extra_cost_usd_per_hour,  # averaged over the day
                utilisation=plan_b.target_rho,
                weights_precision=row_b.weights_precision,
                kv_precision=row_b.kv_precision,
                pp=row_b.pp,
                ep=row_b.ep,
                parallel=row_parallel_section(row_b, ctx.inputs, merged_workload(background), prediction_b),
            )
        )
    completion_s = schedule.completion_h * S_PER_H
    deferred = deferred_fraction(background_rps, schedule)  # the background classes share one queue, oldest first
    figures = [_figures(k, "interactive", plan_i, prediction_i) for k in interactive]
    figures += [
        replace(
            _figures(k, "deferred", plan_b, prediction_b),
            ttft_s=completion_s,  # a deferred request's first token may come as late as its last
            e2e_s=completion_s,
            meets_target=k.deadline_h is not None and completion_s <= k.deadline_h * S_PER_H,
            deferred_fraction=deferred,
        )
        for k in background
    ]
    by_name = {f.name: f for f in figures}
    return _Candidate(
        name="deferred",
        cost_usd_per_hour=plan_i.cost_usd_per_hour + schedule.extra_cost_usd_per_hour,
        pools=tuple(pools),
        classes=tuple(by_name[k.name] for k in classes),
        final=final_i and final_b,
        verification=verification,
        schedule=schedule,
    )


def _day_run(
    ctx: _Context,
    plan_i: PlanResult,
    spare_rps: Sequence[float],
    extra_replicas: Sequence[int],
    extra_replica_rps: float,
    deadline_h: float,
) -> Verified:
    """The deferred plan's day, simulated. The background work runs through the cyclic day on the
    interactive pool's idle capacity plus the extra replicas rented in each period, oldest first and
    work-conserving (planner/simulator_classes_day.py): each period's worst arrival-to-done time.
    Each period's interactive pool (one replica, the interactive classes at that period's rates and
    the background work the day run served on it then, at the lowest priority) runs at step level
    (planner/simulator_classes_step.py): every interactive class's TTFT, TPOT and E2E at its
    percentile. A period meets its target when every interactive class does and the background
    work arriving in it is done within the deadline (its completion plus its own simulated E2E on
    the pool). The extra replicas run the background classes' own single-class plan, which that
    plan's simulator verified."""
    classes = ctx.classes
    interactive = [k for k in classes if k.slo is not None]
    background = [k for k in classes if k.slo is None]
    periods = len(spare_rps)
    background_rps = [sum(k.day_rps(periods)[p] for k in background) for p in range(periods)]
    background_total = sum(k.arrival_rate_rps for k in background)
    capacity = [spare_rps[p] + extra_replicas[p] * extra_replica_rps for p in range(periods)]
    day = simulate_background_day(background_rps, capacity)
    option = None
    if len(plan_i.rows) == 1:
        if ctx.priority_options is None:
            ctx.priority_options = _priority_options(ctx)
        option = next((o for o in ctx.priority_options if o.id == candidate_id_of(plan_i.row)), None)
    replicas = plan_i.row.replicas
    percentile = max(k.own_slo.percentile for k in classes)
    simulated: dict[tuple[tuple[float, ...], float], dict[str, StepClassSimulated]] = {}
    results = []
    for p in range(periods):
        rates = tuple(k.day_rps(periods)[p] for k in interactive)
        in_pool = min(spare_rps[p], day.served_rps[p])
        key = (rates, round(in_pool, 9))
        if option is not None and key not in simulated and sum(rates) + in_pool > 0:
            step = [
                StepClass(name=k.name, workload=k.workload.at_rate(rate / replicas), priority=k.priority)
                for k, rate in zip(interactive, rates, strict=True)
            ]
            step += [
                StepClass(
                    name=k.name,
                    workload=k.workload.at_rate(in_pool * k.arrival_rate_rps / background_total / replicas),
                    priority=k.priority,
                )
                for k in background
            ]
            duration_s = ctx.base.verify_requests / ((sum(rates) + in_pool) / replicas) / (1.0 - WARMUP_FRACTION)
            simulated[key] = {
                r.name: r
                for r in simulate_classes_step(
                    option.group.step_model,
                    step,
                    batch_limit=option.batch_limit,
                    chunk_tokens=option.chunk_tokens,
                    kv_capacity_tokens=option.group.kv_capacity_tokens,
                    duration_s=duration_s,
                    seed=ctx.base.seed,
                    warmup_fraction=WARMUP_FRACTION,
                    percentile=percentile,
                    checkpoint=ctx.checkpoint,
                )
            }
        sims = simulated.get(key, {})
        figures = tuple(
            (k.name, sims[k.name].ttft_s, sims[k.name].tpot_s, sims[k.name].e2e_s)
            for k in interactive
            if k.name in sims and sims[k.name].arrivals > 0
        )
        own_h = max((sims[k.name].e2e_s for k in background if k.name in sims), default=0.0) / S_PER_H
        completion_h = day.completion_h[p] + own_h
        slo = {k.name: k.own_slo for k in interactive}
        on_target = all(meets_slo(slo[name], ttft, tpot, e2e) for name, ttft, tpot, e2e in figures)
        results.append(
            PeriodVerified(
                period=p,
                interactive_rps=sum(rates),
                background_in_pool_rps=in_pool,
                extra_replicas=extra_replicas[p],
                interactive=figures,
                background_completion_h=completion_h,
                meets_target=on_target and completion_h <= deadline_h,
            )
        )
    peak = max(results, key=lambda r: r.interactive_rps)
    top = min(interactive, key=lambda k: k.priority)
    peak_sims = simulated.get(
        (tuple(k.day_rps(periods)[peak.period] for k in interactive), round(peak.background_in_pool_rps, 9)), {}
    )
    return Verified(
        method=(
            "day run: background work first in, first out on the idle and rented capacity of each period "
            "(planner/simulator_classes_day.py); each period's interactive pool at step level with that "
            "period's background in it (planner/simulator_classes_step.py), one replica"
        ),
        interactive_p99_wait_model_s=0.0,
        interactive_p99_wait_simulated_s=peak_sims[top.name].wait_s if top.name in peak_sims else 0.0,
        periods=tuple(results),
    )
