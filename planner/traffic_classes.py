"""Traffic classes: several streams of requests to one model, each with its own rate, lengths and target.

A latency class carries p99 SLOs (`slo`); a background class carries a completion deadline
(`deadline_h`: each request done within H hours of arriving). `priority` orders classes on a
shared pool (0 first); `max_shed_fraction` is how much of a class may be refused at peak.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from planner.workload import HistogramLength, LengthDistribution, Slo, Workload

__all__ = ["MIXTURE_POINTS", "TrafficClass", "merged_workload", "tightest_slo"]

#: Quantile points per class when classes are merged into one length histogram (mid-quantiles
#: (i + 0.5)/64): the mixture keeps each class's mean exactly for fixed lengths and to within the
#: midpoint rule's error for lognormals, and 64 points per class keep the histogram small.
MIXTURE_POINTS = 64
S_PER_H = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficClass:
    name: str
    arrival_rate_rps: float
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    slo: Slo | None = None
    deadline_h: float | None = None
    priority: int = 0
    max_shed_fraction: float = 0.0
    arrival_cv: float = 1.0
    #: The class's arrival rate in each of P equal periods of a day (24/P hours each), as a fleet
    #: plan's `demand_rps`; None: `arrival_rate_rps` all day. `arrival_rate_rps` is the peak the
    #: pools are sized for, so no period may exceed it.
    demand_rps: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.slo is None) == (self.deadline_h is None):
            raise PlannerInputError(f"class {self.name}: give exactly one of slo and deadline_h", field="classes")
        if self.deadline_h is not None and not (self.deadline_h > 0 and math.isfinite(self.deadline_h)):
            raise PlannerInputError(f"class {self.name}: deadline_h must be positive, got {self.deadline_h}", field="classes")
        if not (self.arrival_rate_rps > 0 and math.isfinite(self.arrival_rate_rps)):
            raise PlannerInputError(f"class {self.name}: arrival_rate_rps must be > 0", field="classes")
        if not (0.0 <= self.max_shed_fraction < 1.0):
            raise PlannerInputError(f"class {self.name}: max_shed_fraction must be in [0, 1)", field="classes")
        if self.priority < 0:
            raise PlannerInputError(f"class {self.name}: priority must be >= 0", field="classes")
        if self.demand_rps is not None:
            object.__setattr__(self, "demand_rps", tuple(float(d) for d in self.demand_rps))
            if not self.demand_rps or not all(math.isfinite(d) and d >= 0 for d in self.demand_rps):
                raise PlannerInputError(f"class {self.name}: demand_rps needs one rate >= 0 per period", field="classes")
            if max(self.demand_rps) > self.arrival_rate_rps * (1.0 + 1e-9):
                raise PlannerInputError(
                    f"class {self.name}: demand_rps peaks at {max(self.demand_rps):g} req/s, above arrival_rate_rps "
                    f"{self.arrival_rate_rps:g} (the peak the pools are sized for)",
                    field="classes",
                )

    def day_rps(self, periods: int) -> tuple[float, ...]:
        """The class's rate in each of `periods` periods of the day (`arrival_rate_rps` throughout without a profile)."""
        if self.demand_rps is None:
            return (self.arrival_rate_rps,) * periods
        if len(self.demand_rps) != periods:
            raise PlannerInputError(
                f"class {self.name}: demand_rps gives {len(self.demand_rps)} periods, another class {periods}", field="classes"
            )
        return self.demand_rps

    @property
    def workload(self) -> Workload:
        return Workload(
            arrival_rate_rps=self.arrival_rate_rps,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            arrival_cv=self.arrival_cv,
        )

    @property
    def own_slo(self) -> Slo:
        """The class's target for the single-class planner: its SLO, or its deadline as a p99 end-to-end target."""
        if self.slo is not None:
            return self.slo
        if self.deadline_h is None:
            raise PlannerInputError(f"class {self.name} has neither slo nor deadline_h", field="classes")
        return Slo(e2e_s=self.deadline_h * S_PER_H)


def _mixture(parts: Sequence[tuple[LengthDistribution, float]]) -> HistogramLength:
    u = (np.arange(MIXTURE_POINTS) + 0.5) / MIXTURE_POINTS
    tokens: list[int] = []
    weights: list[float] = []
    for dist, share in parts:
        for q in u:
            tokens.append(max(1, round(dist.quantile(float(q)))))
            weights.append(share / MIXTURE_POINTS)
    return HistogramLength(tokens=tuple(tokens), weights=tuple(weights))


def merged_workload(classes: Sequence[TrafficClass]) -> Workload:
    """All classes as one stream: rates add; lengths are the rate-weighted mixture (prompt and output drawn independently, as in `Workload`)."""
    if not classes:
        raise PlannerInputError("at least one class is needed", field="classes")
    if len(classes) == 1:
        return classes[0].workload
    total = sum(k.arrival_rate_rps for k in classes)
    cv = max(k.arrival_cv for k in classes)  # the burstiest class's CV: conservative for the superposition
    return Workload(
        arrival_rate_rps=total,
        prompt_tokens=_mixture([(k.prompt_tokens, k.arrival_rate_rps / total) for k in classes]),
        output_tokens=_mixture([(k.output_tokens, k.arrival_rate_rps / total) for k in classes]),
        arrival_cv=cv,
    )


def tightest_slo(classes: Sequence[TrafficClass]) -> Slo:
    """Per metric the smallest target any class sets (deadlines as end-to-end targets): one FCFS pool must meet it for every request."""
    slos = [k.own_slo for k in classes]

    def least(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return min(present) if present else None

    return Slo(
        ttft_s=least([s.ttft_s for s in slos]),
        tpot_s=least([s.tpot_s for s in slos]),
        e2e_s=least([s.e2e_s for s in slos]),
        percentile=max(s.percentile for s in slos),
    )
