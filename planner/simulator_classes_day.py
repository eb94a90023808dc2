"""A day run of deferred background work: when does each period's work finish, served oldest first?

The check of planner/plan_deferral.py's schedule. The schedule is a fluid MILP over whole periods
with a bound on completion ((K + 1)·h); this runs the day instead: background work arrives at its
rate in each period (uniformly within it), and a work-conserving server serves it first in, first
out, at up to `capacity_rps[p]` in period p — the interactive pool's idle capacity plus the extra
replicas the schedule rents then. Time advances in steps of `resolution_s`; the cumulative
service S(t) and arrivals A(t) give each instant's work its completion time, the first t' with
S(t') ≥ A(t), counted from the start of the step the work arrives in to the end of the step that
finishes it: an upper bound on the fluid's delay, within two steps. The day is cyclic: the run starts empty and
repeats the day until the backlog at the start of a day repeats (a schedule that serves the day's
work settles within a day or two); the last day is measured. Each request's own service time
(seconds, planner/simulator_classes_step.py) is added by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from planner.units import SECONDS_PER_HOUR

__all__ = ["BackgroundDay", "simulate_background_day"]

HOURS_PER_DAY = 24.0
#: Days run at most before the start-of-day backlog must repeat (the cyclic steady state).
MAX_DAYS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class BackgroundDay:
    period_hours: float
    #: Per period, the longest time from arrival to done of the work arriving in it (inf: never done).
    completion_h: tuple[float, ...]
    #: Per period, the average rate served (requests per second).
    served_rps: tuple[float, ...]
    #: Work left waiting at the end of each period (requests).
    backlog_requests: tuple[float, ...]
    days_run: int

    @property
    def worst_completion_h(self) -> float:
        return max(self.completion_h)


def simulate_background_day(
    arrivals_rps: Sequence[float], capacity_rps: Sequence[float], *, resolution_s: float = 60.0
) -> BackgroundDay:
    """Run the cyclic day (module docstring) and measure each period's worst completion time."""
    periods = len(arrivals_rps)
    if periods == 0 or len(capacity_rps) != periods or not resolution_s > 0:
        raise PlannerInputError("a day run needs one arrival rate and one capacity per period and a positive resolution")
    if min(arrivals_rps) < 0 or min(capacity_rps) < 0:
        raise PlannerInputError("arrival rates and capacities must be >= 0")
    h = HOURS_PER_DAY / periods
    per_period = max(1, math.ceil(h * SECONDS_PER_HOUR / resolution_s))
    dt = h * SECONDS_PER_HOUR / per_period
    arriving = np.repeat(np.asarray(arrivals_rps, dtype=float) * dt, per_period)  # work arriving in each step
    capacity = np.repeat(np.asarray(capacity_rps, dtype=float) * dt, per_period)
    steps = len(arriving)
    backlog = 0.0
    days = 0
    while True:
        days += 1
        start = backlog
        served = np.empty(steps)
        for i in range(steps):  # work-conserving: serve what is waiting, up to the step's capacity
            s = min(capacity[i], backlog + arriving[i])
            served[i] = s
            backlog += arriving[i] - s
        if abs(backlog - start) <= 1e-6 * max(1.0, float(arriving.sum())) or days >= MAX_DAYS:
            break
    settled = abs(backlog - start) <= 1e-6 * max(1.0, float(arriving.sum()))
    # the measured day, preceded by `start` waiting and followed by the same day again (cyclic)
    cum_arrived = start + np.concatenate(([0.0], np.cumsum(np.tile(arriving, 2))))  # A(t) at step boundaries
    cum_served = np.concatenate(([0.0], np.cumsum(np.tile(served, 2))))  # S(t)
    # the work arriving during step i is the slice (A_i, A_{i+1}]: its last part is done at the first boundary j with S_j ≥ A_{i+1}
    done_at = np.searchsorted(cum_served, cum_arrived[1 : steps + 1] * (1.0 - 1e-12), side="left")
    delay_h = np.where(done_at <= 2 * steps, (done_at - np.arange(steps)) * dt / SECONDS_PER_HOUR, math.inf)
    if not settled:
        delay_h = np.full(steps, math.inf)  # the backlog grows from day to day: some work is never done
    has_work = arriving > 0
    completion = []
    for p in range(periods):
        part = slice(p * per_period, (p + 1) * per_period)
        mine = delay_h[part][has_work[part]]
        completion.append(float(mine.max()) if mine.size else 0.0)
    backlog_end = start + np.cumsum(arriving - served)
    return BackgroundDay(
        period_hours=h,
        completion_h=tuple(completion),
        served_rps=tuple(
            float(served[p * per_period : (p + 1) * per_period].sum()) / (h * SECONDS_PER_HOUR) for p in range(periods)
        ),
        backlog_requests=tuple(float(backlog_end[(p + 1) * per_period - 1]) for p in range(periods)),
        days_run=days,
    )
