"""The single-workload plan: integer replicas of candidate configurations at minimum cost per hour.

A candidate is one (GPU, precision, tp, batch limit, chunk budget) that can hold the model and
meet the SLOs, with the largest per-replica rate at which it still does (`max_rps_at_slo`).
The MILP on paper, with r_c the replicas of candidate c, u_c ∈ {0, 1} whether c is used, λ the
arrival rate, μ_c = max_rps_at_slo, g_c = GPUs per replica, p_c = USD per replica-hour:

    minimise    Σ_c r_c·p_c                                   (then, at that cost, Σ_c r_c·g_c)
    subject to  Σ_c r_c·μ_c ≥ λ                               meet_demand
                r_c ≤ R_c·u_c,  Σ_c u_c = 1 (single config)    one_configuration
                Σ_c r_c·μ_c − m ≥ λ,  m ≥ μ_c·u_c              n_plus_one
                Σ_c r_c ≥ min_replicas                        min_replicas
                Σ_c r_c·g_c ≤ max_gpus                        max_gpus
                Σ_c r_c·p_c ≤ budget                          budget
                Σ_{c on gpu k} r_c·g_c ≤ inventory_k           gpu_inventory__<k>
                Σ_c r_c = R                                   pin_replicas (a pinned replica count)

In instance mode (`Candidate.instance_offers`, planner/packing.py) a candidate's replicas are bought
as whole instances: integers m_{c,t} per instance type t holding k_t replicas each at P_t per
instance-hour, Σ_t m_{c,t}·k_t ≥ r_c (no replica straddles instances), and its cost term is
Σ_t m_{c,t}·P_t instead of r_c·p_c — in the objective, the budget and the cost cap alike.

R_c bounds r_c without cutting off any optimum (see `replica_bound`). Ties in cost are broken
toward fewer GPUs by a lexicographic re-solve: minimise GPUs subject to cost ≤ the optimal cost.
An infeasible problem is re-solved with each constraint family left out to name the smallest
relaxation that would make it feasible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pulp

from planner.errors import InfeasiblePlanError, PlannerInputError, SolverError
from planner.milp import (
    ModelSize,
    SolverReport,
    constraint_name,
    integer_value,
    model_size,
    solve,
)
from planner.plan_records import (
    Candidate,
    ConstraintSlack,
    PlanConstraints,
    PlanRow,
    PlanSolution,
    _binds,
    _finite_positive,
    candidate_id,
)

#: The optimizer's public names, with the records it takes and gives (planner/plan_records.py).
__all__ = [
    "RELAXABLE_FAMILIES",
    "Candidate",
    "ConstraintSlack",
    "PlanConstraints",
    "PlanDecisions",
    "PlanObjective",
    "PlanRow",
    "PlanSolution",
    "add_budget_constraints",
    "add_configuration_constraints",
    "add_cost_cap_constraints",
    "add_gpu_inventory_constraints",
    "add_max_gpus_constraints",
    "add_meet_demand_constraints",
    "add_min_replicas_constraints",
    "add_n_plus_one_constraints",
    "add_plan_variables",
    "build_plan_problem",
    "candidate_id",
    "capacity_rps",
    "cost_usd_per_hour",
    "diagnose_infeasible_plan",
    "gpus_used",
    "plan_constraint_slacks",
    "replica_bound",
    "set_plan_objective",
    "solve_plan",
]

PlanObjective = Literal["cost", "gpus", "inventory_shortfall", "most_replicas"]

#: Constraint families that can be left out when diagnosing infeasibility, in the order the
#: error message prefers them (hardware first, then money, then resilience).
RELAXABLE_FAMILIES: tuple[str, ...] = ("gpu_inventory", "max_gpus", "budget", "n_plus_one", "min_replicas", "pin.replicas")

#: Relative tolerance on the optimal cost when re-solving for the fewest GPUs at that cost;
#: far below a cent per hour on any real plan, far above the solver's feasibility tolerance.
_COST_TIE_TOLERANCE = 1e-7


# --- the model ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanDecisions:
    """The decision variables of one built plan problem."""

    candidates: tuple[Candidate, ...]
    replicas: Mapping[str, pulp.LpVariable]
    use: Mapping[str, pulp.LpVariable]
    largest_replica_rps: pulp.LpVariable | None
    inventory_shortfall: Mapping[str, pulp.LpVariable]
    #: per instance-mode candidate, its instance count of each offer (in `Candidate.instance_offers` order)
    instances: Mapping[str, tuple[pulp.LpVariable, ...]] = field(default_factory=dict)


def replica_bound(candidate: Candidate, arrival_rate_rps: float, constraints: PlanConstraints) -> int:
    """R_c = max(min_replicas, ⌈λ/μ_c⌉ + [n_plus_one], 1): no optimum uses more replicas of c.

    With r_c > R_c, the plan of R_c replicas of c alone meets demand, N+1 and min_replicas,
    uses fewer GPUs and costs less, so it is strictly better under every objective used here.
    """
    needed = math.ceil(arrival_rate_rps / candidate.max_rps_at_slo) + (1 if constraints.n_plus_one else 0)
    return max(constraints.min_replicas, needed, constraints.pinned_replicas or 1, 1)


def add_plan_variables(
    problem: pulp.LpProblem,
    candidates: Sequence[Candidate],
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    *,
    with_n_plus_one: bool,
) -> PlanDecisions:
    """replicas[c] ∈ {0…R_c}, use[c] ∈ {0, 1}, largest_replica_rps ≥ 0 (only with N+1)."""
    replicas = {
        c.id: problem.add_variable(
            constraint_name("replicas", c.id),
            lowBound=0,
            upBound=replica_bound(c, arrival_rate_rps, constraints),
            cat=pulp.LpInteger,
        )
        for c in candidates
    }
    use = {c.id: problem.add_variable(constraint_name("use", c.id), cat=pulp.LpBinary) for c in candidates}
    largest = (
        problem.add_variable("largest_replica_rps", lowBound=0, upBound=max(c.max_rps_at_slo for c in candidates))
        if with_n_plus_one
        else None
    )
    instances = {
        c.id: tuple(
            problem.add_variable(
                constraint_name("instances", f"{c.id}/{offer.instance.name}"),
                lowBound=0,
                upBound=math.ceil(replicas[c.id].upBound / offer.replicas_per_instance),
                cat=pulp.LpInteger,
            )
            for offer in c.instance_offers
        )
        for c in candidates
        if c.instance_offers
    }
    for c in candidates:
        if c.instance_offers:  # Σ_t m_{c,t}·k_t ≥ r_c: whole instances hold every replica
            held = pulp.lpSum(m * o.replicas_per_instance for m, o in zip(instances[c.id], c.instance_offers, strict=True))
            problem += held >= replicas[c.id], constraint_name("instances_hold", c.id)
    return PlanDecisions(tuple(candidates), replicas, use, largest, {}, instances)


def capacity_rps(decisions: PlanDecisions) -> pulp.LpAffineExpression:
    """Σ_c r_c·μ_c"""
    return pulp.lpSum(decisions.replicas[c.id] * c.max_rps_at_slo for c in decisions.candidates)


def gpus_used(decisions: PlanDecisions, gpu: str | None = None) -> pulp.LpAffineExpression:
    """Σ_c r_c·g_c (over candidates on `gpu` when given)"""
    return pulp.lpSum(decisions.replicas[c.id] * c.gpus_per_replica for c in decisions.candidates if gpu is None or c.gpu == gpu)


def cost_usd_per_hour(decisions: PlanDecisions) -> pulp.LpAffineExpression:
    """Σ_c r_c·p_c, with Σ_t m_{c,t}·P_t for a candidate bought by the instance"""
    return pulp.lpSum(
        pulp.lpSum(m * o.usd_per_hour for m, o in zip(decisions.instances[c.id], c.instance_offers, strict=True))
        if c.instance_offers
        else decisions.replicas[c.id] * c.cost_usd_per_hour
        for c in decisions.candidates
    )


def add_meet_demand_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, arrival_rate_rps: float) -> None:
    """Σ_c r_c·μ_c ≥ λ — every replica stays at or below the rate at which it meets the SLOs."""
    problem += capacity_rps(decisions) >= arrival_rate_rps, "meet_demand"


def add_configuration_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, *, mixed_fleet: bool) -> None:
    """r_c ≤ R_c·u_c for every c; and Σ_c u_c = 1 unless the fleet may be mixed."""
    for c in decisions.candidates:
        replicas = decisions.replicas[c.id]
        problem += replicas <= replicas.upBound * decisions.use[c.id], constraint_name("use_links_replicas", c.id)
    if not mixed_fleet:
        problem += pulp.lpSum(decisions.use.values()) == 1, "one_configuration"


def add_n_plus_one_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, arrival_rate_rps: float) -> None:
    """Σ_c r_c·μ_c − m ≥ λ with m ≥ μ_c·u_c: demand still met after losing the largest replica."""
    largest = decisions.largest_replica_rps
    if largest is None:
        raise PlannerInputError("N+1 needs the largest_replica_rps variable (planner bug)")
    for c in decisions.candidates:
        problem += largest >= c.max_rps_at_slo * decisions.use[c.id], constraint_name("largest_replica", c.id)
    problem += capacity_rps(decisions) - largest >= arrival_rate_rps, "n_plus_one"


def add_min_replicas_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, min_replicas: int) -> None:
    """Σ_c r_c ≥ min_replicas"""
    problem += pulp.lpSum(decisions.replicas.values()) >= min_replicas, "min_replicas"


def add_max_gpus_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, max_gpus: int) -> None:
    """Σ_c r_c·g_c ≤ max_gpus"""
    problem += gpus_used(decisions) <= max_gpus, "max_gpus"


def add_budget_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, budget_usd_per_hour: float) -> None:
    """Σ_c r_c·p_c ≤ budget_usd_per_hour"""
    problem += cost_usd_per_hour(decisions) <= budget_usd_per_hour, "budget"


def add_gpu_inventory_constraints(
    problem: pulp.LpProblem, decisions: PlanDecisions, inventory: Mapping[str, int], *, elastic: bool
) -> PlanDecisions:
    """Σ_{c on gpu k} r_c·g_c ≤ inventory_k (+ shortfall_k ≥ 0 when elastic, for diagnosis)."""
    shortfall: dict[str, pulp.LpVariable] = {}
    gpus_offered = {c.gpu for c in decisions.candidates}
    for gpu, limit in sorted(inventory.items()):
        if gpu not in gpus_offered:
            continue
        allowance: pulp.LpAffineExpression | int = limit
        if elastic:
            shortfall[gpu] = problem.add_variable(constraint_name("inventory_shortfall", gpu), lowBound=0, cat=pulp.LpInteger)
            allowance = limit + shortfall[gpu]
        problem += gpus_used(decisions, gpu) <= allowance, constraint_name("gpu_inventory", gpu)
    return PlanDecisions(
        decisions.candidates, decisions.replicas, decisions.use, decisions.largest_replica_rps, shortfall, decisions.instances
    )


def add_cost_cap_constraints(problem: pulp.LpProblem, decisions: PlanDecisions, cost_cap_usd_per_hour: float) -> None:
    """Σ_c r_c·p_c ≤ the optimal cost (stage two of the lexicographic objective)."""
    problem += cost_usd_per_hour(decisions) <= cost_cap_usd_per_hour, "at_optimal_cost"


def set_plan_objective(problem: pulp.LpProblem, decisions: PlanDecisions, objective: PlanObjective) -> None:
    """cost: Σ r·p; gpus: Σ r·g; inventory_shortfall: Σ shortfall_k; most_replicas: −Σ r."""
    if objective == "cost":
        problem.setObjective(cost_usd_per_hour(decisions))
    elif objective == "gpus":
        problem.setObjective(gpus_used(decisions))
    elif objective == "inventory_shortfall":
        problem.setObjective(pulp.lpSum(decisions.inventory_shortfall.values()))
    else:
        problem.setObjective(-pulp.lpSum(decisions.replicas.values()))


def build_plan_problem(
    candidates: Sequence[Candidate],
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    *,
    objective: PlanObjective = "cost",
    relax: frozenset[str] = frozenset(),
    cost_cap_usd_per_hour: float | None = None,
) -> tuple[pulp.LpProblem, PlanDecisions]:
    """The plan MILP; `relax` leaves constraint families out (to diagnose infeasibility)."""
    problem = pulp.LpProblem("plan", pulp.LpMinimize)
    with_n_plus_one = constraints.n_plus_one and "n_plus_one" not in relax
    decisions = add_plan_variables(problem, candidates, arrival_rate_rps, constraints, with_n_plus_one=with_n_plus_one)
    add_meet_demand_constraints(problem, decisions, arrival_rate_rps)
    add_configuration_constraints(problem, decisions, mixed_fleet=constraints.mixed_fleet)
    if with_n_plus_one:
        add_n_plus_one_constraints(problem, decisions, arrival_rate_rps)
    if constraints.min_replicas > 0 and "min_replicas" not in relax:
        add_min_replicas_constraints(problem, decisions, constraints.min_replicas)
    if constraints.max_gpus is not None and "max_gpus" not in relax:
        add_max_gpus_constraints(problem, decisions, constraints.max_gpus)
    if constraints.budget_usd_per_hour is not None and "budget" not in relax:
        add_budget_constraints(problem, decisions, constraints.budget_usd_per_hour)
    if constraints.inventory and "gpu_inventory" not in relax:
        decisions = add_gpu_inventory_constraints(
            problem, decisions, constraints.inventory, elastic=objective == "inventory_shortfall"
        )
    if constraints.pinned_replicas is not None and "pin.replicas" not in relax:
        problem += pulp.lpSum(decisions.replicas.values()) == constraints.pinned_replicas, "pin_replicas"
    if cost_cap_usd_per_hour is not None:
        add_cost_cap_constraints(problem, decisions, cost_cap_usd_per_hour)
    set_plan_objective(problem, decisions, objective)
    return problem, decisions


# --- solving --------------------------------------------------------------------------------


def solve_plan(
    candidates: Sequence[Candidate],
    arrival_rate_rps: float,
    constraints: PlanConstraints = PlanConstraints(),
    *,
    time_limit_s: float = 10.0,
    solver_name: str | None = None,
) -> PlanSolution:
    """The cheapest plan covering `arrival_rate_rps` within `constraints` (fewest GPUs among ties).

    Raises InfeasiblePlanError (with the violated family and the smallest relaxation) when no
    plan exists, SolverError when the solver gives no usable answer within `time_limit_s`.
    """
    candidates = _validated_candidates(candidates, arrival_rate_rps)
    problem, decisions = build_plan_problem(candidates, arrival_rate_rps, constraints, objective="cost")
    size = model_size(problem, candidates=len(candidates))
    first = solve(problem, time_limit_s=time_limit_s, solver_name=solver_name)
    if first.status == "no_solution":
        raise _timed_out(first.solver_name, time_limit_s)
    if first.status == "infeasible":
        raise diagnose_infeasible_plan(
            candidates, arrival_rate_rps, constraints, time_limit_s=time_limit_s, solver_name=first.solver_name
        )
    optimal_cost = float(pulp.value(cost_usd_per_hour(decisions)))
    replicas = {c.id: integer_value(decisions.replicas[c.id]) for c in candidates}
    cap = optimal_cost * (1 + _COST_TIE_TOLERANCE) + _COST_TIE_TOLERANCE
    tie_problem, tie_decisions = build_plan_problem(
        candidates, arrival_rate_rps, constraints, objective="gpus", cost_cap_usd_per_hour=cap
    )
    second = solve(tie_problem, time_limit_s=time_limit_s, solver_name=first.solver_name)
    if second.status in ("optimal", "feasible"):
        replicas = {c.id: integer_value(tie_decisions.replicas[c.id]) for c in candidates}
    report = SolverReport(
        name=first.solver_name,
        status="optimal" if first.status == "optimal" and second.status == "optimal" else "feasible",
        solve_s=first.solve_s + second.solve_s,
        mip_gap=first.mip_gap,
    )
    return _plan_solution(candidates, arrival_rate_rps, constraints, replicas, first.objective, report, size)


def _timed_out(solver_name: str, time_limit_s: float) -> SolverError:
    return SolverError(
        f"{solver_name} found no feasible plan within {time_limit_s} s; raise the time limit or offer fewer candidates",
        solver=solver_name,
        time_limit_s=time_limit_s,
    )


def _validated_candidates(candidates: Sequence[Candidate], arrival_rate_rps: float) -> tuple[Candidate, ...]:
    if not _finite_positive(arrival_rate_rps):
        raise PlannerInputError(f"arrival_rate_rps must be finite and > 0, got {arrival_rate_rps}")
    candidates = tuple(candidates)
    if not candidates:
        raise InfeasiblePlanError(
            "no candidate configuration can hold the model and meet the SLOs at any load: "
            "allow more GPU types, precisions or tensor-parallel degrees, or relax the SLOs",
            constraint="candidates",
        )
    ids = [c.id for c in candidates]
    if len(set(ids)) != len(ids):
        raise PlannerInputError("candidate ids must be unique", duplicates=sorted({i for i in ids if ids.count(i) > 1}))
    return candidates


def _plan_solution(
    candidates: tuple[Candidate, ...],
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    replicas: Mapping[str, int],
    objective: float | None,
    report: SolverReport,
    size: ModelSize,
) -> PlanSolution:
    chosen = [(c, replicas[c.id]) for c in candidates if replicas[c.id] > 0]
    capacity = sum(c.max_rps_at_slo * n for c, n in chosen)
    saturation = sum(c.saturation_rps * n for c, n in chosen)
    rows = []
    for c, n in chosen:
        offered = arrival_rate_rps * c.max_rps_at_slo * n / capacity  # traffic split in proportion to capacity
        rows.append(
            PlanRow(
                candidate=c,
                replicas=n,
                gpus=n * c.gpus_per_replica,
                cost_usd_per_hour=c.row_cost_usd_per_hour(n),
                capacity_rps=n * c.max_rps_at_slo,
                offered_rps=offered,
                target_rho=offered / n / c.saturation_rps,  # per-replica rate / per-replica saturation
            )
        )
    cost = sum(row.cost_usd_per_hour for row in rows)
    return PlanSolution(
        rows=tuple(rows),
        arrival_rate_rps=arrival_rate_rps,
        cost_usd_per_hour=cost,
        objective_usd_per_hour=cost if objective is None else objective,
        gpus_total=sum(row.gpus for row in rows),
        replicas_total=sum(row.replicas for row in rows),
        capacity_rps=capacity,
        target_rho=arrival_rate_rps / saturation,
        constraints=plan_constraint_slacks(candidates, arrival_rate_rps, constraints, replicas),
        solver=report,
        model_size=size,
    )


def plan_constraint_slacks(
    candidates: Sequence[Candidate],
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    replicas: Mapping[str, int],
) -> tuple[ConstraintSlack, ...]:
    """Every constraint of the plan at the solution `replicas`, with slack and whether it binds."""
    chosen = tuple(c for c in candidates if replicas.get(c.id, 0) > 0)
    # Replicas that could still be added: any candidate in a mixed fleet, else the chosen one.
    at = _AtSolution(chosen=chosen, addable=tuple(candidates) if constraints.mixed_fleet else chosen, replicas=replicas)
    return (
        *_demand_slacks(at, arrival_rate_rps, constraints),
        *_min_replicas_slacks(at, constraints),
        *_max_gpus_slacks(at, constraints),
        *_budget_slacks(at, constraints),
        *_inventory_slacks(at, constraints),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _AtSolution:
    """The candidates a solution runs replicas of, those a replica could still be added to, and the
    solution's replica counts: what every constraint's slack is read from."""

    chosen: tuple[Candidate, ...]
    addable: tuple[Candidate, ...]
    replicas: Mapping[str, int]


def _demand_slacks(at: _AtSolution, arrival_rate_rps: float, constraints: PlanConstraints) -> list[ConstraintSlack]:
    """Demand met, and with N+1 demand met after losing the largest replica; each binds when less than
    the smallest chosen replica's rate is left over (one replica fewer would not do)."""
    capacity = sum(c.max_rps_at_slo * at.replicas[c.id] for c in at.chosen)
    smallest_rate = min((c.max_rps_at_slo for c in at.chosen), default=math.inf)
    slacks = [
        ConstraintSlack(
            family="meet_demand",
            name="meet_demand",
            value=capacity,
            limit=arrival_rate_rps,
            slack=capacity - arrival_rate_rps,
            unit="rps",
            binding=capacity - arrival_rate_rps < smallest_rate,
        )
    ]
    if constraints.n_plus_one:
        after_loss = capacity - max((c.max_rps_at_slo for c in at.chosen), default=0.0)
        slacks.append(
            ConstraintSlack(
                family="n_plus_one",
                name="n_plus_one",
                value=after_loss,
                limit=arrival_rate_rps,
                slack=after_loss - arrival_rate_rps,
                unit="rps",
                binding=after_loss - arrival_rate_rps < smallest_rate,
            )
        )
    return slacks


def _min_replicas_slacks(at: _AtSolution, constraints: PlanConstraints) -> list[ConstraintSlack]:
    if constraints.min_replicas <= 0:
        return []
    total = sum(at.replicas[c.id] for c in at.chosen)
    return [
        ConstraintSlack(
            family="min_replicas",
            name="min_replicas",
            value=total,
            limit=constraints.min_replicas,
            slack=total - constraints.min_replicas,
            unit="replicas",
            binding=total == constraints.min_replicas,
        )
    ]


def _max_gpus_slacks(at: _AtSolution, constraints: PlanConstraints) -> list[ConstraintSlack]:
    if constraints.max_gpus is None:
        return []
    used = sum(c.gpus_per_replica * at.replicas[c.id] for c in at.chosen)
    step = min((c.gpus_per_replica for c in at.addable), default=math.inf)
    return [
        ConstraintSlack(
            family="max_gpus",
            name="max_gpus",
            value=used,
            limit=constraints.max_gpus,
            slack=constraints.max_gpus - used,
            unit="gpus",
            binding=_binds(constraints.max_gpus - used, step),
        )
    ]


def _budget_slacks(at: _AtSolution, constraints: PlanConstraints) -> list[ConstraintSlack]:
    if constraints.budget_usd_per_hour is None:
        return []
    cost = sum(c.row_cost_usd_per_hour(at.replicas[c.id]) for c in at.chosen)
    step = min((c.cost_usd_per_hour for c in at.addable), default=math.inf)
    slack = constraints.budget_usd_per_hour - cost
    return [
        ConstraintSlack(
            family="budget",
            name="budget",
            value=cost,
            limit=constraints.budget_usd_per_hour,
            slack=slack,
            unit="usd_per_hour",
            binding=_binds(slack, step),
        )
    ]


def _inventory_slacks(at: _AtSolution, constraints: PlanConstraints) -> list[ConstraintSlack]:
    """Every inventory limit the request set, used or not."""
    slacks = []
    for gpu, limit in sorted(constraints.inventory.items()):
        used = sum(c.gpus_per_replica * at.replicas[c.id] for c in at.chosen if c.gpu == gpu)
        step = min((c.gpus_per_replica for c in at.addable if c.gpu == gpu), default=math.inf)
        slacks.append(
            ConstraintSlack(
                family="gpu_inventory",
                name=constraint_name("gpu_inventory", gpu),
                value=used,
                limit=limit,
                slack=limit - used,
                unit="gpus",
                binding=_binds(limit - used, step),
            )
        )
    return slacks


# --- infeasibility ----------------------------------------------------------------------------


def _present_families(constraints: PlanConstraints) -> list[str]:
    present = {
        "gpu_inventory": bool(constraints.inventory),
        "max_gpus": constraints.max_gpus is not None,
        "budget": constraints.budget_usd_per_hour is not None,
        "n_plus_one": constraints.n_plus_one,
        "min_replicas": constraints.min_replicas > 1,
        "pin.replicas": constraints.pinned_replicas is not None,
    }
    return [family for family in RELAXABLE_FAMILIES if present[family]]


_OBJECTIVE_FOR_RELAXATION: dict[str, PlanObjective] = {
    "gpu_inventory": "inventory_shortfall",
    "max_gpus": "gpus",
    "budget": "cost",
    "n_plus_one": "cost",
    "min_replicas": "most_replicas",
    "pin.replicas": "cost",
}


def diagnose_infeasible_plan(
    candidates: Sequence[Candidate],
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    *,
    time_limit_s: float,
    solver_name: str | None = None,
) -> InfeasiblePlanError:
    """Name the violated constraint family and the smallest relaxation that makes the plan feasible.

    Each family is left out in turn and the problem re-solved for the level of that family
    it needs (fewest GPUs, cheapest cost, least inventory shortfall, most replicas that fit).
    The first family (in `RELAXABLE_FAMILIES` order) whose relaxation alone is feasible is
    named in `detail`; all single relaxations are in the `relaxations` extension.
    """
    relaxations: list[dict[str, object]] = []
    for family in _present_families(constraints):
        objective = _OBJECTIVE_FOR_RELAXATION[family]
        relax = frozenset() if family == "gpu_inventory" else frozenset({family})
        problem, decisions = build_plan_problem(candidates, arrival_rate_rps, constraints, objective=objective, relax=relax)
        if solve(problem, time_limit_s=time_limit_s, solver_name=solver_name).status in ("infeasible", "no_solution"):
            continue
        relaxations.append(_relaxation(family, constraints, decisions))
    if not relaxations:
        families = _present_families(constraints)
        return InfeasiblePlanError(
            "no plan meets the constraints together and no single one of them relaxed is enough: "
            f"{', '.join(families)} conflict; relax several of them",
            constraint="combination",
            families=families,
            relaxations=[],
        )
    first = relaxations[0]
    return InfeasiblePlanError(str(first["detail"]), constraint=first["constraint"], relaxation=first, relaxations=relaxations)


def _relaxation(family: str, constraints: PlanConstraints, decisions: PlanDecisions) -> dict[str, object]:
    chosen = [(c, integer_value(decisions.replicas[c.id])) for c in decisions.candidates]
    gpus = sum(c.gpus_per_replica * n for c, n in chosen)
    cost = sum(c.row_cost_usd_per_hour(n) for c, n in chosen)
    if family == "gpu_inventory":
        short = {gpu: integer_value(v) for gpu, v in decisions.inventory_shortfall.items() if integer_value(v) > 0}
        parts = [
            f"{gpu} needs {constraints.inventory[gpu] + n} GPUs but inventory is {constraints.inventory[gpu]} "
            f"({n} short): raise the {gpu} inventory to {constraints.inventory[gpu] + n}"
            for gpu, n in sorted(short.items())
        ]
        return {
            "constraint": "gpu_inventory",
            "detail": "; ".join(parts),
            "gpus_short": short,
            "raise_inventory_to": {gpu: constraints.inventory[gpu] + n for gpu, n in short.items()},
        }
    if family == "max_gpus":
        return {
            "constraint": "max_gpus",
            "detail": f"needs {gpus} GPUs but max_gpus is {constraints.max_gpus}: raise max_gpus to {gpus}",
            "needed": gpus,
            "limit": constraints.max_gpus,
        }
    if family == "budget":
        needed = math.ceil(cost * 100 - 1e-6) / 100  # whole cents, rounded up so the budget is enough
        return {
            "constraint": "budget",
            "detail": (
                f"the cheapest feasible plan costs ${cost:.2f}/h but budget_usd_per_hour is "
                f"${constraints.budget_usd_per_hour:.2f}/h: raise the budget to ${needed:.2f}/h"
            ),
            "needed": cost,
            "limit": constraints.budget_usd_per_hour,
        }
    if family == "n_plus_one":
        return {
            "constraint": "n_plus_one",
            "detail": (
                f"no plan keeps the demand covered with one replica lost within the other constraints; "
                f"without n_plus_one the cheapest plan costs ${cost:.2f}/h on {gpus} GPUs"
            ),
            "cost_without_usd_per_hour": cost,
        }
    if family == "pin.replicas":
        needed = sum(n for _, n in chosen)
        return {
            "constraint": "pin.replicas",
            "detail": (
                f"no plan of exactly {constraints.pinned_replicas} replicas meets the demand within the other constraints; "
                f"without the pin the cheapest plan has {needed} replicas: set constraints.pin.replicas to {needed} or unpin it"
            ),
            "needed": needed,
            "limit": constraints.pinned_replicas,
        }
    most = sum(n for _, n in chosen)
    return {
        "constraint": "min_replicas",
        "detail": (
            f"at most {most} replicas fit within the other constraints but min_replicas is "
            f"{constraints.min_replicas}: lower min_replicas to {most}"
        ),
        "needed": most,
        "limit": constraints.min_replicas,
    }
