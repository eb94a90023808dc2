"""The choice of one prefill and one decode candidate for planner/plan_disagg.py: the MILP of that module's docstring
over every TTFT split's candidates at once, the N+1 and min_replicas floors each pool gets first, and, when the
request's limits (max_gpus, budget, inventory) rule out every pair that meets the SLOs, the diagnosis naming each
limit with the smallest relaxation that plans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import pulp

from planner.disagg import KvLink
from planner.errors import InfeasiblePlanError, SolverError
from planner.milp import constraint_name, solve
from planner.plan_disagg_candidates import PoolCandidate
from planner.plan_records import PlanConstraints
from planner.plan_result import Relaxation, as_dict

SOLVER_TIME_LIMIT_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolChoice:
    """One prefill and one decode candidate of one TTFT split: the plan before verification."""

    prefill: PoolCandidate
    decode: PoolCandidate
    fraction: float
    #: Set when both pools sit in one node of `node_gpus` GPUs and the KV moves over its scale-up link.
    node_link: KvLink | None = None
    node_gpus: int | None = None

    @property
    def cost_usd_per_hour(self) -> float:
        return self.prefill.cost_usd_per_hour + self.decode.cost_usd_per_hour  # both pools


def add_replica_floors(candidate: PoolCandidate, constraints: PlanConstraints) -> PoolCandidate:
    """replicas = max(min_replicas, needed + [N+1], 1) for one pool, as planner/plan_search.py counts an aggregated
    plan's; the N+1 spare is priced and kept as `spare_replicas`, so the pool still meets its budget with one lost."""
    spare = 1 if constraints.n_plus_one else 0
    replicas = max(constraints.min_replicas, candidate.replicas + spare, 1)  # max(min_replicas, needed + [N+1], 1)
    if replicas == candidate.replicas:
        return candidate
    binding = "min_replicas" if replicas > candidate.replicas + spare else candidate.binding
    return replace(candidate.with_replicas(replicas), spare_replicas=spare, binding=binding)


#: One binary decision per candidate: the variable and the candidate it chooses.
_Decisions = list[tuple[pulp.LpVariable, PoolCandidate]]


def add_max_gpus_constraints(problem: pulp.LpProblem, decisions: _Decisions, max_gpus: int) -> None:
    """Σ_p g_p·prefill_p + Σ_d g_d·decode_d ≤ max_gpus: both pools' GPUs, N+1 spares included."""
    problem += pulp.lpSum(c.gpus * v for v, c in decisions) <= max_gpus, "max_gpus"


def add_budget_constraints(problem: pulp.LpProblem, decisions: _Decisions, budget_usd_per_hour: float) -> None:
    """Σ_p cost_p·prefill_p + Σ_d cost_d·decode_d ≤ budget_usd_per_hour"""
    problem += pulp.lpSum(c.cost_usd_per_hour * v for v, c in decisions) <= budget_usd_per_hour, "budget"


def add_gpu_inventory_constraints(problem: pulp.LpProblem, decisions: _Decisions, inventory: Mapping[str, int]) -> None:
    """Σ_{p on k} g_p·prefill_p + Σ_{d on k} g_d·decode_d ≤ inventory_k for each GPU type k listed (both pools draw on it)."""
    for gpu, limit in sorted(inventory.items()):
        on_gpu = [(v, c) for v, c in decisions if c.gpu == gpu]
        if on_gpu:
            problem += pulp.lpSum(c.gpus * v for v, c in on_gpu) <= limit, constraint_name("gpu_inventory", gpu)


def _limited(constraints: PlanConstraints) -> bool:
    return constraints.max_gpus is not None or constraints.budget_usd_per_hour is not None or bool(constraints.inventory)


#: Per TTFT split: its prefill candidates, and its decode candidates keyed by (decode setting, prefill tp).
Splits = dict[float, tuple[list[PoolCandidate], dict[tuple[int, int], PoolCandidate]]]


def _solve_pools(
    splits: Splits, constraints: PlanConstraints, weight: Callable[[PoolCandidate], float] | None = None
) -> PoolChoice | None:
    """The MILP of the module docstring over every split's candidates at once: the prefill and the decode candidate
    must come from the same split, so the split is one more decision. `weight`: the objective's coefficient of a
    candidate (default its cost; the diagnosis of an infeasible limit minimises GPUs instead)."""
    problem = pulp.LpProblem("disaggregated_pools", pulp.LpMinimize)
    x = {
        (f, i): problem.add_variable(constraint_name("prefill", round(f * 100), i), cat=pulp.LpBinary)
        for f, (prefill, _) in splits.items()
        for i in range(len(prefill))
    }
    y = {
        (f, key): problem.add_variable(constraint_name("decode", round(f * 100), key[0], key[1]), cat=pulp.LpBinary)
        for f, (_, decode) in splits.items()
        for key in decode
    }
    decisions: _Decisions = [(v, splits[f][0][i]) for (f, i), v in x.items()]
    decisions += [(v, splits[f][1][key]) for (f, key), v in y.items()]
    coefficient = weight or (lambda c: c.cost_usd_per_hour)
    problem += pulp.lpSum(coefficient(c) * v for v, c in decisions)
    problem += pulp.lpSum(x.values()) == 1, "one_prefill_candidate"
    problem += pulp.lpSum(y.values()) == 1, "one_decode_candidate"
    for f, (prefill, decode) in splits.items():
        for key, option in decode.items():
            # same split; the KV crosses over min(w_p, w_d) links (w = tp·pp GPUs a replica) and both pools hold one format
            same = [x[(f, i)] for i, c in enumerate(prefill) if c.gpus_per_replica == key[1] and c.kv_cache == option.kv_cache]
            problem += y[(f, key)] <= pulp.lpSum(same), constraint_name("transfer_links", round(f * 100), key[0], key[1])
    if constraints.max_gpus is not None:
        add_max_gpus_constraints(problem, decisions, constraints.max_gpus)
    if constraints.budget_usd_per_hour is not None:
        add_budget_constraints(problem, decisions, constraints.budget_usd_per_hour)
    if constraints.inventory:
        add_gpu_inventory_constraints(problem, decisions, constraints.inventory)
    outcome = solve(problem, time_limit_s=SOLVER_TIME_LIMIT_S)
    if outcome.status not in ("optimal", "feasible"):
        return None
    (f_p, i_p) = next(k for k, v in x.items() if (v.value() or 0.0) > 0.5)
    (f_d, key_d) = next(k for k, v in y.items() if (v.value() or 0.0) > 0.5)
    if f_p != f_d:
        raise SolverError("the pools' MILP chose candidates of two TTFT splits (planner bug)")
    return PoolChoice(prefill=splits[f_p][0][i_p], decode=splits[f_d][1][key_d], fraction=f_p)


def choose_pools(splits: Splits, constraints: PlanConstraints) -> PoolChoice | None:
    """The cheapest pair of pools within the limits; None when no pair meets the SLOs at all, InfeasiblePlanError
    naming the limits (with the relaxations that plan) when pairs exist but the limits rule every one out."""
    by_gpu = constraints.max_gpus is not None or bool(constraints.inventory)
    splits = {f: _undominated(p, d, by_gpu=by_gpu) for f, (p, d) in splits.items() if p and d}
    if not splits:
        return None
    chosen = _solve_pools(splits, constraints)
    if chosen is not None or not _limited(constraints):
        return chosen
    unlimited = replace(constraints, max_gpus=None, budget_usd_per_hour=None, inventory={})
    if _solve_pools(splits, unlimited) is None:
        return None
    raise _limits_error(splits, constraints)


def _whole_cents_up(cost_usd_per_hour: float) -> float:
    """A budget covering `cost_usd_per_hour`: whole cents rounded up, as planner/advice.py's budget relaxation."""
    return math.ceil(cost_usd_per_hour * 100 - 1e-6) / 100  # 1e-6 absorbs float noise in a whole number of cents


def _gpus_of(gpu: str) -> Callable[[PoolCandidate], float]:
    """The objective coefficient counting one GPU type's GPUs (the inventory relaxation minimises them)."""

    def weight(c: PoolCandidate) -> float:
        return float(c.gpus) if c.gpu == gpu else 0.0

    return weight


def _limits_error(splits: Splits, constraints: PlanConstraints) -> InfeasiblePlanError:
    """Pairs of pools meet the SLOs but none within the limits: each limit relaxed alone to the smallest value that
    plans (exact: a MILP minimising what the limit counts without it), as the aggregated plan's advice reports them."""
    relaxations: list[Relaxation] = []
    families: list[str] = []
    budget = constraints.budget_usd_per_hour
    if budget is not None and (free := _solve_pools(splits, replace(constraints, budget_usd_per_hour=None))) is not None:
        families.append("budget")
        relaxations.append(
            Relaxation(
                constraint="constraints.budget_usd_per_hour",
                current=budget,
                value=_whole_cents_up(free.cost_usd_per_hour),
                unit="USD/h",
                cost_usd_per_hour=free.cost_usd_per_hour,
            )
        )
    if constraints.max_gpus is not None:
        without = replace(constraints, max_gpus=None)
        fewest = _solve_pools(splits, without, weight=lambda c: c.gpus)
        if fewest is not None:
            needed = fewest.prefill.gpus + fewest.decode.gpus
            at = _solve_pools(splits, replace(constraints, max_gpus=needed))
            families.append("max_gpus")
            relaxations.append(
                Relaxation(
                    constraint="constraints.max_gpus",
                    current=constraints.max_gpus,
                    value=needed,
                    unit="GPUs",
                    cost_usd_per_hour=None if at is None else at.cost_usd_per_hour,
                )
            )
    for gpu, limit in sorted(constraints.inventory.items()):
        rest = {g: n for g, n in constraints.inventory.items() if g != gpu}
        least = _solve_pools(splits, replace(constraints, inventory=rest), weight=_gpus_of(gpu))
        if least is None:
            continue
        used = sum(c.gpus for c in (least.prefill, least.decode) if c.gpu == gpu)
        if used <= limit:
            continue
        at = _solve_pools(splits, replace(constraints, inventory={**rest, gpu: used}))
        if "gpu_inventory" not in families:
            families.append("gpu_inventory")
        relaxations.append(
            Relaxation(
                constraint=f"constraints.inventory.{gpu}",
                current=limit,
                value=used,
                unit="GPUs",
                cost_usd_per_hour=None if at is None else at.cost_usd_per_hour,
            )
        )
    limits = families or ["the limits together"]
    detail = f"every pair of prefill and decode pools meeting the SLOs breaks {' or '.join(limits)}"
    if budget is not None and relaxations and relaxations[0].constraint == "constraints.budget_usd_per_hour":
        detail += f": the cheapest pools cost {relaxations[0].cost_usd_per_hour:.2f} $/h against a budget of {budget:.2f} $/h"
    return InfeasiblePlanError(
        detail,
        constraint=families[0] if families else "limits",
        families=families,
        culprits=[r.constraint for r in relaxations],
        relaxations=[as_dict(r) for r in relaxations],
        relaxations_apply="any" if relaxations else None,
    )


def _undominated(
    prefill: list[PoolCandidate], decode: dict[tuple[int, int], PoolCandidate], *, by_gpu: bool = False
) -> tuple[list[PoolCandidate], dict[tuple[int, int], PoolCandidate]]:
    """Only the cheapest candidate of each (tp, KV format) prefill group and each (prefill tp, KV format)
    decode group can be optimal: the MILP's constraints see nothing else of them. With `by_gpu` (max_gpus or an
    inventory, which count GPUs per type) the groups are also per GPU type: on one GPU type and tp the cheapest
    candidate is also the one with the fewest GPUs, so nothing a GPU limit could need is dropped."""
    cheapest_p: dict[tuple[int, str, str], PoolCandidate] = {}
    for c in prefill:
        group = (c.gpus_per_replica, c.kv_cache, c.gpu if by_gpu else "")
        if group not in cheapest_p or c.cost_usd_per_hour < cheapest_p[group].cost_usd_per_hour:
            cheapest_p[group] = c
    cheapest_d: dict[tuple[int, str, str], tuple[tuple[int, int], PoolCandidate]] = {}
    for key, c in decode.items():
        group = (key[1], c.kv_cache, c.gpu if by_gpu else "")
        if group not in cheapest_d or c.cost_usd_per_hour < cheapest_d[group][1].cost_usd_per_hour:
            cheapest_d[group] = (key, c)
    return list(cheapest_p.values()), dict(cheapest_d.values())
