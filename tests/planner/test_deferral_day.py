"""The day run of deferred background work (planner/simulator_classes_day.py) and the deferred
plan's verification built on it (planner/plan_classes_deferred.py `_day_run`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from planner.errors import PlannerInputError
from planner.plan_classes import plan_classes
from planner.simulator_classes_day import simulate_background_day
from tests.planner.test_plan_classes import BASE, CHAT_CLASS, INPUTS, OFFICE_DAY, SUMMARISE

#: 20 req/s all day; nothing serves it in office hours (09:00–17:00), 40 req/s the other 16 hours.
ARRIVALS = (20.0,) * 24
OFF_PEAK = tuple(0.0 if 9 <= hour < 17 else 40.0 for hour in range(24))
STEP_H = 60.0 / 3600  # the day run's resolution
#: Its completion times are upper bounds within two steps (the module docstring).
SLACK_H = 2 * STEP_H


def test_first_in_first_out_completion_times_match_the_fluid_by_hand() -> None:
    """By hand: work arriving at 09:00 waits for 17:00 (8 h). At 17:00 the 8 h of office work
    (8·20 = 160 req-hours) is served at 40 req/s first, so work arriving at 16:00 — 140 req-hours
    ahead of it by 17:00 — is done 3.5 h later (a delay of 4.5 h) and at 17:00 itself 4 h later.
    Off-peak the backlog drains at 40 − 20 req/s: empty 8 h after 17:00, at 01:00."""
    day = simulate_background_day(ARRIVALS, OFF_PEAK)
    assert day.completion_h[9] == pytest.approx(8.0, abs=SLACK_H)
    assert day.completion_h[16] == pytest.approx(4.5, abs=SLACK_H)
    assert day.worst_completion_h == pytest.approx(8.0, abs=SLACK_H)
    assert day.backlog_requests[16] == pytest.approx(8 * 3600 * 20.0)
    assert day.backlog_requests[0] == pytest.approx(0.0, abs=1e-6)  # drained by 01:00
    assert day.completion_h[2] <= SLACK_H  # 02:00–03:00: served as it arrives
    assert sum(day.served_rps) == pytest.approx(sum(ARRIVALS))  # every request served each day


def test_a_day_that_cannot_serve_its_work_never_finishes_it() -> None:
    day = simulate_background_day(ARRIVALS, tuple(0.0 if 9 <= hour < 17 else 29.0 for hour in range(24)))  # 16·29 < 24·20
    assert math.isinf(day.worst_completion_h)


def test_bad_input_is_refused() -> None:
    with pytest.raises(PlannerInputError):
        simulate_background_day((1.0, 2.0), (1.0,))
    with pytest.raises(PlannerInputError):
        simulate_background_day((-1.0,), (1.0,))


def _deferred_inputs(deadline_h: float):  # type: ignore[no-untyped-def]
    from planner.plan_classes_base import _Context, _plan_one
    from planner.plan_classes_deferred import _spare_rps
    from planner.plan_deferral import deferral_schedule
    from planner.traffic_classes import tightest_slo

    chat = replace(CHAT_CLASS, demand_rps=OFFICE_DAY)
    summarise = replace(SUMMARISE, deadline_h=deadline_h)
    ctx = _Context(classes=[chat, summarise], inputs=INPUTS, base=replace(BASE, verify=True))
    plan_i, _, _ = _plan_one(ctx, [chat], tightest_slo([chat]), verify=True)
    plan_b, _, _ = _plan_one(ctx, [summarise], tightest_slo([summarise]), verify=True)
    spare = _spare_rps(ctx, plan_i, list(OFFICE_DAY), [summarise])
    extra_rps = summarise.arrival_rate_rps / plan_b.replicas
    schedule = deferral_schedule(
        arrivals_rps=[summarise.arrival_rate_rps] * 24,
        spare_rps=spare,
        deadline_h=deadline_h,
        extra_replica_rps=extra_rps,
        extra_replica_usd_per_hour=plan_b.cost_usd_per_hour / plan_b.replicas,
    )
    return ctx, plan_i, spare, schedule, extra_rps


def test_the_deferred_plan_is_verified_by_a_day_run() -> None:
    """Summarisation due within 12 h on the office day (tests/planner/test_plan_classes.py): with
    verification the deferred plan carries its day run, each of the 24 periods: chat's simulated
    p99 TTFT on its pool meets 500 ms in every period, with summarisation work in the pool's idle
    off-peak capacity at the lowest priority, and the work arriving in each period is done within
    12 h; office-hour work (no idle capacity, nothing rented) waits for 17:00."""
    plan = plan_classes(
        [replace(CHAT_CLASS, demand_rps=OFFICE_DAY), replace(SUMMARISE, deadline_h=12.0)], INPUTS, replace(BASE, verify=True)
    )
    assert plan.chosen == "deferred"
    v = plan.verification
    assert v is not None and "day run" in v.method
    assert len(v.periods) == 24
    assert all(p.meets_target for p in v.periods)
    for p in v.periods:
        office = 9 <= p.period < 17
        assert p.interactive_rps == (60.0 if office else 15.0)
        (name, ttft_s, tpot_s, e2e_s) = p.interactive[0]
        assert name == "chat" and 0.0 < ttft_s <= 0.5 and tpot_s > 0.0 and e2e_s > ttft_s
        assert p.background_completion_h <= 12.0
        if office:
            assert p.background_in_pool_rps == 0.0 and p.extra_replicas == 0
        else:
            assert p.background_in_pool_rps > 0.0
    # work arriving at 09:00 is done no sooner than 17:00
    assert v.periods[9].background_completion_h >= 8.0 - STEP_H


def test_the_day_run_fails_a_deadline_shorter_than_its_waits() -> None:
    """The same schedule (made for 12 h) checked against 6 h: office-hour work waits up to 8 h for
    17:00, so those periods miss; the off-peak periods, served as the work arrives or soon after, do not all miss."""
    from planner.plan_classes_deferred import _day_run

    ctx, plan_i, spare, schedule, extra_rps = _deferred_inputs(12.0)
    ok = _day_run(ctx, plan_i, spare, schedule.extra_replicas, extra_rps, 12.0)
    short = _day_run(ctx, plan_i, spare, schedule.extra_replicas, extra_rps, 6.0)
    assert all(p.meets_target for p in ok.periods)
    missed = {p.period for p in short.periods if not p.meets_target}
    assert {9, 10} <= missed
    assert all(short.periods[p].background_completion_h > 6.0 for p in missed)
    assert len(missed) < 24


def test_the_deferred_fraction_by_hand() -> None:
    """Two 12 h periods, 1 req/s each: nothing served in the first (all of it deferred), 2 req/s in
    the second, which first clears the first period's 43,200 requests then serves its own: half the
    day's work is deferred."""
    from planner.plan_deferral import DeferralSchedule, deferred_fraction

    schedule = DeferralSchedule(
        period_hours=12.0,
        served_rps=(0.0, 2.0),
        extra_replicas=(0, 1),
        backlog_requests=(12 * 3600.0, 0.0),
        completion_h=24.0,
        extra_cost_usd_per_hour=0.0,
    )
    assert deferred_fraction((1.0, 1.0), schedule) == pytest.approx(0.5)


def test_the_deferred_plan_reports_the_deferred_fraction() -> None:
    """On the office day (due within 12 h), at least the eight office hours' summarisation (a third of
    its day) waits for a later period; chat, served as it arrives, defers nothing."""
    plan = plan_classes([replace(CHAT_CLASS, demand_rps=OFFICE_DAY), replace(SUMMARISE, deadline_h=12.0)], INPUTS, BASE)
    assert plan.chosen == "deferred"
    by_name = {k.name: k for k in plan.classes}
    assert by_name["chat"].deferred_fraction == 0.0
    assert 1 / 3 - 1e-9 <= by_name["summarise"].deferred_fraction < 1.0
