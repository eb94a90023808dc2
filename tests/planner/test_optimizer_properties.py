"""Property tests of the plan MILP: brute force agrees with it; cost never falls as the rate rises."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError
from planner.optimizer import Candidate, PlanConstraints, solve_plan

GPUS = ("h100-sxm", "a100-80gb", "l40s")

#: Rates and prices on a grid of quarters so sums are exact in binary floating point and no
#: solver feasibility tolerance can separate the MILP from the brute force.
quarters = st.integers(min_value=4, max_value=40).map(lambda k: k / 4)


@st.composite
def candidates(draw: st.DrawFn, max_size: int) -> list[Candidate]:
    size = draw(st.integers(min_value=1, max_value=max_size))
    result = []
    for index in range(size):
        tp = draw(st.sampled_from((1, 2)))
        rps = draw(quarters)
        result.append(
            Candidate(
                id=f"c{index}",
                gpu=draw(st.sampled_from(GPUS)),
                tp=tp,
                weights_precision="fp16",
                kv_precision="fp16",
                batch_limit=32,
                chunk_tokens=None,
                gpus_per_replica=tp,
                cost_usd_per_hour=draw(quarters),
                max_rps_at_slo=rps,
                saturation_rps=rps * 1.5,
            )
        )
    return result


@st.composite
def plan_constraints(draw: st.DrawFn, *, mixed_fleet: bool) -> PlanConstraints:
    return PlanConstraints(
        mixed_fleet=mixed_fleet,
        n_plus_one=draw(st.booleans()),
        min_replicas=draw(st.integers(min_value=0, max_value=3)),
        max_gpus=draw(st.none() | st.integers(min_value=1, max_value=8)),
        budget_usd_per_hour=draw(st.none() | st.integers(min_value=4, max_value=60).map(float)),
        inventory=draw(st.dictionaries(st.sampled_from(GPUS), st.integers(min_value=0, max_value=6), max_size=2)),
    )


def brute_force_cost(candidates: list[Candidate], rate: float, constraints: PlanConstraints) -> float:
    """The cheapest feasible replica vector by enumeration (∞ if none), independent of the MILP.

    Each candidate gets 0 … ⌈λ/μ_min⌉ + 1 + min_replicas replicas: more of any one candidate than
    that is never needed, as that many of it alone already meet demand, N+1 and min_replicas.
    """
    bound = math.ceil(rate / min(c.max_rps_at_slo for c in candidates)) + 1 + constraints.min_replicas
    rps = np.array([c.max_rps_at_slo for c in candidates])
    cost = np.array([c.cost_usd_per_hour for c in candidates])
    gpus = np.array([c.gpus_per_replica for c in candidates])
    grid = np.array(list(itertools.product(range(bound + 1), repeat=len(candidates))))
    used = grid > 0
    capacity = grid @ rps
    feasible = capacity >= rate
    if not constraints.mixed_fleet:
        feasible &= used.sum(axis=1) <= 1
    if constraints.n_plus_one:
        feasible &= capacity - (used * rps).max(axis=1) >= rate
    feasible &= grid.sum(axis=1) >= constraints.min_replicas
    if constraints.max_gpus is not None:
        feasible &= grid @ gpus <= constraints.max_gpus
    if constraints.budget_usd_per_hour is not None:
        feasible &= grid @ cost <= constraints.budget_usd_per_hour
    for gpu, limit in constraints.inventory.items():
        on_gpu = np.array([c.gpu == gpu for c in candidates])
        feasible &= grid @ (gpus * on_gpu) <= limit
    return float((grid @ cost)[feasible].min()) if feasible.any() else math.inf


def milp_cost(candidates: list[Candidate], rate: float, constraints: PlanConstraints) -> float:
    try:
        return solve_plan(candidates, rate, constraints).cost_usd_per_hour
    except InfeasiblePlanError:
        return math.inf


@pytest.mark.parametrize("mixed_fleet", [False, True])
def test_brute_force_agrees_with_the_milp(mixed_fleet: bool) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        candidates=candidates(max_size=5 if not mixed_fleet else 4),
        rate=quarters,
        constraints=plan_constraints(mixed_fleet=mixed_fleet),
    )
    def check(candidates: list[Candidate], rate: float, constraints: PlanConstraints) -> None:
        expected = brute_force_cost(candidates, rate, constraints)
        assert milp_cost(candidates, rate, constraints) == pytest.approx(expected)

    check()


@settings(max_examples=30, deadline=None)
@given(
    candidates=candidates(max_size=4),
    rates=st.tuples(quarters, quarters).map(sorted),
    mixed_fleet=st.booleans(),
    n_plus_one=st.booleans(),
)
def test_cost_never_falls_when_the_rate_rises(
    candidates: list[Candidate], rates: list[float], mixed_fleet: bool, n_plus_one: bool
) -> None:
    constraints = PlanConstraints(mixed_fleet=mixed_fleet, n_plus_one=n_plus_one)
    low, high = rates
    assert (
        solve_plan(candidates, low, constraints).cost_usd_per_hour
        <= solve_plan(candidates, high, constraints).cost_usd_per_hour + 1e-9
    )


@settings(max_examples=30, deadline=None)
@given(candidates=candidates(max_size=4), rate=quarters, constraints=plan_constraints(mixed_fleet=True))
def test_a_solution_meets_its_own_constraints(candidates: list[Candidate], rate: float, constraints: PlanConstraints) -> None:
    try:
        plan = solve_plan(candidates, rate, constraints)
    except InfeasiblePlanError as error:
        assert error.extensions["constraint"]
        return
    assert all(slack.slack >= -1e-9 for slack in plan.constraints)
    assert plan.capacity_rps >= rate
    assert sum(row.offered_rps for row in plan.rows) == pytest.approx(rate)
    assert all(0 < row.target_rho < 1 for row in plan.rows)
