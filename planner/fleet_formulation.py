"""The fleet MILP itself: presolve, decision variables, constraint rows, cover-cost cuts.

On paper (planner/fleet.py has the whole formulation): `add_fleet_variables` makes R_k, O_kp,
S_kp and r_wcp (and the N+1 helpers), one `add_*_constraints` per family of rows, and
`build_fleet_problem` puts them together. Kept apart from the search (planner/fleet_solve.py)
because the search, the period-by-period stage and the infeasibility diagnosis each build their
own problem from these same pieces; the row names (`constraint_name`) are what the shadow prices
(planner/fleet_report.py) read back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import pulp

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet_spec import HOURS_PER_DAY, FleetConstraints, FleetSpec, FleetWorkload, GpuPeriod, ReplicaKey, WorkloadPeriod
from planner.milp import constraint_name, period_label
from planner.optimizer import Candidate

#: Branch-and-bound nodes allowed per workload-period when pricing its cheapest integer cover
#: (`cover_cost_lower_bound`); past it the cut is left out (it is a strengthening, never needed).
_COVER_NODE_LIMIT = 20_000


# --- presolve -----------------------------------------------------------------------------------


def dominates(better: Candidate, worse: Candidate) -> bool:
    """Same GPU type, k = g_worse / g_better a whole number, and k·μ_better ≥ μ_worse.

    Swapping every `worse` replica for k `better` ones uses the same GPUs of the same type and
    keeps demand, N+1 (capacity less the largest replica never falls: it gains k·μ_better − μ_worse
    ≥ 0, and if μ_better becomes the largest, (k − 1)·μ_better ≥ 0 more) and min_replicas.
    """
    k, remainder = divmod(worse.gpus_per_replica, better.gpus_per_replica)
    return better.gpu == worse.gpu and remainder == 0 and k * better.max_rps_at_slo >= worse.max_rps_at_slo


def undominated(candidates: Sequence[Candidate]) -> tuple[Candidate, ...]:
    """Candidates no other one dominates; of equals, the first listed stays."""
    kept: list[Candidate] = []
    for index, c in enumerate(candidates):
        beaten = any(
            dominates(other, c) and (not dominates(c, other) or other_index < index)
            for other_index, other in enumerate(candidates)
            if other_index != index
        )
        if not beaten:
            kept.append(c)
    return tuple(kept)


def presolve(spec: FleetSpec) -> tuple[FleetSpec, int]:
    """The fleet with dominated candidates dropped, and how many were; a workload without
    candidates is an InfeasiblePlanError naming it."""
    workloads = []
    dropped = 0
    for w in spec.workloads:
        if not w.candidates and not w.pool_options:
            raise InfeasiblePlanError(
                f"workload {w.name!r} has no candidate configuration that holds its model and meets its SLOs: "
                "allow more GPU types, precisions or tensor-parallel degrees, or relax its SLOs",
                constraint="candidates",
                workload=w.name,
            )
        kept = undominated(w.candidates)
        dropped += len(w.candidates) - len(kept)
        workloads.append(FleetWorkload(name=w.name, candidates=kept, demand_rps=w.demand_rps, pool_options=w.pool_options))
    presolved = FleetSpec(
        workloads=tuple(workloads),
        prices=spec.prices,
        inventory=dict(spec.inventory),
        spot=spec.spot,
        period_hours=spec.period_hours,
        constraints=spec.constraints,
    )
    return presolved, dropped


# --- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetDecisions:
    """The decision variables of one built fleet problem, keyed by (gpu), (gpu, period) and
    (workload, candidate id, period)."""

    reserved_gpus: Mapping[str, pulp.LpVariable]
    on_demand_gpus: Mapping[GpuPeriod, pulp.LpVariable]
    spot_gpus: Mapping[GpuPeriod, pulp.LpVariable]
    replicas: Mapping[ReplicaKey, pulp.LpVariable]
    use: Mapping[ReplicaKey, pulp.LpVariable]
    largest_replica_rps: Mapping[WorkloadPeriod, pulp.LpVariable]
    inventory_shortfall: Mapping[GpuPeriod, pulp.LpVariable]
    #: z_wo: 1 when workload w runs pool option o in every period (`add_pool_option_constraints`).
    pool_choice: Mapping[tuple[str, str], pulp.LpVariable] = field(default_factory=dict)


def replica_bound(candidate: Candidate, demand_rps: float, constraints: FleetConstraints) -> int:
    """max(min_replicas, ⌈d/μ_c⌉ + [N+1]): at least one optimum never runs more replicas of c.

    That many replicas of c alone meet demand, N+1 and min_replicas; extra replicas only add
    GPUs used, so trimming them never raises the cost.
    """
    needed = math.ceil(demand_rps / candidate.max_rps_at_slo) + (1 if constraints.n_plus_one and demand_rps > 0 else 0)
    return max(constraints.min_replicas, needed)


def add_fleet_variables(problem: pulp.LpProblem, spec: FleetSpec, *, elastic_inventory: bool) -> FleetDecisions:
    """reserved_gpus[k], on_demand_gpus[k, p], spot_gpus[k, p], replicas[w, c, p] (+ N+1 helpers)."""
    periods = range(spec.periods)

    def limit(gpu: str, period: int) -> int | None:
        return spec.inventory_limit(gpu, period)

    # Inventory limits reserved and on-demand GPUs through its named rows only (no variable
    # bounds), so the LP relaxation puts the value of inventory on those rows' duals.
    reserved = {
        gpu: problem.add_variable(constraint_name("reserved_gpus", gpu), lowBound=0, cat=pulp.LpInteger) for gpu in spec.gpus
    }
    on_demand = {
        (gpu, p): problem.add_variable(constraint_name("on_demand_gpus", gpu, period_label(p)), lowBound=0, cat=pulp.LpInteger)
        for gpu in spec.gpus
        for p in periods
    }
    spot = {}
    for gpu in spec.gpus:
        if gpu not in spec.spot:
            continue
        for p in periods:
            spot[gpu, p] = problem.add_variable(
                constraint_name("spot_gpus", gpu, period_label(p)),
                lowBound=0,
                upBound=spec.spot[gpu].max_gpus,
                cat=pulp.LpInteger,
            )
    replicas = {
        (w.name, c.id, p): problem.add_variable(
            constraint_name("replicas", w.name, c.id, period_label(p)),
            lowBound=0,
            upBound=replica_bound(c, w.demand_rps[p], spec.constraints),
            cat=pulp.LpInteger,
        )
        for w in spec.workloads
        for c in w.candidates
        for p in periods
    }
    use: dict[ReplicaKey, pulp.LpVariable] = {}
    largest: dict[WorkloadPeriod, pulp.LpVariable] = {}
    if spec.constraints.n_plus_one:
        for w in spec.workloads:
            for p in periods:
                largest[w.name, p] = problem.add_variable(
                    constraint_name("largest_replica_rps", w.name, period_label(p)),
                    lowBound=0,
                    upBound=max((c.max_rps_at_slo for c in w.candidates), default=0.0),  # 0: a pools-only workload
                )
                for c in w.candidates:
                    use[w.name, c.id, p] = problem.add_variable(
                        constraint_name("use", w.name, c.id, period_label(p)), lowBound=0, upBound=1, cat=pulp.LpBinary
                    )
    shortfall = {}
    if elastic_inventory:
        shortfall = {
            (gpu, p): problem.add_variable(
                constraint_name("inventory_shortfall", gpu, period_label(p)), lowBound=0, cat=pulp.LpInteger
            )
            for gpu in spec.gpus
            for p in periods
            if limit(gpu, p) is not None
        }
    pool_choice = {
        (w.name, o.id): problem.add_variable(constraint_name("pools", w.name, o.id), cat=pulp.LpBinary)
        for w in spec.workloads
        for o in w.pool_options
    }
    return FleetDecisions(reserved, on_demand, spot, replicas, use, largest, shortfall, pool_choice)


def linear_sum(terms: Iterable[tuple[pulp.LpVariable, float]]) -> pulp.LpAffineExpression:
    """Σ coefficient·variable over (variable, coefficient) pairs, each variable once.

    Built in one step: `pulp.lpSum` of products makes a new expression per term and merges them
    one at a time. Building the 10 140-variable `shared` model took 0.28–0.40 s that way and
    0.12–0.16 s this way (with `constraint_name`'s cached parts; 2026-12-01, load ≈ 1.5).
    """
    pairs = list(terms)
    expression = pulp.LpAffineExpression(pairs)
    if len(expression) != len(pairs):
        raise PlannerInputError("a variable appears twice in one linear sum (planner bug)")
    return expression


def capacity_rps(spec: FleetSpec, decisions: FleetDecisions, workload: FleetWorkload, period: int) -> pulp.LpAffineExpression:
    """Σ_c r_wcp·μ_c"""
    return linear_sum((decisions.replicas[workload.name, c.id, period], c.max_rps_at_slo) for c in workload.candidates)


def pool_terms(decisions: FleetDecisions, workload: FleetWorkload, coefficient: float) -> list[tuple[pulp.LpVariable, float]]:
    """coefficient·z_wo for each pool option o of the workload (none without options, or at a zero coefficient)."""
    if coefficient == 0:
        return []
    return [(decisions.pool_choice[workload.name, o.id], coefficient) for o in workload.pool_options]


def gpus_used(spec: FleetSpec, decisions: FleetDecisions, gpu: str, period: int) -> pulp.LpAffineExpression:
    """Σ_{w, c on k} r_wcp·g_c + Σ_{w, o} z_wo·G_okp (G_okp: the GPUs of type k option o's pools hold in period p)"""
    replicas = [
        (decisions.replicas[w.name, c.id, period], float(c.gpus_per_replica))
        for w in spec.workloads
        for c in w.candidates
        if c.gpu == gpu
    ]
    pools = [
        (decisions.pool_choice[w.name, o.id], float(o.gpus_in(gpu, period)))
        for w in spec.workloads
        for o in w.pool_options
        if o.gpus_in(gpu, period)
    ]
    return linear_sum(replicas + pools)


def gpus_held(decisions: FleetDecisions, gpu: str, period: int) -> pulp.LpAffineExpression:
    """R_k + O_kp + S_kp"""
    held = decisions.reserved_gpus[gpu] + decisions.on_demand_gpus[gpu, period]
    spot = decisions.spot_gpus.get((gpu, period))
    return held if spot is None else held + spot


def fleet_cost_usd(spec: FleetSpec, decisions: FleetDecisions) -> pulp.LpAffineExpression:
    """Σ_k R_k·π^res_k·h·P + Σ_{k,p} (O_kp·π^od_k + S_kp·π^spot_k)·h"""
    reserved = [(decisions.reserved_gpus[gpu], spec.prices[gpu].reserved_usd_per_hour * spec.horizon_hours) for gpu in spec.gpus]
    on_demand = [
        (variable, spec.prices[gpu].on_demand_usd_per_hour * spec.period_hours)
        for (gpu, _), variable in decisions.on_demand_gpus.items()
    ]
    spot = [
        (variable, spec.spot_price_usd_per_hour(gpu) * spec.period_hours) for (gpu, _), variable in decisions.spot_gpus.items()
    ]
    return linear_sum(reserved + on_demand + spot)


def add_meet_demand_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_c r_wcp·μ_c + d_wp·Σ_o z_wo ≥ d_wp for every workload w and period p (pools chosen carry the whole demand)."""
    for w in spec.workloads:
        for p in range(spec.periods):
            terms = [(decisions.replicas[w.name, c.id, p], c.max_rps_at_slo) for c in w.candidates]
            problem += (
                linear_sum(terms + pool_terms(decisions, w, w.demand_rps[p])) >= w.demand_rps[p],
                constraint_name("meet_demand", w.name, period_label(p)),
            )


def add_n_plus_one_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_c r_wcp·μ_c + d_wp·Σ_o z_wo − m_wp ≥ d_wp, m_wp ≥ μ_c·u_wcp, r_wcp ≤ R_wcp·u_wcp: one replica may be lost.
    Pools chosen carry the whole demand with a replica lost: planner/fleet_pools.py sizes each pool with an N+1
    spare (FleetSpec refuses options without), and no aggregated replica runs beside them (u_wcp = 0, m_wp = 0)."""
    for w in spec.workloads:
        for p in range(spec.periods):
            label = period_label(p)
            largest = decisions.largest_replica_rps[w.name, p]
            for c in w.candidates:
                replicas = decisions.replicas[w.name, c.id, p]
                use = decisions.use[w.name, c.id, p]
                problem += (
                    linear_sum([(replicas, 1), (use, -replicas.upBound)]) <= 0,  # r ≤ R·u
                    constraint_name("use_links_replicas", w.name, c.id, label),
                )
                problem += (
                    linear_sum([(largest, 1), (use, -c.max_rps_at_slo)]) >= 0,  # m ≥ μ·u
                    constraint_name("largest_replica", w.name, c.id, label),
                )
            pools = linear_sum(pool_terms(decisions, w, w.demand_rps[p]))
            problem += (
                capacity_rps(spec, decisions, w, p) + pools - largest >= w.demand_rps[p],
                constraint_name("n_plus_one", w.name, label),
            )


class Cover(NamedTuple):
    """A whole number of replicas of each item meeting one demand (`cheapest_cover`)."""

    cost: float  # Σ_c a_c·r_c
    counts: tuple[int, ...]  # r_c, in the order of the items
    finished: bool  # the search ended within its node limit (else the counts are the best found, not proved cheapest)


def cheapest_cover(items: Sequence[tuple[float, float]], demand_rps: float, *, node_limit: int = _COVER_NODE_LIMIT) -> Cover:
    """min Σ_c a_c·r_c over whole r_c ≥ 0 with Σ_c μ_c·r_c ≥ d; `items` are (a_c, μ_c) with
    a_c ≥ 0, μ_c > 0. Returns the cost, the counts (in `items` order) and whether the search
    finished within `node_limit` (if not, the counts are the best found, not proved cheapest).

    A depth-first branch and bound over the items in increasing a/μ (the fractional bound
    cost + remaining demand × the best a/μ left prunes).
    """
    order = sorted(range(len(items)), key=lambda i: items[i][0] / items[i][1])
    slack = 1e-9 * max(demand_rps, 1.0)
    counts = [0] * len(items)
    if demand_rps <= slack:
        return Cover(0.0, tuple(counts), True)
    single = min(order, key=lambda i: items[i][0] * math.ceil(demand_rps / items[i][1] - 1e-12))
    best_counts = list(counts)
    best_counts[single] = math.ceil(demand_rps / items[single][1] - 1e-12)
    best = items[single][0] * best_counts[single]
    nodes = 0

    def search(depth: int, remaining: float, cost: float) -> bool:
        nonlocal best, best_counts, nodes
        nodes += 1
        if nodes > node_limit:
            return False
        if remaining <= slack:
            if cost < best:
                best, best_counts = cost, list(counts)
            return True
        if depth == len(order):
            return True
        a, mu = items[order[depth]]
        if cost + remaining * a / mu >= best * (1 - 1e-12):
            return True  # not even fractional replicas of the best a/μ left beat the incumbent
        for count in range(math.ceil(remaining / mu - 1e-12), -1, -1):
            counts[order[depth]] = count
            finished = search(depth + 1, remaining - count * mu, cost + count * a)
            counts[order[depth]] = 0
            if not finished:
                return False
        return True

    finished = search(0, demand_rps, 0.0)
    return Cover(best, tuple(best_counts), finished)


def cover_cost_lower_bound(
    items: Sequence[tuple[float, float]], demand_rps: float, min_replicas: int, *, node_limit: int = _COVER_NODE_LIMIT
) -> float | None:
    """A lower bound on Σ_c a_c·r_c for whole r_c meeting Σ_c μ_c·r_c ≥ d and Σ_c r_c ≥ min_replicas:
    the cheapest cover (`cheapest_cover`), and at least min_replicas × the cheapest a_c. None when
    `node_limit` runs out first. Every such r costs at least this, so Σ_c a_c·r_c ≥ it is a valid cut.
    """
    cost, _, finished = cheapest_cover(items, demand_rps, node_limit=node_limit)
    if not finished:
        return None
    return max(cost, min_replicas * min(a for a, _ in items))


def cheapest_gpu_hour_usd(spec: FleetSpec, gpu: str) -> float:
    """The lowest price one GPU-hour of `gpu` can have in this fleet: reserved, on demand or spot."""
    prices = [spec.prices[gpu].reserved_usd_per_hour, spec.prices[gpu].on_demand_usd_per_hour]
    if gpu in spec.spot:
        prices.append(spec.spot_price_usd_per_hour(gpu))
    return min(prices)


def add_cover_cost_cuts(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> int:
    """Σ_c a_c·r_wcp ≥ V_wp with a_c = g_c × the cheapest GPU-hour of c's type and V_wp the least
    Σ a_c·r_c of any whole number of replicas meeting d_wp and min_replicas
    (`cover_cost_lower_bound`): valid for every integer fleet, and it removes the LP relaxation's
    fractional replicas (1.13 replicas where 2 are needed), whose rounding is most of the gap on
    fleets of few replicas per workload. Rows named cover_cost__w__hp; how many were added."""
    added = 0
    for w in spec.workloads:
        if not w.candidates:
            continue  # served by pools alone
        weights = {c.id: c.gpus_per_replica * cheapest_gpu_hour_usd(spec, c.gpu) for c in w.candidates}
        items = [(weights[c.id], c.max_rps_at_slo) for c in w.candidates]
        best_ratio = min(a / mu for a, mu in items)
        bounds: dict[tuple[float, int], float | None] = {}
        for p in range(spec.periods):
            key = (w.demand_rps[p], spec.constraints.min_replicas)
            if key not in bounds:
                bounds[key] = cover_cost_lower_bound(items, *key)
            bound = bounds[key]
            if bound is None or bound <= w.demand_rps[p] * best_ratio * (1 + 1e-9):
                continue  # no stronger than the LP relaxation already is
            replicas = [(decisions.replicas[w.name, c.id, p], weights[c.id]) for c in w.candidates]
            problem += (
                linear_sum(replicas + pool_terms(decisions, w, bound)) >= bound,  # + V·Σ_o z_wo: pools chosen, no replicas
                constraint_name("cover_cost", w.name, period_label(p)),
            )
            added += 1
    return added


def add_min_replicas_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_c r_wcp + m·Σ_o z_wo ≥ m (m = min_replicas) for every workload w and period p: pools chosen
    count as meeting it (planner/fleet_pools.py floors each pool at m replicas; FleetSpec refuses options below)."""
    m = spec.constraints.min_replicas
    for w in spec.workloads:
        for p in range(spec.periods):
            terms = [(decisions.replicas[w.name, c.id, p], 1.0) for c in w.candidates]
            problem += (
                linear_sum(terms + pool_terms(decisions, w, float(m))) >= m,
                constraint_name("min_replicas", w.name, period_label(p)),
            )


def add_pool_option_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """A workload runs at most one pool option, and none of its aggregated replicas while it does:

        Σ_o z_wo ≤ 1                              (one_pool_option__w)
        r_wcp + U_wcp·Σ_o z_wo ≤ U_wcp            (pools_exclusive__w__c__hp; U_wcp the replica bound, big-M)

    An option is fixed pools per period (sized at that period's demand by planner/plan_disagg.py),
    so z_wo adds its GPUs of each type to every period's gpus_held row and covers the whole demand
    in `add_meet_demand_constraints`."""
    for w in spec.workloads:
        if not w.pool_options:
            continue
        problem += linear_sum(pool_terms(decisions, w, 1.0)) <= 1, constraint_name("one_pool_option", w.name)
        for c in w.candidates:
            for p in range(spec.periods):
                replicas = decisions.replicas[w.name, c.id, p]
                bound = float(replicas.upBound or 0)
                if bound <= 0:
                    continue
                problem += (
                    linear_sum([(replicas, 1.0), *pool_terms(decisions, w, bound)]) <= bound,
                    constraint_name("pools_exclusive", w.name, c.id, period_label(p)),
                )


def add_gpus_held_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_{w, c on k} r_wcp·g_c ≤ R_k + O_kp + S_kp for every GPU type k and period p."""
    for gpu in spec.gpus:
        for p in range(spec.periods):
            problem += (
                gpus_used(spec, decisions, gpu, p) <= gpus_held(decisions, gpu, p),
                constraint_name("gpus_held", gpu, period_label(p)),
            )


def add_gpu_inventory_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """R_k + O_kp + S_kp ≤ inventory_kp (+ shortfall_kp when diagnosing) where inventory is given."""
    for gpu in spec.gpus:
        for p in range(spec.periods):
            limit = spec.inventory_limit(gpu, p)
            if limit is None:
                continue
            shortfall = decisions.inventory_shortfall.get((gpu, p))
            allowance = limit if shortfall is None else limit + shortfall
            problem += gpus_held(decisions, gpu, p) <= allowance, constraint_name("gpu_inventory", gpu, period_label(p))


def add_budget_constraints(
    problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions, budget_usd_per_day: float
) -> None:
    """total cost ≤ budget_usd_per_day · horizon_hours / 24"""
    problem += fleet_cost_usd(spec, decisions) <= budget_usd_per_day * spec.horizon_hours / HOURS_PER_DAY, "budget"


def build_fleet_problem(
    spec: FleetSpec, *, with_budget: bool = True, elastic_inventory: bool = False, cover_cuts: bool = False
) -> tuple[pulp.LpProblem, FleetDecisions]:
    """The fleet MILP (with inventory shortfall minimised instead of cost when elastic); with
    `cover_cuts`, strengthened by `add_cover_cost_cuts` (same integer optimum, tighter relaxation)."""
    problem = pulp.LpProblem("fleet", pulp.LpMinimize)
    decisions = add_fleet_variables(problem, spec, elastic_inventory=elastic_inventory)
    add_meet_demand_constraints(problem, spec, decisions)
    if spec.constraints.n_plus_one:
        add_n_plus_one_constraints(problem, spec, decisions)
    if spec.constraints.min_replicas > 0:
        add_min_replicas_constraints(problem, spec, decisions)
    add_pool_option_constraints(problem, spec, decisions)
    add_gpus_held_constraints(problem, spec, decisions)
    add_gpu_inventory_constraints(problem, spec, decisions)
    if cover_cuts:
        add_cover_cost_cuts(problem, spec, decisions)
    if with_budget and spec.constraints.budget_usd_per_day is not None:
        add_budget_constraints(problem, spec, decisions, spec.constraints.budget_usd_per_day)
    if elastic_inventory:
        problem.setObjective(linear_sum((variable, 1) for variable in decisions.inventory_shortfall.values()))
    else:
        problem.setObjective(fleet_cost_usd(spec, decisions))
    return problem, decisions
