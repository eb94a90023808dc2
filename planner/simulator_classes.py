"""A discrete-event simulation of traffic classes sharing one replica's c slots: priorities and admission limits.

The check of planner/queueing_priority.py. Each class arrives as a Poisson stream with its own
rate and a slot holding time drawn from an exponential (`service="exponential"`, the analytic
model's assumption) or fixed at its mean (`service="fixed"`, closer to a continuous-batching
request whose life is set by its output length). A freed slot goes to the waiting request of the
highest priority (0 first), FCFS within a class; nothing running is preempted. An arrival of a
class with an admission limit K that finds K or more requests in the replica (running + queued)
is shed (deferral to off-peak hours is simulated by planner/simulator_classes_day.py). The
simulator works at the level of slots (planner/simulator_classes_step.py works at step level): the step-time coupling of a continuous batch
(planner/simulator.py) enters through the classes' holding times, which the caller takes from the
single-class model at the pool's operating point.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.errors import PlannerInputError
from planner.queueing_priority import ClassLoad

__all__ = ["ClassSimulated", "simulate_classes"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSimulated:
    name: str
    arrivals: int
    admitted: int
    shed_fraction: float  # refused / arrivals
    wait_probability: float
    mean_wait_s: float
    p99_wait_s: float
    wait_at_percentile_s: float  # at the `percentile` asked for (99 by default)


def simulate_classes(
    classes: Sequence[ClassLoad],
    *,
    slots: int,
    duration_s: float,
    seed: int = 0,
    warmup_fraction: float = 0.1,
    service: Literal["exponential", "fixed"] = "exponential",
    percentile: float = 99.0,
) -> tuple[ClassSimulated, ...]:
    """Per-class waits and shed fractions of `duration_s` of traffic; the first `warmup_fraction` is not measured."""
    if slots < 1 or duration_s <= 0 or not classes:
        raise PlannerInputError("the class simulation needs slots >= 1, a positive duration and at least one class")
    rng = np.random.default_rng(seed)
    arrival_t: list[np.ndarray] = []
    for k in classes:
        n = int(rng.poisson(k.arrival_rate_rps * duration_s))
        arrival_t.append(np.sort(rng.uniform(0.0, duration_s, n)))  # a Poisson process given its count
    times = np.concatenate(arrival_t)
    which = np.concatenate([np.full(len(a), i, dtype=np.int64) for i, a in enumerate(arrival_t)])
    order = np.argsort(times, kind="stable")
    times, which = times[order], which[order]
    means = np.array([k.service_s for k in classes])
    holds = rng.exponential(means[which]) if service == "exponential" else means[which]
    levels = sorted({k.priority for k in classes})
    level_of = [levels.index(k.priority) for k in classes]
    queues: list[deque[int]] = [deque() for _ in levels]
    finishing: list[float] = []  # heap of slot release times
    waits: list[list[float]] = [[] for _ in classes]
    shed = [0] * len(classes)
    counted = [0] * len(classes)
    start = warmup_fraction * duration_s
    queued = 0

    def admit(now: float) -> None:
        nonlocal queued
        while len(finishing) < slots and queued:
            q = next(q for q in queues if q)
            j = q.popleft()
            queued -= 1
            if times[j] >= start:
                waits[int(which[j])].append(now - float(times[j]))
            heapq.heappush(finishing, now + float(holds[j]))

    for j in range(len(times)):
        now = float(times[j])
        while finishing and finishing[0] <= now:
            released = heapq.heappop(finishing)
            admit(released)
        i = int(which[j])
        limit = classes[i].admission_limit
        if now >= start:
            counted[i] += 1
        if limit is not None and len(finishing) + queued >= limit:
            if now >= start:
                shed[i] += 1
            continue
        queues[level_of[i]].append(j)
        queued += 1
        admit(now)
    results = []
    for i, k in enumerate(classes):
        w = np.asarray(waits[i]) if waits[i] else np.zeros(1)
        results.append(
            ClassSimulated(
                name=k.name,
                arrivals=counted[i],
                admitted=len(waits[i]),
                shed_fraction=shed[i] / counted[i] if counted[i] else 0.0,
                wait_probability=float(np.mean(w > 0.0)),
                mean_wait_s=float(np.mean(w)),
                p99_wait_s=float(np.percentile(w, 99.0)),
                wait_at_percentile_s=float(np.percentile(w, percentile)),
            )
        )
    return tuple(results)
