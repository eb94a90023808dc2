"""Brute force agrees with the fleet MILP on small random instances; the rounded LP fallback and the
period-by-period fleet are real fleets; the reported gap is against a proved lower bound."""

from __future__ import annotations

import itertools
import math
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError
from planner.fleet import (
    FleetConstraints,
    FleetSpec,
    FleetWorkload,
    GpuPrice,
    build_fleet_problem,
    cover_fleet,
    fleet_cost_usd,
    fleet_with_reservations_fixed,
    presolve,
    rounded_fleet,
    solve_fleet,
)
from planner.milp import default_solver_name, solve
from planner.optimizer import Candidate

GPUS = ("h100-sxm", "a100-80gb")

#: Quarters keep every sum exact in binary floating point (no tolerance can split MILP and enumeration).
quarters = st.integers(min_value=4, max_value=32).map(lambda k: k / 4)
demands = st.integers(min_value=0, max_value=24).map(lambda k: k / 4)


@st.composite
def fleets(draw: st.DrawFn) -> FleetSpec:
    periods = draw(st.integers(min_value=1, max_value=3))
    workloads = []
    for w in range(draw(st.integers(min_value=1, max_value=2))):
        candidates = []
        for c in range(draw(st.integers(min_value=1, max_value=2))):
            tp = draw(st.sampled_from((1, 2)))
            rps = draw(quarters)
            candidates.append(
                Candidate(
                    id=f"w{w}c{c}",
                    gpu=draw(st.sampled_from(GPUS)),
                    tp=tp,
                    weights_precision="fp16",
                    kv_precision="fp16",
                    batch_limit=32,
                    chunk_tokens=None,
                    gpus_per_replica=tp,
                    cost_usd_per_hour=1.0,
                    max_rps_at_slo=rps,
                    saturation_rps=rps * 1.5,
                )
            )
        workloads.append(
            FleetWorkload(name=f"w{w}", candidates=tuple(candidates), demand_rps=tuple(draw(demands) for _ in range(periods)))
        )
    prices = {}
    for gpu in GPUS:
        on_demand = draw(quarters)
        prices[gpu] = GpuPrice(on_demand_usd_per_hour=on_demand, reserved_usd_per_hour=draw(quarters) * on_demand / 8)
    return FleetSpec(
        workloads=tuple(workloads),
        prices=prices,
        inventory=draw(st.dictionaries(st.sampled_from(GPUS), st.integers(min_value=0, max_value=6), max_size=2)),
        period_hours=draw(st.sampled_from((0.5, 1.0, 2.0))),
        constraints=FleetConstraints(min_replicas=draw(st.integers(0, 2)), n_plus_one=draw(st.booleans())),
    )


def workload_usages(spec: FleetSpec, workload: FleetWorkload, period: int) -> set[tuple[int, ...]]:
    """GPUs per type of every feasible replica vector of one workload in one period.

    Each candidate gets 0 … ⌈d/μ_min⌉ + 1 + min_replicas replicas (that many of any one alone
    already meets demand, N+1 and min_replicas, so more are never needed).
    """
    demand = workload.demand_rps[period]
    bound = math.ceil(demand / min(c.max_rps_at_slo for c in workload.candidates)) + 1 + spec.constraints.min_replicas
    usages = set()
    for counts in itertools.product(range(bound + 1), repeat=len(workload.candidates)):
        chosen = [(c, n) for c, n in zip(workload.candidates, counts, strict=True) if n > 0]
        capacity = sum(c.max_rps_at_slo * n for c, n in chosen)
        largest = max((c.max_rps_at_slo for c, _ in chosen), default=0.0)
        if capacity < demand or sum(counts) < spec.constraints.min_replicas:
            continue
        if spec.constraints.n_plus_one and capacity - largest < demand:
            continue
        usages.add(tuple(sum(c.gpus_per_replica * n for c, n in chosen if c.gpu == gpu) for gpu in GPUS))
    return usages


def brute_force_cost(spec: FleetSpec) -> float:
    """Enumerate reservations; given them, each period independently takes its cheapest rental."""
    per_period = []
    for p in range(spec.periods):
        combined = {(0,) * len(GPUS)}
        for w in spec.workloads:
            combined = {tuple(a + b for a, b in zip(u, v, strict=True)) for u in combined for v in workload_usages(spec, w, p)}
        per_period.append(combined)
    most = [max((u[k] for usages in per_period for u in usages), default=0) for k in range(len(GPUS))]
    best = math.inf
    for reserved in itertools.product(*(range(m + 1) for m in most)):
        if any(
            spec.inventory_limit(gpu, p) is not None and reserved[k] > spec.inventory_limit(gpu, p)
            for k, gpu in enumerate(GPUS)
            for p in range(spec.periods)
        ):
            continue
        cost = sum(reserved[k] * spec.prices[gpu].reserved_usd_per_hour * spec.horizon_hours for k, gpu in enumerate(GPUS))
        for p, usages in enumerate(per_period):
            rentals = [
                sum(
                    max(0, u[k] - reserved[k]) * spec.prices[gpu].on_demand_usd_per_hour * spec.period_hours
                    for k, gpu in enumerate(GPUS)
                )
                for u in usages
                if all(
                    spec.inventory_limit(gpu, p) is None or max(u[k], reserved[k]) <= spec.inventory_limit(gpu, p)
                    for k, gpu in enumerate(GPUS)
                )
            ]
            cost += min(rentals, default=math.inf)
        best = min(best, cost)
    return best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=fleets())
def test_brute_force_agrees_with_the_fleet_milp(spec: FleetSpec) -> None:
    expected = brute_force_cost(spec)
    try:
        plan = solve_fleet(spec, shadow_prices=False)
    except InfeasiblePlanError:
        assert expected == math.inf
        return
    assert plan.cost.total_usd == pytest.approx(expected)
    for period in plan.periods:
        for gpu, used in period.gpus_used.items():
            assert used <= period.gpus_held[gpu]
            limit = spec.inventory_limit(gpu, period.index)
            assert limit is None or period.gpus_held[gpu] <= limit
    assert sum(plan.cost.per_workload_usd.values()) + plan.cost.idle_usd == pytest.approx(plan.cost.total_usd)


def assert_is_a_fleet(spec: FleetSpec, decisions, values: dict[str, float]) -> None:
    """Demand, min_replicas and N+1 met in every workload-period; GPUs used ≤ held ≤ inventory."""
    count = {key: round(values[variable.name]) for key, variable in decisions.replicas.items()}
    for w in spec.workloads:
        for p in range(spec.periods):
            running = [(c, count[w.name, c.id, p]) for c in w.candidates if count[w.name, c.id, p] > 0]
            capacity = sum(c.max_rps_at_slo * n for c, n in running)
            assert capacity >= w.demand_rps[p]
            assert sum(n for _, n in running) >= spec.constraints.min_replicas
            if spec.constraints.n_plus_one:
                assert capacity - max((c.max_rps_at_slo for c, _ in running), default=0.0) >= w.demand_rps[p]
    for gpu in spec.gpus:
        for p in range(spec.periods):
            used = sum(count[w.name, c.id, p] * c.gpus_per_replica for w in spec.workloads for c in w.candidates if c.gpu == gpu)
            held = values[decisions.reserved_gpus[gpu].name] + values[decisions.on_demand_gpus[gpu, p].name]
            assert used <= held
            limit = spec.inventory_limit(gpu, p)
            assert limit is None or held <= limit


def fleet_cost(spec: FleetSpec, decisions, values: dict[str, float]) -> float:
    cost = fleet_cost_usd(spec, decisions)
    return cost.constant + sum(k * values.get(v.name, 0.0) for v, k in cost.items())


def cost_at_reservations(spec: FleetSpec, decisions, values: dict[str, float], reservations: dict[str, int]) -> float:
    """What `values`' replicas cost with each type's reservation fixed: R_k·π_res·H plus, in each
    period, the GPUs used beyond R_k on demand (no spot in these instances); ∞ past inventory."""
    total = sum(n * spec.prices[gpu].reserved_usd_per_hour * spec.horizon_hours for gpu, n in reservations.items())
    for gpu in spec.gpus:
        for p in range(spec.periods):
            used = sum(
                round(values[decisions.replicas[w.name, c.id, p].name]) * c.gpus_per_replica
                for w in spec.workloads
                for c in w.candidates
                if c.gpu == gpu
            )
            limit = spec.inventory_limit(gpu, p)
            if limit is not None and max(used, reservations[gpu]) > limit:
                return math.inf
            total += max(0, used - reservations[gpu]) * spec.prices[gpu].on_demand_usd_per_hour * spec.period_hours
    return total


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=fleets(), data=st.data())
def test_the_period_by_period_fleet_is_feasible_and_never_dearer_than_its_fallback_at_its_reservations(
    spec: FleetSpec, data: st.DataObject
) -> None:
    """Whatever reservations it is handed, the period-by-period stage returns a real fleet, never
    below the optimum, and never dearer than the fallback's replicas at those reservations
    (each period keeps the cheaper; choosing the reservations again can only lower the cost)."""
    presolved, _ = presolve(spec)
    _, decisions = build_fleet_problem(presolved)
    fallback = cover_fleet(presolved, decisions)
    reservations = {gpu: data.draw(st.integers(0, 6)) for gpu in presolved.gpus}
    for gpu in presolved.gpus:
        limits = [n for n in (presolved.inventory_limit(gpu, p) for p in range(presolved.periods)) if n is not None]
        reservations[gpu] = min([reservations[gpu], *limits])
    every_pair = [{(w.name, c.id) for w in presolved.workloads for c in w.candidates}] * presolved.periods
    found, _ = fleet_with_reservations_fixed(
        presolved,
        decisions,
        reservations=reservations,
        pairs=every_pair,
        fallback=fallback,
        deadline=time.perf_counter() + 5,
        solver_name=default_solver_name(),
        relative_gap=1e-4,
    )
    if found is None:  # no fallback, and some period has no fleet at these reservations
        assert fallback is None
        return
    assert_is_a_fleet(presolved, decisions, found)
    assert fleet_cost(presolved, decisions, found) >= brute_force_cost(spec) - 1e-9
    if fallback is not None:
        assert (
            fleet_cost(presolved, decisions, found) <= cost_at_reservations(presolved, decisions, fallback, reservations) + 1e-9
        )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=fleets(), relative_gap=st.sampled_from((0.05, 0.25, 0.5)))
def test_the_reported_gap_is_against_a_proved_bound(spec: FleetSpec, relative_gap: float) -> None:
    """With a loose gap the search stops at the first fleet within it, often not the optimum; the
    bound the gap implies, cost × (1 − gap), must still be at most the true optimum, and the plan
    is "optimal" exactly when its gap is within the one asked for."""
    expected = brute_force_cost(spec)
    try:
        plan = solve_fleet(spec, shadow_prices=False, relative_gap=relative_gap)
    except InfeasiblePlanError:
        assert expected == math.inf
        return
    assert plan.cost.total_usd >= expected - 1e-9
    assert plan.cost.total_usd * (1 - plan.solver.mip_gap) <= expected + 1e-9
    assert (plan.solver.status == "optimal") == (plan.solver.mip_gap <= relative_gap)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=fleets())
def test_the_rounded_lp_fleet_is_feasible_and_never_beats_the_optimum(spec: FleetSpec) -> None:
    """The fallback used when the MILP's time limit strikes: a real fleet, never below the optimum."""
    presolved, _ = presolve(spec)
    problem, decisions = build_fleet_problem(presolved)
    if solve(problem, time_limit_s=5, relaxed=True).status != "optimal":
        return
    lp_values = {variable.name: variable.varValue or 0.0 for variable in problem.variables()}
    rounded = rounded_fleet(presolved, decisions, lp_values)
    if rounded is None:
        return
    value = {key: round(rounded[variable.name]) for key, variable in decisions.replicas.items()}
    for w in presolved.workloads:
        for p in range(presolved.periods):
            counts = {c.id: value[w.name, c.id, p] for c in w.candidates}
            capacity = sum(c.max_rps_at_slo * counts[c.id] for c in w.candidates)
            assert capacity >= w.demand_rps[p]
            assert sum(counts.values()) >= presolved.constraints.min_replicas
    for gpu in presolved.gpus:
        for p in range(presolved.periods):
            used = sum(
                value[w.name, c.id, p] * c.gpus_per_replica for w in presolved.workloads for c in w.candidates if c.gpu == gpu
            )
            held = rounded[decisions.reserved_gpus[gpu].name] + rounded[decisions.on_demand_gpus[gpu, p].name]
            assert used <= held
            limit = presolved.inventory_limit(gpu, p)
            assert limit is None or held <= limit
    cost = fleet_cost_usd(presolved, decisions)
    rounded_cost = cost.constant + sum(k * rounded.get(v.name, 0.0) for v, k in cost.items())
    assert rounded_cost >= brute_force_cost(spec) - 1e-9
