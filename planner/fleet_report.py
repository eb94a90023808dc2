"""What a solved fleet reports: its periods (who runs where, GPUs held and used), its costs split
by kind, workload and period, the LP relaxation's shadow prices, and — when no fleet exists —
which workload, period and GPU type fall short.

These read a finished fleet (whole counts) or re-solve a relaxed copy of the model; none of them
chooses a fleet, so they are kept apart from the search (planner/fleet_solve.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import pulp

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet_formulation import build_fleet_problem, fleet_cost_usd
from planner.fleet_spec import (
    HOURS_PER_DAY,
    Checkpoint,
    DemandShadowPrice,
    FleetAssignment,
    FleetClassAssignment,
    FleetCost,
    FleetPeriod,
    FleetPoolAssignment,
    FleetSpec,
    GpuPeriod,
    InventoryShadowPrice,
    ReplicaKey,
    ShadowPrices,
    no_checkpoint,
)
from planner.milp import constraint_name, integer_value, period_label, solve


def _period_cost_usd(
    spec: FleetSpec,
    gpu: str,
    period: int,
    reserved: Mapping[str, int],
    on_demand: Mapping[GpuPeriod, int],
    spot: Mapping[GpuPeriod, int],
) -> float:
    """USD over one period of the `gpu` GPUs held in it: reserved (paid in every period), on demand and spot."""
    hours = spec.period_hours
    cost = reserved[gpu] * spec.prices[gpu].reserved_usd_per_hour * hours  # reserved: paid in every period
    cost += on_demand[gpu, period] * spec.prices[gpu].on_demand_usd_per_hour * hours
    if (gpu, period) in spot:
        cost += spot[gpu, period] * spec.spot_price_usd_per_hour(gpu) * hours
    return cost


def period_schedule(
    spec: FleetSpec,
    period: int,
    reserved: Mapping[str, int],
    on_demand: Mapping[GpuPeriod, int],
    spot: Mapping[GpuPeriod, int],
    replicas: Mapping[ReplicaKey, int],
    chosen_pools: frozenset[tuple[str, str]] = frozenset(),
) -> FleetPeriod:
    """One period of the fleet: each workload's replicas with the demand they carry (split in
    proportion to capacity), or its pools (`chosen_pools`: (workload, option id)) carrying all of
    it, the GPUs used and held per type, and the period's cost."""
    pools = tuple(
        FleetPoolAssignment(
            workload=w.name,
            period=period,
            option=o.id,
            prefill=o.periods[period][0],
            decode=o.periods[period][1],
            offered_rps=w.demand_rps[period],
        )
        for w in spec.workloads
        for o in w.pool_options
        if (w.name, o.id) in chosen_pools and o.arrangement is None
    )
    class_pools = tuple(
        FleetClassAssignment(
            workload=w.name,
            period=period,
            option=o.id,
            arrangement=o.arrangement,
            pools=o.periods[period],
            classes=o.class_figures[period] if o.class_figures else (),
            offered_rps=w.demand_rps[period],
        )
        for w in spec.workloads
        for o in w.pool_options
        if (w.name, o.id) in chosen_pools and o.arrangement is not None
    )
    assignments = []
    for w in spec.workloads:
        rows = [(c, replicas[w.name, c.id, period]) for c in w.candidates if replicas[w.name, c.id, period] > 0]
        capacity = sum(c.max_rps_at_slo * n for c, n in rows)
        for c, n in rows:
            offered = w.demand_rps[period] * c.max_rps_at_slo * n / capacity  # split in proportion to capacity
            assignments.append(
                FleetAssignment(
                    workload=w.name,
                    period=period,
                    candidate=c,
                    replicas=n,
                    gpus=n * c.gpus_per_replica,
                    capacity_rps=n * c.max_rps_at_slo,
                    offered_rps=offered,
                    target_rho=offered / n / c.saturation_rps,
                )
            )
    used = {
        gpu: sum(a.gpus for a in assignments if a.candidate.gpu == gpu)
        + sum(pair.gpus.get(gpu, 0) for pair in pools)
        + sum(arranged.gpus.get(gpu, 0) for arranged in class_pools)
        for gpu in spec.gpus
    }
    held = {gpu: reserved[gpu] + on_demand[gpu, period] + spot.get((gpu, period), 0) for gpu in spec.gpus}
    total_held = sum(held.values())
    return FleetPeriod(
        index=period,
        demand_rps=MappingProxyType({w.name: w.demand_rps[period] for w in spec.workloads}),
        on_demand_gpus=MappingProxyType({gpu: on_demand[gpu, period] for gpu in spec.gpus if on_demand[gpu, period]}),
        spot_gpus=MappingProxyType({gpu: n for (gpu, p), n in spot.items() if p == period and n}),
        gpus_used=MappingProxyType({gpu: n for gpu, n in used.items() if n}),
        gpus_held=MappingProxyType({gpu: n for gpu, n in held.items() if n}),
        assignments=tuple(assignments),
        cost_usd=sum(_period_cost_usd(spec, gpu, period, reserved, on_demand, spot) for gpu in spec.gpus),
        gpu_utilisation=sum(used.values()) / total_held if total_held else 0.0,
        pools=pools,
        class_pools=class_pools,
    )


def cost_breakdown(
    spec: FleetSpec,
    reserved: Mapping[str, int],
    on_demand: Mapping[GpuPeriod, int],
    spot: Mapping[GpuPeriod, int],
    periods: Sequence[FleetPeriod],
) -> FleetCost:
    """The fleet's costs over the horizon by kind, by workload (GPUs used at the period's mean price
    per GPU held) and by period; GPUs held but unused are `idle_usd` (see `FleetCost`)."""
    hours = spec.period_hours
    reserved_usd = sum(n * spec.prices[gpu].reserved_usd_per_hour * spec.horizon_hours for gpu, n in reserved.items())
    on_demand_usd = sum(n * spec.prices[gpu].on_demand_usd_per_hour * hours for (gpu, _), n in on_demand.items())
    spot_usd = sum(n * spec.spot_price_usd_per_hour(gpu) * hours for (gpu, _), n in spot.items())
    per_workload = {w.name: 0.0 for w in spec.workloads}
    idle = 0.0
    for period in periods:
        for gpu in spec.gpus:
            held = period.gpus_held.get(gpu, 0)
            if held == 0:
                continue
            usd_per_gpu = _period_cost_usd(spec, gpu, period.index, reserved, on_demand, spot) / held  # mean price held
            used = 0
            for a in period.assignments:
                if a.candidate.gpu == gpu:
                    per_workload[a.workload] += a.gpus * usd_per_gpu
                    used += a.gpus
            for pair in period.pools:
                per_workload[pair.workload] += pair.gpus.get(gpu, 0) * usd_per_gpu
                used += pair.gpus.get(gpu, 0)
            for arranged in period.class_pools:
                per_workload[arranged.workload] += arranged.gpus.get(gpu, 0) * usd_per_gpu
                used += arranged.gpus.get(gpu, 0)
            idle += (held - used) * usd_per_gpu
    total = reserved_usd + on_demand_usd + spot_usd
    return FleetCost(
        total_usd=total,
        usd_per_day=total * HOURS_PER_DAY / spec.horizon_hours,
        reserved_usd=reserved_usd,
        on_demand_usd=on_demand_usd,
        spot_usd=spot_usd,
        idle_usd=idle,
        per_workload_usd=MappingProxyType(per_workload),
        per_period_usd=tuple(period.cost_usd for period in periods),
    )


def demand_and_inventory_duals(spec: FleetSpec, problem: pulp.LpProblem) -> dict[str, float]:
    """Row duals of every meet_demand and gpu_inventory row, read right after the LP relaxation."""
    names = [constraint_name("meet_demand", w.name, period_label(p)) for w in spec.workloads for p in range(spec.periods)]
    names += [
        constraint_name("gpu_inventory", gpu, period_label(p))
        for gpu in spec.gpus
        for p in range(spec.periods)
        if spec.inventory_limit(gpu, p) is not None
    ]
    duals = {}
    for name in names:
        constraint = problem.get_constraint_by_name(name)
        if constraint is None:
            raise PlannerInputError(f"no constraint {name} in {problem.name} (planner bug)")
        duals[name] = float(constraint.pi or 0.0)
    return duals


def lp_shadow_prices(spec: FleetSpec, duals: Mapping[str, float], periods: Sequence[FleetPeriod]) -> ShadowPrices:
    """Shadow prices from the LP relaxation's row duals (`demand_and_inventory_duals`).

    In a minimisation the dual of a ≥ row is d(cost)/d(demand) ≥ 0; the dual of a ≤ inventory
    row is ≤ 0, and its negation is what one more GPU of inventory would save. Inventory is
    priced only where the integer plan holds every GPU the inventory allows.
    """
    demand = tuple(
        DemandShadowPrice(
            workload=w.name,
            period=p,
            usd_per_rps=max(0.0, duals[constraint_name("meet_demand", w.name, period_label(p))]),
        )
        for w in spec.workloads
        for p in range(spec.periods)
    )
    inventory = []
    for period in periods:
        for gpu in spec.gpus:
            limit = spec.inventory_limit(gpu, period.index)
            if limit is None or period.gpus_held.get(gpu, 0) < limit:
                continue
            dual = duals[constraint_name("gpu_inventory", gpu, period_label(period.index))]
            inventory.append(InventoryShadowPrice(gpu=gpu, period=period.index, usd_per_gpu=max(0.0, -dual)))
    return ShadowPrices(method="lp_relaxation", demand=demand, inventory=tuple(inventory))


# --- infeasibility ------------------------------------------------------------------------------


def diagnose_infeasible_fleet(
    spec: FleetSpec, *, time_limit_s: float, solver_name: str | None = None, checkpoint: Checkpoint = no_checkpoint
) -> InfeasiblePlanError:
    """Name what makes the fleet infeasible and the smallest relaxation.

    First the budget is left out: if that is feasible, the budget is named with the cheapest
    fleet's cost per day. Otherwise inventory is made elastic (shortfall GPUs allowed, their
    number minimised, budget left out): each (GPU type, period) short is reported with the
    workload that uses most of that type in that period. `checkpoint` is called before each solve.
    """
    if spec.constraints.budget_usd_per_day is not None:
        checkpoint()
        problem, decisions = build_fleet_problem(spec, with_budget=False)
        if solve(problem, time_limit_s=time_limit_s, solver_name=solver_name).status in ("optimal", "feasible"):
            cost_usd = float(pulp.value(fleet_cost_usd(spec, decisions)))
            per_day = cost_usd * HOURS_PER_DAY / spec.horizon_hours
            needed = math.ceil(per_day * 100 - 1e-6) / 100  # whole cents, rounded up
            return InfeasiblePlanError(
                f"the cheapest fleet costs ${per_day:.2f}/day but budget_usd_per_day is "
                f"${spec.constraints.budget_usd_per_day:.2f}/day: raise the budget to ${needed:.2f}/day",
                constraint="budget",
                needed=per_day,
                limit=spec.constraints.budget_usd_per_day,
            )
    checkpoint()
    problem, decisions = build_fleet_problem(spec, with_budget=False, elastic_inventory=True)
    status = solve(problem, time_limit_s=time_limit_s, solver_name=solver_name).status
    if status == "infeasible":
        return InfeasiblePlanError(
            "no fleet meets the demand even with inventory unlimited (planner bug or contradictory constraints)",
            constraint="combination",
        )
    if status == "no_solution":
        return InfeasiblePlanError(
            f"no fleet meets the constraints, and finding the shortfall took longer than {time_limit_s} s; "
            "raise the time limit to see which GPU type falls short",
            constraint="unknown",
        )
    shortfalls = []
    for (gpu, p), variable in sorted(decisions.inventory_shortfall.items(), key=lambda item: (item[0][1], item[0][0])):
        short = integer_value(variable)
        if short == 0:
            continue
        users: dict[str, int] = {}
        for w in spec.workloads:
            for c in w.candidates:
                if c.gpu == gpu:
                    users[w.name] = users.get(w.name, 0) + integer_value(decisions.replicas[w.name, c.id, p]) * c.gpus_per_replica
            for o in w.pool_options:
                if o.gpus_in(gpu, p):
                    chosen = integer_value(decisions.pool_choice[w.name, o.id])
                    users[w.name] = users.get(w.name, 0) + chosen * o.gpus_in(gpu, p)
        workload = max(sorted(users), key=lambda name: users[name])
        limit = spec.inventory_limit(gpu, p)
        if limit is None:  # add_fleet_variables makes shortfall variables only where inventory is given
            raise PlannerInputError(f"inventory shortfall of {gpu} in period {p}, which has no inventory (planner bug)")
        shortfalls.append(
            {"workload": workload, "period": p, "gpu": gpu, "gpus_short": short, "inventory": limit, "needed": limit + short}
        )
    first = shortfalls[0]
    return InfeasiblePlanError(
        f"workload {first['workload']!r} cannot be served in period {first['period']}: {first['gpu']} inventory is "
        f"{first['inventory']} GPUs and meeting demand needs {first['needed']} — "
        f"{first['gpus_short']} GPUs short; raise the {first['gpu']} inventory or allow other GPU types",
        constraint="gpu_inventory",
        workload=first["workload"],
        period=first["period"],
        gpu=first["gpu"],
        gpus_short=first["gpus_short"],
        shortfalls=shortfalls,
    )
