"""Traffic-class arrangements as options of the fleet MILP, as planner/fleet_pools.py offers separate pools.

A fleet workload with traffic classes has no aggregated candidates of its own: it is served by one of
its arrangements, each an all-or-nothing pool option (planner/fleet_spec.py PoolOption with
`arrangement`; planner/fleet_formulation.py `add_pool_option_constraints`). For each period, the
classes at that period's rates (a class's `demand_rps` profile, else its `arrival_rate_rps` all day) are
arranged by planner/plan_classes.py `each_arrangement` — the arrangements a single class plan compares
(shared FCFS, shared priority, shared priority with shedding, segregated), each sized by the same
single-class planner, unsimulated as the fleet's other options are — and an arrangement that serves
every period becomes an option holding its pools (id "classes-<arrangement>"). The MILP then takes the
cheapest in GPU cost over the day, within inventory and budget.

`deferred` moves background work between periods, so it is planned once for the day
(plan_classes `deferred_arrangement`): the interactive pool sized for its peak in every period, and
the extra background replicas its schedule rents in each period (a pool of that many, absent where
none). It is offered only where the fleet's periods are the classes' day (periods × period_hours =
24 h, the day planner/plan_deferral.py schedules) and its extra replicas respect min_replicas.

A class with no demand in a period is sized at IDLE_RATE_RPS (one request an hour, as fleet_pools sizes
an idle period), so an arrangement keeps its pools' shape all day. Distinct rate vectors are arranged
once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from planner.errors import InfeasiblePlanError
from planner.fleet_pools import IDLE_RATE_RPS
from planner.fleet_spec import Checkpoint, ClassFigure, PoolConfig, PoolOption, no_checkpoint
from planner.plan_classes import ClassesPlan, PoolPlan, deferred_arrangement, each_arrangement
from planner.plan_deferral import HOURS_PER_DAY
from planner.planning import PlanningInputs, PlanningRequest
from planner.traffic_classes import TrafficClass

__all__ = ["arrangement_options", "class_demand_rps"]


def class_demand_rps(classes: Sequence[TrafficClass], periods: int) -> tuple[float, ...]:
    """The workload's demand per period: the sum of its classes' rates."""
    rates = [k.day_rps(periods) for k in classes]
    return tuple(sum(r[p] for r in rates) for p in range(periods))


def _config(pool: PoolPlan) -> PoolConfig:
    return PoolConfig(
        role=pool.name,
        gpu=pool.gpu,
        tp=pool.tp,
        pp=pool.pp,
        ep=pool.ep,
        replicas=pool.replicas,
        weights_precision=pool.weights_precision,
        kv_precision=pool.kv_precision,
        batch_limit=pool.batch_limit,
        chunk_tokens=pool.chunk_tokens,
        rho=pool.utilisation,
        binding=pool.scheduling,
    )


def _figures(plan: ClassesPlan) -> tuple[ClassFigure, ...]:
    return tuple(
        ClassFigure(
            name=k.name,
            pool=k.arrangement_pool,
            percentile=k.percentile,
            ttft_s=k.ttft_s,
            tpot_s=k.tpot_s,
            e2e_s=k.e2e_s,
            deadline_h=k.deadline_h,
            meets_target=k.meets_target,
            shed_fraction=k.shed_fraction,
        )
        for k in plan.classes
    )


def arrangement_options(
    *,
    classes: Sequence[TrafficClass],
    inputs: PlanningInputs,
    base: PlanningRequest,
    periods: int,
    period_hours: float = HOURS_PER_DAY,
    checkpoint: Checkpoint = no_checkpoint,
) -> tuple[PoolOption, ...]:
    """The workload's arrangement options (module docstring), in plan_classes' order. `base` carries the
    grids and constraints (min_replicas, n_plus_one) every pool is planned under; its workload and SLO are
    replaced per pool. Raises InfeasiblePlanError when no arrangement serves every period."""
    day = [k.day_rps(periods) for k in classes]
    arranged: dict[tuple[float, ...], dict[str, ClassesPlan]] = {}
    per_period: list[dict[str, ClassesPlan]] = []
    for p in range(periods):
        rates = tuple(r[p] if r[p] > 0 else IDLE_RATE_RPS for r in day)
        if rates not in arranged:
            checkpoint()
            at_rates = [replace(k, arrival_rate_rps=rate, demand_rps=None) for k, rate in zip(classes, rates, strict=True)]
            arranged[rates] = {plan.chosen: plan for plan in each_arrangement(at_rates, inputs, base)}
        per_period.append(arranged[rates])
    names = [name for name in per_period[0] if all(name in found for found in per_period)]
    options = [
        PoolOption(
            id=f"classes-{name}",
            periods=tuple(tuple(_config(pool) for pool in found[name].pools) for found in per_period),
            arrangement=name,
            class_figures=tuple(_figures(found[name]) for found in per_period),
        )
        for name in names
    ]
    if math.isclose(periods * period_hours, HOURS_PER_DAY) and (deferred := _deferred(classes, inputs, base, periods)):
        options.append(deferred)
    if not options:
        raise InfeasiblePlanError(
            "no arrangement of the classes (shared FCFS, shared priority, segregated, deferred) serves every period's rates",
            constraint="classes",
        )
    return tuple(options)


def _deferred(classes: Sequence[TrafficClass], inputs: PlanningInputs, base: PlanningRequest, periods: int) -> PoolOption | None:
    """The deferred arrangement as an option (module docstring), or None where it is not offered."""
    found = deferred_arrangement(classes, inputs, base)
    if found is None:
        return None
    plan, extra = found
    if len(extra) != periods or any(0 < n < base.constraints.min_replicas for n in extra):
        return None
    interactive = [_config(pool) for pool in plan.pools if pool.name != "deferred"]
    background = [pool for pool in plan.pools if pool.name == "deferred"]
    pools = tuple((*interactive, *(replace(_config(pool), replicas=n) for pool in background if n > 0)) for n in extra)
    figures = _figures(plan)
    return PoolOption(id="classes-deferred", periods=pools, arrangement="deferred", class_figures=(figures,) * periods)
