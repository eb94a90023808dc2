"""Background work deferred within its deadline over a day profile: a fluid schedule on a cyclic day.

The day is P equal periods of h = 24/P hours (as a fleet plan's `demand_rps`, one rate per
period). Background requests arrive at `arrivals_rps[p]` in period p and are served, oldest
first, by the interactive pool's idle capacity (`spare_rps[p]`) plus `n_p` extra replicas of
`extra_replica_rps` each, rented in period p at `extra_replica_usd_per_hour` — only in the
off-peak periods, those where the interactive pool has idle capacity (`spare_rps[p] > 0`): at the
interactive peak nothing is rented, so work arriving then waits for the off-peak hours or, when
its deadline does not reach them, the schedule is infeasible. The work is a fluid
(requests as a continuous quantity, per period):

    B_p = B_{p−1} + A_p − s_p            backlog at the end of period p (cyclic: B_{−1} = B_{P−1})
    s_p ≤ spare_p + n_p · x              served in period p (requests)
    Σ_{j=1..K} s_{p+j} ≥ B_p             the backlog at the end of p is done within the next K periods

with A_p = arrivals_rps[p]·h·3600, x = extra_replica_rps·h·3600 and K = ⌊D/h⌋ − 1 for a deadline
of D hours: oldest first, the backlog left at the end of period p is served before anything that
arrives later, so it is done by the end of period p + K, and a request that arrived in period p
(at the earliest at its start) is then done within (K + 1)·h ≤ D hours. The request's own
service time (seconds) is neglected against a deadline of hours. With K = 0 every period's work
is done within it. The extra replicas are whole numbers per period: the cheapest schedule is a
small MILP (scipy.optimize.milp, HiGHS), minimising Σ_p n_p · price · h over the day; then a
second one keeps that many replica-periods and rents the fewest replicas at once (one objective
weighing both took HiGHS 0.45 s against 0.03 s for the two; measured on a 24-period day).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.units import SECONDS_PER_HOUR

__all__ = ["HOURS_PER_DAY", "DeferralSchedule", "deferral_schedule", "deferred_fraction"]

HOURS_PER_DAY = 24.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeferralSchedule:
    period_hours: float
    served_rps: tuple[float, ...]  # background work served per period, as an average rate
    extra_replicas: tuple[int, ...]  # extra background replicas rented per period
    backlog_requests: tuple[float, ...]  # left waiting at the end of each period
    completion_h: float  # a bound on any request's time from arrival to done
    extra_cost_usd_per_hour: float  # the extra replicas' cost averaged over the day


def deferral_schedule(
    *,
    arrivals_rps: Sequence[float],
    spare_rps: Sequence[float],
    deadline_h: float,
    extra_replica_rps: float,
    extra_replica_usd_per_hour: float,
) -> DeferralSchedule:
    """The cheapest extra off-peak capacity per period that finishes every period's background work
    within `deadline_h`; InfeasiblePlanError when the deadline is shorter than one period or no
    off-peak capacity finishes the work within it."""
    periods = len(arrivals_rps)
    if periods == 0 or len(spare_rps) != periods:
        raise PlannerInputError("a day profile needs one arrival rate and one spare rate per period")
    if not (extra_replica_rps > 0 and extra_replica_usd_per_hour >= 0):
        raise PlannerInputError("an extra replica needs a positive rate and a price >= 0")
    h = HOURS_PER_DAY / periods
    later = math.floor(deadline_h / h + 1e-9) - 1  # K: periods after its own within which a backlog is done
    if later < 0:
        raise InfeasiblePlanError(
            f"the deadline of {deadline_h:g} h is shorter than one period of the day profile ({h:g} h): "
            "no request can wait for a later period",
            constraint="deadline_h",
        )
    later = min(later, periods - 1)  # a day's wait at most: the cyclic day repeats
    seconds = h * SECONDS_PER_HOUR
    arrived = np.asarray(arrivals_rps, dtype=float) * seconds  # A_p
    spare = np.maximum(np.asarray(spare_rps, dtype=float), 0.0) * seconds
    per_replica = extra_replica_rps * seconds  # x
    # variables: s_0..s_{P−1}, n_0..n_{P−1}, B_0..B_{P−1}, M (the most rented at once)
    s, n, b, m = 0, periods, 2 * periods, 3 * periods
    size = 3 * periods + 1
    rows: list[np.ndarray] = []
    low: list[float] = []
    high: list[float] = []
    for p in range(periods):
        capacity = np.zeros(size)
        capacity[s + p], capacity[n + p] = 1.0, -per_replica
        rows.append(capacity)
        low.append(-np.inf)
        high.append(float(spare[p]))  # s_p − x·n_p ≤ spare_p
        balance = np.zeros(size)
        balance[b + p], balance[b + (p - 1) % periods], balance[s + p] = 1.0, -1.0, 1.0
        if periods == 1:
            balance[b + p] = 0.0  # one period: B_p − B_p cancels
        rows.append(balance)
        low.append(float(arrived[p]))
        high.append(float(arrived[p]))  # B_p − B_{p−1} + s_p = A_p
        window = np.zeros(size)
        window[b + p] = 1.0
        for j in range(1, later + 1):
            window[s + (p + j) % periods] -= 1.0
        rows.append(window)
        low.append(-np.inf)
        high.append(0.0)  # B_p ≤ Σ_{j=1..K} s_{p+j}
    for p in range(periods):
        most = np.zeros(size)
        most[n + p], most[m] = 1.0, -1.0
        rows.append(most)
        low.append(-np.inf)
        high.append(0.0)  # n_p ≤ M
    replica_periods = np.zeros(size)
    replica_periods[n : n + periods] = 1.0  # Σ n_p, the objective of the first stage
    integrality = np.zeros(size)
    integrality[n : n + periods] = 1
    upper = np.full(size, np.inf)
    upper[n : n + periods] = np.where(spare > 0.0, np.inf, 0.0)  # extra replicas off-peak only
    bounds = Bounds(np.zeros(size), upper)
    result = milp(
        replica_periods,
        constraints=LinearConstraint(np.vstack(rows), low, high),
        integrality=integrality,
        bounds=bounds,
    )
    if result.x is not None:
        fewest = round(float(result.x[n : n + periods].sum()))
        most = np.zeros(size)
        most[m] = 1.0
        spread = milp(
            most,
            constraints=LinearConstraint(np.vstack([*rows, replica_periods]), [*low, -np.inf], [*high, fewest]),
            integrality=integrality,
            bounds=bounds,
        )
        result = spread if spread.x is not None else result
    if result.x is None:
        raise InfeasiblePlanError(
            f"the background work cannot be finished within its deadline of {deadline_h:g} h: work arriving at the "
            "interactive peak (no idle capacity, nothing rented) does not reach the off-peak hours in time",
            constraint="deadline_h",
        )
    x = result.x
    served = x[s : s + periods]
    backlog = np.maximum(x[b : b + periods], 0.0)
    extra = tuple(round(v) for v in x[n : n + periods])
    return DeferralSchedule(
        period_hours=h,
        served_rps=tuple(float(v) / seconds for v in served),
        extra_replicas=extra,
        backlog_requests=tuple(float(v) for v in backlog),
        completion_h=_completion_h(served, backlog, h),
        extra_cost_usd_per_hour=sum(extra) * extra_replica_usd_per_hour * h / HOURS_PER_DAY,
    )


def deferred_fraction(arrivals_rps: Sequence[float], schedule: DeferralSchedule) -> float:
    """The share of a day's background work served in a later period than the one it arrived in.

    Oldest first, period p's service first clears the backlog left at the end of p − 1 (cyclic), so
    of its own arrivals A_p it serves min(A_p, max(0, s_p − B_{p−1})) and defers the rest."""
    periods = len(arrivals_rps)
    arrived = [a * schedule.period_hours for a in arrivals_rps]  # per-hour units cancel in the ratio
    total = sum(arrived)
    if total <= 0:
        return 0.0
    deferred = 0.0
    for p in range(periods):
        served = schedule.served_rps[p] * schedule.period_hours
        before = schedule.backlog_requests[(p - 1) % periods] / SECONDS_PER_HOUR
        deferred += arrived[p] - min(arrived[p], max(0.0, served - before))
    return deferred / total


def _completion_h(served: np.ndarray, backlog: np.ndarray, h: float) -> float:
    """A bound on any request's arrival-to-done time: a request arriving in period p is done in p
    when nothing is left at its end, else by the end of the first period q > p by which the
    service after p covers the backlog B_p (oldest first): (q − p + 1)·h."""
    periods = len(served)
    worst = h
    for p in range(periods):
        if backlog[p] <= 1e-6 * max(1.0, float(served.max(initial=0.0))):
            continue
        done = 0.0
        for j in range(1, periods + 1):
            done += float(served[(p + j) % periods])
            if done >= backlog[p] * (1.0 - 1e-9):
                worst = max(worst, (j + 1) * h)
                break
        else:
            worst = math.inf
    return worst
