"""The fleet search: `solve_fleet` and its stages, from the LP relaxations to the whole MILP.

`solve_fleet` runs in stages, each only while the best fleet found is outside the relative gap
of the proved bound: the two LP relaxations (plain, for the duals; with cover cuts, for the
bound), fallback fleets built without the solver (planner/fleet_rounding.py), the periods solved
one by one with the reservations fixed (`fleet_with_reservations_fixed`), the MILP restricted to
a neighbourhood, the whole MILP. Each stage is a function of its own below; `_Search` carries
the incumbent and the bound from one to the next. The model is planner/fleet_formulation.py's,
the report planner/fleet_report.py's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import pulp

from planner.errors import SolverError
from planner.fleet_formulation import FleetDecisions, add_cover_cost_cuts, build_fleet_problem, fleet_cost_usd, presolve
from planner.fleet_report import (
    cost_breakdown,
    demand_and_inventory_duals,
    diagnose_infeasible_fleet,
    lp_shadow_prices,
    period_schedule,
)
from planner.fleet_rounding import (
    ROUNDING_SLACK,
    cover_fleet,
    fleet_from_replicas,
    rounded_fleet,
    rounded_reservations,
    trim_idle_replicas,
    value_at,
    whole_count,
)
from planner.fleet_spec import (
    HOURS_PER_DAY,
    Checkpoint,
    FleetConstraints,
    FleetPlan,
    FleetSpec,
    FleetWorkload,
    GpuPeriod,
    ReplicaKey,
    WorkloadCandidate,
    no_checkpoint,
)
from planner.milp import ModelSize, Relaxation, SolverReport, integer_value, model_size, solve

#: Least time the first integer stage gets after the LP relaxations, whatever the overall limit;
#: a later stage that would get less is skipped while a fleet is in hand (a MILP stage spends a
#: good part of a second handing the model over: 0.2–0.9 s past a 0.75–1 s limit on the N+1
#: synthetic benchmark, 23 724 columns, measured 2026-12-01).
_MIN_MILP_TIME_S = 1.0

#: The MILP stops once its incumbent is proved within this fraction of the optimum (the gap is
#: reported with every plan). 1 % of a fleet's cost is below the 1 % tolerance at which μ itself
#: is known (planner/rate_search.py MU_RELATIVE_TOLERANCE), so a smaller gap buys nothing real.
FLEET_RELATIVE_GAP = 0.01

#: Share of the time left that each stage but the last (the whole MILP) may use. The stages before
#: it search the neighbourhood where good fleets are found (on the `shared` benchmark the whole
#: MILP finds none as good in 10 s), and the whole MILP gets little time anyway once the
#: hand-overs are paid; 3/4, a judgement, not tuned.
RESTRICTED_SHARE = 0.75

#: The cutoff row allows this relative excess over the fallback fleet's cost, so that fleet stays
#: feasible for the solver despite rounding in its row activity.
_CUTOFF_SLACK = 1e-7


# --- solving ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Relaxed:
    """What the two LP relaxations leave for the integer stages."""

    solver_name: str  # the solver that answered, used for every later stage
    lp_values: Mapping[str, float]  # the plain relaxation's values
    cut_values: Mapping[str, float]  # the cut relaxation's values (the plain ones if it failed)
    duals: Mapping[str, float]  # the plain relaxation's meet_demand and gpu_inventory row duals
    bound: float  # the better of the two relaxations' optima: a lower bound on every fleet's cost
    solve_s: float


@dataclass(slots=True, kw_only=True)
class _Search:
    """The incumbent and the proved bound as the stages pass them on. Mutable on purpose: every
    stage reads the same best fleet and bound and may improve either."""

    cost: pulp.LpAffineExpression  # the fleet's cost over the horizon, in the problem's variables
    bound: float  # proved lower bound on the optimum
    solve_s: float  # solver seconds so far
    best: Mapping[str, float] | None = None  # the cheapest fleet found, by variable name

    def cost_usd(self, fleet: Mapping[str, float]) -> float:
        return value_at(self.cost, fleet)

    def gap(self) -> float:
        """The best fleet's relative excess over the bound (inf without one)."""
        if self.best is None:
            return math.inf
        usd = self.cost_usd(self.best)
        return max(0.0, usd - self.bound) / max(abs(usd), 1e-12)

    def is_cheaper(self, fleet: Mapping[str, float]) -> bool:
        return self.best is None or self.cost_usd(fleet) < self.cost_usd(self.best)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Clock:
    """The search's deadline, and what is kept back from every stage: about what handing the
    model over once more and reading the answer costs (it took less than building and solving
    the LPs did), and the result tables."""

    deadline: float  # time.perf_counter() seconds
    setup_s: float

    def stage_s(self, share: float, *, first: bool, have_fleet: bool) -> float | None:
        """Seconds for the next stage: `share` of the time left less `setup_s`; at least
        _MIN_MILP_TIME_S for the first stage or while no fleet is in hand, else None (skip it)
        when less than that is left."""
        left_s = share * max(self.deadline - time.perf_counter() - self.setup_s, 0.0)
        if left_s >= _MIN_MILP_TIME_S:
            return left_s
        return _MIN_MILP_TIME_S if first or not have_fleet else None


def solve_fleet(
    spec: FleetSpec,
    *,
    time_limit_s: float = 10.0,
    solver_name: str | None = None,
    shadow_prices: bool = True,
    relative_gap: float = FLEET_RELATIVE_GAP,
    checkpoint: Checkpoint = no_checkpoint,
) -> FleetPlan:
    """The cheapest fleet schedule for `spec`, with costs, utilisation and (optionally) shadow prices.

    The search stops once a fleet is proved within `relative_gap` of the optimum ("optimal", gap
    reported), or at `time_limit_s` with the best fleet found ("feasible", gap against the proved
    bound: the better of the LP relaxations' optima and the whole MILP's dual bound). It runs in
    stages, each only while the best fleet is outside the gap: rounded fallbacks, the periods
    solved one by one with the reservations fixed (`fleet_with_reservations_fixed`), the MILP
    restricted to a neighbourhood, the whole MILP.

    `checkpoint` is called between stages; whatever it raises ends the search (see `Checkpoint`).

    Raises InfeasiblePlanError naming the workload, period and GPU type that fall short (or the
    budget), SolverError when the solver gives no usable answer within `time_limit_s`.
    """
    started = time.perf_counter()
    presolved, dropped = presolve(spec)
    checkpoint()
    problem, decisions = build_fleet_problem(presolved)
    size = model_size(problem, candidates=sum(len(w.candidates) for w in presolved.workloads))
    checkpoint()
    relaxed = _relaxations(
        presolved, problem, decisions, time_limit_s=time_limit_s, solver_name=solver_name, checkpoint=checkpoint
    )
    search = _Search(cost=fleet_cost_usd(presolved, decisions), bound=relaxed.bound, solve_s=relaxed.solve_s)
    budget = presolved.constraints.budget_usd_per_day
    budget_usd = math.inf if budget is None else budget * presolved.horizon_hours / HOURS_PER_DAY
    # The fallbacks and the period stages build fleets from replica counts alone, which know nothing
    # of the pool options' binaries (and a pool option links every period): with options, the whole MILP.
    pools = presolved.has_pool_options
    if not pools:
        search.best = _best_fallback(presolved, decisions, relaxed, search, budget_usd=budget_usd)
    clock = _Clock(deadline=started + time_limit_s, setup_s=time.perf_counter() - started)
    if not pools:
        _period_stages(
            presolved, decisions, relaxed, search, clock, budget_usd=budget_usd, relative_gap=relative_gap, checkpoint=checkpoint
        )
    for restricted in (False,) if pools else (True, False):
        checkpoint()
        stage_s = clock.stage_s(RESTRICTED_SHARE if restricted else 1.0, first=False, have_fleet=search.best is not None)
        if search.gap() > relative_gap and stage_s is not None:
            _milp_stage(
                presolved,
                problem,
                decisions,
                relaxed,
                search,
                stage_s=stage_s,
                restricted=restricted,
                time_limit_s=time_limit_s,
                relative_gap=relative_gap,
                checkpoint=checkpoint,
            )
    checkpoint()
    if search.best is None:
        raise SolverError(
            f"{relaxed.solver_name} found no feasible fleet within {time_limit_s} s and rounding the LP "
            "relaxation broke an inventory or budget limit; raise the time limit",
            solver=relaxed.solver_name,
            time_limit_s=time_limit_s,
        )
    report = SolverReport(
        name=relaxed.solver_name,
        status="optimal" if search.gap() <= relative_gap else "feasible",
        solve_s=search.solve_s,
        mip_gap=search.gap(),
    )
    duals = relaxed.duals if shadow_prices else None
    return _fleet_plan(presolved, decisions, search.best, duals=duals, solver=report, size=size, dropped=dropped)


def _relaxations(
    spec: FleetSpec,
    problem: pulp.LpProblem,
    decisions: FleetDecisions,
    *,
    time_limit_s: float,
    solver_name: str | None,
    checkpoint: Checkpoint,
) -> _Relaxed:
    """Solve the LP relaxation (its duals are the shadow prices), then add the cover cuts to
    `problem` and solve it again (its optimum is the tighter bound). An infeasible relaxation is
    the diagnosed InfeasiblePlanError (no fractional fleet, so no integer one); one that does not
    finish is a SolverError (an interrupted LP gives neither bound nor duals)."""
    relaxation = Relaxation(problem, solver_name=solver_name)
    lp = relaxation.solve(time_limit_s=time_limit_s)
    checkpoint()
    if lp.status == "infeasible":
        raise diagnose_infeasible_fleet(spec, time_limit_s=time_limit_s, solver_name=lp.solver_name, checkpoint=checkpoint)
    if lp.status != "optimal" or lp.objective is None:
        raise SolverError(
            f"{lp.solver_name} could not solve the fleet's LP relaxation within {time_limit_s} s; "
            "raise the time limit or plan fewer workloads, periods or candidates",
            solver=lp.solver_name,
            time_limit_s=time_limit_s,
        )
    lp_values = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
    duals = demand_and_inventory_duals(spec, problem)
    # The duals above come from the plain relaxation (the cuts would take the demand rows'
    # prices). Everything below has the cover cuts, which leave the integer optimum unchanged.
    add_cover_cost_cuts(problem, spec, decisions)
    bound = lp.objective
    checkpoint()
    cut_lp = relaxation.solve(time_limit_s=time_limit_s)
    checkpoint()
    cut_values = lp_values
    if cut_lp.status == "optimal" and cut_lp.objective is not None:
        bound = max(bound, cut_lp.objective)
        cut_values = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
    return _Relaxed(
        solver_name=lp.solver_name,
        lp_values=lp_values,
        cut_values=cut_values,
        duals=duals,
        bound=bound,
        solve_s=lp.solve_s + cut_lp.solve_s,
    )


def _best_fallback(
    spec: FleetSpec, decisions: FleetDecisions, relaxed: _Relaxed, search: _Search, *, budget_usd: float
) -> Mapping[str, float] | None:
    """The cheapest of the fleets built without the solver (both relaxations rounded, and the
    cheapest covers) that keeps within the budget; None if none does."""
    best = None
    for fleet in (
        rounded_fleet(spec, decisions, relaxed.lp_values),
        rounded_fleet(spec, decisions, relaxed.cut_values),
        cover_fleet(spec, decisions),
    ):
        # over the budget: not one we may return; of equal costs the first stays
        if (
            fleet is not None
            and search.cost_usd(fleet) <= budget_usd
            and (best is None or search.cost_usd(fleet) < search.cost_usd(best))
        ):
            best = fleet
    return best


def _period_stages(
    spec: FleetSpec,
    decisions: FleetDecisions,
    relaxed: _Relaxed,
    search: _Search,
    clock: _Clock,
    *,
    budget_usd: float,
    relative_gap: float,
    checkpoint: Checkpoint,
) -> None:
    """Stage 1, period by period: the cut LP's reservations rounded and fixed, after which no row
    links two periods, so each is a small MILP of its own. (a) Each period is offered the
    (workload, candidate) pairs the cut LP or the best fleet run in it; (b) if that is not
    within the gap, the pairs they run in any period (the restricted MILP's neighbourhood).
    On `shared`, (a) takes ≈ 0.7 s to 0.3 % where the restricted MILP took 4–5 s to 0.1–1.3 %;
    on the synthetic benchmark (b) reaches 1 % where the restricted MILP finds nothing in 5 s."""
    reservations = rounded_reservations(spec, decisions, relaxed.cut_values)
    for by_period in (True, False):
        checkpoint()
        budget_s = clock.stage_s(RESTRICTED_SHARE, first=by_period, have_fleet=search.best is not None)
        if search.gap() <= relative_gap or budget_s is None:
            break
        guides = [relaxed.cut_values, search.best or {}]
        pairs = _pairs_by_period(spec, decisions, guides) if by_period else [_pairs_used(decisions, guides)] * spec.periods
        found, periods_s = fleet_with_reservations_fixed(
            spec,
            decisions,
            reservations=reservations,
            pairs=pairs,
            fallback=search.best,
            deadline=time.perf_counter() + budget_s,
            solver_name=relaxed.solver_name,
            relative_gap=relative_gap / 2,
            checkpoint=checkpoint,
        )
        search.solve_s += periods_s
        if found is not None and search.cost_usd(found) <= budget_usd and search.is_cheaper(found):
            search.best = found


def _milp_stage(
    spec: FleetSpec,
    problem: pulp.LpProblem,
    decisions: FleetDecisions,
    relaxed: _Relaxed,
    search: _Search,
    *,
    stage_s: float,
    restricted: bool,
    time_limit_s: float,
    relative_gap: float,
    checkpoint: Checkpoint,
) -> None:
    """Stage 2 (`restricted`), the neighbourhood of the cut relaxation with the reservations
    free: the MILP restricted to the (workload, candidate) pairs the cut LP or the best fleet
    uses (a quarter of them on the benchmark). Stage 3: the whole MILP. Both carry the cutoff
    cost ≤ the best fleet so far (a row, not a MIP start: HiGHS 1.16's MIP start misreports
    optima, see docs/fleet-benchmark.md), and stop once a fleet is within the gap of the proved
    bound. The whole MILP's dual bound raises `search.bound`; its infeasibility under the cutoff
    proves the best fleet optimal, and without one is the diagnosed InfeasiblePlanError."""
    cutoff_usd = math.inf if search.best is None else search.cost_usd(search.best)
    if search.best is not None:
        limit_usd = cutoff_usd + _CUTOFF_SLACK * max(abs(cutoff_usd), 1.0)
        row = problem.get_constraint_by_name("incumbent_cutoff")
        if row is None:
            problem += search.cost <= limit_usd, "incumbent_cutoff"
        else:
            row.changeRHS(limit_usd)
    closed = _restrict(decisions, [relaxed.cut_values, search.best or {}]) if restricted else {}
    try:
        outcome = solve(
            problem,
            time_limit_s=stage_s,
            solver_name=relaxed.solver_name,
            relative_gap=relative_gap / 2 if restricted else relative_gap,
            stop_at_objective=search.bound / (1 - relative_gap),
        )  # within the gap of our bound
    finally:
        for variable, upper in closed.items():
            variable.upBound = upper
    search.solve_s += outcome.solve_s
    if outcome.status == "infeasible" and search.best is None and not restricted:
        raise diagnose_infeasible_fleet(spec, time_limit_s=time_limit_s, solver_name=outcome.solver_name, checkpoint=checkpoint)
    if outcome.status == "infeasible" and not restricted:
        search.bound = max(search.bound, cutoff_usd)  # nothing beats the best fleet so far: it is optimal
    if outcome.status in ("optimal", "feasible"):
        found = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
        if search.is_cheaper(found):
            search.best = found
        # best is never None here (found, or a cheaper fleet); the check says so to the type checker
        if not restricted and outcome.dual_bound is not None and search.best is not None:
            search.bound = max(search.bound, min(outcome.dual_bound, search.cost_usd(search.best)))


def _fleet_plan(
    spec: FleetSpec,
    decisions: FleetDecisions,
    values: Mapping[str, float],
    *,
    duals: Mapping[str, float] | None,
    solver: SolverReport,
    size: ModelSize,
    dropped: int,
) -> FleetPlan:
    """The plan of the fleet `values`: whole counts, idle replicas trimmed, its periods and costs,
    and the shadow prices from `duals` (None: not asked for)."""
    reserved = {gpu: whole_count(values, v) for gpu, v in decisions.reserved_gpus.items()}
    on_demand = {key: whole_count(values, v) for key, v in decisions.on_demand_gpus.items()}
    spot = {key: whole_count(values, v) for key, v in decisions.spot_gpus.items()}
    replicas = trim_idle_replicas(spec, {key: whole_count(values, v) for key, v in decisions.replicas.items()})
    chosen = frozenset(key for key, v in decisions.pool_choice.items() if whole_count(values, v) == 1)
    periods = tuple(period_schedule(spec, p, reserved, on_demand, spot, replicas, chosen) for p in range(spec.periods))
    return FleetPlan(
        reserved_gpus=MappingProxyType(reserved),
        periods=periods,
        period_hours=spec.period_hours,
        cost=cost_breakdown(spec, reserved, on_demand, spot, periods),
        shadow_prices=None if duals is None else lp_shadow_prices(spec, duals, periods),
        solver=solver,
        model_size=size,
        candidates_dropped=dropped,
    )


def period_spec(spec: FleetSpec, period: int, pairs: set[WorkloadCandidate]) -> FleetSpec:
    """The fleet of one period alone (no budget), each workload offered its candidates in `pairs`,
    or all of them if `pairs` names none of its own."""
    workloads = []
    for w in spec.workloads:
        offered = tuple(c for c in w.candidates if (w.name, c.id) in pairs) or w.candidates
        workloads.append(FleetWorkload(name=w.name, candidates=offered, demand_rps=(w.demand_rps[period],)))
    return FleetSpec(
        workloads=tuple(workloads),
        prices=spec.prices,
        inventory={gpu: (count,) for gpu, count in spec.inventory_in(period).items()},
        spot=spec.spot,
        period_hours=spec.period_hours,
        constraints=FleetConstraints(min_replicas=spec.constraints.min_replicas, n_plus_one=spec.constraints.n_plus_one),
    )


def fleet_with_reservations_fixed(
    spec: FleetSpec,
    decisions: FleetDecisions,
    *,
    reservations: Mapping[str, int],
    pairs: Sequence[set[WorkloadCandidate]],
    fallback: Mapping[str, float] | None,
    deadline: float,
    solver_name: str,
    relative_gap: float,
    checkpoint: Checkpoint = no_checkpoint,
) -> tuple[dict[str, float] | None, float]:
    """A fleet found period by period, and the solver's seconds.

    With every R_k fixed at `reservations` no row links two periods, so each period is a MILP of
    its own (`period_spec`): the replicas of that period's (workload, candidate) `pairs`, and the
    on-demand and spot GPUs, solved within `relative_gap` by `deadline` (shared evenly among the
    periods left). Each period keeps the cheaper, at these reservations, of its MILP's replicas
    and `fallback`'s (a MILP stopped by its time limit may end worse, or with none); None when a
    period has neither. The reservations are then chosen again for the replicas kept
    (`fleet_from_replicas`), which never costs more than keeping them: the fleet never costs
    more than `fallback`'s replicas at `reservations` (it may cost more than `fallback` itself,
    whose own reservations may suit it better; the caller keeps the cheaper). `checkpoint` is
    called before each period.
    """
    replicas: dict[ReplicaKey, int] = {}
    spot: dict[GpuPeriod, int] = {}
    solve_s = 0.0
    for p in range(spec.periods):
        checkpoint()
        options = []
        if fallback is not None:
            options.append(
                {
                    (w.name, c.id): whole_count(fallback, decisions.replicas[w.name, c.id, p])
                    for w in spec.workloads
                    for c in w.candidates
                }
            )
        left_s = (deadline - time.perf_counter()) / (spec.periods - p)
        renting = not options or _rental_at(spec, p, reservations, options[0])[0] > 0
        if left_s > 0 and renting:  # a fallback that rents nothing here is already this period's best
            problem, sub = build_fleet_problem(period_spec(spec, p, pairs[p]))
            for gpu, variable in sub.reserved_gpus.items():
                variable.lowBound = variable.upBound = reservations[gpu]
            outcome = solve(problem, time_limit_s=left_s, solver_name=solver_name, relative_gap=relative_gap)
            solve_s += outcome.solve_s
            if outcome.status in ("optimal", "feasible"):
                options.append(
                    {
                        (w.name, c.id): integer_value(sub.replicas[w.name, c.id, 0]) if (w.name, c.id, 0) in sub.replicas else 0
                        for w in spec.workloads
                        for c in w.candidates
                    }
                )
        priced = [(*_rental_at(spec, p, reservations, counts), counts) for counts in options]
        cost_usd, rented_spot, counts = min(priced, key=lambda option: option[0], default=(math.inf, {}, {}))
        if not math.isfinite(cost_usd):
            return None, solve_s
        replicas.update({(workload, candidate, p): n for (workload, candidate), n in counts.items()})
        spot.update({(gpu, p): n for gpu, n in rented_spot.items()})
    return fleet_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), spot), solve_s


def _rental_at(
    spec: FleetSpec, period: int, reservations: Mapping[str, int], counts: Mapping[WorkloadCandidate, int]
) -> tuple[float, dict[str, int]]:
    """USD per hour of renting, in `period`, the GPUs beyond `reservations` that replicas `counts`
    (by (workload, candidate)) use: spot first, up to its availability, then on demand; and the
    spot GPUs used. Infinite when the GPUs held would break the period's inventory."""
    used = dict.fromkeys(spec.gpus, 0)
    for w in spec.workloads:
        for c in w.candidates:
            used[c.gpu] += counts[w.name, c.id] * c.gpus_per_replica
    cost_usd, spot = 0.0, {}
    for gpu, n in used.items():
        limit = spec.inventory_limit(gpu, period)
        if limit is not None and max(n, reservations[gpu]) > limit:
            return math.inf, {}
        beyond = max(0, n - reservations[gpu])
        spot[gpu] = min(beyond, spec.spot[gpu].max_gpus) if gpu in spec.spot else 0
        spot_usd = spec.spot_price_usd_per_hour(gpu) if gpu in spec.spot else 0.0
        cost_usd += spot[gpu] * spot_usd + (beyond - spot[gpu]) * spec.prices[gpu].on_demand_usd_per_hour
    return cost_usd, {gpu: n for gpu, n in spot.items() if gpu in spec.spot}


def _pairs_by_period(
    spec: FleetSpec, decisions: FleetDecisions, fleets: Sequence[Mapping[str, float]]
) -> list[set[WorkloadCandidate]]:
    """For each period, the (workload, candidate) pairs some fleet in `fleets` runs in it."""
    used: list[set[WorkloadCandidate]] = [set() for _ in range(spec.periods)]
    for (workload, candidate, p), variable in decisions.replicas.items():
        if any(fleet.get(variable.name, 0.0) > ROUNDING_SLACK for fleet in fleets):
            used[p].add((workload, candidate))
    return used


def _pairs_used(decisions: FleetDecisions, fleets: Sequence[Mapping[str, float]]) -> set[WorkloadCandidate]:
    """The (workload, candidate) pairs some period of some fleet in `fleets` runs."""
    return {
        (workload, candidate)
        for (workload, candidate, _), variable in decisions.replicas.items()
        if any(fleet.get(variable.name, 0.0) > ROUNDING_SLACK for fleet in fleets)
    }


def _restrict(decisions: FleetDecisions, fleets: Sequence[Mapping[str, float]]) -> dict[pulp.LpVariable, float | None]:
    """Close (upper bound 0) every replica variable of a (workload, candidate) pair that no
    period of any of `fleets` uses; the closed variables and their former upper bounds."""
    used = _pairs_used(decisions, fleets)
    closed = {}
    for (workload, candidate, _), variable in decisions.replicas.items():
        if (workload, candidate) not in used:
            closed[variable] = variable.upBound
            variable.upBound = 0
    return closed
