"""The fleet plan: many workloads over a day of periods, on reserved, on-demand and spot GPUs.

One MILP chooses how many GPUs of each type to reserve (held and paid in every period), how
many to rent on demand (and on spot) in each period, and how many replicas of which candidate
each workload runs in each period. On paper, with w a workload, c ∈ C_w its candidates (GPU
k_c, g_c GPUs per replica, μ_c = max_rps_at_slo), p a period of h hours, d_wp the demand:

    minimise   Σ_k R_k·π^res_k·h·P + Σ_{k,p} (O_kp·π^od_k + S_kp·π^spot_k)·h
    subject to Σ_c r_wcp·μ_c ≥ d_wp                                 meet_demand__w__hp
               Σ_c r_wcp·μ_c − m_wp ≥ d_wp,  m_wp ≥ μ_c·u_wcp        n_plus_one__w__hp
               Σ_c r_wcp ≥ min_replicas                             min_replicas__w__hp
               Σ_{w, c on k} r_wcp·g_c ≤ R_k + O_kp + S_kp          gpus_held__k__hp
               R_k + O_kp + S_kp ≤ inventory_kp                     gpu_inventory__k__hp
               S_kp ≤ spot availability_k                           (a variable bound)
               total cost ≤ budget_usd_per_day · P·h / 24           budget

Every workload may mix candidates (the router splits its traffic in proportion to capacity).
Costs come from the GPU prices, not from `Candidate.cost_usd_per_hour`. Pools shared between
workloads of the same model (`share_pools`) are not modelled in this version: each workload
runs its own replicas. An infeasible fleet is re-solved with the budget left out, then with
inventory made elastic, to name the workload, period and GPU type that fall short.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import pulp

from planner.errors import InfeasiblePlanError, PlannerInputError, SolverError
from planner.milp import (
    ModelSize,
    Relaxation,
    SolverReport,
    constraint_name,
    integer_value,
    model_size,
    period_label,
    solve,
)
from planner.optimizer import Candidate

HOURS_PER_DAY = 24.0

#: LP values within this of an integer count as that integer when rounding up (solver tolerance).
_ROUNDING_SLACK = 1e-6

#: Least time the first integer stage gets after the LP relaxations, whatever the overall limit;
#: a later stage that would get less is skipped while a fleet is in hand (a MILP stage spends a
#: good part of a second handing the model over: 0.2–0.9 s past a 0.75–1 s limit on the N+1
#: synthetic benchmark, 23 724 columns, measured 2026-12-01).
_MIN_MILP_TIME_S = 1.0

#: The MILP stops once its incumbent is proved within this fraction of the optimum (the gap is
#: reported with every plan). 1 % of a fleet's cost is below the 1 % tolerance at which μ itself
#: is known (planner/fleet_candidates.py MU_RELATIVE_TOLERANCE), so a smaller gap buys nothing real.
FLEET_RELATIVE_GAP = 0.01

#: Share of the time left that each stage but the last (the whole MILP) may use. The stages before
#: it search the neighbourhood where good fleets are found (on the `shared` benchmark the whole
#: MILP finds none as good in 10 s), and the whole MILP gets little time anyway once the
#: hand-overs are paid; 3/4, a judgement, not tuned.
RESTRICTED_SHARE = 0.75

#: The cutoff row allows this relative excess over the fallback fleet's cost, so that fleet stays
#: feasible for the solver despite rounding in its row activity.
_CUTOFF_SLACK = 1e-7

#: What the caller hands `solve_fleet` to stop the work: called between stages (and between the
#: periods of the period stage), it raises to abandon the plan. The planner never reads a clock
#: for it; the API's checkpoint raises its request-timeout error once the request's deadline has
#: passed, so a plan whose caller got a 503 stops within one stage (api/fleet_plans.py).
Checkpoint = Callable[[], None]


def no_checkpoint() -> None:
    """The default checkpoint: never stops the work."""


#: Branch-and-bound nodes allowed per workload-period when pricing its cheapest integer cover
#: (`cover_cost_lower_bound`); past it the cut is left out (it is a strengthening, never needed).
_COVER_NODE_LIMIT = 20_000


def _finite_non_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetWorkload:
    """One workload: its candidate configurations and its demand, one rate per period."""

    name: str
    candidates: tuple[Candidate, ...]
    demand_rps: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "demand_rps", tuple(float(d) for d in self.demand_rps))
        if not self.name:
            raise PlannerInputError("a workload needs a name")
        if not self.demand_rps:
            raise PlannerInputError(f"workload {self.name!r}: demand_rps needs at least one period")
        if not all(_finite_non_negative(d) for d in self.demand_rps):
            raise PlannerInputError(f"workload {self.name!r}: every demand must be finite and >= 0")
        ids = [c.id for c in self.candidates]
        if len(set(ids)) != len(ids):
            raise PlannerInputError(f"workload {self.name!r}: candidate ids must be unique")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuPrice:
    """USD per GPU-hour: on demand (paid in the periods rented), reserved (paid in every period)."""

    on_demand_usd_per_hour: float
    reserved_usd_per_hour: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.on_demand_usd_per_hour) and self.on_demand_usd_per_hour > 0):
            raise PlannerInputError(f"on-demand price must be finite and > 0, got {self.on_demand_usd_per_hour}")
        if not _finite_non_negative(self.reserved_usd_per_hour):
            raise PlannerInputError(f"reserved price must be finite and >= 0, got {self.reserved_usd_per_hour}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpotOffer:
    """Spot GPUs of one type: price = on-demand × (1 − discount), at most `max_gpus` per period."""

    discount_fraction: float
    max_gpus: int

    def __post_init__(self) -> None:
        if not (0.0 <= self.discount_fraction < 1.0):
            raise PlannerInputError(f"spot discount must be in [0, 1), got {self.discount_fraction}")
        if self.max_gpus < 0:
            raise PlannerInputError(f"spot availability must be >= 0 GPUs, got {self.max_gpus}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetConstraints:
    """Per workload and period: at least `min_replicas`, and N+1 if asked; a budget over the horizon."""

    min_replicas: int = 1
    n_plus_one: bool = False
    budget_usd_per_day: float | None = None

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise PlannerInputError(f"min_replicas must be >= 0, got {self.min_replicas}")
        if self.budget_usd_per_day is not None and not (math.isfinite(self.budget_usd_per_day) and self.budget_usd_per_day > 0):
            raise PlannerInputError(f"budget_usd_per_day must be finite and > 0, got {self.budget_usd_per_day}")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSpec:
    """Everything the fleet MILP needs. `inventory` gives the most GPUs of a type, either one
    count for every period or one per period; types not listed are unlimited."""

    workloads: tuple[FleetWorkload, ...]
    prices: Mapping[str, GpuPrice]
    inventory: Mapping[str, int | tuple[int, ...]] = field(default_factory=dict)
    spot: Mapping[str, SpotOffer] = field(default_factory=dict)
    period_hours: float = 1.0
    constraints: FleetConstraints = FleetConstraints()

    def __post_init__(self) -> None:
        object.__setattr__(self, "workloads", tuple(self.workloads))
        if not self.workloads:
            raise PlannerInputError("a fleet needs at least one workload")
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise PlannerInputError("workload names must be unique", duplicates=sorted({n for n in names if names.count(n) > 1}))
        periods = {len(w.demand_rps) for w in self.workloads}
        if len(periods) != 1:
            raise PlannerInputError(
                "every workload must give the same number of periods",
                periods={w.name: len(w.demand_rps) for w in self.workloads},
            )
        if not (math.isfinite(self.period_hours) and self.period_hours > 0):
            raise PlannerInputError(f"period_hours must be finite and > 0, got {self.period_hours}")
        object.__setattr__(self, "prices", MappingProxyType(dict(self.prices)))
        object.__setattr__(self, "spot", MappingProxyType(dict(self.spot)))
        unpriced = sorted({c.gpu for w in self.workloads for c in w.candidates} - set(self.prices))
        if unpriced:
            raise PlannerInputError(f"no price for GPU types {', '.join(unpriced)}", gpus=unpriced)
        unpriced_spot = sorted(set(self.spot) - set(self.prices))
        if unpriced_spot:
            raise PlannerInputError(f"spot offered for unpriced GPU types {', '.join(unpriced_spot)}", gpus=unpriced_spot)
        object.__setattr__(self, "inventory", MappingProxyType(self._per_period_inventory()))

    def _per_period_inventory(self) -> dict[str, tuple[int, ...]]:
        inventory: dict[str, tuple[int, ...]] = {}
        for gpu, counts in self.inventory.items():
            per_period = (counts,) * self.periods if isinstance(counts, int) else tuple(counts)
            if len(per_period) != self.periods or not all(isinstance(n, int) and n >= 0 for n in per_period):
                raise PlannerInputError(
                    f"inventory of {gpu!r} must be a whole number >= 0 or one per period ({self.periods}), got {counts!r}"
                )
            inventory[gpu] = per_period
        return inventory

    @property
    def periods(self) -> int:
        return len(self.workloads[0].demand_rps)

    @property
    def horizon_hours(self) -> float:
        return self.periods * self.period_hours

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPU types some candidate runs on, sorted."""
        return tuple(sorted({c.gpu for w in self.workloads for c in w.candidates}))

    def inventory_limit(self, gpu: str, period: int) -> int | None:
        counts = self.inventory.get(gpu)
        return None if counts is None else counts[period]

    def spot_price_usd_per_hour(self, gpu: str) -> float:
        return self.prices[gpu].on_demand_usd_per_hour * (1 - self.spot[gpu].discount_fraction)  # on-demand less the discount


# --- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetAssignment:
    """Replicas of one candidate serving one workload in one period."""

    workload: str
    period: int
    candidate: Candidate
    replicas: int
    gpus: int
    capacity_rps: float  # replicas × max_rps_at_slo
    offered_rps: float  # the workload's demand × this row's share of its capacity
    target_rho: float  # offered rate per replica / saturation_rps


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetPeriod:
    """One period of the schedule: GPUs rented, used and held, who runs where, and its cost."""

    index: int
    demand_rps: Mapping[str, float]
    on_demand_gpus: Mapping[str, int]
    spot_gpus: Mapping[str, int]
    gpus_used: Mapping[str, int]
    gpus_held: Mapping[str, int]  # reserved + on-demand + spot
    assignments: tuple[FleetAssignment, ...]
    cost_usd: float
    gpu_utilisation: float  # Σ used / Σ held (0 when nothing is held)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetCost:
    """Costs over the horizon. Per workload: in each period, a GPU type's cost is spread over
    the GPUs held at their mean price; each workload pays for the GPUs its replicas use, and
    GPUs held but unused (reserved GPUs idle off-peak) are `idle_usd`. The parts sum to the total."""

    total_usd: float
    usd_per_day: float  # total × 24 h / horizon
    reserved_usd: float
    on_demand_usd: float
    spot_usd: float
    idle_usd: float
    per_workload_usd: Mapping[str, float]
    per_period_usd: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemandShadowPrice:
    """Marginal cost (USD over the horizon) of one more req/s of this workload in this period."""

    workload: str
    period: int
    usd_per_rps: float


@dataclass(frozen=True, slots=True, kw_only=True)
class InventoryShadowPrice:
    """Value (USD saved over the horizon) of one more GPU of inventory in a period where it binds."""

    gpu: str
    period: int
    usd_per_gpu: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowPrices:
    """Duals of the LP relaxation (every integer made continuous, binaries in [0, 1]).

    The relaxation prices capacity at its fractional marginal cost, so a demand dual reads
    "one more req/s here costs this much if GPUs came in fractions"; where the integer plan
    has slack the true marginal cost of a small increase is zero, and of a larger one a step.
    Inventory values are reported for the (type, period) pairs whose inventory the integer plan
    exhausts; the relaxation may value some of them at zero. When several periods share a
    reservation the LP is degenerate and the split of the reservation's cost over those
    periods' demand duals is one of several valid ones (their sum is what is determined).
    """

    method: str
    demand: tuple[DemandShadowPrice, ...]
    inventory: tuple[InventoryShadowPrice, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetPlan:
    """The cheapest schedule of reserved, on-demand and spot GPUs and replicas, with its costs."""

    reserved_gpus: Mapping[str, int]
    periods: tuple[FleetPeriod, ...]
    period_hours: float
    cost: FleetCost
    shadow_prices: ShadowPrices | None
    solver: SolverReport
    model_size: ModelSize
    candidates_dropped: int  # dominated candidates removed before the MILP


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
        if not w.candidates:
            raise InfeasiblePlanError(
                f"workload {w.name!r} has no candidate configuration that holds its model and meets its SLOs: "
                "allow more GPU types, precisions or tensor-parallel degrees, or relax its SLOs",
                constraint="candidates",
                workload=w.name,
            )
        kept = undominated(w.candidates)
        dropped += len(w.candidates) - len(kept)
        workloads.append(FleetWorkload(name=w.name, candidates=kept, demand_rps=w.demand_rps))
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
    on_demand_gpus: Mapping[tuple[str, int], pulp.LpVariable]
    spot_gpus: Mapping[tuple[str, int], pulp.LpVariable]
    replicas: Mapping[tuple[str, str, int], pulp.LpVariable]
    use: Mapping[tuple[str, str, int], pulp.LpVariable]
    largest_replica_rps: Mapping[tuple[str, int], pulp.LpVariable]
    inventory_shortfall: Mapping[tuple[str, int], pulp.LpVariable]


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
    use: dict[tuple[str, str, int], pulp.LpVariable] = {}
    largest: dict[tuple[str, int], pulp.LpVariable] = {}
    if spec.constraints.n_plus_one:
        for w in spec.workloads:
            for p in periods:
                largest[w.name, p] = problem.add_variable(
                    constraint_name("largest_replica_rps", w.name, period_label(p)),
                    lowBound=0,
                    upBound=max(c.max_rps_at_slo for c in w.candidates),
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
    return FleetDecisions(reserved, on_demand, spot, replicas, use, largest, shortfall)


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


def gpus_used(spec: FleetSpec, decisions: FleetDecisions, gpu: str, period: int) -> pulp.LpAffineExpression:
    """Σ_{w, c on k} r_wcp·g_c"""
    return linear_sum(
        (decisions.replicas[w.name, c.id, period], c.gpus_per_replica)
        for w in spec.workloads
        for c in w.candidates
        if c.gpu == gpu
    )


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
    """Σ_c r_wcp·μ_c ≥ d_wp for every workload w and period p."""
    for w in spec.workloads:
        for p in range(spec.periods):
            problem += (
                capacity_rps(spec, decisions, w, p) >= w.demand_rps[p],
                constraint_name("meet_demand", w.name, period_label(p)),
            )


def add_n_plus_one_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_c r_wcp·μ_c − m_wp ≥ d_wp, m_wp ≥ μ_c·u_wcp, r_wcp ≤ R_wcp·u_wcp: one replica may be lost."""
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
            problem += (
                capacity_rps(spec, decisions, w, p) - largest >= w.demand_rps[p],
                constraint_name("n_plus_one", w.name, label),
            )


def cheapest_cover(
    items: Sequence[tuple[float, float]], demand_rps: float, *, node_limit: int = _COVER_NODE_LIMIT
) -> tuple[float, tuple[int, ...], bool]:
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
        return 0.0, tuple(counts), True
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
    return best, tuple(best_counts), finished


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
            problem += (
                linear_sum((decisions.replicas[w.name, c.id, p], weights[c.id]) for c in w.candidates) >= bound,
                constraint_name("cover_cost", w.name, period_label(p)),
            )
            added += 1
    return added


def add_min_replicas_constraints(problem: pulp.LpProblem, spec: FleetSpec, decisions: FleetDecisions) -> None:
    """Σ_c r_wcp ≥ min_replicas for every workload w and period p."""
    for w in spec.workloads:
        for p in range(spec.periods):
            problem += (
                linear_sum((decisions.replicas[w.name, c.id, p], 1) for c in w.candidates) >= spec.constraints.min_replicas,
                constraint_name("min_replicas", w.name, period_label(p)),
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


# --- solving ------------------------------------------------------------------------------------


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
    relaxation = Relaxation(problem, solver_name=solver_name)
    lp = relaxation.solve(time_limit_s=time_limit_s)
    checkpoint()
    if lp.status == "infeasible":  # no fractional fleet, so no integer one
        raise diagnose_infeasible_fleet(presolved, time_limit_s=time_limit_s, solver_name=lp.solver_name, checkpoint=checkpoint)
    if lp.status != "optimal" or lp.objective is None:  # an interrupted LP gives neither bound nor duals
        raise SolverError(
            f"{lp.solver_name} could not solve the fleet's LP relaxation within {time_limit_s} s; "
            "raise the time limit or plan fewer workloads, periods or candidates",
            solver=lp.solver_name,
            time_limit_s=time_limit_s,
        )
    lp_values = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
    duals = _demand_and_inventory_duals(presolved, problem)
    cost = fleet_cost_usd(presolved, decisions)
    budget = presolved.constraints.budget_usd_per_day
    budget_usd = math.inf if budget is None else budget * presolved.horizon_hours / HOURS_PER_DAY
    # The duals above come from the plain relaxation (the cuts would take the demand rows'
    # prices). Everything below has the cover cuts, which leave the integer optimum unchanged.
    add_cover_cost_cuts(problem, presolved, decisions)
    solve_s = lp.solve_s
    bound = lp.objective
    checkpoint()
    cut_lp = relaxation.solve(time_limit_s=time_limit_s)
    checkpoint()
    solve_s += cut_lp.solve_s
    cut_values = lp_values
    if cut_lp.status == "optimal" and cut_lp.objective is not None:
        bound = max(bound, cut_lp.objective)
        cut_values = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
    fallbacks = [
        fleet
        for fleet in (
            rounded_fleet(presolved, decisions, lp_values),
            rounded_fleet(presolved, decisions, cut_values),
            cover_fleet(presolved, decisions),
        )
        if fleet is not None and _evaluate(cost, fleet) <= budget_usd  # over the budget: not one we may return
    ]
    best = min(fallbacks, key=lambda fleet: _evaluate(cost, fleet), default=None)

    def gap(fleet: Mapping[str, float] | None) -> float:
        return math.inf if fleet is None else max(0.0, _evaluate(cost, fleet) - bound) / max(abs(_evaluate(cost, fleet)), 1e-12)

    deadline = started + time_limit_s
    # Kept back from every stage: about what handing the model over once more and reading the
    # answer costs (it took less than building and solving the LPs did), and the result tables.
    setup_s = time.perf_counter() - started

    def stage_s(share: float, *, first: bool = False) -> float | None:
        """Seconds for the next stage: `share` of the time left less `setup_s`; at least
        _MIN_MILP_TIME_S for the first stage or while no fleet is in hand, else None (skip it)
        when less than that is left."""
        left_s = share * max(deadline - time.perf_counter() - setup_s, 0.0)
        if left_s >= _MIN_MILP_TIME_S:
            return left_s
        return _MIN_MILP_TIME_S if first or best is None else None

    # Stage 1, period by period: the cut LP's reservations rounded and fixed, after which no row
    # links two periods, so each is a small MILP of its own. (a) Each period is offered the
    # (workload, candidate) pairs the cut LP or the best fleet run in it; (b) if that is not
    # within the gap, the pairs they run in any period (the restricted MILP's neighbourhood).
    # On `shared`, (a) takes ≈ 0.7 s to 0.3 % where the restricted MILP took 4–5 s to 0.1–1.3 %;
    # on the synthetic benchmark (b) reaches 1 % where the restricted MILP finds nothing in 5 s.
    reservations = rounded_reservations(presolved, decisions, cut_values)
    for by_period in (True, False):
        checkpoint()
        budget_s = stage_s(RESTRICTED_SHARE, first=by_period)
        if gap(best) <= relative_gap or budget_s is None:
            break
        guides = [cut_values, best or {}]
        pairs = (
            _pairs_by_period(presolved, decisions, guides) if by_period else [_pairs_used(decisions, guides)] * presolved.periods
        )
        found, periods_s = fleet_with_reservations_fixed(
            presolved,
            decisions,
            reservations=reservations,
            pairs=pairs,
            fallback=best,
            deadline=time.perf_counter() + budget_s,
            solver_name=lp.solver_name,
            relative_gap=relative_gap / 2,
            checkpoint=checkpoint,
        )
        solve_s += periods_s
        found_usd = math.inf if found is None else _evaluate(cost, found)
        if found_usd <= budget_usd and (best is None or found_usd < _evaluate(cost, best)):
            best = found

    # Stage 2, the neighbourhood of the cut relaxation with the reservations free: the MILP
    # restricted to the (workload, candidate) pairs the cut LP or the best fleet uses (a quarter
    # of them on the benchmark). Stage 3, if that is not within the gap: the whole MILP.
    # Both carry the cutoff cost ≤ the best fleet so far (a row, not a MIP start: HiGHS 1.16's
    # MIP start misreports optima, see docs/fleet-benchmark.md), and stop once a fleet is within
    # the gap of the proved bound.
    for restricted in (True, False):
        checkpoint()
        budget_s = stage_s(RESTRICTED_SHARE if restricted else 1.0)
        if gap(best) <= relative_gap or budget_s is None:
            continue
        cutoff_usd = math.inf if best is None else _evaluate(cost, best)
        if best is not None:
            limit_usd = cutoff_usd + _CUTOFF_SLACK * max(abs(cutoff_usd), 1.0)
            row = problem.get_constraint_by_name("incumbent_cutoff")
            if row is None:
                problem += cost <= limit_usd, "incumbent_cutoff"
            else:
                row.changeRHS(limit_usd)
        closed = _restrict(decisions, [cut_values, best or {}]) if restricted else {}
        try:
            outcome = solve(
                problem,
                time_limit_s=budget_s,
                solver_name=lp.solver_name,
                relative_gap=relative_gap / 2 if restricted else relative_gap,
                stop_at_objective=bound / (1 - relative_gap),
            )  # within the gap of our bound
        finally:
            for variable, upper in closed.items():
                variable.upBound = upper
        solve_s += outcome.solve_s
        if outcome.status == "infeasible" and best is None and not restricted:
            raise diagnose_infeasible_fleet(
                presolved, time_limit_s=time_limit_s, solver_name=outcome.solver_name, checkpoint=checkpoint
            )
        if outcome.status == "infeasible" and not restricted:
            bound = max(bound, cutoff_usd)  # nothing beats the best fleet so far: it is optimal
        if outcome.status in ("optimal", "feasible"):
            found = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
            if best is None or _evaluate(cost, found) < _evaluate(cost, best):
                best = found
            if not restricted and outcome.dual_bound is not None:
                bound = max(bound, min(outcome.dual_bound, _evaluate(cost, best)))
    checkpoint()
    if best is None:
        raise SolverError(
            f"{lp.solver_name} found no feasible fleet within {time_limit_s} s and rounding the LP "
            "relaxation broke an inventory or budget limit; raise the time limit",
            solver=lp.solver_name,
            time_limit_s=time_limit_s,
        )
    values = best
    report = SolverReport(
        name=lp.solver_name,
        status="optimal" if gap(best) <= relative_gap else "feasible",
        solve_s=solve_s,
        mip_gap=gap(best),
    )
    reserved = {gpu: _whole(values, v) for gpu, v in decisions.reserved_gpus.items()}
    on_demand = {key: _whole(values, v) for key, v in decisions.on_demand_gpus.items()}
    spot = {key: _whole(values, v) for key, v in decisions.spot_gpus.items()}
    replicas = trim_idle_replicas(presolved, {key: _whole(values, v) for key, v in decisions.replicas.items()})
    periods = tuple(_fleet_period(presolved, p, reserved, on_demand, spot, replicas) for p in range(presolved.periods))
    prices = lp_shadow_prices(presolved, duals, periods) if shadow_prices else None
    return FleetPlan(
        reserved_gpus=MappingProxyType(reserved),
        periods=periods,
        period_hours=presolved.period_hours,
        cost=_fleet_cost(presolved, reserved, on_demand, spot, periods),
        shadow_prices=prices,
        solver=report,
        model_size=size,
        candidates_dropped=dropped,
    )


def rounded_reservations(spec: FleetSpec, decisions: FleetDecisions, values: Mapping[str, float]) -> dict[str, int]:
    """Each GPU type's reservation in `values` rounded to the nearest whole GPU, within every period's inventory."""
    levels = {}
    for gpu, variable in decisions.reserved_gpus.items():
        limits = [n for n in (spec.inventory_limit(gpu, p) for p in range(spec.periods)) if n is not None]
        levels[gpu] = min([max(0, round(values.get(variable.name, 0.0))), *limits])
    return levels


def period_spec(spec: FleetSpec, period: int, pairs: set[tuple[str, str]]) -> FleetSpec:
    """The fleet of one period alone (no budget), each workload offered its candidates in `pairs`,
    or all of them if `pairs` names none of its own."""
    workloads = []
    for w in spec.workloads:
        offered = tuple(c for c in w.candidates if (w.name, c.id) in pairs) or w.candidates
        workloads.append(FleetWorkload(name=w.name, candidates=offered, demand_rps=(w.demand_rps[period],)))
    return FleetSpec(
        workloads=tuple(workloads),
        prices=spec.prices,
        inventory={gpu: (counts[period],) for gpu, counts in spec.inventory.items()},
        spot=spec.spot,
        period_hours=spec.period_hours,
        constraints=FleetConstraints(min_replicas=spec.constraints.min_replicas, n_plus_one=spec.constraints.n_plus_one),
    )


def fleet_with_reservations_fixed(
    spec: FleetSpec,
    decisions: FleetDecisions,
    *,
    reservations: Mapping[str, int],
    pairs: Sequence[set[tuple[str, str]]],
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
    (`_start_from_replicas`), which never costs more than keeping them: the fleet never costs
    more than `fallback`'s replicas at `reservations` (it may cost more than `fallback` itself,
    whose own reservations may suit it better; the caller keeps the cheaper). `checkpoint` is
    called before each period.
    """
    replicas: dict[tuple[str, str, int], int] = {}
    spot: dict[tuple[str, int], int] = {}
    solve_s = 0.0
    for p in range(spec.periods):
        checkpoint()
        options = []
        if fallback is not None:
            options.append(
                {
                    (w.name, c.id): _whole(fallback, decisions.replicas[w.name, c.id, p])
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
    return _start_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), spot), solve_s


def _rental_at(
    spec: FleetSpec, period: int, reservations: Mapping[str, int], counts: Mapping[tuple[str, str], int]
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
) -> list[set[tuple[str, str]]]:
    """For each period, the (workload, candidate) pairs some fleet in `fleets` runs in it."""
    used: list[set[tuple[str, str]]] = [set() for _ in range(spec.periods)]
    for (workload, candidate, p), variable in decisions.replicas.items():
        if any(fleet.get(variable.name, 0.0) > _ROUNDING_SLACK for fleet in fleets):
            used[p].add((workload, candidate))
    return used


def _pairs_used(decisions: FleetDecisions, fleets: Sequence[Mapping[str, float]]) -> set[tuple[str, str]]:
    """The (workload, candidate) pairs some period of some fleet in `fleets` runs."""
    return {
        (workload, candidate)
        for (workload, candidate, _), variable in decisions.replicas.items()
        if any(fleet.get(variable.name, 0.0) > _ROUNDING_SLACK for fleet in fleets)
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


def _whole(values: Mapping[str, float], variable: pulp.LpVariable) -> int:
    return int(round(values.get(variable.name, 0.0)))


def _evaluate(expression: pulp.LpAffineExpression, values: Mapping[str, float]) -> float:
    """The value of `expression` at `values` (variable name → value)."""
    return expression.constant + sum(coefficient * values.get(v.name, 0.0) for v, coefficient in expression.items())


def rounded_fleet(spec: FleetSpec, decisions: FleetDecisions, lp_values: Mapping[str, float]) -> dict[str, float] | None:
    """A feasible integer fleet built from the solved LP relaxation: the answer when the MILP's
    time limit stops it at a worse incumbent (HiGHS's own heuristics can stall on large fleets).

    Each workload-period keeps the whole part of its LP replicas, then adds replicas one at a
    time — largest LP remainder first, then the cheapest on-demand cost per req/s — on GPU types
    with inventory left in that period, until demand, N+1 and min_replicas hold. Idle replicas
    are trimmed, and each GPU type reserves the level R minimising
    R·π_res·P + Σ_p max(0, used_p − R)·π_od, renting the rest; spot is left unused.
    None when inventory runs out first.
    """
    replicas: dict[tuple[str, str, int], int] = {}
    for p in range(spec.periods):
        room = {gpu: spec.inventory_limit(gpu, p) for gpu in spec.gpus}
        fractional = {
            (w.name, c.id): max(0.0, lp_values.get(decisions.replicas[w.name, c.id, p].name, 0.0))
            for w in spec.workloads
            for c in w.candidates
        }
        counts = {key: math.floor(value + _ROUNDING_SLACK) for key, value in fractional.items()}
        for w in spec.workloads:
            for c in w.candidates:
                if room[c.gpu] is not None:
                    room[c.gpu] -= counts[w.name, c.id] * c.gpus_per_replica
        for w in spec.workloads:
            mine = {c.id: counts[w.name, c.id] for c in w.candidates}
            while not _meets(w, p, mine, spec.constraints):
                addable = [
                    c
                    for c in w.candidates
                    if (room[c.gpu] is None or room[c.gpu] >= c.gpus_per_replica)
                    and mine[c.id] < decisions.replicas[w.name, c.id, p].upBound
                ]
                if not addable:
                    return None
                chosen = min(
                    addable,
                    key=lambda c: (
                        -(fractional[w.name, c.id] - mine[c.id]),
                        spec.prices[c.gpu].on_demand_usd_per_hour * c.gpus_per_replica / c.max_rps_at_slo,
                    ),
                )
                mine[chosen.id] += 1
                if room[chosen.gpu] is not None:
                    room[chosen.gpu] -= chosen.gpus_per_replica
            replicas.update({(w.name, key, p): n for key, n in mine.items()})
    return _start_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), {})


def cover_fleet(spec: FleetSpec, decisions: FleetDecisions) -> dict[str, float] | None:
    """A feasible integer fleet built workload-period by workload-period: the cheapest whole cover
    of each demand (`cheapest_cover`, each replica priced at its GPUs' cheapest GPU-hour), topped
    up with the cheapest replica per req/s until N+1 and min_replicas hold; idle replicas trimmed
    and reservations chosen as in `rounded_fleet`. None when it breaks an inventory limit.

    The LP relaxation spreads replicas over candidates in fractions, so rounding it
    (`rounded_fleet`) is often worse than this; the solver gets the cheaper of the two as a cutoff.
    """
    replicas: dict[tuple[str, str, int], int] = {}
    for w in spec.workloads:
        weights = [c.gpus_per_replica * cheapest_gpu_hour_usd(spec, c.gpu) for c in w.candidates]
        items = [(a, c.max_rps_at_slo) for a, c in zip(weights, w.candidates, strict=True)]
        cheapest = min(range(len(items)), key=lambda i: (items[i][0] / items[i][1], items[i][0]))
        covers: dict[float, tuple[int, ...]] = {}
        for p in range(spec.periods):
            demand = w.demand_rps[p]
            if demand not in covers:
                covers[demand] = cheapest_cover(items, demand)[1]
            mine = {c.id: n for c, n in zip(w.candidates, covers[demand], strict=True)}
            while not _meets(w, p, mine, spec.constraints):
                mine[w.candidates[cheapest].id] += 1
            replicas.update({(w.name, key, p): n for key, n in mine.items()})
    return _start_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), {})


def _start_from_replicas(
    spec: FleetSpec,
    decisions: FleetDecisions,
    replicas: Mapping[tuple[str, str, int], int],
    spot: Mapping[tuple[str, int], int],
) -> dict[str, float] | None:
    """Variable values (by `decisions`' names) for a fleet running `replicas` (and `spot`): each
    GPU type reserves the level R minimising R·π_res·P + Σ_p max(0, used_p − spot_p − R)·π_od,
    among the levels that keep R + spot_p within every period's inventory, and rents the rest.
    None if that breaks an inventory limit (the replicas use more GPUs than some period holds)."""
    used = {(gpu, p): 0 for gpu in spec.gpus for p in range(spec.periods)}
    for w in spec.workloads:
        for c in w.candidates:
            for p in range(spec.periods):
                used[c.gpu, p] += replicas[w.name, c.id, p] * c.gpus_per_replica
    start: dict[str, float] = {}
    for gpu in spec.gpus:
        spot_used = [spot.get((gpu, p), 0) for p in range(spec.periods)]
        limits = [spec.inventory_limit(gpu, p) for p in range(spec.periods)]
        ceiling = min((n - s for n, s in zip(limits, spot_used, strict=True) if n is not None), default=None)
        price = spec.prices[gpu]
        uncovered = [max(0, used[gpu, p] - s) for p, s in enumerate(spot_used)]

        def cost(level: int, uncovered: list[int] = uncovered, price: GpuPrice = price) -> float:
            return (
                level * price.reserved_usd_per_hour * spec.periods
                + sum(max(0, n - level) for n in uncovered) * price.on_demand_usd_per_hour
            )

        # The cost is convex in R, so its least value on [0, ceiling] is at a usage level or an end.
        levels = {0, *uncovered} if ceiling is None else {0, ceiling, *uncovered}
        reserved = min(sorted(level for level in levels if ceiling is None or 0 <= level <= ceiling), key=cost, default=0)
        start[decisions.reserved_gpus[gpu].name] = reserved
        for p, n in enumerate(uncovered):
            on_demand = max(0, n - reserved)
            held = reserved + on_demand + spot_used[p]
            if limits[p] is not None and held > limits[p]:
                return None
            start[decisions.on_demand_gpus[gpu, p].name] = on_demand
            if gpu in spec.spot:
                start[decisions.spot_gpus[gpu, p].name] = spot_used[p]
    for key, variable in decisions.replicas.items():
        start[variable.name] = replicas[key]
    if spec.constraints.n_plus_one:
        for w in spec.workloads:
            for p in range(spec.periods):
                running = [c for c in w.candidates if replicas[w.name, c.id, p] > 0]
                for c in w.candidates:
                    start[decisions.use[w.name, c.id, p].name] = 1 if replicas[w.name, c.id, p] > 0 else 0
                start[decisions.largest_replica_rps[w.name, p].name] = max((c.max_rps_at_slo for c in running), default=0.0)
    return start


def _meets(workload: FleetWorkload, period: int, counts: Mapping[str, int], constraints: FleetConstraints) -> bool:
    chosen = [c for c in workload.candidates if counts[c.id] > 0]
    capacity = sum(c.max_rps_at_slo * counts[c.id] for c in chosen)
    demand = workload.demand_rps[period]
    largest = max((c.max_rps_at_slo for c in chosen), default=0.0)
    return (
        capacity >= demand
        and (not constraints.n_plus_one or capacity - largest >= demand)
        and sum(counts.values()) >= constraints.min_replicas
    )


def trim_idle_replicas(spec: FleetSpec, replicas: Mapping[tuple[str, str, int], int]) -> dict[tuple[str, str, int], int]:
    """Drop replicas the workload does not need (the solver may park some on idle reserved GPUs
    at no cost); largest replicas first. GPUs held and the cost are unchanged."""
    trimmed = dict(replicas)
    for w in spec.workloads:
        order = sorted(w.candidates, key=lambda c: (-c.gpus_per_replica, c.max_rps_at_slo))
        for p in range(spec.periods):
            counts = {c.id: trimmed[w.name, c.id, p] for c in w.candidates}
            for c in order:
                while counts[c.id] > 0:
                    counts[c.id] -= 1
                    if not _meets(w, p, counts, spec.constraints):
                        counts[c.id] += 1
                        break
            for c in w.candidates:
                trimmed[w.name, c.id, p] = counts[c.id]
    return trimmed


def _period_cost_usd(
    spec: FleetSpec,
    gpu: str,
    period: int,
    reserved: Mapping[str, int],
    on_demand: Mapping[tuple[str, int], int],
    spot: Mapping[tuple[str, int], int],
) -> float:
    hours = spec.period_hours
    cost = reserved[gpu] * spec.prices[gpu].reserved_usd_per_hour * hours  # reserved: paid in every period
    cost += on_demand[gpu, period] * spec.prices[gpu].on_demand_usd_per_hour * hours
    if (gpu, period) in spot:
        cost += spot[gpu, period] * spec.spot_price_usd_per_hour(gpu) * hours
    return cost


def _fleet_period(
    spec: FleetSpec,
    period: int,
    reserved: Mapping[str, int],
    on_demand: Mapping[tuple[str, int], int],
    spot: Mapping[tuple[str, int], int],
    replicas: Mapping[tuple[str, str, int], int],
) -> FleetPeriod:
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
    used = {gpu: sum(a.gpus for a in assignments if a.candidate.gpu == gpu) for gpu in spec.gpus}
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
    )


def _fleet_cost(
    spec: FleetSpec,
    reserved: Mapping[str, int],
    on_demand: Mapping[tuple[str, int], int],
    spot: Mapping[tuple[str, int], int],
    periods: Sequence[FleetPeriod],
) -> FleetCost:
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


def _demand_and_inventory_duals(spec: FleetSpec, problem: pulp.LpProblem) -> dict[str, float]:
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
    """Shadow prices from the LP relaxation's row duals (`_demand_and_inventory_duals`).

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
        workload = max(sorted(users), key=lambda name: users[name])
        limit = spec.inventory_limit(gpu, p)
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
