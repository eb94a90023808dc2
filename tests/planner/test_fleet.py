"""The fleet MILP on hand-computed optima: reserved vs on-demand, spikes, inventory, spot, prices;
its period-by-period stage, its stopping rule and its kept-loaded LP relaxation."""

from __future__ import annotations

import random
import time

import pytest

import planner.fleet_solve as fleet_module  # where solve_fleet looks up its stages
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet import (
    FLEET_RELATIVE_GAP,
    FleetConstraints,
    FleetSpec,
    FleetWorkload,
    GpuPrice,
    SpotOffer,
    add_cover_cost_cuts,
    build_fleet_problem,
    cover_fleet,
    fleet_cost_usd,
    fleet_with_reservations_fixed,
    presolve,
    solve_fleet,
    undominated,
)
from planner.milp import CBC, HIGHS, Relaxation, solve
from planner.optimizer import Candidate

#: Illustrative prices (USD per GPU-hour), not catalog data: reserved is 62.5 % of on-demand.
H100 = GpuPrice(on_demand_usd_per_hour=4.0, reserved_usd_per_hour=2.5)
A100 = GpuPrice(on_demand_usd_per_hour=3.0, reserved_usd_per_hour=2.6)


def candidate(gpu: str, rps: float, tp: int = 1, name: str | None = None) -> Candidate:
    return Candidate(
        id=name or f"{gpu}/fp16/fp16/tp{tp}/b32/nochunk",
        gpu=gpu,
        tp=tp,
        weights_precision="fp16",
        kv_precision="fp16",
        batch_limit=32,
        chunk_tokens=None,
        gpus_per_replica=tp,
        cost_usd_per_hour=1.0,  # unused by the fleet model: GPU prices set the cost
        max_rps_at_slo=rps,
        saturation_rps=rps * 1.5,
    )


FAST = candidate("h100-sxm", 10.0)
SLOW = candidate("a100-80gb", 5.0)


def fleet(demand: list[float], *, candidates=(FAST,), **kwargs) -> FleetSpec:
    prices = kwargs.pop("prices", {"h100-sxm": H100, "a100-80gb": A100})
    return FleetSpec(
        workloads=(FleetWorkload(name="chat", candidates=tuple(candidates), demand_rps=tuple(demand)),),
        prices=prices,
        **kwargs,
    )


def test_flat_demand_is_all_reserved() -> None:
    """15 req/s in each of 4 hours needs ⌈15/10⌉ = 2 H100s every hour.

    Reserved: 2 × $2.5 × 4 h = $20 < on demand 2 × $4 × 4 h = $32, so both are reserved.
    """
    plan = solve_fleet(fleet([15, 15, 15, 15]))
    assert plan.reserved_gpus == {"h100-sxm": 2}
    assert all(not period.on_demand_gpus for period in plan.periods)
    assert plan.cost.total_usd == pytest.approx(20.0)
    assert plan.cost.reserved_usd == pytest.approx(20.0)
    assert plan.cost.usd_per_day == pytest.approx(20.0 * 24 / 4)
    assert [a.replicas for p in plan.periods for a in p.assignments] == [2, 2, 2, 2]
    assert all(p.gpu_utilisation == pytest.approx(1.0) for p in plan.periods)
    assert plan.solver.status == "optimal"


def test_one_short_spike_is_rented_on_demand() -> None:
    """15, 15, 15, 35 req/s: 2 H100s all day are reserved ($20); the spike's 2 extra are rented
    for its one hour (2 × $4 = $8) rather than reserved all day (2 × $2.5 × 4 = $20). Total $28."""
    plan = solve_fleet(fleet([15, 15, 15, 35]))
    assert plan.reserved_gpus == {"h100-sxm": 2}
    assert [dict(p.on_demand_gpus) for p in plan.periods] == [{}, {}, {}, {"h100-sxm": 2}]
    assert plan.cost.total_usd == pytest.approx(28.0)
    assert plan.cost.on_demand_usd == pytest.approx(8.0)
    assert plan.cost.per_period_usd == pytest.approx((5.0, 5.0, 5.0, 13.0))
    spike = plan.periods[3].assignments[0]
    assert spike.replicas == 4
    assert spike.target_rho == pytest.approx(35 / 4 / 15)


@pytest.mark.parametrize("reserved_price", [1.0, 1.5, 2.5, 3.5])
@pytest.mark.parametrize("busy_periods", [1, 2, 3, 4])
def test_reserved_wins_iff_utilisation_reaches_the_price_ratio(reserved_price: float, busy_periods: int) -> None:
    """One GPU needed in `busy_periods` of 4 hours, none otherwise (min_replicas 0).

    Reserving costs 4 × π_res; renting costs busy × π_od. Reserved wins iff busy/4 > π_res/π_od
    (at equality both cost the same); the optimum is min(4·π_res, busy·π_od).
    """
    prices = {"h100-sxm": GpuPrice(on_demand_usd_per_hour=4.0, reserved_usd_per_hour=reserved_price)}
    demand = [5.0] * busy_periods + [0.0] * (4 - busy_periods)
    plan = solve_fleet(fleet(demand, prices=prices, constraints=FleetConstraints(min_replicas=0)))
    assert plan.cost.total_usd == pytest.approx(min(4 * reserved_price, busy_periods * 4.0))
    if busy_periods / 4 > reserved_price / 4.0:
        assert plan.reserved_gpus == {"h100-sxm": 1}
    elif busy_periods / 4 < reserved_price / 4.0:
        assert plan.reserved_gpus == {"h100-sxm": 0}


def test_inventory_forces_a_second_gpu_type() -> None:
    """Flat 15 req/s. Unlimited: 2 reserved H100s at $5/h beat 1 H100 + 1 A100 ($5.1/h) and 3 A100s.

    With one H100 in stock: 1 H100 (10 req/s) + 1 A100 (5 req/s), reserved, $5.1/h × 4 h = $20.4.
    """
    free = solve_fleet(fleet([15] * 4, candidates=(FAST, SLOW)))
    assert free.reserved_gpus == {"h100-sxm": 2, "a100-80gb": 0}
    plan = solve_fleet(fleet([15] * 4, candidates=(FAST, SLOW), inventory={"h100-sxm": 1}))
    assert plan.reserved_gpus == {"h100-sxm": 1, "a100-80gb": 1}
    assert plan.cost.total_usd == pytest.approx(20.4)
    rows = {a.candidate.gpu: a for a in plan.periods[0].assignments}
    assert rows["h100-sxm"].offered_rps == pytest.approx(10.0)  # 15 × 10/15
    assert rows["a100-80gb"].offered_rps == pytest.approx(5.0)


def test_per_period_inventory_overrides() -> None:
    """Only 1 H100 in the last hour caps the reservation at 1 H100 ($10 over 4 h). The other
    5 req/s: a reserved A100 ($2.6 × 4 = $10.4) beats renting an H100 for 3 h and an A100 for 1
    ($12 + $3). Total $20.4; with 2 H100s in every hour it would be $20."""
    plan = solve_fleet(fleet([15] * 4, candidates=(FAST, SLOW), inventory={"h100-sxm": (2, 2, 2, 1)}))
    assert plan.reserved_gpus == {"h100-sxm": 1, "a100-80gb": 1}
    assert plan.periods[3].gpus_held["h100-sxm"] == 1
    assert plan.cost.total_usd == pytest.approx(20.4)
    assert plan.shadow_prices is not None
    assert {(p.gpu, p.period) for p in plan.shadow_prices.inventory} == {("h100-sxm", 3)}


def test_spot_is_used_up_to_its_availability() -> None:
    """Spot at 25 % off ($3/h, dearer than reserved $2.5/h) with 1 GPU available per hour.

    The spike's 2 extra H100s: 1 on spot ($3), 1 on demand ($4); the flat hours stay reserved.
    Total $20 + $3 + $4 = $27.
    """
    spec = fleet([15, 15, 15, 35], spot={"h100-sxm": SpotOffer(discount_fraction=0.25, max_gpus=1)})
    plan = solve_fleet(spec)
    assert dict(plan.periods[3].spot_gpus) == {"h100-sxm": 1}
    assert dict(plan.periods[3].on_demand_gpus) == {"h100-sxm": 1}
    assert plan.reserved_gpus == {"h100-sxm": 2}
    assert plan.cost.spot_usd == pytest.approx(3.0)
    assert plan.cost.total_usd == pytest.approx(20.0 + 3.0 + 4.0)


def test_n_plus_one_and_min_replicas_per_period() -> None:
    """N+1 at 15 req/s: (r − 1) × 10 ≥ 15 ⇒ 3 replicas; min_replicas 2 keeps 2 up at zero demand."""
    plan = solve_fleet(fleet([15, 15], constraints=FleetConstraints(n_plus_one=True)))
    assert [p.assignments[0].replicas for p in plan.periods] == [3, 3]
    plan = solve_fleet(fleet([0, 15], constraints=FleetConstraints(min_replicas=2)))
    assert [p.assignments[0].replicas for p in plan.periods] == [2, 2]


def test_costs_split_by_gpus_used_and_idle_reserved_time() -> None:
    """Two workloads on H100s over 2 hours; "batch" needs 1 GPU in hour 0 only, "chat" 1 GPU always.

    Reserving a second H100 for batch's one busy hour would cost 2 × $2.5 = $5 against $4 on
    demand, so chat's GPU is reserved ($5) and batch rents one hour ($4): $9. Per workload: chat pays its
    reserved GPU in both hours ($5); batch pays the mean price of the 2 GPUs held in hour 0
    ((2.5 + 4)/2 = $3.25) — chat's hour 0 also costs $3.25, its hour 1 $2.5: chat $5.75.
    """
    spec = FleetSpec(
        workloads=(
            FleetWorkload(name="chat", candidates=(FAST,), demand_rps=(5.0, 5.0)),
            FleetWorkload(name="batch", candidates=(FAST,), demand_rps=(5.0, 0.0)),
        ),
        prices={"h100-sxm": H100},
        constraints=FleetConstraints(min_replicas=0),
    )
    plan = solve_fleet(spec)
    assert plan.cost.total_usd == pytest.approx(9.0)
    assert plan.cost.per_workload_usd == pytest.approx({"chat": 5.75, "batch": 3.25})
    assert plan.cost.idle_usd == pytest.approx(0.0)
    assert sum(plan.cost.per_workload_usd.values()) + plan.cost.idle_usd == pytest.approx(plan.cost.total_usd)


def test_idle_reserved_gpus_are_reported() -> None:
    """Demand 25, 25, 25, 5 req/s: 3 reserved H100s ($30) beat 1 reserved + 2 rented for 3 h ($34);
    in the last hour 2 of 3 reserved GPUs sit idle: 2 × $2.5 = $5 idle, utilisation 1/3."""
    plan = solve_fleet(fleet([25, 25, 25, 5]))
    assert plan.reserved_gpus == {"h100-sxm": 3}
    assert plan.cost.idle_usd == pytest.approx(5.0)
    assert plan.periods[3].gpu_utilisation == pytest.approx(1 / 3)
    assert plan.periods[3].assignments[0].replicas == 1  # no replicas parked on idle GPUs


def test_shadow_prices_of_demand_and_inventory() -> None:
    """One hour, 15 req/s, one H100 in stock, A100s unlimited (LP relaxation).

    The marginal req/s comes from A100s: $2.6 / 5 req/s = $0.52 per req/s. One more H100 would
    carry 10 req/s for $2.5 instead of 2 A100s ($5.2): worth $2.7.
    """
    plan = solve_fleet(fleet([15], candidates=(FAST, SLOW), inventory={"h100-sxm": 1}))
    prices = plan.shadow_prices
    assert prices is not None and prices.method == "lp_relaxation"
    assert prices.demand[0].usd_per_rps == pytest.approx(0.52)
    (inventory,) = prices.inventory
    assert (inventory.gpu, inventory.period) == ("h100-sxm", 0)
    assert inventory.usd_per_gpu == pytest.approx(2.7)


def test_spike_demand_is_priced_at_on_demand_rates() -> None:
    """In the spike hour the marginal req/s is rented: $4 / 10 req/s = $0.40."""
    plan = solve_fleet(fleet([15, 15, 15, 35]))
    assert plan.shadow_prices is not None
    assert plan.shadow_prices.demand[3].usd_per_rps == pytest.approx(0.4)


def test_inventory_shortfall_names_workload_period_and_gpu() -> None:
    """ "rag" needs 4 H100s at 35 req/s in hour 2 with 3 in stock and no other type: 1 short."""
    spec = FleetSpec(
        workloads=(
            FleetWorkload(name="chat", candidates=(FAST,), demand_rps=(5.0, 5.0, 5.0)),
            FleetWorkload(name="rag", candidates=(candidate("h100-sxm", 10.0, name="rag-h100"),), demand_rps=(5.0, 5.0, 25.0)),
        ),
        prices={"h100-sxm": H100},
        inventory={"h100-sxm": 3},
    )
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_fleet(spec)
    error = caught.value
    assert error.extensions["constraint"] == "gpu_inventory"
    assert (error.extensions["workload"], error.extensions["period"], error.extensions["gpu"]) == ("rag", 2, "h100-sxm")
    assert error.extensions["gpus_short"] == 1
    assert "'rag'" in error.detail and "period 2" in error.detail and "1 GPUs short" in error.detail


def test_budget_shortfall_names_the_cheapest_fleet() -> None:
    """Flat 15 req/s for 4 hours costs at least $20, i.e. $120/day; a $100/day budget fails."""
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_fleet(fleet([15] * 4, constraints=FleetConstraints(budget_usd_per_day=100.0)))
    assert caught.value.extensions["constraint"] == "budget"
    assert caught.value.extensions["needed"] == pytest.approx(120.0)
    assert "$120.00/day" in caught.value.detail
    assert solve_fleet(fleet([15] * 4, constraints=FleetConstraints(budget_usd_per_day=120.0))).cost.usd_per_day == (
        pytest.approx(120.0)
    )


def test_dominated_candidates_are_dropped_before_the_milp() -> None:
    """Same GPU: tp2 at 8 req/s is beaten by tp1 at 10 req/s (fewer GPUs, more rate)."""
    worse = candidate("h100-sxm", 8.0, tp=2)
    assert undominated([worse, FAST, SLOW]) == (FAST, SLOW)
    # Two tp1 replicas (2 × 10 = 20 req/s on 2 GPUs) beat one tp2 at 18, but not one tp2 at 25.
    assert undominated([candidate("h100-sxm", 18.0, tp=2), FAST]) == (FAST,)
    wide = candidate("h100-sxm", 25.0, tp=2)
    assert undominated([wide, FAST]) == (wide, FAST)
    plan = solve_fleet(fleet([15], candidates=(worse, FAST, SLOW)))
    assert plan.candidates_dropped == 1
    assert plan.model_size.candidates == 2
    assert plan.model_size.variables > 0 and plan.model_size.constraints > 0


def test_invalid_fleets_are_input_errors() -> None:
    with pytest.raises(PlannerInputError):
        FleetSpec(
            workloads=(
                FleetWorkload(name="a", candidates=(FAST,), demand_rps=(1.0, 2.0)),
                FleetWorkload(name="b", candidates=(FAST,), demand_rps=(1.0,)),
            ),
            prices={"h100-sxm": H100},
        )
    with pytest.raises(PlannerInputError):
        FleetWorkload(name="a", candidates=(FAST,), demand_rps=(-1.0,))
    with pytest.raises(PlannerInputError):
        fleet([1.0], prices={"a100-80gb": A100})  # H100 unpriced
    with pytest.raises(PlannerInputError):
        fleet([1.0, 1.0], inventory={"h100-sxm": (1, 2, 3)})
    with pytest.raises(InfeasiblePlanError) as caught:
        solve_fleet(fleet([1.0], candidates=()))
    assert caught.value.extensions["workload"] == "chat"


def test_inputs_are_not_mutated() -> None:
    demand = [15.0, 35.0]
    inventory = {"h100-sxm": 8}
    spec = fleet(demand, inventory=inventory)
    solve_fleet(spec)
    inventory["h100-sxm"] = 0
    demand[0] = 99.0
    assert spec.inventory == {"h100-sxm": (8, 8)}
    assert spec.workloads[0].demand_rps == (15.0, 35.0)


def _cost_usd(spec: FleetSpec, decisions, values) -> float:
    expression = fleet_cost_usd(spec, decisions)
    return expression.constant + sum(k * values.get(v.name, 0.0) for v, k in expression.items())


def test_fixed_reservations_split_the_fleet_into_periods_and_are_chosen_again() -> None:
    """15, 15, 15, 35 req/s on H100s (10 req/s each) with the reservation fixed at 0: each hour
    alone rents ⌈d/10⌉ = 2, 2, 2, 4 GPUs. Choosing the reservation again for that usage: R = 2
    costs 2 × $2.5 × 4 h + 2 × $4 = $28, R = 0 costs 10 × $4 = $40, R = 4 costs $40; so R = 2,
    the optimum of `test_one_short_spike_is_rented_on_demand`, though the hours were solved at 0."""
    spec, _ = presolve(fleet([15, 15, 15, 35]))
    _, decisions = build_fleet_problem(spec)
    every_pair = [{("chat", FAST.id)}] * spec.periods
    found, solve_s = fleet_with_reservations_fixed(
        spec,
        decisions,
        reservations={"h100-sxm": 0},
        pairs=every_pair,
        fallback=None,
        deadline=time.perf_counter() + 5,
        solver_name=HIGHS,
        relative_gap=1e-4,
    )
    assert found is not None and solve_s > 0
    assert found[decisions.reserved_gpus["h100-sxm"].name] == 2
    assert [found[decisions.on_demand_gpus["h100-sxm", p].name] for p in range(4)] == [0, 0, 0, 2]
    assert [found[decisions.replicas["chat", FAST.id, p].name] for p in range(4)] == [2, 2, 2, 4]
    assert _cost_usd(spec, decisions, found) == pytest.approx(28.0)


def test_a_period_without_time_keeps_the_fallback() -> None:
    """With the deadline already past no period MILP runs: every period keeps the fallback's
    replicas, so the fleet costs what the fallback costs (reservations chosen the same way)."""
    spec, _ = presolve(fleet([15, 25, 5], candidates=(FAST, SLOW)))
    _, decisions = build_fleet_problem(spec)
    fallback = cover_fleet(spec, decisions)
    assert fallback is not None
    found, solve_s = fleet_with_reservations_fixed(
        spec,
        decisions,
        reservations={"h100-sxm": 3, "a100-80gb": 0},
        pairs=[set()] * spec.periods,
        fallback=fallback,
        deadline=time.perf_counter() - 1,
        solver_name=HIGHS,
        relative_gap=1e-4,
    )
    assert solve_s == 0.0
    assert found == fallback
    nothing, _ = fleet_with_reservations_fixed(
        spec,
        decisions,
        reservations={"h100-sxm": 3, "a100-80gb": 0},
        pairs=[set()] * spec.periods,
        fallback=None,
        deadline=time.perf_counter() - 1,
        solver_name=HIGHS,
        relative_gap=1e-4,
    )
    assert nothing is None


def _three_workloads(seed: int = 31) -> FleetSpec:
    """Three workloads × 6 hours on three GPU types, drawn with a fixed seed (illustrative)."""
    rng = random.Random(seed)
    gpus = ["h100-sxm", "a100-80gb", "l4"]
    workloads = []
    for w in range(3):
        drawn = []
        for i in range(3):
            gpu, tp = rng.choice(gpus), rng.choice([1, 2])
            drawn.append(candidate(gpu, rng.choice([1, 2, 3, 5, 7, 10]) + rng.choice([0, 0.5]), tp=tp, name=f"c{i}"))
        unique = tuple({c.id: c for c in drawn}.values())
        demand = tuple(float(rng.choice(range(30))) for _ in range(6))
        workloads.append(FleetWorkload(name=f"w{w}", candidates=unique, demand_rps=demand))
    on_demand = (4.0, 3.0, 1.0)
    prices = {
        gpu: GpuPrice(on_demand_usd_per_hour=od, reserved_usd_per_hour=od * 0.6) for gpu, od in zip(gpus, on_demand, strict=True)
    }
    return FleetSpec(workloads=tuple(workloads), prices=prices)


def test_the_milp_stages_run_only_while_the_best_fleet_is_outside_the_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this instance the fallbacks are not within 1 % of the cut LP's bound and the
    period-by-period stage is: nothing runs after it. Without that stage the MILP runs (so the
    first assertion is not vacuous)."""
    stages: list[str] = []
    periods_stage, milp_solve = fleet_module.fleet_with_reservations_fixed, fleet_module.solve

    def periods_spy(*args, **kwargs):
        stages.append("periods")
        return periods_stage(*args, **kwargs)

    def solve_spy(problem, **kwargs):
        if "stop_at_objective" in kwargs:
            stages.append("milp")
        return milp_solve(problem, **kwargs)

    monkeypatch.setattr(fleet_module, "fleet_with_reservations_fixed", periods_spy)
    monkeypatch.setattr(fleet_module, "solve", solve_spy)
    plan = solve_fleet(_three_workloads(), shadow_prices=False)
    assert stages == ["periods"]
    assert plan.solver.status == "optimal" and plan.solver.mip_gap <= FLEET_RELATIVE_GAP

    stages.clear()
    monkeypatch.setattr(fleet_module, "fleet_with_reservations_fixed", lambda *args, **kwargs: (None, 0.0))
    without = solve_fleet(_three_workloads(), shadow_prices=False)
    assert "milp" in stages
    assert without.cost.total_usd == pytest.approx(plan.cost.total_usd)


@pytest.mark.parametrize("solver_name", [HIGHS, CBC])
def test_the_kept_relaxation_matches_a_fresh_solve_after_cuts(solver_name: str) -> None:
    """The relaxation held in HiGHS, solved again after the cover cuts are added, has the optimum
    of a fresh solve of the same problem (CBC's path is a fresh solve), and the values, row duals
    and reduced costs it writes back are one solution: c·x = Σ_i π_i·b_i + Σ_j d_j·x_j (from
    c = Aᵀπ + d and complementary slackness π_i·(Ax − b)_i = 0), which fails if any were
    written to the wrong variable or row."""
    spec, _ = presolve(_three_workloads())
    problem, decisions = build_fleet_problem(spec)
    relaxation = Relaxation(problem, solver_name=solver_name)
    plain = relaxation.solve(time_limit_s=10)
    add_cover_cost_cuts(problem, spec, decisions)
    kept = relaxation.solve(time_limit_s=10)
    fresh_problem, fresh_decisions = build_fleet_problem(spec)
    fresh_plain = solve(fresh_problem, time_limit_s=10, solver_name=solver_name, relaxed=True)
    assert add_cover_cost_cuts(fresh_problem, spec, fresh_decisions) > 0
    fresh = solve(fresh_problem, time_limit_s=10, solver_name=solver_name, relaxed=True)
    assert plain.status == kept.status == "optimal"
    assert plain.objective == pytest.approx(fresh_plain.objective)
    assert kept.objective == pytest.approx(fresh.objective)
    assert kept.objective > plain.objective  # the cuts bind on this instance
    values = {v.name: v.varValue for v in problem.variables()}
    assert _cost_usd(spec, decisions, values) == pytest.approx(kept.objective)
    if solver_name == HIGHS:
        rows = sum(c.pi * -c.constant for c in problem.constraints())
        columns = sum(v.dj * v.varValue for v in problem.variables())
        assert rows + columns == pytest.approx(kept.objective)


@pytest.mark.parametrize("seed", range(12))
def test_the_reported_gap_never_claims_more_than_is_proved(seed: int) -> None:
    """Stopped at a loose 5 % gap, the search returns fleets that are often not optimal; the
    bound their gap implies, cost × (1 − gap), is still at most the optimum (HiGHS run to a zero
    gap on the same MILP), and "optimal" means within the 5 % asked for."""
    spec = _three_workloads(seed)
    try:
        plan = solve_fleet(spec, shadow_prices=False, relative_gap=0.05)
    except InfeasiblePlanError:
        return
    problem, _ = build_fleet_problem(presolve(spec)[0])
    exact = solve(problem, time_limit_s=60, relative_gap=0.0)
    assert exact.status == "optimal" and exact.objective is not None
    assert plan.cost.total_usd >= exact.objective - 1e-6
    assert plan.cost.total_usd * (1 - plan.solver.mip_gap) <= exact.objective + 1e-6
    assert (plan.solver.status == "optimal") == (plan.solver.mip_gap <= 0.05)


class _Stop(Exception):
    """What the test's checkpoint raises to abandon a plan."""


@pytest.mark.parametrize("stop_at", [1, 2, 3, 4, 5])
def test_a_checkpoint_that_raises_abandons_the_plan_at_that_stage(stop_at: int) -> None:
    """`solve_fleet` calls its checkpoint between stages (presolve, model, LP, cut LP, each
    integer stage and period) and lets what it raises through: the caller's deadline stops the
    work there, and the planner itself never reads a deadline clock."""
    spec = fleet([15, 15, 15, 35], candidates=(FAST, SLOW))
    calls: list[int] = []

    def checkpoint() -> None:
        calls.append(len(calls) + 1)
        if len(calls) == stop_at:
            raise _Stop

    with pytest.raises(_Stop):
        solve_fleet(spec, checkpoint=checkpoint)
    assert calls == list(range(1, stop_at + 1))


def test_a_checkpoint_that_never_raises_changes_nothing() -> None:
    calls: list[None] = []
    spec = fleet([15, 15, 15, 35], candidates=(FAST, SLOW))
    plan = solve_fleet(spec, checkpoint=lambda: calls.append(None))
    assert len(calls) >= 5
    assert plan.cost.total_usd == pytest.approx(solve_fleet(spec).cost.total_usd)
