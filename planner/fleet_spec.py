"""The fleet plan's records: what `solve_fleet` is asked (workloads, prices, spot, inventory,
constraints) and what it answers (periods, assignments, costs, shadow prices).

They live apart from the MILP so that the API and the tests can build and read fleets without
the solver's modules, and so that each record's validation sits next to its fields. The model
itself is in planner/fleet_formulation.py, the search in planner/fleet_solve.py (overview in
planner/fleet.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias

from planner.errors import PlannerInputError
from planner.milp import ModelSize, SolverReport
from planner.optimizer import Candidate

HOURS_PER_DAY = 24.0

#: The key of one replica count: (workload name, candidate id, period index).
ReplicaKey: TypeAlias = tuple[str, str, int]
#: The key of a count of one GPU type in one period: (GPU type, period index).
GpuPeriod: TypeAlias = tuple[str, int]
#: The key of one workload's quantity in one period: (workload name, period index).
WorkloadPeriod: TypeAlias = tuple[str, int]
#: A candidate as one workload runs it: (workload name, candidate id).
WorkloadCandidate: TypeAlias = tuple[str, str]

#: What the caller hands `solve_fleet` to stop the work: called between stages (and between the
#: periods of the period stage), it raises to abandon the plan. The planner never reads a clock
#: for it; the API's checkpoint raises its request-timeout error once the request's deadline has
#: passed, so a plan whose caller got a 503 stops within one stage (api/fleet_plans.py).
Checkpoint = Callable[[], None]


def no_checkpoint() -> None:
    """The default checkpoint: never stops the work."""


def _finite_non_negative(value: float) -> bool:
    return math.isfinite(value) and value >= 0


# --- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """One pool of a disaggregated option in one period (planner/plan_disagg.py's PoolCandidate, flattened)."""

    role: str  # "prefill" or "decode"
    gpu: str
    tp: int
    replicas: int
    weights_precision: str
    kv_precision: str
    batch_limit: int | None
    chunk_tokens: int | None
    rho: float
    binding: str
    #: Replicas beyond what the demand needs, kept for constraints.n_plus_one (in `replicas`, priced).
    spare_replicas: int = 0
    #: Pipeline stages and expert-parallel degree of a replica (planner/pipeline.py): tp × pp GPUs a replica.
    pp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.replicas


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassFigure:
    """One traffic class's predicted figures on its arrangement's pool in one period (planner/plan_classes.py
    ClassFigures, at the class's rate in that period)."""

    name: str
    pool: str
    percentile: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    deadline_h: float | None
    meets_target: bool
    shed_fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOption:
    """Pools that serve one workload alone, sized at each period's demand, one tuple of pools per period:
    separate prefill and decode pools (planner/fleet_pools.py: a (prefill, decode) pair), or with
    `arrangement` a traffic-class arrangement's pools (planner/fleet_classes.py: one per class, or one
    shared; a pool's `role` is its name) with each class's figures per period in `class_figures`.
    The fleet MILP takes all of an option or none of it (planner/fleet_formulation.py
    `add_pool_option_constraints`)."""

    id: str
    periods: tuple[tuple[PoolConfig, ...], ...]
    arrangement: str | None = None
    class_figures: tuple[tuple[ClassFigure, ...], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "periods", tuple(tuple(pools) for pools in self.periods))
        object.__setattr__(self, "class_figures", tuple(tuple(f) for f in self.class_figures))
        if not self.id:
            raise PlannerInputError("a pool option needs a non-empty id")
        if self.arrangement is None and any(len(pools) != 2 for pools in self.periods):
            raise PlannerInputError(f"pool option {self.id!r}: separate pools are one prefill and one decode pool per period")
        if self.class_figures and len(self.class_figures) != len(self.periods):
            raise PlannerInputError(f"pool option {self.id!r}: class figures need one tuple per period")

    def gpus_in(self, gpu: str, period: int) -> int:
        """GPUs of type `gpu` both pools hold in `period`."""
        return sum(pool.gpus for pool in self.periods[period] if pool.gpu == gpu)

    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(pool.gpu for pair in self.periods for pool in pair)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetWorkload:
    """One workload: its candidate configurations, its separate-pool options (none unless its
    topology allows them) and its demand, one rate per period."""

    name: str
    candidates: tuple[Candidate, ...]
    demand_rps: tuple[float, ...]
    pool_options: tuple[PoolOption, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "pool_options", tuple(self.pool_options))
        object.__setattr__(self, "demand_rps", tuple(float(d) for d in self.demand_rps))
        if any(len(o.periods) != len(self.demand_rps) for o in self.pool_options):
            raise PlannerInputError(f"workload {self.name!r}: every pool option needs one pair of pools per period")
        if len({o.id for o in self.pool_options}) != len(self.pool_options):
            raise PlannerInputError(f"workload {self.name!r}: pool option ids must be unique")
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
        if unsized := self._pools_not_sized_for_the_constraints():
            raise PlannerInputError(
                "pool options must be sized for n_plus_one and min_replicas (planner/fleet_pools.py passes them to "
                f"plan_disaggregated): {'; '.join(unsized)}",
                constraint="topology",
            )
        unpriced = sorted(set(self.gpus) - set(self.prices))
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
        """GPU types some candidate or pool option runs on, sorted."""
        pools = {gpu for w in self.workloads for o in w.pool_options for gpu in o.gpu_types}
        return tuple(sorted({c.gpu for w in self.workloads for c in w.candidates} | pools))

    @property
    def has_pool_options(self) -> bool:
        return any(w.pool_options for w in self.workloads)

    def _pools_not_sized_for_the_constraints(self) -> list[str]:
        """Each pool option's pools that break the fleet's N+1 or min_replicas: every pool holds at least
        min_replicas (and one) replicas, and under N+1 a spare in every period with demand, as
        planner/fleet_pools.py sizes them (an aggregated workload's N+1 holds only where it has demand too). A class
        arrangement's pools are sized for N+1 by the single-class planner they come from (planner/fleet_classes.py),
        which adds the replica to the pool's count rather than naming a spare."""
        floor = max(self.constraints.min_replicas, 1)
        out = []
        for w in self.workloads:
            for o in w.pool_options:
                for p, (pair, demand) in enumerate(zip(o.periods, w.demand_rps, strict=True)):
                    for pool in pair:
                        if pool.replicas < floor:
                            out.append(f"{w.name}/{o.id} {pool.role} pool in period {p} has {pool.replicas} < {floor} replicas")
                        if o.arrangement is None and self.constraints.n_plus_one and demand > 0 and pool.spare_replicas < 1:
                            out.append(f"{w.name}/{o.id} {pool.role} pool in period {p} has no N+1 spare")
        return out

    def inventory_limit(self, gpu: str, period: int) -> int | None:
        counts = self.inventory.get(gpu)
        return None if counts is None else _count_in(counts, period)

    def inventory_in(self, period: int) -> dict[str, int]:
        """Each listed type's limit in one period."""
        return {gpu: _count_in(counts, period) for gpu, counts in self.inventory.items()}

    def spot_price_usd_per_hour(self, gpu: str) -> float:
        return self.prices[gpu].on_demand_usd_per_hour * (1 - self.spot[gpu].discount_fraction)  # on-demand less the discount


def _count_in(counts: int | tuple[int, ...], period: int) -> int:
    """One period's limit from an inventory entry: `FleetSpec.__post_init__` stores one count per
    period, but the field's type is the one callers give (a single count stands for every period)."""
    return counts if isinstance(counts, int) else counts[period]


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
class FleetPoolAssignment:
    """A workload served by separate prefill and decode pools in one period."""

    workload: str
    period: int
    option: str
    prefill: PoolConfig
    decode: PoolConfig
    offered_rps: float  # the workload's whole demand in the period

    @property
    def gpus(self) -> Mapping[str, int]:
        """GPUs per type of both pools."""
        used: dict[str, int] = {}
        for pool in (self.prefill, self.decode):
            used[pool.gpu] = used.get(pool.gpu, 0) + pool.gpus
        return MappingProxyType(used)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetClassAssignment:
    """A workload with traffic classes served by one arrangement's pools in one period, with each class's figures."""

    workload: str
    period: int
    option: str
    arrangement: str
    pools: tuple[PoolConfig, ...]
    classes: tuple[ClassFigure, ...]
    offered_rps: float  # the workload's whole demand in the period (all classes)

    @property
    def gpus(self) -> Mapping[str, int]:
        """GPUs per type of every pool."""
        used: dict[str, int] = {}
        for pool in self.pools:
            used[pool.gpu] = used.get(pool.gpu, 0) + pool.gpus
        return MappingProxyType(used)


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
    pools: tuple[FleetPoolAssignment, ...] = ()  # workloads served by separate prefill and decode pools
    class_pools: tuple[FleetClassAssignment, ...] = ()  # workloads with traffic classes, on their arrangement's pools


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
