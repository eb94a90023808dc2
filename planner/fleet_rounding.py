"""Integer fleets without the solver: rounding an LP relaxation, covering each demand cheapest,
trimming idle replicas, and choosing the reservations for a set of replicas.

The staged search (planner/fleet_solve.py) needs a feasible fleet in hand before it hands the
MILP to the solver: as its fallback answer when the time limit stops the solver at a worse
incumbent (or with none), and as the cutoff that prunes the MILP's search. A fleet here is what
the solver reads and writes: variable name → value, by the names of `FleetDecisions`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pulp

from planner.fleet_formulation import FleetDecisions, cheapest_cover, cheapest_gpu_hour_usd
from planner.fleet_spec import FleetConstraints, FleetSpec, FleetWorkload, GpuPeriod, GpuPrice, ReplicaKey

#: LP values within this of an integer count as that integer when rounding up (solver tolerance).
ROUNDING_SLACK = 1e-6


def rounded_reservations(spec: FleetSpec, decisions: FleetDecisions, values: Mapping[str, float]) -> dict[str, int]:
    """Each GPU type's reservation in `values` rounded to the nearest whole GPU, within every period's inventory."""
    levels = {}
    for gpu, variable in decisions.reserved_gpus.items():
        limits = [n for n in (spec.inventory_limit(gpu, p) for p in range(spec.periods)) if n is not None]
        levels[gpu] = min([max(0, round(values.get(variable.name, 0.0))), *limits])
    return levels


def whole_count(values: Mapping[str, float], variable: pulp.LpVariable) -> int:
    """`variable`'s value in the fleet `values` as the whole number the solver meant (0 when absent)."""
    return round(values.get(variable.name, 0.0))


def value_at(expression: pulp.LpAffineExpression, values: Mapping[str, float]) -> float:
    """The value of `expression` at `values` (variable name → value)."""
    total: float = expression.constant + sum(coefficient * values.get(v.name, 0.0) for v, coefficient in expression.items())
    return total  # pulp is untyped: its constant and coefficients are floats


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
    replicas: dict[ReplicaKey, int] = {}
    for p in range(spec.periods):
        room = {gpu: spec.inventory_limit(gpu, p) for gpu in spec.gpus}
        fractional = {
            (w.name, c.id): max(0.0, lp_values.get(decisions.replicas[w.name, c.id, p].name, 0.0))
            for w in spec.workloads
            for c in w.candidates
        }
        counts = {key: math.floor(value + ROUNDING_SLACK) for key, value in fractional.items()}
        for w in spec.workloads:
            for c in w.candidates:
                _take(room, c.gpu, counts[w.name, c.id] * c.gpus_per_replica)
        for w in spec.workloads:
            mine = {c.id: counts[w.name, c.id] for c in w.candidates}
            while not _meets(w, p, mine, spec.constraints):
                addable = [
                    c
                    for c in w.candidates
                    if _has_room(room[c.gpu], c.gpus_per_replica) and mine[c.id] < decisions.replicas[w.name, c.id, p].upBound
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
                _take(room, chosen.gpu, chosen.gpus_per_replica)
            replicas.update({(w.name, key, p): n for key, n in mine.items()})
    return fleet_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), {})


def _has_room(left: int | None, gpus: int) -> bool:
    """Whether `gpus` more GPUs fit in what is left of a type's inventory (None: unlimited)."""
    return left is None or left >= gpus


def _take(room: dict[str, int | None], gpu: str, gpus: int) -> None:
    """`gpus` GPUs of `gpu` taken from what is left of its inventory (an unlimited type stays so)."""
    left = room[gpu]
    if left is not None:
        room[gpu] = left - gpus


def cover_fleet(spec: FleetSpec, decisions: FleetDecisions) -> dict[str, float] | None:
    """A feasible integer fleet built workload-period by workload-period: the cheapest whole cover
    of each demand (`cheapest_cover`, each replica priced at its GPUs' cheapest GPU-hour), topped
    up with the cheapest replica per req/s until N+1 and min_replicas hold; idle replicas trimmed
    and reservations chosen as in `rounded_fleet`. None when it breaks an inventory limit.

    The LP relaxation spreads replicas over candidates in fractions, so rounding it
    (`rounded_fleet`) is often worse than this; the solver gets the cheaper of the two as a cutoff.
    """
    replicas: dict[ReplicaKey, int] = {}
    for w in spec.workloads:
        weights = [c.gpus_per_replica * cheapest_gpu_hour_usd(spec, c.gpu) for c in w.candidates]
        items = [(a, c.max_rps_at_slo) for a, c in zip(weights, w.candidates, strict=True)]
        cheapest = min(range(len(items)), key=lambda i: (items[i][0] / items[i][1], items[i][0]))
        covers: dict[float, tuple[int, ...]] = {}
        for p in range(spec.periods):
            demand = w.demand_rps[p]
            if demand not in covers:
                covers[demand] = cheapest_cover(items, demand).counts
            mine = {c.id: n for c, n in zip(w.candidates, covers[demand], strict=True)}
            while not _meets(w, p, mine, spec.constraints):
                mine[w.candidates[cheapest].id] += 1
            replicas.update({(w.name, key, p): n for key, n in mine.items()})
    return fleet_from_replicas(spec, decisions, trim_idle_replicas(spec, replicas), {})


def fleet_from_replicas(
    spec: FleetSpec,
    decisions: FleetDecisions,
    replicas: Mapping[ReplicaKey, int],
    spot: Mapping[GpuPeriod, int],
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
        for p, (n, limit) in enumerate(zip(uncovered, limits, strict=True)):
            on_demand = max(0, n - reserved)
            held = reserved + on_demand + spot_used[p]
            if limit is not None and held > limit:
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
    """Whether `counts` replicas (by candidate id) meet the workload's demand in `period`, N+1 if asked, and min_replicas."""
    chosen = [c for c in workload.candidates if counts[c.id] > 0]
    capacity = sum(c.max_rps_at_slo * counts[c.id] for c in chosen)
    demand = workload.demand_rps[period]
    largest = max((c.max_rps_at_slo for c in chosen), default=0.0)
    return (
        capacity >= demand
        and (not constraints.n_plus_one or capacity - largest >= demand)
        and sum(counts.values()) >= constraints.min_replicas
    )


def trim_idle_replicas(spec: FleetSpec, replicas: Mapping[ReplicaKey, int]) -> dict[ReplicaKey, int]:
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
