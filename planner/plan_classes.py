"""Plans for several traffic classes: which arrangement of pools serves them cheapest.

Arrangements compared (each priced in USD per hour; the cheapest feasible one is chosen):

(a) ``shared_fcfs`` — one pool, first come first served, planned by the single-class planner
    (planner/planning.py) for the merged stream at the tightest target of any class: every
    request, background ones included, gets the interactive TTFT.
(b) ``shared_priority`` — one pool with non-preemptive priority: the background classes fill idle
    slots. Its configuration is searched over the single-class planner's candidates for the merged
    stream (`_cheapest_pool`, branch and bound on cost), each at the fewest replicas that keep the
    pool in the analytic model's validated region (ρ ≤ RELIABLE_MAX_UTILISATION) and every class on
    target. The figures: the queueing model's prediction for the merged stream on that pool
    (planner/queueing.py: step times with everyone in the batch, hence TPOT for all classes) with
    its FCFS slot wait replaced by each class's priority wait (Cobham, planner/queueing_priority.py)
    at the same percentile, never below the FCFS figure (`with_wait`). With verification the
    winner's classes are simulated at step level (planner/simulator_classes_step.py); a miss refuses
    that pool.
(c) ``segregated`` — one pool per class, each planned by the single-class planner at its own SLO
    (a deadline as a p99 end-to-end target of H hours, which lets the background pool run hot).
(b') ``shared_priority_shedding`` — (b) with the lowest class, where its `max_shed_fraction` allows,
    given an admission limit K ≤ c (admitted only while a replica holds fewer than K requests): the
    pool is sized at the smallest K whose refusals from the birth–death chain
    (planner/queueing_priority.py) stay within `max_shed_fraction` (the least admitted load), then K
    is raised as far as the model accepts on that pool; the saving against (b) is reported.
(d) ``deferred`` — with a day profile (`TrafficClass.demand_rps`): the interactive pool sized for
    its peak, the background work deferred within its deadline into its idle hours and, where
    needed, extra off-peak replicas (planner/plan_deferral.py); not comparable without a profile.
    With verification, a day run checks it (planner/simulator_classes_day.py).

Why (b) or (c) beat (a): a queue's wait grows as 1/(1 − ρ). In (a) the background load raises the
ρ the interactive requests see, so the pool must be run cool enough for the interactive tail
with all the load in it. Under priority, an interactive request waits behind the interactive
load only, σ_1, plus the residual of a busy slot — Cobham's W_1 = P_w·s̄/c / (1 − σ_1) — so the
background load rides in capacity the interactive class must hold idle anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.plan_classes_base import (
    ArrangementCost,
    ClassesPlan,
    ClassFigures,
    PoolPlan,
    _Candidate,
    _Context,
    _figures,
    _NotComparable,
    _plan_one,
    _pool,
)
from planner.plan_classes_deferred import _day_periods, _deferred
from planner.plan_classes_priority import _shared_priority, _shared_priority_shedding
from planner.planning import PlanningInputs, PlanningRequest
from planner.traffic_classes import TrafficClass, tightest_slo

__all__ = [
    "ArrangementCost",
    "ClassFigures",
    "ClassesPlan",
    "PoolPlan",
    "deferred_arrangement",
    "each_arrangement",
    "plan_classes",
]


def _segregated(ctx: _Context, *, verify: bool) -> _Candidate:
    pools, figures, final = [], [], True
    for k in ctx.classes:
        result, prediction, simulated = _plan_one(ctx, [k], k.own_slo, verify=verify)
        final = final and simulated
        pools.append(_pool(k.name, [k], result, prediction, ctx.inputs))
        figures.append(_figures(k, k.name, result, prediction))
    return _Candidate(
        name="segregated",
        cost_usd_per_hour=sum(p.cost_usd_per_hour for p in pools),
        pools=tuple(pools),
        classes=tuple(figures),
        final=final,
    )


def _shared_fcfs(ctx: _Context, *, verify: bool) -> _Candidate:
    classes = ctx.classes
    result, prediction, final = _plan_one(ctx, classes, tightest_slo(classes), verify=verify)
    return _Candidate(
        name="shared_fcfs",
        cost_usd_per_hour=result.cost_usd_per_hour,
        pools=(_pool("shared", classes, result, prediction, ctx.inputs),),
        classes=tuple(_figures(k, "shared", result, prediction) for k in classes),
        final=final,
    )


_ARRANGEMENTS: tuple[tuple[str, Callable[..., _Candidate], str], ...] = (
    ("shared_fcfs", _shared_fcfs, "one FCFS pool planned at the tightest target of any class"),
    ("shared_priority", _shared_priority, "one pool, interactive first, background fills idle slots"),
    (
        "shared_priority_shedding",
        _shared_priority_shedding,
        "the priority pool with an admission limit on the lowest class, refusing within its max_shed_fraction",
    ),
    ("segregated", _segregated, "one pool per class, each at its own target"),
    (
        "deferred",
        _deferred,
        (
            "the interactive pool sized for its peak; background work deferred within its deadline into its idle "
            "hours, and extra background replicas only in the periods that need them"
        ),
    ),
)
#: Appended to the reason of an arrangement whose single-class plans were never simulated.
NOT_SIMULATED = (
    "; queueing model only, not simulated: before simulation it already cost no less than the chosen "
    "arrangement, and simulation only raises a cost"
)


def plan_classes(classes: Sequence[TrafficClass], inputs: PlanningInputs, base: PlanningRequest) -> ClassesPlan:
    """Compare the arrangements for `classes` and choose the cheapest feasible one.

    `base` carries the search grids, constraints and verification settings; its workload and SLO
    are replaced per pool.

    With `base.verify`, only what the choice needs is simulated: every arrangement is first priced
    with its single-class plans unsimulated (lower bounds, except the priority pool, whose seed is
    simulated up front), then the cheapest whose cost is not final is simulated, until the cheapest
    is final. That is the arrangement simulating every plan would choose, at the same cost; an
    arrangement left unsimulated is reported at its lower bound, saying so.
    """
    if not classes:
        raise PlannerInputError("at least one class is needed", field="classes")
    if len({k.name for k in classes}) != len(classes):
        raise PlannerInputError("class names must be unique", field="classes")
    _day_periods(classes)  # profiles of different lengths are the request's error, not an arrangement's
    ctx = _Context(classes=classes, inputs=inputs, base=base)
    builds = {name: build for name, build, _ in _ARRANGEMENTS}
    order = {name: i for i, (name, _, _) in enumerate(_ARRANGEMENTS)}
    priced: dict[str, _Candidate] = {}
    refused: dict[str, str] = {}
    # the deferred arrangement first: its pools are simulated up front (with verify), and the
    # segregated arrangement then takes those plans instead of planning them again unsimulated
    for name in sorted(order, key=lambda n: (n != "deferred", order[n])):
        try:
            priced[name] = builds[name](ctx, verify=False)
        except InfeasiblePlanError as error:
            refused[name] = f"infeasible: {error.detail}"
        except _NotComparable as error:
            refused[name] = f"not comparable: {error}"
    while priced:
        best = min(priced.values(), key=lambda c: (c.cost_usd_per_hour, order[c.name]))  # ties: listed first
        if best.final:
            break
        try:
            priced[best.name] = builds[best.name](ctx, verify=True)
        except InfeasiblePlanError as error:
            del priced[best.name]
            refused[best.name] = f"infeasible: {error.detail}"
    else:
        raise InfeasiblePlanError("no arrangement serves every class", constraint="classes")
    compared = []
    for name, _, reason in _ARRANGEMENTS:
        if name in refused:
            compared.append(ArrangementCost(name=name, cost_usd_per_hour=None, reason=refused[name]))
            continue
        candidate = priced[name]
        note = "" if candidate.final else NOT_SIMULATED
        saving = None
        if name == "shared_priority_shedding" and "shared_priority" in priced:
            saving = priced["shared_priority"].cost_usd_per_hour - candidate.cost_usd_per_hour
        compared.append(
            ArrangementCost(
                name=name,
                cost_usd_per_hour=candidate.cost_usd_per_hour,
                reason=reason + note,
                saving_vs_no_shedding_usd_per_hour=saving,
            )
        )
    return ClassesPlan(
        chosen=best.name,
        compared=tuple(compared),
        pools=best.pools,
        classes=best.classes,
        verification=best.verification,
    )


def each_arrangement(classes: Sequence[TrafficClass], inputs: PlanningInputs, base: PlanningRequest) -> tuple[ClassesPlan, ...]:
    """Every arrangement but `deferred` that can serve `classes`, each as a ClassesPlan whose `chosen` names it
    (simulated only when `base.verify`), in `_ARRANGEMENTS` order: for a caller that chooses among them
    itself (the fleet MILP, planner/fleet_classes.py). An arrangement that is infeasible or not comparable
    is left out."""
    ctx = _Context(classes=classes, inputs=inputs, base=base)
    plans = []
    for name, build, _ in _ARRANGEMENTS:
        if name == "deferred":  # its pools span the day: not one period's
            continue
        try:
            found = build(ctx, verify=base.verify)
        except (InfeasiblePlanError, _NotComparable):
            continue
        plans.append(
            ClassesPlan(chosen=name, compared=(), pools=found.pools, classes=found.classes, verification=found.verification)
        )
    return tuple(plans)


def deferred_arrangement(
    classes: Sequence[TrafficClass], inputs: PlanningInputs, base: PlanningRequest
) -> tuple[ClassesPlan, tuple[int, ...]] | None:
    """The `deferred` arrangement of `classes` (their day profiles) with its extra background replicas per
    period, for a caller that prices the periods itself (the fleet MILP, planner/fleet_classes.py); None
    when it is infeasible or not comparable (no profile, no latency or no deadline class)."""
    ctx = _Context(classes=classes, inputs=inputs, base=base)
    try:
        found = _deferred(ctx, verify=base.verify)
    except (InfeasiblePlanError, _NotComparable):
        return None
    assert found.schedule is not None
    plan = ClassesPlan(chosen="deferred", compared=(), pools=found.pools, classes=found.classes, verification=found.verification)
    return plan, found.schedule.extra_replicas
