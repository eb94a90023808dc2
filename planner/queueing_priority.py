"""Traffic classes on one continuous-batching replica: non-preemptive priority waits and finite-buffer shedding.

A replica's c slots are the servers of a c-server queue (planner/queueing.py, step 1); a request
holds its slot for its service time s (admission → last token). With several classes sharing the
slots, a freed slot goes to the waiting request of the highest priority (priority 0 first), FCFS
within a class, and a running request is never preempted.

Waiting — Cobham's formula generalised to c servers (Kleinrock, *Queueing Systems* vol. 2, §3.6,
M/M/m with non-preemptive priorities; Cobham 1954 for m = 1). With offered load a = Σ λ_i·s_i
(Erlangs), per-slot loads σ_k = Σ_{i≤k} λ_i·s_i / c and the mean slot service time
s̄ = a / Σ λ_i, the time until some slot frees, for an arrival that finds all c busy, has mean s̄/c,
and an arrival waits with Erlang C's probability P_w = C(c, a). Class k then waits on average

    W_k = P_w · (s̄/c) / ((1 − σ_{k−1}) · (1 − σ_k))

(one class: P_w·s̄/(c(1 − ρ)), Erlang C's mean wait). Classes with different mean service times
share s̄ (the mixture's mean); the formula is exact for one service rate.

Tail: an exponential per class with the same wait probability, P(W_k > t) = P_w · exp(−t·P_w/W_k),
so the q-quantile is (W_k/P_w)·ln(P_w/(1 − q)) when P_w > 1 − q and 0 otherwise (exact for one
class; for the lower classes an approximation the class simulator, planner/simulator_classes.py,
checks: docs/traffic-classes.md).

Shedding — admission limits as a birth–death chain (M/M/c/K with one K per class, "trunk
reservation"): class k is admitted iff fewer than K_k requests are in the replica (running or
queued); K_k = None admits always. With n in the system the birth rate is Σ_{k: n < K_k} λ_k and
the death rate min(n, c)/s̄, so π_n ∝ Π_{j<n} birth(j)/death(j+1), and class k is refused with
probability Σ_{n ≥ K_k} π_n (Poisson arrivals see time averages). Beyond the largest finite K
only unlimited classes arrive: a geometric tail with ratio λ_u·s̄/c, summed in closed form (it
needs the unlimited classes alone below saturation). A continuous batch's occupancy is
overdispersed (its steps slow as it fills): given the single-class model's dispersion D, the
death rates are instead those under which the chain with every class admitted has that model's
negative binomial occupancy (`shed_probabilities`), which brings the refusals within 1.2–2.3× of
the step-level simulator's on the worked example's pool, from 1.6–70× low (docs/traffic-classes.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from planner.errors import PlannerInputError, UnstableLoadError

__all__ = ["ClassLoad", "ClassWait", "ShedResult", "erlang_c", "priority_waits", "shed_probabilities"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassLoad:
    """One class's traffic on a replica: arrivals, mean slot holding time, priority (0 = highest)."""

    name: str
    arrival_rate_rps: float
    service_s: float
    priority: int
    admission_limit: int | None = None  # admit iff fewer than this many in the replica (running + queued)

    def __post_init__(self) -> None:
        if not (self.arrival_rate_rps >= 0 and math.isfinite(self.arrival_rate_rps)):
            raise PlannerInputError(f"class {self.name}: arrival rate must be finite and >= 0, got {self.arrival_rate_rps}")
        if not (self.service_s > 0 and math.isfinite(self.service_s)):
            raise PlannerInputError(f"class {self.name}: service time must be finite and > 0, got {self.service_s}")
        if self.admission_limit is not None and self.admission_limit < 1:
            raise PlannerInputError(f"class {self.name}: admission limit must be >= 1, got {self.admission_limit}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassWait:
    name: str
    priority: int
    wait_probability: float
    mean_wait_s: float
    utilisation_through_class: float  # σ_k: per-slot load of this class and every higher one

    def wait_at_percentile_s(self, percentile: float) -> float:
        """q-quantile of the exponential tail P(W > t) = P_w·exp(−t·P_w/W)."""
        tail = 1.0 - percentile / 100.0
        if self.wait_probability <= tail or self.mean_wait_s == 0.0:
            return 0.0
        return (
            self.mean_wait_s / self.wait_probability * math.log(self.wait_probability / tail)
        )  # conditional mean × ln(P_w / tail)


@dataclass(frozen=True, slots=True, kw_only=True)
class ShedResult:
    name: str
    shed_probability: float


def erlang_c(slots: int, offered_erlangs: float) -> float:
    """Probability that an arrival waits in M/M/c: the Erlang B recursion B_k = a·B_{k−1}/(k + a·B_{k−1}), then C = B/(1 − ρ(1 − B))."""
    if slots < 1:
        raise PlannerInputError(f"slots must be >= 1, got {slots}")
    rho = offered_erlangs / slots
    if rho >= 1.0:
        raise UnstableLoadError(
            f"offered load {offered_erlangs:.3g} Erlangs fills {slots} slots (ρ = {rho:.3f} ≥ 1)", utilisation=rho
        )
    b = 1.0
    for k in range(1, slots + 1):
        b = offered_erlangs * b / (k + offered_erlangs * b)  # Erlang B with k servers
    return b / (1.0 - rho * (1.0 - b))  # Erlang C from Erlang B


def _mean_service_s(classes: Sequence[ClassLoad]) -> float:
    total_rate = sum(k.arrival_rate_rps for k in classes)
    if total_rate == 0.0:
        return sum(k.service_s for k in classes) / len(classes)
    return sum(k.arrival_rate_rps * k.service_s for k in classes) / total_rate  # s̄ = a / Σλ


def priority_waits(classes: Sequence[ClassLoad], *, slots: int) -> tuple[ClassWait, ...]:
    """Mean wait and tail per class under non-preemptive priority on `slots` slots (Cobham, M/M/c)."""
    if not classes:
        raise PlannerInputError("at least one class is needed")
    offered = sum(k.arrival_rate_rps * k.service_s for k in classes)
    p_wait = erlang_c(slots, offered)
    residual_s = _mean_service_s(classes) / slots  # s̄/c: mean time until one of c busy slots frees
    waits = []
    above = 0.0
    for level in sorted({k.priority for k in classes}):
        through = above + sum(k.arrival_rate_rps * k.service_s for k in classes if k.priority == level) / slots
        mean_wait_s = p_wait * residual_s / ((1.0 - above) * (1.0 - through))  # Cobham: W0 / ((1 − σ_{k−1})(1 − σ_k))
        for k in classes:
            if k.priority == level:
                waits.append(
                    ClassWait(
                        name=k.name,
                        priority=level,
                        wait_probability=p_wait,
                        mean_wait_s=mean_wait_s,
                        utilisation_through_class=through,
                    )
                )
        above = through
    return tuple(waits)


def shed_probabilities(classes: Sequence[ClassLoad], *, slots: int, dispersion: float = 1.0) -> tuple[ShedResult, ...]:
    """Refusal probability per class of the birth–death chain with per-class admission limits.

    `dispersion`: the variance-to-mean ratio of the replica's occupancy without limits, as the
    single-class model finds it (planner/queueing.py `occupancy_dispersion`; 1 for the M/M/c
    chain). Above 1 the death rates are the ones under which the chain, with every class
    admitted, has that model's negative binomial occupancy NB(r, q) of mean a = Σλ·s̄ below the
    slots (q = 1 − 1/D, r = a/(D − 1)): π_{n+1}/π_n = q(n + r)/(n + 1) = Λ/μ(n + 1), so
    μ(n) = Λ·n / (q·(n − 1 + r)) for n ≤ c and μ(c) beyond — a continuous batch whose steps slow
    as it fills serves fewer requests per second per running request. The limits then change
    only the births."""
    if not classes:
        raise PlannerInputError("at least one class is needed")
    if not (dispersion >= 1.0 and math.isfinite(dispersion)):
        raise PlannerInputError(f"occupancy dispersion must be finite and >= 1, got {dispersion}")
    mean_s = _mean_service_s(classes)
    total_rate = sum(k.arrival_rate_rps for k in classes)
    overdispersed = dispersion > 1.0 + 1e-9 and total_rate > 0
    q_nb = 1.0 - 1.0 / dispersion
    r_nb = total_rate * mean_s / (dispersion - 1.0) if overdispersed else math.inf

    def death(n: int) -> float:
        m = min(n, slots)
        if not overdispersed:
            return m / mean_s
        return total_rate * m / (q_nb * (m - 1 + r_nb))

    limits = [k.admission_limit for k in classes if k.admission_limit is not None]
    top = max(limits, default=0)
    unlimited_rate = sum(k.arrival_rate_rps for k in classes if k.admission_limit is None)
    tail_ratio = unlimited_rate / death(slots)
    if unlimited_rate > 0 and tail_ratio >= 1.0:
        raise UnstableLoadError(
            f"the classes without an admission limit alone fill {slots} slots (ρ = {tail_ratio:.3f} ≥ 1)",
            utilisation=tail_ratio,
        )
    weights = [1.0]
    for n in range(top):
        birth = sum(k.arrival_rate_rps for k in classes if k.admission_limit is None or n < k.admission_limit)
        weights.append(weights[-1] * birth / death(n + 1))  # π_{n+1} = π_n · birth(n) / death(n + 1)
    # States above `top`: birth λ_u, death μ(n); below c the death rate still grows.
    tail = 0.0
    if unlimited_rate > 0:
        w = weights[-1]
        n = top
        while n < slots:
            w *= unlimited_rate / death(n + 1)
            tail += w
            n += 1
        tail += w * tail_ratio / (1.0 - tail_ratio)  # geometric tail once every slot is busy
    total = sum(weights) + tail
    results = []
    for k in classes:
        if k.admission_limit is None:
            shed = 0.0
        else:
            shed = sum(weights[k.admission_limit :]) / total + tail / total  # P(N ≥ K_k)
        results.append(ShedResult(name=k.name, shed_probability=shed))
    return tuple(results)
