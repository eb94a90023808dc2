"""Traffic-class arrangements as fleet options (planner/fleet_classes.py): at a flat day the fleet MILP
takes the arrangement plan_classes chooses for the workload alone, and every option carries each class's
figures per period."""

from __future__ import annotations

import dataclasses

import pytest

from planner.fleet_classes import arrangement_options, class_demand_rps
from planner.fleet_solve import solve_fleet
from planner.fleet_spec import FleetSpec, FleetWorkload, GpuPrice
from planner.plan_classes import plan_classes
from tests.planner.test_plan_classes import BASE, CHAT_CLASS, OFFICE_DAY, SUMMARISE
from tests.planner.test_planning import INPUTS

#: Reserved at the on-demand price, so the MILP ranks arrangements by the same $/h as plan_classes.
PRICES = {
    g.slug: GpuPrice(on_demand_usd_per_hour=g.price_usd_per_hour_on_demand, reserved_usd_per_hour=g.price_usd_per_hour_on_demand)
    for g in INPUTS.gpus
}
CLASSES = (CHAT_CLASS, SUMMARISE)


def fleet_for(options, demand):  # type: ignore[no-untyped-def]
    spec = FleetSpec(workloads=(FleetWorkload(name="w", candidates=(), demand_rps=demand, pool_options=options),), prices=PRICES)
    return solve_fleet(spec)


@pytest.fixture(scope="module")
def flat():  # type: ignore[no-untyped-def]
    return arrangement_options(classes=CLASSES, inputs=INPUTS, base=BASE, periods=2)


def test_at_a_flat_day_the_fleet_takes_the_single_plans_arrangement(flat) -> None:  # type: ignore[no-untyped-def]
    single = plan_classes(list(CLASSES), INPUTS, BASE)
    assert {o.arrangement for o in flat} >= {single.chosen}
    assert len(flat) >= 2, "segregated and a shared pool are both offered"
    plan = fleet_for(flat, class_demand_rps(CLASSES, 2))
    [chosen] = {a.arrangement for period in plan.periods for a in period.class_pools}
    assert chosen == single.chosen
    assert plan.cost.usd_per_day / 24 == pytest.approx(sum(p.cost_usd_per_hour for p in single.pools), rel=1e-6)


def test_every_option_states_each_class_per_period(flat) -> None:  # type: ignore[no-untyped-def]
    for option in flat:
        assert option.id == f"classes-{option.arrangement}" and len(option.periods) == 2
        for figures in option.class_figures:
            assert [f.name for f in figures] == ["chat", "summarise"]
            assert all(f.ttft_s > 0 and f.meets_target for f in figures)
    segregated = next(o for o in flat if o.arrangement == "segregated")
    assert [pool.role for pool in segregated.periods[0]] == ["chat", "summarise"]


def test_a_profile_sizes_each_period_at_its_rates() -> None:
    day = dataclasses.replace(SUMMARISE, demand_rps=(20.0, 0.0))
    options = arrangement_options(classes=(CHAT_CLASS, day), inputs=INPUTS, base=BASE, periods=2)
    assert class_demand_rps((CHAT_CLASS, day), 2) == (80.0, 60.0)
    segregated = next(o for o in options if o.arrangement == "segregated")
    busy, idle = (pools[1].replicas for pools in segregated.periods)
    assert idle < busy and idle >= 1


def test_a_day_of_periods_offers_the_deferred_arrangement_and_takes_the_cheapest() -> None:
    """tests/planner/test_plan_classes.py's office day (chat 60 req/s from 09:00 to 17:00, 15 otherwise;
    summaries due within 12 h): over 24 one-hour periods the deferred arrangement is offered — the chat pool
    at its peak all day, extra summary replicas only in the periods its schedule rents them — and the MILP
    takes the option whose GPUs cost least over the day."""
    chat = dataclasses.replace(CHAT_CLASS, demand_rps=OFFICE_DAY)
    summarise = dataclasses.replace(SUMMARISE, deadline_h=12.0)
    options = arrangement_options(classes=(chat, summarise), inputs=INPUTS, base=BASE, periods=24, period_hours=1.0)
    deferred = next(o for o in options if o.arrangement == "deferred")
    single = plan_classes([chat, summarise], INPUTS, BASE)
    interactive = [pools[0] for pools in deferred.periods]
    assert {p.replicas for p in interactive} == {single.pools[0].replicas}
    extra = [sum(p.replicas for p in pools[1:]) for pools in deferred.periods]
    assert all(n == 0 for hour, n in enumerate(extra) if 9 <= hour < 17)  # office hours: nothing rented
    plan = fleet_for(options, class_demand_rps((chat, summarise), 24))

    def day_usd(option):  # type: ignore[no-untyped-def]
        return sum(PRICES[pool.gpu].on_demand_usd_per_hour * pool.gpus for pools in option.periods for pool in pools)

    assert plan.cost.total_usd == pytest.approx(min(day_usd(o) for o in options), rel=1e-9)
    assert not any(
        o.arrangement == "deferred"
        for o in arrangement_options(classes=(chat, summarise), inputs=INPUTS, base=BASE, periods=24, period_hours=2.0)
    )
