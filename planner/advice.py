"""Advice for an impossible plan request: which of the constraints it set are the culprits, and the
smallest relaxation of each that works when applied.

"Works" is decided the only way that cannot be wrong: the request is planned again with the
relaxation applied (the same search, MILP and simulator verification as the answer a client would
get on re-posting it). Each relaxation is searched as a one-dimensional monotone question — a looser
SLO, a larger budget, more GPUs or inventory, fewer required replicas never turn a feasible request
infeasible — first outward from the current value to one that works, then bisected until the
value that works is within RELAXATION_TOLERANCE of one that does not (so 5 % less of it fails).
Integer limits (GPUs, replicas) are bisected to the exact smallest integer.

Only what the request set is relaxed: an SLO target it gave, a budget, max_gpus, an inventory
entry, min_replicas, N+1, a pinned replica count (`constraints.pin.replicas`), and (when the caller passed the catalog's other GPU types and precisions)
the allowed GPUs and precisions. When no single relaxation works, the limits it set are relaxed
together to what one plan needs, and the answer says they must all move.

Every relaxation has one shape: `{constraint, current, value, unit}` with the request's own field
name and unit (`slo.ttft_ms` in ms, `constraints.budget_usd_per_hour` in USD/h, …).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from planner.confidence import GRADES, grade_rank
from planner.errors import HeadroomError, InfeasiblePlanError, PlannerInputError
from planner.pins import without_replicas
from planner.plan_result import Relaxation, as_dict
from planner.units import MS_PER_S
from planner.workload import Slo

if TYPE_CHECKING:
    from planner.optimizer import PlanConstraints
    from planner.planning import PlanningInputs, PlanningRequest, PlanResult

#: A relaxation is searched until the value that works is within this fraction of one that fails.
RELAXATION_TOLERANCE = 0.05
#: Growth factor while looking outward for a value that works.
_OUTWARD_FACTOR = 2.0
#: Outward steps before a single relaxation is declared not enough on its own (2^12 = 4,096 × the start).
_OUTWARD_STEPS = 12
#: Re-plans one piece of advice may take, and its wall-clock allowance; past either, the relaxations
#: found so far are returned and `advice_complete` says the search stopped early.
MAX_REPLANS = 60
MAX_ADVICE_S = 8.0

Plan = Callable[["PlanningRequest", "PlanningInputs"], "PlanResult"]


class _Budget:
    """Counts re-plans against MAX_REPLANS and MAX_ADVICE_S."""

    def __init__(self) -> None:
        self.replans = 0
        self.deadline = time.perf_counter() + MAX_ADVICE_S

    @property
    def spent(self) -> bool:
        return self.replans >= MAX_REPLANS or time.perf_counter() > self.deadline


@dataclass(frozen=True, slots=True, kw_only=True)
class _Trial:
    """Plans a request with one change applied; None when infeasible (or the budget is spent)."""

    plan: Plan
    request: PlanningRequest
    inputs: PlanningInputs
    budget: _Budget

    def __call__(
        self, request: PlanningRequest | None = None, inputs: PlanningInputs | None = None, *, verify: bool | None = None
    ) -> PlanResult | None:
        """The plan of `request` (default the original) on `inputs`, without advice or justification;
        `verify` False plans with the queueing model alone (a necessary condition: a plan the
        simulator verifies is one the model found first)."""
        if self.budget.spent:
            return None
        if self.request.checkpoint is not None:
            self.request.checkpoint()  # the caller's deadline ends the advice too
        self.budget.replans += 1
        request = request or self.request
        request = replace(
            request, advise=False, explain=False, verify=request.verify if verify is None else (verify and request.verify)
        )
        try:
            return self.plan(request, inputs or self.inputs)
        except (InfeasiblePlanError, PlannerInputError):
            return None
        except HeadroomError:
            return None


def _smallest_working(
    works: Callable[[float], PlanResult | None], current: float, start: float
) -> tuple[float, PlanResult] | None:
    """The smallest value ≥ current that works, to RELAXATION_TOLERANCE: outward from `start` by
    doubling, then geometric bisection between the last value that failed and the first that worked."""
    failed = current
    value = max(start, current * (1 + RELAXATION_TOLERANCE))
    if works(value * _OUTWARD_FACTOR ** (_OUTWARD_STEPS - 1)) is None:
        return None  # not even the loosest value tried works: this relaxation alone is not enough
    found: PlanResult | None = None
    for _ in range(_OUTWARD_STEPS):
        found = works(value)
        if found is not None:
            break
        failed, value = value, value * _OUTWARD_FACTOR
    if found is None:
        return None
    while value > failed * (1 + RELAXATION_TOLERANCE):
        middle = math.sqrt(failed * value)
        result = works(middle)
        if result is None:
            failed = middle
        else:
            value, found = middle, result
    return value, found


def _smallest_verified(
    works: Callable[[float, bool], PlanResult | None], current: float, start: float, verify: bool
) -> tuple[float, PlanResult] | None:
    """`_smallest_working` with the queueing model alone first (cheap), then the simulator's word on
    the value found: a value the model refuses is refused with verification too, so the model's
    bracket already proves 5 % less fails; only when the simulator rejects the model's value does the
    search go on upward with verified plans."""
    found = _smallest_working(lambda v: works(v, False), current, start)
    if found is None or not verify:
        return found
    value, _ = found
    checked = works(value, True)
    if checked is not None:
        return value, checked
    return _smallest_working(lambda v: works(v, True), value, value * (1 + RELAXATION_TOLERANCE))


def _smallest_working_int(
    works: Callable[[int], PlanResult | None], current: int, known: int, known_plan: PlanResult
) -> tuple[int, PlanResult]:
    """The smallest integer in (current, known] that works (`known` works), by bisection."""
    low, high, found = current, known, known_plan
    while high - low > 1:
        middle = (low + high) // 2
        result = works(middle)
        if result is None:
            low = middle
        else:
            high, found = middle, result
    return high, found


def _slo_relaxations(trial: _Trial, error: InfeasiblePlanError) -> list[Relaxation]:
    slo = trial.request.slo
    floors = _floors(error)
    out: list[Relaxation] = []
    for metric, field_name, unit, scale in (
        ("ttft", "ttft_ms", "ms", MS_PER_S),
        ("tpot", "tpot_ms", "ms", MS_PER_S),
        ("e2e", "e2e_s", "s", 1.0),
    ):
        target_s = getattr(slo, f"{metric}_s")
        if target_s is None:
            continue

        def works(value: float, verify: bool, metric: str = metric, scale: float = scale) -> PlanResult | None:
            return trial(replace(trial.request, slo=_with_target(slo, metric, value / scale)), verify=verify)

        current = target_s * scale
        floor = floors.get(metric)
        start = max(current * (1 + RELAXATION_TOLERANCE), (floor * scale * 1.001) if floor is not None else 0.0)
        found = _smallest_verified(works, current, start, trial.request.verify)
        if found is not None:
            value, plan = found
            out.append(
                Relaxation(
                    constraint=f"slo.{field_name}",
                    current=current,
                    value=_round_up(value),
                    unit=unit,
                    cost_usd_per_hour=plan.cost_usd_per_hour,
                )
            )
    return out


def _with_target(slo: Slo, metric: str, target_s: float) -> Slo:
    return replace(slo, **{f"{metric}_s": target_s})


def _floors(error: InfeasiblePlanError) -> dict[str, float]:
    """The unloaded floor the base error found for one metric (seconds), to start the search there."""
    extensions = error.extensions
    metric = extensions.get("constraint")
    smallest = extensions.get("smallest_feasible")
    unit = extensions.get("unit")
    if metric in ("ttft", "tpot", "e2e") and isinstance(smallest, int | float):
        return {str(metric): float(smallest) / (MS_PER_S if unit == "ms" else 1.0)}
    return {}


def _round_up(value: float) -> float:
    """Four significant figures, rounded up so the stated value still works."""
    if value <= 0:
        return value
    digits = 3 - math.floor(math.log10(value))
    factor = 10.0**digits
    return math.ceil(value * factor - 1e-9) / factor


def _whole_cents_up(cost_usd_per_hour: float) -> float:
    """A budget that covers `cost_usd_per_hour`: whole cents, rounded up (the 1e-6 absorbs float noise
    in a cost that is already a whole number of cents)."""
    return math.ceil(cost_usd_per_hour * 100 - 1e-6) / 100


@dataclass(frozen=True, slots=True)
class _Limits:
    """Plans the request with some of its constraints changed: what every limit's relaxation asks."""

    trial: _Trial

    @property
    def constraints(self) -> PlanConstraints:
        return self.trial.request.constraints

    def plan_with(self, verify: bool | None = None, **changes: Any) -> PlanResult | None:
        request = self.trial.request
        return self.trial(replace(request, constraints=replace(request.constraints, **changes)), verify=verify)

    def smallest_int(
        self, current: int, known: int, known_plan: PlanResult, name: str, setter: Callable[[int], Any]
    ) -> tuple[int, PlanResult]:
        """The smallest integer limit that works: bisected with the model, then the simulator's word."""
        value, found = _smallest_working_int(lambda n: self.plan_with(False, **{name: setter(n)}), current, known, known_plan)
        if not self.trial.request.verify or found is known_plan:
            return value, found
        checked = self.plan_with(**{name: setter(value)})
        if checked is not None:
            return value, checked
        return _smallest_working_int(lambda n: self.plan_with(**{name: setter(n)}), value, known, known_plan)


def _limit_relaxations(trial: _Trial) -> list[Relaxation]:
    """Each limit the request set, relaxed alone to the smallest change that plans (in this order,
    which is also the order re-plans are spent in when the advice budget runs short)."""
    limits = _Limits(trial)
    out: list[Relaxation] = []
    for relax in (
        _relax_budget,
        _relax_max_gpus,
        _relax_inventory,
        _relax_n_plus_one,
        _relax_min_confidence,
        _relax_pinned_replicas,
        _relax_min_replicas,
    ):
        out.extend(relax(limits))
    return out


def _relax_budget(limits: _Limits) -> list[Relaxation]:
    """The budget the cheapest plan without one costs."""
    budget = limits.constraints.budget_usd_per_hour
    if budget is None:
        return []
    unlimited = limits.plan_with(budget_usd_per_hour=None)
    if unlimited is None:
        return []
    return [
        Relaxation(
            constraint="constraints.budget_usd_per_hour",
            current=budget,
            value=_whole_cents_up(unlimited.cost_usd_per_hour),
            unit="USD/h",
            cost_usd_per_hour=unlimited.cost_usd_per_hour,
        )
    ]


def _relax_max_gpus(limits: _Limits) -> list[Relaxation]:
    """The smallest max_gpus that plans, at most what the plan without the limit uses."""
    max_gpus = limits.constraints.max_gpus
    if max_gpus is None:
        return []
    unlimited = limits.plan_with(max_gpus=None)
    if unlimited is None:
        return []
    value, plan = limits.smallest_int(max_gpus, unlimited.gpus_total, unlimited, "max_gpus", lambda n: n)
    return [
        Relaxation(
            constraint="constraints.max_gpus",
            current=max_gpus,
            value=value,
            unit="GPUs",
            cost_usd_per_hour=plan.cost_usd_per_hour,
        )
    ]


def _relax_inventory(limits: _Limits) -> list[Relaxation]:
    """For each inventory entry the plan without it overruns, the smallest stock of that GPU that plans."""
    inventory = limits.constraints.inventory
    out: list[Relaxation] = []
    for gpu, limit in sorted(inventory.items()):
        unlimited = limits.plan_with(inventory={g: n for g, n in inventory.items() if g != gpu})
        if unlimited is None:
            continue
        used = sum(r.gpus for r in unlimited.rows if r.gpu == gpu)
        if used <= limit:
            continue

        def stock(n: int, gpu: str = gpu) -> dict[str, int]:
            return {**inventory, gpu: n}

        value, plan = limits.smallest_int(limit, used, unlimited, "inventory", stock)
        out.append(
            Relaxation(
                constraint=f"constraints.inventory.{gpu}",
                current=limit,
                value=value,
                unit="GPUs",
                cost_usd_per_hour=plan.cost_usd_per_hour,
            )
        )
    return out


def _relax_n_plus_one(limits: _Limits) -> list[Relaxation]:
    """Dropping the spare replica, when that alone plans."""
    if not limits.constraints.n_plus_one:
        return []
    without_spare = limits.plan_with(n_plus_one=False)
    if without_spare is None:
        return []
    return [
        Relaxation(
            constraint="constraints.n_plus_one",
            current=True,
            value=False,
            unit=None,
            cost_usd_per_hour=without_spare.cost_usd_per_hour,
        )
    ]


def _relax_min_confidence(limits: _Limits) -> list[Relaxation]:
    """The highest lower calibration grade that plans: the next grade down first, the smallest step
    that admits more GPUs."""
    min_confidence = limits.constraints.min_confidence
    if min_confidence is None:
        return []
    for grade in (g for g in reversed(GRADES) if grade_rank(g) < grade_rank(min_confidence)):
        graded = limits.plan_with(min_confidence=None if grade == GRADES[0] else grade)
        if graded is not None:
            return [
                Relaxation(
                    constraint="constraints.min_confidence",
                    current=min_confidence,
                    value=grade,
                    unit=None,
                    cost_usd_per_hour=graded.cost_usd_per_hour,
                )
            ]
    return []


def _relax_pinned_replicas(limits: _Limits) -> list[Relaxation]:
    """The replica count the plan without the pin's count uses: pinning the free plan's own count
    gives that plan back."""
    pinned = limits.constraints.pinned_replicas
    if pinned is None:
        return []
    unpinned = limits.plan_with(pin=without_replicas(limits.constraints.pin))
    if unpinned is None:
        return []
    return [
        Relaxation(
            constraint="constraints.pin.replicas",
            current=pinned,
            value=unpinned.replicas,
            unit="replicas",
            cost_usd_per_hour=unpinned.cost_usd_per_hour,
        )
    ]


def _relax_min_replicas(limits: _Limits) -> list[Relaxation]:
    """The largest min_replicas that still plans, by bisection on (1, current)."""
    min_replicas = limits.constraints.min_replicas
    if min_replicas <= 1:
        return []
    fewest = limits.plan_with(min_replicas=1)
    if fewest is None:
        return []
    low, high, found = 1, min_replicas, fewest
    while high - low > 1:
        middle = (low + high) // 2
        result = limits.plan_with(min_replicas=middle)
        if result is None:
            high = middle
        else:
            low, found = middle, result
    return [
        Relaxation(
            constraint="constraints.min_replicas",
            current=min_replicas,
            value=low,
            unit="replicas",
            cost_usd_per_hour=found.cost_usd_per_hour,
        )
    ]


def _allowed_relaxations(trial: _Trial) -> list[Relaxation]:
    """One more GPU type or precision pair from the catalog's others, when the caller restricted them."""
    inputs, request = trial.inputs, trial.request
    out: list[Relaxation] = []
    for gpu in inputs.other_gpus:
        plan = trial(request, replace(inputs, gpus=(*inputs.gpus, gpu), other_gpus=()))
        if plan is not None:
            out.append(
                Relaxation(
                    constraint="constraints.gpus",
                    current=None,
                    value=gpu.slug,
                    unit=None,
                    cost_usd_per_hour=plan.cost_usd_per_hour,
                )
            )
    for precision in inputs.other_precisions:
        plan = trial(request, replace(inputs, precisions=(*inputs.precisions, precision), other_precisions=()))
        if plan is not None:
            out.append(
                Relaxation(
                    constraint="constraints.precisions",
                    current=None,
                    value=f"{precision.weights.slug}/{precision.kv_cache.slug}",
                    unit=None,
                    cost_usd_per_hour=plan.cost_usd_per_hour,
                )
            )
    return out


def _together(trial: _Trial, error: InfeasiblePlanError) -> list[Relaxation]:
    """No single relaxation works: every limit the request set, moved to what the cheapest plan
    without any of them uses (only the ones that plan breaks); when even that plan does not exist,
    the smallest SLO relaxation that plans with the limits lifted joins them. Verified by planning
    with all of them applied."""
    free = _free_plan(trial, error)
    if free is None:
        return []
    moves = _Moves(constraints=trial.request.constraints, moved=list(free.moved))
    _move_budget(moves, free.plan)
    _move_max_gpus(moves, free.plan)
    _move_inventory(moves, free.plan)
    _move_min_confidence(moves, free.plan, trial.inputs)
    _move_n_plus_one(moves, trial, free.request)
    _move_pinned_replicas(moves, free.plan)
    _move_min_replicas(moves, trial, free.request, free.plan)
    check = trial(replace(free.request, constraints=moves.applied()))
    if check is None:
        return []
    return [replace(r, cost_usd_per_hour=check.cost_usd_per_hour) for r in moves.moved]


def _lifted(constraints: PlanConstraints) -> PlanConstraints:
    """`constraints` with every limit a relaxation may move lifted (what the plan needs is then read off)."""
    return replace(
        constraints,
        max_gpus=None,
        budget_usd_per_hour=None,
        inventory={},
        n_plus_one=False,
        min_replicas=min(constraints.min_replicas, 1),
        min_confidence=None,
        pin=without_replicas(constraints.pin),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _FreePlan:
    """The cheapest plan with the limits lifted, the request it was planned for (its SLO possibly
    relaxed), and the SLO relaxation that took, if any."""

    request: PlanningRequest
    plan: PlanResult
    moved: tuple[Relaxation, ...]


def _free_plan(trial: _Trial, error: InfeasiblePlanError) -> _FreePlan | None:
    """The plan with every limit lifted; when there is none, the smallest SLO relaxation that plans
    with the limits lifted is applied first (None when that does not plan either)."""
    request = trial.request
    free = _lifted(request.constraints)
    plan = trial(replace(request, constraints=free))
    if plan is not None:
        return _FreePlan(request=request, plan=plan, moved=())
    lifted = replace(trial, request=replace(request, constraints=free))
    slo_moves = sorted(_slo_relaxations(lifted, error), key=_relative)
    if not slo_moves:
        return None
    first = slo_moves[0]
    metric = {"slo.ttft_ms": "ttft", "slo.tpot_ms": "tpot", "slo.e2e_s": "e2e"}[first.constraint]
    scale = 1.0 if metric == "e2e" else MS_PER_S
    request = replace(request, slo=_with_target(request.slo, metric, float(first.value) / scale))
    plan = trial(replace(request, constraints=free))
    if plan is None:
        return None
    return _FreePlan(request=request, plan=plan, moved=(replace(first, cost_usd_per_hour=None),))


@dataclass(slots=True, kw_only=True)
class _Moves:
    """The limits moved so far (in the order the advice lists them) and the constraint changes that
    apply them; built up step by step, since later steps re-plan with the earlier changes applied."""

    constraints: PlanConstraints
    changes: dict[str, Any] = field(default_factory=dict)
    moved: list[Relaxation] = field(default_factory=list)

    def applied(self) -> PlanConstraints:
        return replace(self.constraints, **self.changes)


def _move_budget(moves: _Moves, plan: PlanResult) -> None:
    budget = moves.constraints.budget_usd_per_hour
    if budget is not None and plan.cost_usd_per_hour > budget:
        needed = _whole_cents_up(plan.cost_usd_per_hour)
        moves.changes["budget_usd_per_hour"] = needed
        moves.moved.append(Relaxation(constraint="constraints.budget_usd_per_hour", current=budget, value=needed, unit="USD/h"))


def _move_max_gpus(moves: _Moves, plan: PlanResult) -> None:
    max_gpus = moves.constraints.max_gpus
    if max_gpus is not None and plan.gpus_total > max_gpus:
        moves.changes["max_gpus"] = plan.gpus_total
        moves.moved.append(Relaxation(constraint="constraints.max_gpus", current=max_gpus, value=plan.gpus_total, unit="GPUs"))


def _move_inventory(moves: _Moves, plan: PlanResult) -> None:
    inventory = dict(moves.constraints.inventory)
    for gpu, limit in sorted(moves.constraints.inventory.items()):
        used = sum(r.gpus for r in plan.rows if r.gpu == gpu)
        if used > limit:
            inventory[gpu] = used
            moves.moved.append(Relaxation(constraint=f"constraints.inventory.{gpu}", current=limit, value=used, unit="GPUs"))
    moves.changes["inventory"] = inventory


def _move_min_confidence(moves: _Moves, plan: PlanResult, inputs: PlanningInputs) -> None:
    """Down to the lowest calibration grade among the plan's GPUs (an uncalibrated GPU counts as the lowest grade)."""
    min_confidence = moves.constraints.min_confidence
    if min_confidence is None:
        return
    grades = {g.slug: g.calibration_grade for g in inputs.gpus}
    lowest = min((grades.get(r.gpu) or GRADES[0] for r in plan.rows), key=grade_rank)
    if grade_rank(lowest) < grade_rank(min_confidence):
        moves.changes["min_confidence"] = None if lowest == GRADES[0] else lowest
        moves.moved.append(Relaxation(constraint="constraints.min_confidence", current=min_confidence, value=lowest, unit=None))


def _move_n_plus_one(moves: _Moves, trial: _Trial, request: PlanningRequest) -> None:
    """The spare replica goes only when the limits moved so far do not plan with it."""
    if (
        moves.constraints.n_plus_one
        and moves.applied() != moves.constraints
        and trial(replace(request, constraints=moves.applied())) is None
    ):
        moves.changes["n_plus_one"] = False
        moves.moved.append(Relaxation(constraint="constraints.n_plus_one", current=True, value=False, unit=None))


def _move_pinned_replicas(moves: _Moves, plan: PlanResult) -> None:
    pinned = moves.constraints.pinned_replicas
    if pinned is not None and plan.replicas != pinned:
        moves.changes["pin"] = without_replicas(moves.constraints.pin)
        moves.moved.append(
            Relaxation(constraint="constraints.pin.replicas", current=pinned, value=plan.replicas, unit="replicas")
        )


def _move_min_replicas(moves: _Moves, trial: _Trial, request: PlanningRequest, plan: PlanResult) -> None:
    """min_replicas comes down to the free plan's count only when the limits moved so far do not plan with it."""
    min_replicas = moves.constraints.min_replicas
    if min_replicas > 1 and plan.replicas < min_replicas and trial(replace(request, constraints=moves.applied())) is None:
        moves.changes["min_replicas"] = plan.replicas
        moves.moved.append(
            Relaxation(constraint="constraints.min_replicas", current=min_replicas, value=plan.replicas, unit="replicas")
        )


def _relative(relaxation: Relaxation) -> float:
    """How far a relaxation moves its constraint, relative to where it was (for ordering the advice)."""
    current, value = relaxation.current, relaxation.value
    if isinstance(current, bool) or isinstance(value, bool | str) or not current:
        return math.inf
    if not isinstance(current, int | float) or not isinstance(value, int | float):
        return math.inf
    return abs(float(value) / float(current) - 1.0)


def advised(error: InfeasiblePlanError, request: PlanningRequest, inputs: PlanningInputs, plan: Plan) -> InfeasiblePlanError:
    """`error` with the relaxations that were re-planned and found to work: `relaxations` (each alone
    enough when `relaxations_apply` is "any"; all of them together when "all"), the culprit(s) named
    in `detail`, `constraint` the first culprit's field."""
    trial = _Trial(plan=plan, request=request, inputs=inputs, budget=_Budget())
    single = _slo_relaxations(trial, error) + _limit_relaxations(trial) + _allowed_relaxations(trial)
    single.sort(key=_relative)
    apply = "any"
    relaxations = single
    if not single:
        relaxations = _together(trial, error)
        apply = "all"
    extensions = dict(error.extensions)
    extensions.pop("relaxation", None)
    extensions.update(
        relaxations=[as_dict(r) for r in relaxations],
        relaxations_apply=apply,
        advice_complete=not trial.budget.spent,
        advice_replans=trial.budget.replans,
    )
    if not relaxations:
        detail = f"{error.detail}. No relaxation of the constraints this request set was found to make it feasible" + (
            "" if not trial.budget.spent else " before the advice's allowance of re-plans ran out"
        )
        return InfeasiblePlanError(detail, **extensions)
    # the base error's own sentence stays where it explains a physical floor (an SLO below what any
    # configuration reaches unloaded, a model no GPU holds); a limit's diagnosis is the advice itself
    base = error.extensions.get("constraint")
    why = error.detail if base in ("ttft", "tpot", "e2e", "memory", "verification") else None
    families = {_family(r.constraint) for r in relaxations}
    if base in ("ttft", "tpot", "e2e") and relaxations and base not in families:
        # the unloaded floor of one metric was measured only over the configurations that metric
        # refused; re-planning found another metric to be what stands in the way, so that floor is
        # not the culprit and its sentence would mislead
        why = None
        for member in ("target", "smallest_feasible", "unit", "configuration"):
            extensions.pop(member, None)
    if apply == "any":
        first = relaxations[0]
        options = "; or ".join(_phrase(r) for r in relaxations[:4])
        advice = f"each of these alone makes it feasible (re-planned to check): {options}"
        extensions["constraint"] = _family(first.constraint)
        extensions["culprits"] = [r.constraint for r in relaxations]
    else:
        advice = (
            f"no single constraint relaxed is enough: {', '.join(r.constraint for r in relaxations)} must all move, "
            "together: " + "; ".join(_phrase(r) for r in relaxations)
        )
        extensions["constraint"] = "combination"
        extensions["culprits"] = [r.constraint for r in relaxations]
    detail = f"{why}; {advice}" if why else f"no plan meets this request as set: {advice}"
    return InfeasiblePlanError(detail, **extensions)


def _family(field_name: str) -> str:
    """A relaxation's request field → the constraint family the problem's `constraint` member names."""
    if field_name.startswith("constraints.inventory."):
        return "gpu_inventory"
    return _FAMILY.get(field_name, field_name)


#: A relaxation's request field → the constraint family the problem's `constraint` member names.
_FAMILY = {
    "slo.ttft_ms": "ttft",
    "slo.tpot_ms": "tpot",
    "slo.e2e_s": "e2e",
    "constraints.budget_usd_per_hour": "budget",
    "constraints.max_gpus": "max_gpus",
    "inventory": "gpu_inventory",
    "constraints.min_replicas": "min_replicas",
    "constraints.n_plus_one": "n_plus_one",
    "constraints.gpus": "gpus",
    "constraints.precisions": "precisions",
    "constraints.min_confidence": "min_confidence",
    "constraints.pin.replicas": "pin.replicas",
}


def _phrase(relaxation: Relaxation) -> str:
    if isinstance(relaxation.value, bool):
        return f"set {relaxation.constraint} to {str(relaxation.value).lower()}"
    if relaxation.constraint == "constraints.min_confidence":
        return f"lower {relaxation.constraint} from {relaxation.current} to {relaxation.value}"
    if relaxation.constraint in ("constraints.gpus", "constraints.precisions"):
        return f"allow {relaxation.value} in {relaxation.constraint}"
    unit = f" {relaxation.unit}" if relaxation.unit else ""
    cost = "" if relaxation.cost_usd_per_hour is None else f" (the plan then costs ${relaxation.cost_usd_per_hour:.2f}/h)"
    return (
        f"{relaxation.constraint} {relaxation.current:g} → {relaxation.value:g}{unit}{cost}"
        if isinstance(relaxation.current, int | float)
        else f"{relaxation.constraint} → {relaxation.value}{unit}{cost}"
    )
