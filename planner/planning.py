"""Headroom's main job: the cheapest plan that meets the p99 SLOs, with the numbers that justify it.

`plan_capacity(request, inputs)` enumerates candidates (planner/candidates.py), drops what cannot
hold the model or meet an SLO at any load, searches for the cheapest with the queueing model and
the simulator in the loop (a winner the simulator finds missing its SLOs has that rate recorded as
missed and the search runs again), lets the MILP (`planner.optimizer.solve_plan`) prove the integer
optimum and report the constraints' slacks, and explains the plan returned (planner/plan_result.py
records). An impossible request's relaxations are found by re-planning (planner/advice.py).

Why a branch and bound before the MILP. The queueing root-find is the expensive step (tens of
predictions per candidate), and a request can have thousands of candidates. In a single-
configuration plan a candidate c costs p_c · max(min_replicas, ⌈λ/μ_c⌉ + [N+1]) and μ_c ≤ its
saturation rate ≤ the closed-form bound of planner/candidates.py, so the same expression with
the bound in place of μ_c is a lower bound on its cost. Candidates are taken in order of that
bound (first the closed form, then the queueing model's exact saturation, then μ_c itself), and
the search stops when the next bound exceeds the cheapest plan found: every candidate left
could not have been cheaper. A bound whose replica count already breaks max_gpus, the budget or
the inventory drops the candidate outright (replicas only grow from the bound). The MILP then
solves over every candidate whose μ was found — the same optimum, proved by the solver, with
its constraint slacks and infeasibility diagnosis. A mixed fleet can use any candidate, so
there the search keeps only each (GPU, precision, tp)'s largest μ (same price and GPUs, so the
others are dominated) and the MILP sees all of those.

Each SLO relaxed by 10 % re-runs the same search (verified as the plan was) against the final
cost — re-solved, not scaled — reusing what is known (a rate that meets a stricter SLO meets the
looser one). Traffic +10/+25/+50 % is re-planned with what the simulator taught the search, and
each level takes the cheaper of its own plan and the next level's (a plan for more traffic serves
less), so the sensitivity is monotone.

The replica oracle. What a single-configuration plan needs of candidate c is the fewest replicas r
whose per-replica rate λ/r meets every SLO. The queueing model's percentiles never fall as the rate
rises (common random numbers), so each prediction at some λ/r either proves r enough (and every
rate below it) or proves fewer replicas too few; a handful of predictions decide r where the
root-find for μ itself takes dozens. The search takes one prediction per pop and re-queues the
candidate at its raised bound, so candidates that stop being competitive are never resolved.
Only the chosen candidate's μ is narrowed (to 1 %) for the justification.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import numpy as np

from planner.candidates import (
    BATCH_LIMITS,
    CHUNK_BUDGETS,
    MS_PER_S,
    TP_DEGREES,
    Drop,
    Group,
    Option,
    enumerate_all_options,
    enumerate_groups,
    packed_groups,
)
from planner.errors import (
    ConvergenceError,
    InfeasiblePlanError,
    PlannerInputError,
    UnsupportedConfigurationError,
)
from planner.memory import kv_bytes_per_request, weight_bytes
from planner.optimizer import Candidate, PlanConstraints, PlanSolution, solve_plan
from planner.packing import InstanceUse, instance_uses
from planner.performance import decode_step, prefill
from planner.pins import apply_pins, without_replicas
from planner.plan_result import (
    AddReplica,
    Adjustment,
    Alternative,
    BindingEntry,
    CandidatesSection,
    CapacityBinding,
    Configuration,
    ConstraintBinding,
    DecodeRoofline,
    FigureOfRecord,
    FiguresOfRecord,
    Justification,
    LittlesLaw,
    MemorySection,
    NextCandidate,
    P99Intervals,
    Percentiles,
    Predicted,
    PrefillRoofline,
    Provenance,
    QueueingSection,
    RhoPoint,
    RooflineSection,
    SameConfiguration,
    Sensitivity,
    SensitivityEntry,
    SimulatedFigures,
    SingleConfiguration,
    SloBinding,
    StepModelSection,
    UnstableQueueing,
    Verification,
    VerificationRow,
    as_dict,
)
from planner.queueing import PercentileBounds, Prediction, max_rps_at_slo, predict, saturation_rps, screen
from planner.rate_search import Bracket
from planner.simulator import simulate
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.workload import Serving, Slo, Workload

HOURS_PER_MONTH = 730.0  # 8,760 h / 12, the convention cloud price sheets use
SECONDS_PER_HOUR = 3600.0
TRAFFIC_FACTORS: tuple[float, ...] = (1.10, 1.25, 1.50)
SLO_RELAXATION = 1.10
#: Utilisations of the ρ-vs-latency curve (with the plan's own ρ and μ's): where the 1/(1−ρ) wall shows.
CURVE_UTILISATIONS: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95)
#: Simulated requests per verification: 4,000 (3,600 after the 10 % warm-up) put 36 requests beyond
#: a p99 — the simulator's own batch-means CI rests on 200 requests per block — while one simulation
#: of one replica stays within a few hundred milliseconds (docs/plan-benchmark.md).
VERIFY_REQUESTS = 4_000
#: The capacity answer's verification (planner/capacity.py): at most this many steps down from the
#: rate found, each dividing it by VERIFY_CAPACITY_STEP, before it gives the rate up as unverifiable.
MAX_VERIFY_ADJUSTMENTS = 4
VERIFY_CAPACITY_STEP = 1.10
#: The fraction of saturation up to which every SLO must hold for capacity, not an SLO, to be the
#: binding constraint of a plan.
SATURATION_BINDS = 0.99
#: Upper bound on queueing root-finds in one search, so a pathological request stays bounded;
#: reaching it is reported (`exhaustive: false`).
MAX_EVALUATIONS = 600
#: Below this fraction of the lowest rate known to miss, the oracle checks vanishing load before searching on.
_VANISHING = 1e-3
_COST_TOLERANCE = 1e-9


# --- request and inputs ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningInputs:
    """What the API gathered from the catalog: specs with prices and the chosen efficiencies."""

    model: ModelSpec
    gpus: tuple[GpuSpec, ...]
    precisions: tuple[Precision, ...]
    efficiency_profile: str = "calibrated"
    catalog_version: int = 0
    #: The catalog's GPU types and precisions the request did not allow: an impossible request's
    #: advice tries adding each (planner/advice.py); empty when the request allowed everything.
    other_gpus: tuple[GpuSpec, ...] = ()
    other_precisions: tuple[Precision, ...] = ()
    #: The provider's instance types, for plans in whole instances (`PlanConstraints.unit` "instance").
    instance_types: tuple[InstanceTypeSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.gpus:
            raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
        if not self.precisions:
            raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanningRequest:
    """The workload, its SLOs and the limits on the plan, plus the search grids."""

    workload: Workload
    slo: Slo
    constraints: PlanConstraints = field(default_factory=PlanConstraints)
    verify: bool = True
    verify_requests: int = VERIFY_REQUESTS
    seed: int = 0
    tp_degrees: tuple[int, ...] = TP_DEGREES
    batch_limits: tuple[int, ...] = BATCH_LIMITS
    chunk_budgets: tuple[int | None, ...] = CHUNK_BUDGETS
    solver_time_limit_s: float = 10.0
    #: On an infeasible request, re-plan to find the relaxations that work (planner/advice.py).
    advise: bool = True
    #: Build the justification's re-planned sections (binding's relaxations, alternatives,
    #: sensitivity); the advice's trial plans need only feasibility and cost.
    explain: bool = True
    #: Called between the search's steps and the advice's re-plans; raises to stop the work (the
    #: service passes its request deadline's, so a plan its 503 abandoned stops). The planner reads no clock.
    checkpoint: Callable[[], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not (self.workload.arrival_rate_rps > 0 and math.isfinite(self.workload.arrival_rate_rps)):
            raise PlannerInputError(
                f"arrival_rate_rps must be > 0 to plan for, got {self.workload.arrival_rate_rps}",
                constraint="arrival_rate_rps",
            )
        if self.verify_requests < 100:
            raise PlannerInputError(f"verify_requests must be >= 100, got {self.verify_requests}")


# --- result ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRow:
    gpu: str
    tp: int
    replicas: int
    gpus: int
    weights_precision: str
    kv_precision: str
    batch_limit: int
    chunk_tokens: int | None
    max_rps_at_slo: float  # per replica
    saturation_rps: float  # per replica
    offered_rps: float  # to the whole row
    target_rho: float  # per-replica rate / per-replica saturation
    cost_usd_per_hour: float
    #: Instance mode: the whole instances the row's replicas are packed into (planner/packing.py).
    instances: tuple[InstanceUse, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    """A plan and its justification; SI units with the unit in every name (the API converts)."""

    rows: tuple[FleetRow, ...]
    replicas: int
    gpus_total: int
    target_rho: float
    cost_usd_per_hour: float
    cost_usd_per_month: float
    cost_usd_per_million_output_tokens: float
    #: None only on the advice's trial plans (`PlanningRequest.explain` False), which need feasibility and cost alone
    predicted: Predicted | None
    justification: Justification | None
    verification: Verification | None
    provenance: Provenance | None

    @property
    def row(self) -> FleetRow:
        """The largest row (the only one in a single-configuration plan)."""
        return max(self.rows, key=lambda r: r.offered_rps)

    @property
    def instances(self) -> tuple[InstanceUse, ...]:
        """Every row's instances (empty unless the plan is in whole instances)."""
        return tuple(use for row in self.rows for use in row.instances)


# --- cached queueing calls (pure functions of hashable inputs; shared across requests) -----------


def _mix(workload: Workload) -> Workload:
    """The workload at a unit rate: per-replica μ and saturation do not depend on the offered rate."""
    return workload.at_rate(1.0)


@lru_cache(maxsize=8192)
def _saturation(sm: StepModel, mix: Workload, serving: Serving, capacity: int) -> float:
    return saturation_rps(sm, mix, serving, kv_capacity_tokens=capacity)


@lru_cache(maxsize=8192)
def _max_rps(sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int) -> float | tuple[str, str, float | None]:
    """μ, or (constraint, reason, predicted_s) when no rate meets the SLO on this configuration."""
    try:
        return max_rps_at_slo(sm, mix, serving, slo, kv_capacity_tokens=capacity)
    except InfeasiblePlanError as exc:
        predicted = exc.extensions.get("predicted_s")
        return str(exc.extensions.get("constraint", "slo")), exc.detail, None if predicted is None else float(predicted)
    except ConvergenceError as exc:
        return "queueing", f"the queueing model did not converge on this configuration ({exc.detail})", None


class _PredictionCache:
    """The queueing model's answers per (configuration, rate, percentile), shared by every request in
    the process (pure functions of frozen specs): full predictions, and, where `queueing.screen`
    proved a miss on a slice of the sample, the lower bounds on the percentiles that did, which
    settle any later SLO they also prove missed (a 10 % looser target in the binding section, say).
    A screened rate that is not proven missed yields the very prediction `predict` makes, so it is
    kept as that. Bounded, least recently used out first, and safe across request threads, as
    `functools.lru_cache` is."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._answers: OrderedDict[tuple[Any, ...], Prediction | PercentileBounds] = OrderedDict()
        self._lock = threading.Lock()

    def _find(self, key: tuple[Any, ...]) -> Prediction | PercentileBounds | None:
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
            return found

    def _keep(self, key: tuple[Any, ...], answer: Prediction | PercentileBounds) -> None:
        with self._lock:
            if isinstance(answer, PercentileBounds) and isinstance(self._answers.get(key), Prediction):
                return  # a whole prediction (another thread's) says more than bounds
            self._answers[key] = answer
            self._answers.move_to_end(key)
            if len(self._answers) > self._maxsize:
                self._answers.popitem(last=False)

    def prediction(
        self, sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, percentile: float
    ) -> Prediction:
        key = (sm, mix, serving, capacity, rate_rps, percentile)
        found = self._find(key)
        if isinstance(found, Prediction):
            return found
        prediction = predict(sm, mix.at_rate(rate_rps), serving, kv_capacity_tokens=capacity, percentile=percentile)
        self._keep(key, prediction)
        return prediction

    def screened(
        self, sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, slo: Slo
    ) -> Prediction | PercentileBounds:
        key = (sm, mix, serving, capacity, rate_rps, slo.percentile)
        found = self._find(key)
        if isinstance(found, Prediction) or (found is not None and found.prove_missed(slo)):
            return found
        answer = screen(sm, mix.at_rate(rate_rps), serving, slo, kv_capacity_tokens=capacity)
        self._keep(key, answer)
        return answer

    def cache_clear(self) -> None:
        with self._lock:
            self._answers.clear()


_PREDICTIONS = _PredictionCache(maxsize=16384)


def _cached_prediction(
    sm: StepModel, mix: Workload, serving: Serving, capacity: int, rate_rps: float, percentile: float
) -> Prediction:
    return _PREDICTIONS.prediction(sm, mix, serving, capacity, rate_rps, percentile)


def _meets(prediction: Prediction, slo: Slo) -> bool:
    if prediction.unstable:
        return False
    return all(_predicted_at(prediction, metric) <= target for metric, target in _slo_targets(slo).items())


def _excess(prediction: Prediction, slo: Slo) -> float:
    """max over the SLO's targets of predicted/target − 1 (≤ 0 exactly when `_meets`; inf when unstable)."""
    if prediction.unstable:
        return math.inf
    return max(_predicted_at(prediction, metric) / target - 1.0 for metric, target in _slo_targets(slo).items())


def _stricter_or_equal(a: Slo, b: Slo) -> bool:
    """Whether meeting `a` implies meeting `b`: same percentile, each target of `b` set in `a` no looser."""
    if a.percentile != b.percentile:
        return False
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        target_b = getattr(b, metric)
        target_a = getattr(a, metric)
        if target_b is not None and (target_a is None or target_a > target_b):
            return False
    return True


@dataclass(slots=True)
class _RateFacts(Bracket):
    """What is known about one option under one SLO: a per-replica rate that meets it, the lowest
    that misses (saturation at first), and why no rate does (when so)."""

    drop: tuple[str, str, float | None] | None = None
    probes: int = 0


def _serving(option: Option, replicas: int = 1) -> Serving:
    return Serving(replicas=replicas, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)


# --- the search -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SinglePlan:
    """One candidate alone covering the rate: its replicas and cost, or why the limits refuse it."""

    option: Option
    mu_rps: float
    saturation_rps: float
    replicas: int
    gpus: int
    cost_usd_per_hour: float
    refused: str | None  # family of the limit it breaks (max_gpus, budget, gpu_inventory), None when within all

    @property
    def feasible(self) -> bool:
        return self.refused is None


def _replicas(rate_rps: float, arrival_rate_rps: float, constraints: PlanConstraints) -> int:
    needed = math.ceil(arrival_rate_rps / rate_rps * (1 - 1e-12))  # ⌈λ/μ⌉, immune to λ/(λ/r) rounding up past r
    # (+1 for N+1), at least min_replicas, and a pinned count (which `_refused_by` refuses to exceed)
    return max(constraints.min_replicas, needed + (1 if constraints.n_plus_one else 0), constraints.pinned_replicas or 1, 1)


def _limits_key(constraints: PlanConstraints) -> tuple[Any, ...]:
    """What of the limits the closed-form bounds depend on, hashable (the inventory is a read-only mapping)."""
    return (
        constraints.max_gpus,
        constraints.budget_usd_per_hour,
        constraints.min_replicas,
        constraints.n_plus_one,
        tuple(sorted(constraints.inventory.items())),
        constraints.pinned_replicas,
    )


def _refused_by(gpu: str, gpus: int, cost: float, constraints: PlanConstraints, replicas: int = 0) -> str | None:
    if constraints.pinned_replicas is not None and replicas > constraints.pinned_replicas:
        return "pin.replicas"
    if constraints.max_gpus is not None and gpus > constraints.max_gpus:
        return "max_gpus"
    if constraints.budget_usd_per_hour is not None and cost > constraints.budget_usd_per_hour * (1 + _COST_TOLERANCE):
        return "budget"
    if gpu in constraints.inventory and gpus > constraints.inventory[gpu]:
        return "gpu_inventory"
    return None


def single_plan(
    option: Option, mu_rps: float, saturation: float, arrival_rate_rps: float, constraints: PlanConstraints
) -> SinglePlan:
    replicas = _replicas(mu_rps, arrival_rate_rps, constraints)
    gpus = replicas * option.group.tp
    cost = option.group.cost_usd_per_hour(replicas)
    return SinglePlan(
        option=option,
        mu_rps=mu_rps,
        saturation_rps=saturation,
        replicas=replicas,
        gpus=gpus,
        cost_usd_per_hour=cost,
        refused=_refused_by(option.group.gpu.slug, gpus, cost, constraints, replicas),
    )


def _beats(cost: float, gpus: float, best_cost: float, best_gpus: float, option_id: str = "", best_id: str | None = None) -> bool:
    """Cheaper, or as cheap (within rounding) with fewer GPUs: the MILP's lexicographic order; among
    plans equal in both, the smaller candidate id (so the answer does not depend on search order)."""
    if cost < best_cost * (1 - _COST_TOLERANCE):
        return True
    if cost > best_cost * (1 + _COST_TOLERANCE):
        return False
    return gpus < best_gpus or (gpus == best_gpus and best_id is not None and option_id < best_id)


def _replica_probe(facts: _RateFacts, arrival_rate_rps: float, low: int, high: int) -> int:
    """The replica count to try next when `low` replicas may be too few and `high` are known to be
    enough: where μ's bracket points (regula falsi on the slacks, planner/rate_search.py), the
    count whose per-replica rate λ/r sits just below that estimate, kept inside [low, high − 1]
    so each probe narrows the range; bisection of the counts while a slack is unknown."""
    if facts.met_slack is None or facts.missed_slack is None or high - low < 2:
        return (low + high) // 2
    rate = facts.next_probe()
    return min(max(math.ceil(arrival_rate_rps / rate * (1 - 1e-12)), low), high - 1)


def _largest_beating(option: Option, constraints: PlanConstraints, best: tuple[float, float, str | None]) -> int:
    """The most replicas n (as the rate needs them, before min_replicas and N+1) whose plan would still
    beat `best`; 0 when none would. One prediction at λ/n then settles whether the option can win."""
    best_cost, best_gpus, best_id = best
    group = option.group
    price, tp = group.price_usd_per_hour, group.tp  # price: a per-replica floor of the cost (exact by the GPU)
    extra = 1 if constraints.n_plus_one else 0
    total = int(best_cost / price) + 2
    while total >= 1 and not _beats(group.cost_usd_per_hour(total), total * tp, best_cost, best_gpus, option.id, best_id):
        total -= 1
    if total < max(constraints.min_replicas, constraints.pinned_replicas or 1, 1):
        return 0
    return max(0, total - extra)


@dataclass(slots=True)
class _Outcome:
    """What one search learned: the best single plan, every plan priced, and what it skipped."""

    best: SinglePlan | None = None
    priced: list[SinglePlan] = field(default_factory=list)
    slo_drops: dict[str, tuple[str, str, float | None]] = field(
        default_factory=dict
    )  # option id → (constraint, reason, predicted)
    limit_drops: dict[str, str] = field(default_factory=dict)  # option id → family
    skipped: dict[str, float] = field(default_factory=dict)  # option id → cost lower bound, left at the evaluation limit
    #: what was still queued when the bound stopped the search (cost bound, GPUs, id, stage); only
    #: the justification reads it, so it is kept as it was rather than indexed by every search
    left_queued: list[tuple[float, int, str, int]] = field(default_factory=list)
    root_finds: int = 0
    exhaustive: bool = True


class _Planner:
    """Caches for one request: exact saturations and μ per (option, SLO)."""

    def __init__(self, options: Sequence[Option], workload: Workload, *, checkpoint: Callable[[], None] | None = None) -> None:
        self.options = list(options)
        self.checkpoint = checkpoint
        self.mix = _mix(workload)
        self.root_finds = 0
        self.predictions = 0
        self.facts: dict[tuple[str, Slo], _RateFacts] = {}
        self._facts_of: dict[str, list[tuple[Slo, _RateFacts]]] = {}  # option id → its facts under every SLO seen
        self.by_id = {o.id: o for o in self.options}
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._id_list: list[str] | None = None
        self._by_group: dict[tuple[str, str, str, int], list[Option]] | None = None
        #: every answer the queueing model gave this request, per (option id, percentile): (rate, answer)
        self._answers: dict[tuple[str, float], list[tuple[float, Prediction | PercentileBounds]]] = {}
        self._simulations: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._passes: dict[str, list[tuple[Slo, float, int]]] = {}
        #: options whose rates the simulator lowered below the queueing model's
        self.simulator_corrected: set[str] = set()
        self._initial: dict[
            tuple[float, tuple[Any, ...]],
            tuple[list[tuple[float, int, str, int]], dict[str, str], dict[str, tuple[str, str, float | None]]],
        ] = {}

    def simulated(
        self, option: Option, workload: Workload, rate_rps: float, replicas: int, slo: Slo, request: PlanningRequest
    ) -> dict[str, Any]:
        """The simulator's verdict on `replicas` of `option` sharing `rate_rps` (one replica at its
        share, as `_verify`), run once per request for each configuration, load and SLO."""
        key = (option.id, rate_rps, replicas, slo)
        report = self._simulations.get(key)
        if report is None:
            report = _verify(option, workload, rate_rps, replicas, slo, request.verify_requests, request.seed)
            self._simulations[key] = report
        return report

    def simulator_agrees(
        self, option: Option, workload: Workload, rate_rps: float, replicas: int, slo: Slo, request: PlanningRequest
    ) -> tuple[bool, dict[str, Any] | None]:
        """Whether the simulator agrees `replicas` of `option` meet `slo` at `rate_rps`, and its report
        when one was run. A pass already seen at a per-replica rate at least as high, under an SLO at
        least as strict (and the same replica count's arrival variability), settles it without
        another run: latency does not fall as the load rises, the assumption the search makes of the
        queueing model too."""
        per_replica = rate_rps / replicas
        cv_key = replicas if workload.arrival_cv != 1.0 else 0
        for passed_slo, passed_rate, passed_cv in self._passes.get(option.id, ()):
            if passed_cv == cv_key and per_replica <= passed_rate and _stricter_or_equal(passed_slo, slo):
                return True, None
        report = self.simulated(option, workload, rate_rps, replicas, slo, request)
        if report["meets_slo"]:
            self._passes.setdefault(option.id, []).append((slo, per_replica, cv_key))
        return bool(report["meets_slo"]), report

    def record_simulated_miss(self, option: Option, slo: Slo, rate_rps: float, misses: Sequence[str] = ()) -> None:
        """The simulator found `slo` missed at per-replica `rate_rps`: no rate from there up is used
        again for this option under this SLO, whatever the queueing model said, so every later search
        (the plan's own, its sensitivity) prices the option with the simulator's correction.

        A miss of TPOT alone is presumed for the group's settings that decode more per step: a batch
        limit as large or larger with a chunk budget as large or larger (or none) puts at least as
        many sequences and prefill tokens beside each decode, so its steps — and TPOT — are no
        shorter at the same rate. Presumed, not simulated: it spares one simulation per such setting
        (a grid of up to 4,096 × 16,384 has dozens per group that tie on cost), at the price of a
        plan that may be one step dearer than the cheapest the simulator would have accepted."""
        self._record_miss(option, slo, rate_rps)
        if tuple(misses) != ("tpot",):
            return
        chunk = option.chunk_tokens or math.inf
        for sibling in self._siblings(option):
            if sibling.batch_limit >= option.batch_limit and (sibling.chunk_tokens or math.inf) >= chunk:
                self._record_miss(sibling, slo, rate_rps)

    def _siblings(self, option: Option) -> list[Option]:
        """The other batch/chunk settings of the option's (GPU, precision, tp) group."""
        if self._by_group is None:
            self._by_group = {}
            for other in self.options:
                self._by_group.setdefault(other.group.key, []).append(other)
        return [o for o in self._by_group.get(option.group.key, ()) if o.id != option.id]

    def _record_miss(self, option: Option, slo: Slo, rate_rps: float) -> None:
        facts = self._facts(option, slo)
        if rate_rps < facts.missed_rps:
            facts.missed_rps, facts.missed_slack = rate_rps, None
        if facts.met_rps >= facts.missed_rps:
            facts.met_rps, facts.met_slack, facts.run, facts.probes = 0.0, None, 0, 0
        self.simulator_corrected.add(option.id)

    def saturation(self, option: Option) -> float:
        return _saturation(option.group.step_model, self.mix, _serving(option), option.group.kv_capacity_tokens)

    def mu(self, option: Option, slo: Slo) -> float | tuple[str, str, float | None]:
        """The queueing model's root-find for μ (mixed fleets need the exact rate)."""
        before = _max_rps.cache_info().hits
        value = _max_rps(option.group.step_model, self.mix, _serving(option), slo, option.group.kv_capacity_tokens)
        if _max_rps.cache_info().hits == before:
            self.root_finds += 1
        if not isinstance(value, tuple):
            facts = self._facts(option, slo)
            if value > facts.met_rps:
                facts.met_rps, facts.met_slack = value, None
        return value

    # -- the replica oracle: what the search needs is the fewest replicas meeting the SLOs at a rate,
    # -- and the queueing model's percentiles never fall as the rate rises (common random numbers),
    # -- so a few predictions at λ/r decide it without finding μ itself.

    def _facts(self, option: Option, slo: Slo) -> _RateFacts:
        key = (option.id, slo)
        facts = self.facts.get(key)
        if facts is None:
            facts = _RateFacts(met_rps=0.0, missed_rps=self.saturation(option))
            # a rate meeting a stricter SLO meets this one: carry what is known
            for other_slo, known in self._facts_of.get(option.id, ()):
                if _stricter_or_equal(other_slo, slo):
                    facts.met_rps = max(facts.met_rps, known.met_rps)
            self.facts[key] = facts
            self._facts_of.setdefault(option.id, []).append((slo, facts))
        return facts

    def meets(self, option: Option, slo: Slo, rate_rps: float, *, exact_slack: bool = False) -> bool:
        """Whether one replica at `rate_rps` meets every target (one prediction unless already known).

        A rate that misses by a clear margin is settled by `queueing.screen` on an eighth of the
        sample; `exact_slack` asks for the whole prediction instead, so the slack recorded is exact
        (narrowing μ interpolates it; a screened miss records only a lower bound on the excess)."""
        facts = self._facts(option, slo)
        if rate_rps <= facts.met_rps:
            return True
        if rate_rps >= facts.missed_rps:
            return False
        if not exact_slack:
            proven = self._proven_missed(option, slo, rate_rps)
            if proven is not None:
                return facts.record(rate_rps, proven)
        sm, serving, capacity = option.group.step_model, _serving(option), option.group.kv_capacity_tokens
        try:
            if exact_slack:
                answer: Prediction | PercentileBounds = _PREDICTIONS.prediction(
                    sm, self.mix, serving, capacity, rate_rps, slo.percentile
                )
            else:
                answer = _PREDICTIONS.screened(sm, self.mix, serving, capacity, rate_rps, slo)
        except ConvergenceError as exc:
            facts.drop = ("queueing", f"the queueing model did not converge on this configuration ({exc.detail})", None)
            facts.missed_rps = 0.0
            return False
        self.predictions += 1
        self._answers.setdefault((option.id, slo.percentile), []).append((rate_rps, answer))
        excess = (
            answer.excess(slo)[0] if isinstance(answer, PercentileBounds) else _excess(answer, slo)
        )  # bounds: a lower bound, > 0
        return facts.record(rate_rps, excess)

    def _proven_missed(self, option: Option, slo: Slo, rate_rps: float) -> float | None:
        """A lower bound (> 0) on the excess over `slo` at `rate_rps` from an answer this request already
        has at a rate no higher, under any SLO of the same percentile; None when none proves a miss.
        Percentiles never fall as the rate rises (common random numbers: the assumption every bound of
        the search rests on), so a target missed at a lower rate is missed here by at least as much. The
        justification's re-plans under a relaxed SLO or at more traffic probe the same options at equal
        or higher per-replica rates than the plan's own search did, and are settled without predicting."""
        proven: float | None = None
        for rate, answer in self._answers.get((option.id, slo.percentile), ()):
            if rate > rate_rps:
                continue
            excess = answer.excess(slo)[0] if isinstance(answer, PercentileBounds) else _excess(answer, slo)
            if excess > 0 and (proven is None or excess > proven):
                proven = excess
        return proven

    def fewest_replicas_bound(self, option: Option, slo: Slo, arrival_rate_rps: float) -> int:
        """No fewer replicas can meet the SLOs: λ/r must stay below the lowest rate known to miss."""
        return math.floor(arrival_rate_rps / self._facts(option, slo).missed_rps * (1 + 1e-12)) + 1

    def refine(
        self, option: Option, slo: Slo, arrival_rate_rps: float, *, beat_at_most: int | None = None
    ) -> int | tuple[str, str, float | None] | None:
        """One step of the lazy search: the fewest replicas when already decided, else one prediction
        and None, so the caller re-queues the option at its raised bound. The prediction is at the
        bound first; then, when a plan to beat is known, at the most replicas that would still beat it
        (`beat_at_most`: a miss there retires the option, however far its bound had to climb);
        else halfway to the known answer, or twice the bound when nothing meets yet."""
        facts = self._facts(option, slo)
        if facts.drop is not None:
            return facts.drop
        low = self.fewest_replicas_bound(option, slo, arrival_rate_rps)
        high = math.ceil(arrival_rate_rps / facts.met_rps * (1 - 1e-12)) if facts.met_rps > 0 else None
        if high is not None and high <= low:
            return high
        decisive = beat_at_most is not None and beat_at_most > low
        if high is None:
            if facts.probes == 0:
                probe = low
            elif decisive:
                probe = beat_at_most
            else:
                probe = 2 * low
            facts.probes += 1
            if arrival_rate_rps / probe < facts.missed_rps * _VANISHING:
                vanishing = self.saturation(option) * 1e-6
                if not self.meets(option, slo, vanishing):
                    if facts.drop is None:
                        facts.drop = self._why_never(option, slo, vanishing)
                    return facts.drop
        else:
            probe = _replica_probe(facts, arrival_rate_rps, low, high)
            if decisive and beat_at_most < probe:
                probe = beat_at_most
        self.meets(option, slo, arrival_rate_rps / probe)
        return facts.drop

    def fewest_replicas(self, option: Option, slo: Slo, arrival_rate_rps: float) -> int | tuple[str, str, float | None]:
        """The fewest replicas r whose per-replica rate λ/r meets every SLO; or why none does."""
        facts = self._facts(option, slo)
        if facts.drop is not None:
            return facts.drop
        low = self.fewest_replicas_bound(option, slo, arrival_rate_rps)
        high = math.ceil(arrival_rate_rps / facts.met_rps * (1 - 1e-12)) if facts.met_rps > 0 else None
        r = low
        while high is None:
            if self.meets(option, slo, arrival_rate_rps / r):
                high = r
                break
            if facts.drop is not None:
                return facts.drop
            low = r + 1
            if arrival_rate_rps / low < facts.missed_rps * _VANISHING and facts.drop is None:
                vanishing = self.saturation(option) * 1e-6
                if not self.meets(option, slo, vanishing):
                    if facts.drop is None:
                        facts.drop = self._why_never(option, slo, vanishing)
                    return facts.drop
            r = 2 * r
        while low < high:
            middle = _replica_probe(facts, arrival_rate_rps, low, high)
            if self.meets(option, slo, arrival_rate_rps / middle):
                high = middle
            else:
                if facts.drop is not None:
                    return facts.drop
                low = middle + 1
        return high

    def _why_never(self, option: Option, slo: Slo, rate_rps: float) -> tuple[str, str, float | None]:
        prediction = _cached_prediction(
            option.group.step_model, self.mix, _serving(option), option.group.kv_capacity_tokens, rate_rps, slo.percentile
        )
        metric = max(_slo_targets(slo), key=lambda m: _predicted_at(prediction, m) / _slo_targets(slo)[m])
        predicted = _predicted_at(prediction, metric)
        target = _slo_targets(slo)[metric]
        return (
            metric,
            f"p{slo.percentile:g} {metric.upper()} is {predicted * MS_PER_S:.4g} ms even at vanishing load, "
            f"above the {target * MS_PER_S:.4g} ms target",
            predicted,
        )

    def max_rate(self, option: Option, slo: Slo, *, curve: bool = False) -> tuple[float, float]:
        """A bracket [met, missed) around μ, narrowed by regula falsi to MU_RELATIVE_TOLERANCE (planner/rate_search.py).

        With `curve` (the plan's own configuration), the ρ curve's fixed points are predicted first:
        the justification draws them anyway (cached), and those inside the bracket narrow it for free."""
        facts = self._facts(option, slo)
        if curve:
            saturation = self.saturation(option)
            for utilisation in CURVE_UTILISATIONS:
                if facts.met_rps > 0 and facts.drop is None:
                    self.meets(option, slo, utilisation * saturation, exact_slack=True)
        while not facts.narrow_enough() and facts.met_rps > 0 and facts.drop is None:
            self.meets(option, slo, facts.next_probe(), exact_slack=True)
        return facts.met_rps, facts.missed_rps

    def search(
        self,
        slo: Slo,
        arrival_rate_rps: float,
        constraints: PlanConstraints,
        *,
        below_usd_per_hour: float = math.inf,
        only: Callable[[Option], bool] | None = None,
    ) -> _Outcome:
        """Branch and bound for the cheapest single configuration (then the fewest GPUs, then the
        smallest candidate id); with `below_usd_per_hour`, only plans strictly cheaper than that count;
        with `only`, only the options it accepts (one GPU type or precision of the alternatives)."""
        out = _Outcome()
        by_id = self.by_id
        key = (arrival_rate_rps, _limits_key(constraints))
        if key not in self._initial:  # the closed-form bounds depend on the rate and limits, not the SLO
            first = _Outcome()
            heap0 = self._initial_heap(arrival_rate_rps, constraints, first)
            self._initial[key] = (heap0, first.limit_drops, first.slo_drops)
        heap0, limit_drops, slo_drops = self._initial[key]
        if only is None:
            heap = list(heap0)
        else:
            heap = [entry for entry in heap0 if only(by_id[entry[2]])]
            heapq.heapify(heap)
        out.limit_drops.update(limit_drops)
        out.slo_drops.update(slo_drops)
        best_cost, best_gpus = below_usd_per_hour, (0 if math.isfinite(below_usd_per_hour) else math.inf)
        best_id: str | None = None
        while heap:
            if self.checkpoint is not None:
                self.checkpoint()
            cost_lb, gpus_lb, option_id, stage = heapq.heappop(heap)
            if not _beats(cost_lb, gpus_lb, best_cost, best_gpus, option_id, best_id):
                heap.append((cost_lb, gpus_lb, option_id, stage))
                out.left_queued = heap
                break
            option = by_id[option_id]
            if stage == 0:
                self._push(
                    heap,
                    option,
                    min(self.saturation(option), self._facts(option, slo).missed_rps),
                    1,
                    arrival_rate_rps,
                    constraints,
                    out,
                )
                continue
            if out.root_finds >= MAX_EVALUATIONS:
                out.exhaustive = False
                out.skipped[option_id] = cost_lb
                continue
            out.root_finds += 1
            beat_at_most = (
                _largest_beating(option, constraints, (best_cost, best_gpus, best_id)) if math.isfinite(best_cost) else None
            )
            value = self.refine(option, slo, arrival_rate_rps, beat_at_most=beat_at_most)
            if isinstance(value, tuple):
                out.slo_drops[option_id] = value
                continue
            if value is None:  # one prediction raised its bound: back into the queue at the new bound
                self._push(heap, option, self._facts(option, slo).missed_rps, 2, arrival_rate_rps, constraints, out)
                continue
            plan = single_plan(option, arrival_rate_rps / value, self.saturation(option), arrival_rate_rps, constraints)
            out.priced.append(plan)
            if plan.feasible and _beats(plan.cost_usd_per_hour, plan.gpus, best_cost, best_gpus, option.id, best_id):
                out.best = plan
                best_cost, best_gpus, best_id = plan.cost_usd_per_hour, plan.gpus, option.id
        return out

    def _ids(self) -> list[str]:
        """Each option's id in `self.options` order (an id is built from its parts on each access)."""
        if self._id_list is None:
            self._id_list = [o.id for o in self.options]
        return self._id_list

    def _option_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per option (in `self.options` order): closed-form saturation bound, price, tp, usable; built once per request."""
        if self._arrays is None:
            options = self.options
            bound = np.fromiter((o.saturation_bound_rps for o in options), dtype=float, count=len(options))
            price = np.fromiter((o.group.price_usd_per_hour for o in options), dtype=float, count=len(options))
            tp = np.fromiter((o.group.tp for o in options), dtype=np.int64, count=len(options))
            self._arrays = (bound, price, tp, (bound > 0) & np.isfinite(bound))
        return self._arrays

    def _initial_heap(
        self, arrival_rate_rps: float, constraints: PlanConstraints, out: _Outcome
    ) -> list[tuple[float, int, str, int]]:
        """Every option at its closed-form bound, as `_push` at stage 0 would queue them one by one,
        computed for all options at once (a plan has ~2,000) and heapified."""
        options = self.options
        bound, price, tp, usable = self._option_arrays()
        for index in np.flatnonzero(~usable).tolist():
            out.slo_drops[options[index].id] = ("kv_cache", "no sustainable rate: the replica cannot run one request", None)
        needed = np.ceil(arrival_rate_rps / np.where(usable, bound, 1.0) * (1 - 1e-12))  # ⌈λ/μ⌉, as _replicas
        replicas = np.maximum(np.maximum(needed + (1 if constraints.n_plus_one else 0), constraints.min_replicas), 1).astype(
            np.int64
        )
        pinned = constraints.pinned_replicas
        over_pin = replicas > pinned if pinned is not None else np.zeros(len(options), dtype=bool)
        if pinned is not None:
            replicas = np.maximum(replicas, pinned)
        gpus, cost = replicas * tp, replicas * price  # price: per replica, a floor of an instance-mode cost
        # the family _refused_by names first wins: the replica pin, max_gpus, then budget, then the inventory
        families = ("", "gpu_inventory", "budget", "max_gpus", "pin.replicas")
        refused = np.zeros(len(options), dtype=np.int8)
        if constraints.inventory:
            stock = np.fromiter(
                (constraints.inventory.get(o.group.gpu.slug, math.inf) for o in options), dtype=float, count=len(options)
            )
            refused[gpus > stock] = 1
        if constraints.budget_usd_per_hour is not None:
            refused[cost > constraints.budget_usd_per_hour * (1 + _COST_TOLERANCE)] = 2
        if constraints.max_gpus is not None:
            refused[gpus > constraints.max_gpus] = 3
        refused[over_pin] = 4
        for index in np.flatnonzero(usable & (refused > 0)).tolist():
            out.limit_drops[self._ids()[index]] = families[int(refused[index])]
        keep = np.flatnonzero(usable & (refused == 0)).tolist()
        costs, counts = cost.tolist(), gpus.tolist()
        ids = self._ids()
        heap = [(costs[i], counts[i], ids[i], 0) for i in keep]
        heapq.heapify(heap)
        return heap

    @staticmethod
    def _push(
        heap: list[tuple[float, int, str, int]],
        option: Option,
        rate_bound: float,
        stage: int,
        arrival_rate_rps: float,
        constraints: PlanConstraints,
        out: _Outcome,
    ) -> None:
        if not (rate_bound > 0 and math.isfinite(rate_bound)):
            out.slo_drops[option.id] = ("kv_cache", "no sustainable rate: the replica cannot run one request", None)
            return
        replicas = _replicas(rate_bound, arrival_rate_rps, constraints)
        if stage == 2:  # λ/r must stay strictly below a rate known to miss
            strict = math.floor(arrival_rate_rps / rate_bound * (1 + 1e-12)) + 1
            replicas = max(constraints.min_replicas, strict + (1 if constraints.n_plus_one else 0), 1)
            natural = replicas
            replicas = max(replicas, constraints.pinned_replicas or 1)
        else:
            natural = _replicas(rate_bound, arrival_rate_rps, replace(constraints, pin=None))
        gpus = replicas * option.group.tp
        cost = option.group.cost_usd_per_hour(replicas)
        refused = _refused_by(option.group.gpu.slug, gpus, cost, constraints, natural)
        if refused is not None:
            out.limit_drops[option.id] = refused
            return
        heapq.heappush(heap, (cost, gpus, option.id, stage))

    def best_per_group(
        self, slo: Slo, *, ceiling_usd_per_hour: float = math.inf, arrival_rate_rps: float = 0.0
    ) -> tuple[dict[tuple[str, str, str, int], tuple[Option, float]], dict[str, tuple[str, str, float | None]]]:
        """For a mixed fleet: each group's option with the largest μ (equal price and GPUs, so the
        others are dominated), searched in order of the saturation bound; an option that misses at
        the largest μ found so far in its group is dominated and costs no root-find.

        Only groups that could sit in a fleet costing at most `ceiling_usd_per_hour` are searched.
        With e the lowest cost per unit of rate of any option (≥ min p_c / saturation bound_c), a
        fleet using r ≥ 1 replicas of group g at price p_g and rate μ_g ≤ S_g (its largest bound)
        costs at least r·p_g + (λ − r·μ_g)⁺·e ≥ p_g + (λ − S_g)⁺·e, since p_g/μ_g ≥ e (the minimum is
        at r = 1) and the rest of the rate costs at least e per unit; N+1, min_replicas and the
        limits only add to it."""
        efficiency = min((o.group.price_usd_per_hour / o.saturation_bound_rps for o in self.options), default=0.0)
        largest: dict[tuple[str, str, str, int], float] = {}
        for option in self.options:
            largest[option.group.key] = max(largest.get(option.group.key, 0.0), option.saturation_bound_rps)
        groups: dict[tuple[str, str, str, int], list[Option]] = {}
        for option in self.options:
            price = option.group.price_usd_per_hour
            floor = price + max(0.0, arrival_rate_rps - largest[option.group.key]) * efficiency  # p_g + (λ − S_g)⁺·e
            if floor <= ceiling_usd_per_hour * (1 + _COST_TOLERANCE):
                groups.setdefault(option.group.key, []).append(option)
        best: dict[tuple[str, str, str, int], tuple[Option, float]] = {}
        drops: dict[str, tuple[str, str, float | None]] = {}
        for key, options in groups.items():
            for option in sorted(options, key=lambda o: -o.saturation_bound_rps):
                if key in best and option.saturation_bound_rps <= best[key][1]:
                    break
                if key in best and self.saturation(option) <= best[key][1]:
                    continue
                facts = self._facts(option, slo)
                if key in best and not self.meets(option, slo, best[key][1]):
                    continue  # misses at the group's best μ so far: its own μ is lower, one prediction settles it
                if facts.met_rps <= 0 and not self.meets(option, slo, self.saturation(option) * 1e-6):
                    if facts.drop is None:
                        facts.drop = self._why_never(option, slo, self.saturation(option) * 1e-6)
                if facts.drop is not None:
                    drops[option.id] = facts.drop
                    continue
                if facts.met_rps <= 0:
                    facts.met_rps = self.saturation(option) * 1e-6
                value = self.max_rate(option, slo)[0]  # μ within 1 %, from below: every rate used is one that meets
                if key not in best or value > best[key][1]:
                    best[key] = (option, value)
        return best, drops


# --- infeasibility ----------------------------------------------------------------------------------


def _describe(gpu: str, weights: str, kv: str, tp: int | None) -> str:
    precision = weights if weights == kv else f"{weights} weights, {kv} KV"
    return f"{gpu}, {precision}" + ("" if tp is None else f", tp {tp}")


def _infeasible_from_drops(
    drops: Sequence[Drop], slo: Slo, slo_predicted: Sequence[tuple[str, float, str]]
) -> InfeasiblePlanError:
    """No candidate survives: name the constraint and the smallest relaxation that would admit one."""
    latency = [
        (d.constraint, d.bound_s, _describe(d.gpu, d.weights_precision, d.kv_precision, d.tp))
        for d in drops
        if d.constraint in ("ttft", "tpot", "e2e") and d.bound_s is not None
    ]
    latency += list(slo_predicted)
    if latency:
        by_metric: dict[str, tuple[float, str]] = {}
        for metric, bound, where in latency:
            if metric not in by_metric or bound < by_metric[metric][0]:
                by_metric[metric] = (bound, where)
        metric, (bound, where) = min(by_metric.items(), key=lambda kv: kv[1][0] / getattr(slo, f"{kv[0]}_s"))
        target = getattr(slo, f"{metric}_s")
        unit, scale = ("s", 1.0) if metric == "e2e" else ("ms", MS_PER_S)
        return InfeasiblePlanError(
            f"{metric}_{unit} {target * scale:.4g} is below the fastest {metric.upper()} any allowed configuration reaches "
            f"even unloaded: {bound * scale:.4g} {unit} on {where}",
            constraint=metric,
            target=target * scale,
            smallest_feasible=bound * scale,
            unit=unit,
            configuration=where,
            alternatives_dropped=len(drops),
        )
    memory = [d for d in drops if d.constraint == "memory"]
    if memory:
        best = max(memory, key=lambda d: (d.available_bytes or 0) / (d.needed_bytes or 1))
        return InfeasiblePlanError(
            f"no allowed configuration can hold the model; the closest is {_describe(best.gpu, best.weights_precision, best.kv_precision, best.tp)}: "
            f"{best.reason}. Allow GPUs with more memory, a lower precision or a higher tp",
            constraint="memory",
            needed_gb=(best.needed_bytes or 0) / 1e9,
            available_gb=(best.available_bytes or 0) / 1e9,
            configuration=_describe(best.gpu, best.weights_precision, best.kv_precision, best.tp),
        )
    first = drops[0] if drops else None
    return InfeasiblePlanError(
        "no allowed configuration can serve this model: "
        + (
            "; ".join(sorted({f"{_describe(d.gpu, d.weights_precision, d.kv_precision, d.tp)}: {d.reason}" for d in drops})[:6])
            or "nothing to plan with"
        ),
        constraint=first.constraint if first else "candidates",
    )


# --- explanation helpers ----------------------------------------------------------------------------


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * MS_PER_S


def _slo_targets(slo: Slo) -> dict[str, float]:
    return {m: t for m, t in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)) if t is not None}


def _predicted_at(p: Prediction, metric: str) -> float:
    latency = getattr(p, metric)
    return 0.0 if latency is None else latency.at_percentile_s


def _per_replica_cv(arrival_cv: float, replicas: int) -> float:
    """A random split of a renewal stream into r parts: c² = c²/r + (r − 1)/r (thinning; Poisson stays Poisson)."""
    return math.sqrt(arrival_cv**2 / replicas + (replicas - 1) / replicas)


def _prediction(
    option: Option, workload: Workload, rate_rps: float, replicas: int, percentile: float, *, curve: bool
) -> Prediction:
    serving = _serving(option, replicas)
    return predict(
        option.group.step_model,
        workload.at_rate(rate_rps),
        serving,
        kv_capacity_tokens=option.group.kv_capacity_tokens,
        percentile=percentile,
        curve=curve,
    )


@lru_cache(maxsize=512)
def _simulated_share(
    sm: StepModel, per_replica: Workload, serving: Serving, capacity: int, requests: int, seed: int
) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """One replica simulated at its share of the traffic: the result and its measured (post warm-up)
    TTFT, TPOT and E2E samples. A pure function of frozen inputs, shared by every request in the
    process (an impossible request's advice re-plans the same configurations at the same loads)."""
    result = simulate(sm, per_replica, serving, kv_capacity_tokens=capacity, requests=requests, seed=seed)
    detail = result.detail
    warm = int(math.floor(0.1 * result.requests))
    tpot = detail.tpot_s[warm:]
    samples = (detail.ttft_s[warm:].copy(), tpot[~np.isnan(tpot)].copy(), detail.e2e_s[warm:].copy())
    for sample in samples:
        sample.setflags(write=False)
    return (result, *samples)


def _verify(
    option: Option, workload: Workload, rate_rps: float, replicas: int, slo: Slo, requests: int, seed: int
) -> dict[str, Any]:
    """Simulate one replica at its share of the traffic (random split) and compare with the SLOs."""
    per_replica = Workload(
        arrival_rate_rps=rate_rps / replicas,
        prompt_tokens=workload.prompt_tokens,
        output_tokens=workload.output_tokens,
        arrival_cv=_per_replica_cv(workload.arrival_cv, replicas),
    )
    result, ttft, tpot, e2e = _simulated_share(
        option.group.step_model, per_replica, _serving(option), option.group.kv_capacity_tokens, requests, seed
    )
    values = {
        "ttft": float(np.percentile(ttft, slo.percentile)),
        "tpot": float(np.percentile(tpot, slo.percentile)) if tpot.size else 0.0,
        "e2e": float(np.percentile(e2e, slo.percentile)),
    }
    misses = [m for m, target in _slo_targets(slo).items() if values[m] > target]
    if not result.stable:
        misses.append("stability")
    return {
        "simulated": {
            "percentile": slo.percentile,
            "ttft_s": {"p50": result.ttft_s.p50, "p99": result.ttft_s.p99, "at_percentile": values["ttft"]},
            "tpot_s": {"p50": result.tpot_s.p50, "p99": result.tpot_s.p99, "at_percentile": values["tpot"]},
            "e2e_s": {"p50": result.e2e_s.p50, "p99": result.e2e_s.p99, "at_percentile": values["e2e"]},
            "p99_ci_s": {
                "ttft": [result.ttft_s.p99_ci_low, result.ttft_s.p99_ci_high],
                "tpot": [result.tpot_s.p99_ci_low, result.tpot_s.p99_ci_high],
                "e2e": [result.e2e_s.p99_ci_low, result.e2e_s.p99_ci_high],
            },
            "mean_occupancy": result.mean_occupancy,
            "stable": result.stable,
        },
        "misses": misses,
        "meets_slo": not misses,
        "requests_simulated": result.requests,
        "replicas_simulated": 1,
        "per_replica_rate_rps": per_replica.arrival_rate_rps,
        "wall_time_s": result.wall_time_s,
    }


def _row(option: Option, replicas: int, mu: float, saturation: float, offered: float) -> FleetRow:
    group = option.group
    return FleetRow(
        gpu=option.group.gpu.slug,
        tp=option.group.tp,
        replicas=replicas,
        gpus=replicas * option.group.tp,
        weights_precision=option.group.precision.weights.slug,
        kv_precision=option.group.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        max_rps_at_slo=mu,
        saturation_rps=saturation,
        offered_rps=offered,
        target_rho=offered / replicas / saturation,  # per-replica rate / per-replica saturation
        cost_usd_per_hour=group.cost_usd_per_hour(replicas),
        instances=instance_uses(replicas, group.offers) if group.offers else (),
    )


def _configuration(option: Option) -> Configuration:
    return Configuration(**_config(option))


def _config(option: Option) -> dict[str, Any]:
    g = option.group
    return {
        "gpu": g.gpu.slug,
        "tp": g.tp,
        "weights_precision": g.precision.weights.slug,
        "kv_precision": g.precision.kv_cache.slug,
        "batch_limit": option.batch_limit,
        "chunk_tokens": option.chunk_tokens,
    }


# --- the plan ----------------------------------------------------------------------------------------


def plan_capacity(request: PlanningRequest, inputs: PlanningInputs) -> PlanResult:
    """The cheapest verified plan for `request` on `inputs`, with its justification.

    Raises InfeasiblePlanError (the culprit constraints and, with `request.advise`, the smallest
    relaxations that were re-planned and found to work, planner/advice.py) when no plan exists,
    PlannerInputError on malformed input, SolverError when the MILP gives no answer.
    """
    try:
        return _plan(request, inputs)
    except InfeasiblePlanError as error:
        if not request.advise:
            raise
        from planner.advice import advised

        raise advised(error, request, inputs, _plan) from None


def _plan(request: PlanningRequest, inputs: PlanningInputs) -> PlanResult:
    started = time.perf_counter()
    request, inputs = apply_pins(request, inputs)
    workload, slo, constraints = request.workload, request.slo, request.constraints
    lam = workload.arrival_rate_rps
    groups, drops = enumerate_groups(
        model=inputs.model,
        gpus=inputs.gpus,
        precisions=inputs.precisions,
        workload=workload,
        slo=slo,
        tp_degrees=request.tp_degrees,
        min_confidence=constraints.min_confidence,
    )
    if constraints.unit == "instance":
        if not inputs.instance_types:
            raise PlannerInputError(
                "a plan in whole instances needs the provider's instance types; none were given", constraint="unit"
            )
        groups, unpacked = packed_groups(groups, inputs.instance_types)
        drops = [*drops, *unpacked]
    options = enumerate_all_options(groups, workload, batch_limits=request.batch_limits, chunk_budgets=request.chunk_budgets)
    if not options:
        raise _infeasible_from_drops(drops, slo, ())
    planner = _Planner(options, workload, checkpoint=request.checkpoint)
    by_id = {o.id: o for o in options}

    verified: _Verified | None = None
    if constraints.mixed_fleet:
        outcome = planner.search(slo, lam, constraints)
        # A mixed fleet costs at most the best single configuration, so a group whose single
        # replica already costs more can hold no row of it: only the others are searched.
        ceiling = outcome.best.cost_usd_per_hour if outcome.best is not None else math.inf
        best_groups, mixed_drops = planner.best_per_group(slo, ceiling_usd_per_hour=ceiling, arrival_rate_rps=lam)
        pool = [(opt, mu) for opt, mu in best_groups.values()]
        slo_failures = mixed_drops
    else:
        # The search's winner is simulated before anything is built on it; a miss moves it (more
        # replicas or another configuration) and the search runs again, so the plan, its MILP and
        # every section below describe the configuration the simulator agreed with.
        verified = _verified_search(planner, workload, slo, lam, constraints, request)
        outcome = verified.outcome
        if verified.exhausted:
            raise InfeasiblePlanError(
                f"the simulator finds the SLOs missed at every plan the search proposed ({len(verified.adjustments)} "
                "tried); the SLOs are too close to what these configurations reach at this load",
                constraint="verification",
                adjustments=[as_dict(a) for a in verified.adjustments],
            )
        # μ for the MILP: the largest per-replica rate verified to meet the SLOs — within 1 % of μ for
        # the cheapest candidate, λ/r for the others (enough to decide their replica counts; a
        # larger μ could only make the winner win by more).
        best = outcome.best
        refined = planner.max_rate(best.option, slo, curve=True)[0] if best is not None else None
        pool = [
            (p.option, refined if refined is not None and p.option is best.option else p.mu_rps)
            for p in outcome.priced
            if best is None or p.option is best.option or p.cost_usd_per_hour > best.cost_usd_per_hour
        ]
        slo_failures = outcome.slo_drops
    if not pool:
        if outcome.limit_drops and not slo_failures:
            # every candidate breaks a limit at the replicas it needs: the search has proved it, so no
            # second estimate of μ is consulted (one that disagreed could find a "plan" the search refused)
            families = sorted(set(outcome.limit_drops.values()))
            raise InfeasiblePlanError(
                f"every allowed configuration breaks {' or '.join(families)} at the replicas the SLOs need",
                constraint=families[0],
                families=families,
            )
        predicted = [
            (c, pred, _describe(*by_id[i].group.key))
            for i, (c, _, pred) in slo_failures.items()
            if pred is not None and c in ("ttft", "tpot", "e2e")
        ]
        raise _infeasible_from_drops(drops, slo, predicted)

    candidates = [_candidate(opt, mu, planner) for opt, mu in pool]
    solve_started = time.perf_counter()
    solution = solve_plan(candidates, lam, constraints, time_limit_s=request.solver_time_limit_s)
    solve_ms = (time.perf_counter() - solve_started) * MS_PER_S

    rows = [
        _row(by_id[r.candidate.id], r.replicas, r.candidate.max_rps_at_slo, r.candidate.saturation_rps, r.offered_rps)
        for r in solution.rows
    ]
    adjustments: list[Adjustment] = []
    verification: dict[str, Any] | None = None
    if verified is not None:
        adjustments = verified.adjustments
        if verified.report is not None:
            main_row = max(rows, key=lambda r: r.offered_rps)
            report = planner.simulated(
                by_id[candidate_id_of(main_row)], workload, main_row.offered_rps, main_row.replicas, slo, request
            )
            verification = dict(report)
            verification["rows"] = [{"gpu": r.gpu, "replicas": r.replicas, "meets_slo": report["meets_slo"]} for r in rows]
    elif request.verify:
        fleet_verified: tuple[Any, ...] | None
        try:
            fleet_verified = _verified_fleet(planner, by_id, pool, workload, slo, constraints, request)
        except InfeasiblePlanError:
            fleet_verified = None  # no fleet the simulator accepts within the rounds: a single configuration may still serve
        if fleet_verified is not None:
            solution, candidates, rows, verification, adjustments = fleet_verified
            fleet_cost = sum(r.cost_usd_per_hour for r in rows)
        else:
            fleet_cost, adjustments = math.inf, []
        # Verification may have made the mixed fleet dearer than a single configuration the simulator
        # also accepts: the cheaper verified plan is the answer, whatever its shape.
        single = _verified_search(planner, workload, slo, lam, constraints, request, below_usd_per_hour=fleet_cost)
        if fleet_verified is None and (single.best is None or single.report is None):
            raise InfeasiblePlanError(
                "the simulator finds the SLOs missed at every mixed fleet and single configuration the search proposed; "
                "the SLOs are too close to what these configurations reach at this load",
                constraint="verification",
                adjustments=[as_dict(a) for a in single.adjustments],
            )
        if single.best is not None and single.report is not None:
            best = single.best
            mu = planner.max_rate(best.option, slo)[0]
            rows = [_row(best.option, best.replicas, max(mu, lam / best.replicas), planner.saturation(best.option), lam)]
            adjustments = [
                *adjustments,
                *single.adjustments,
                SingleConfiguration(
                    to=_configuration(best.option),
                    replicas=best.replicas,
                    because="after verification one configuration alone is cheaper than the mixed fleet",
                ),
            ]
            verification = dict(single.report)
            verification["rows"] = [{"gpu": rows[0].gpu, "replicas": rows[0].replicas, "meets_slo": True}]
            outcome = single.outcome
            if best.option.id not in {c.id for c in candidates}:
                candidates = [*candidates, _candidate(best.option, rows[0].max_rps_at_slo, planner)]
        # the verified rows are the plan: the MILP's slacks are taken again at their replica counts
        solution = replace(solution, constraints=_row_slacks(rows, candidates, lam, constraints))

    cost = sum(r.cost_usd_per_hour for r in rows)
    main = max(rows, key=lambda r: r.offered_rps)
    main_option = by_id[candidate_id_of(main)]
    if workload.arrival_cv == 1.0 and len(rows) == 1:
        # a random split of Poisson arrivals is Poisson: one replica at λ/r, the very rate the search probed
        prediction = _cached_prediction(
            main_option.group.step_model,
            planner.mix,
            _serving(main_option),
            main_option.group.kv_capacity_tokens,
            lam / main.replicas,
            slo.percentile,
        )
    else:
        prediction = _prediction(main_option, workload, main.offered_rps, main.replicas, slo.percentile, curve=False)
    mu_met, mu_missed = planner.max_rate(main_option, slo, curve=True)
    if len(rows) == 1:
        rows = [replace(main, max_rps_at_slo=max(main.max_rps_at_slo, mu_met))]
        main = rows[0]
    curve = _rho_curve(planner, main_option, slo, main.offered_rps / main.replicas, mu_met)
    saturation_total = sum(r.replicas * r.saturation_rps for r in rows)
    output_tokens_per_s = lam * workload.output_tokens.mean
    result_rows = tuple(rows)
    context = _Context(planner=planner, request=request, inputs=inputs, by_id=by_id, drops=drops, cost=cost)

    record = None if verification is None else _verification_record(verification, adjustments, request.seed)
    if not request.explain:
        return PlanResult(
            rows=tuple(rows),
            replicas=sum(r.replicas for r in rows),
            gpus_total=sum(r.gpus for r in rows),
            target_rho=lam / saturation_total,
            cost_usd_per_hour=cost,
            cost_usd_per_month=cost * HOURS_PER_MONTH,
            cost_usd_per_million_output_tokens=cost / (output_tokens_per_s * SECONDS_PER_HOUR) * 1e6,
            predicted=None,
            justification=None,
            verification=record,
            provenance=None,
        )
    justification = Justification(
        step_model=_step_model_section(main_option.group.step_model),
        memory=_memory_section(main_option, inputs.model, workload, prediction),
        roofline=_roofline_section(main_option, workload, prediction),
        queueing=_queueing_section(prediction, slo, curve),
        binding=_binding_section(context, solution, main_option, main, prediction, mu_met),
        alternatives=_alternatives_section(context, outcome, main),
        sensitivity=_sensitivity_section(context, rows, (mu_met, mu_missed)),
        candidates=CandidatesSection(
            enumerated=len(options),
            groups=len(groups),
            dropped_before_queueing=len(drops),
            queueing_predictions=planner.predictions,
            queueing_root_finds=planner.root_finds,
            in_milp=len(candidates),
            search_exhaustive=outcome.exhaustive,
            simulations=len(planner._simulations),
        ),
    )
    return PlanResult(
        rows=result_rows,
        replicas=sum(r.replicas for r in rows),
        gpus_total=sum(r.gpus for r in rows),
        target_rho=lam / saturation_total,  # λ / Σ replicas · saturation
        cost_usd_per_hour=cost,
        cost_usd_per_month=cost * HOURS_PER_MONTH,
        cost_usd_per_million_output_tokens=cost / (output_tokens_per_s * SECONDS_PER_HOUR) * 1e6,  # $/h ÷ tokens/h × 1e6
        predicted=_predicted_section(prediction, slo, main, output_tokens_per_s, record),
        justification=justification,
        verification=record,
        provenance=Provenance(
            catalog_version=inputs.catalog_version,
            solver=solution.solver.name,
            status=solution.solver.status,
            mip_gap=solution.solver.mip_gap,
            solve_ms=solve_ms,
            plan_ms=(time.perf_counter() - started) * MS_PER_S,
            efficiency_profile=inputs.efficiency_profile,
            efficiencies={g.slug: g.efficiency for g in inputs.gpus if g.slug in {r.gpu for r in rows}},
            created_at=datetime.now(UTC).isoformat(),
        ),
    )


def _percentiles(block: Mapping[str, Any]) -> Percentiles:
    return Percentiles(p50=block["p50"], p99=block["p99"], at_percentile=block["at_percentile"])


def _verification_record(report: Mapping[str, Any], adjustments: Sequence[Adjustment], seed: int) -> Verification:
    """The simulator's report on the plan (as `_verify` writes it, with the plan's rows) as a record."""
    simulated = report["simulated"]
    ci = simulated["p99_ci_s"]
    return Verification(
        simulated=SimulatedFigures(
            percentile=simulated["percentile"],
            ttft_s=_percentiles(simulated["ttft_s"]),
            tpot_s=_percentiles(simulated["tpot_s"]),
            e2e_s=_percentiles(simulated["e2e_s"]),
            p99_ci_s=P99Intervals(ttft=tuple(ci["ttft"]), tpot=tuple(ci["tpot"]), e2e=tuple(ci["e2e"])),  # type: ignore[arg-type]
            mean_occupancy=simulated["mean_occupancy"],
            stable=simulated["stable"],
        ),
        misses=tuple(report["misses"]),
        meets_slo=report["meets_slo"],
        requests_simulated=report["requests_simulated"],
        replicas_simulated=report["replicas_simulated"],
        per_replica_rate_rps=report["per_replica_rate_rps"],
        wall_time_s=report["wall_time_s"],
        rows=tuple(VerificationRow(**row) for row in report["rows"]),
        adjustments=tuple(adjustments),
        seed=seed,
    )


#: Rounds of search → simulate → correct before a plan is given up as unverifiable; each round either
#: verifies the search's cheapest plan or moves it (more replicas, or another configuration); a round is
#: one simulation, paid only while the simulator keeps refusing. Measured on the grid to 4,096 / 16,384:
#: bench/plan_latency.py's 70B request at TPOT 20 ms needs 9 rounds (eight H200 tp 2 settings refuted
#: one by one before H100 tp 4 verifies at $19.04/h), so 8 refused a request the coarser grid planned.
#: More is not free of side effects: at 16, the advice's verified bisection (planner/advice.py) met a
#: TPOT bracket where a plan exhausting its rounds at one target verified at a lower one (the search
#: path depends on what earlier trials refuted), and overstated a relaxation by 5.3 %. 12 holds both.
MAX_VERIFY_ROUNDS = 12


@dataclass(slots=True)
class _Verified:
    """The cheapest single plan the simulator agreed with (None when there is none), the search that
    found it, the moves verification made on the way, and the simulator's report on it."""

    best: SinglePlan | None
    outcome: _Outcome
    adjustments: list[Adjustment]
    report: dict[str, Any] | None
    exhausted: bool = False


def _verified_search(
    planner: _Planner,
    workload: Workload,
    slo: Slo,
    arrival_rate_rps: float,
    constraints: PlanConstraints,
    request: PlanningRequest,
    *,
    below_usd_per_hour: float = math.inf,
    infer: bool = False,
) -> _Verified:
    """Branch and bound with the simulator in the loop: the search's cheapest plan is simulated at
    its load; a miss is recorded against that option (its rates from there up are never used again
    under this SLO) and the search runs again. Every other option's cost is a lower bound that the
    simulator can only raise, so the first winner the simulator agrees with is the cheapest plan
    that survives verification — no option left could undercut it. Without `request.verify` this is
    the plain search. With `infer`, a pass already simulated at a higher load under a stricter SLO
    stands for this one (`_Planner.simulator_agrees`): the justification's re-plans use it; the plan
    itself is always simulated at its own load."""
    adjustments: list[Adjustment] = []
    outcome = planner.search(slo, arrival_rate_rps, constraints, below_usd_per_hour=below_usd_per_hour)
    for _ in range(MAX_VERIFY_ROUNDS):
        best = outcome.best
        if best is None or not request.verify:
            return _Verified(best=best, outcome=outcome, adjustments=adjustments, report=None)
        if infer:
            agrees, report = planner.simulator_agrees(best.option, workload, arrival_rate_rps, best.replicas, slo, request)
        else:
            report = planner.simulated(best.option, workload, arrival_rate_rps, best.replicas, slo, request)
            agrees = bool(report["meets_slo"])
            if agrees:
                planner.simulator_agrees(
                    best.option, workload, arrival_rate_rps, best.replicas, slo, request
                )  # remember the pass
        if agrees:
            return _Verified(best=best, outcome=outcome, adjustments=adjustments, report=report)
        misses = ", ".join(report["misses"]) if report is not None else "an SLO"
        planner.record_simulated_miss(
            best.option, slo, arrival_rate_rps / best.replicas, tuple(report["misses"]) if report is not None else ()
        )
        outcome = planner.search(slo, arrival_rate_rps, constraints, below_usd_per_hour=below_usd_per_hour)
        moved = outcome.best
        because = (
            f"simulated p{slo.percentile:g} missed ({misses}) at {best.replicas} "
            f"replica(s), {arrival_rate_rps / best.replicas:.4g} req/s each"
        )
        if moved is not None and moved.option.id == best.option.id:
            adjustments.append(
                AddReplica(
                    configuration=_configuration(best.option),
                    from_replicas=best.replicas,
                    to_replicas=moved.replicas,
                    because=because,
                )
            )
        else:
            adjustments.append(
                NextCandidate(
                    from_=_configuration(best.option), to=None if moved is None else _configuration(moved.option), because=because
                )
            )
    if outcome.best is None:
        return _Verified(best=None, outcome=outcome, adjustments=adjustments, report=None)
    return _Verified(best=None, outcome=outcome, adjustments=adjustments, report=None, exhausted=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    """What the justification sections share: the request's caches, its inputs and the final cost."""

    planner: _Planner
    request: PlanningRequest
    inputs: PlanningInputs
    by_id: Mapping[str, Option]
    drops: Sequence[Drop]
    cost: float


def _row_slacks(
    rows: Sequence[FleetRow], candidates: Sequence[Candidate], arrival_rate_rps: float, constraints: PlanConstraints
) -> tuple[Any, ...]:
    """The plan's constraint slacks at the replica counts of `rows` (after verification moved them)."""
    from planner.optimizer import plan_constraint_slacks

    by_id = {c.id: c for c in candidates}
    chosen = [replace(by_id[candidate_id_of(r)], max_rps_at_slo=r.max_rps_at_slo) for r in rows if candidate_id_of(r) in by_id]
    replicas = {candidate_id_of(r): r.replicas for r in rows}
    others = [c for c in candidates if c.id not in replicas]
    return plan_constraint_slacks(chosen + others, arrival_rate_rps, constraints, replicas)


def _predicted_section(
    prediction: Prediction, slo: Slo, main: FleetRow, output_tokens_per_s: float, verification: Verification | None
) -> Predicted:
    """The analytic percentiles at the plan's load and, per metric, the figure of record: the
    simulator's where the analytic model marks the point outside its validated region and the
    simulator ran, the queueing model's otherwise."""

    def analytic(metric: str) -> Percentiles:
        latency = getattr(prediction, metric)
        return Percentiles(
            p50=latency.p50_s if latency else None,
            p99=latency.p99_s if latency else None,
            at_percentile=_predicted_at(prediction, metric),
        )

    use_simulator = verification is not None and not prediction.reliable

    def of_record(metric: str) -> FigureOfRecord:
        if verification is not None and use_simulator:
            simulated: Percentiles = getattr(verification.simulated, f"{metric}_s")
            low, high = getattr(verification.simulated.p99_ci_s, metric) if slo.percentile == 99.0 else (None, None)
            return FigureOfRecord(value=simulated.at_percentile, method="simulated", ci_low=low, ci_high=high)
        return FigureOfRecord(value=_predicted_at(prediction, metric), method="analytic")

    note = prediction.fidelity_note
    if verification is not None and use_simulator:
        reason = (note or "").removesuffix(" — use the simulator").removeprefix("outside the analytic model's validated region: ")
        note = (
            f"the analytic model is outside its validated region here ({reason}); the figures of record are the "
            f"simulator's ({verification.requests_simulated} requests)"
        )
    return Predicted(
        percentile=slo.percentile,
        per_replica_rate_rps=main.offered_rps / main.replicas,
        ttft_s=analytic("ttft"),
        tpot_s=analytic("tpot"),
        e2e_s=analytic("e2e"),
        output_tokens_per_s=output_tokens_per_s,
        reliable=prediction.reliable,
        fidelity_note=note,
        of_record=FiguresOfRecord(ttft_s=of_record("ttft"), tpot_s=of_record("tpot"), e2e_s=of_record("e2e")),
    )


def candidate_id_of(row: FleetRow) -> str:
    from planner.optimizer import candidate_id

    return candidate_id(
        gpu=row.gpu,
        weights_precision=row.weights_precision,
        kv_precision=row.kv_precision,
        tp=row.tp,
        batch_limit=row.batch_limit,
        chunk_tokens=row.chunk_tokens,
    )


def _verified_fleet(
    planner: _Planner,
    by_id: Mapping[str, Option],
    pool: Sequence[tuple[Option, float]],
    workload: Workload,
    slo: Slo,
    constraints: PlanConstraints,
    request: PlanningRequest,
) -> tuple[PlanSolution, list[Candidate], list[FleetRow], dict[str, Any], list[Adjustment]]:
    """A mixed fleet with the simulator in the loop, as `_verified_search` does for one configuration:
    every row is simulated at its share of the traffic; a row that misses has its rate recorded as
    missed, its μ narrowed below that rate with the queueing model, and the MILP solved again.
    Raises InfeasiblePlanError when no fleet is accepted within MAX_VERIFY_ROUNDS."""
    lam = workload.arrival_rate_rps
    mus = {option.id: mu for option, mu in pool}
    options = {option.id: option for option, _ in pool}
    adjustments: list[Adjustment] = []
    for _ in range(MAX_VERIFY_ROUNDS):
        candidates = [_candidate(options[i], mu, planner) for i, mu in mus.items() if mu > 0]
        if not candidates:
            break
        solution = solve_plan(candidates, lam, constraints, time_limit_s=request.solver_time_limit_s)
        rows = [
            _row(by_id[r.candidate.id], r.replicas, r.candidate.max_rps_at_slo, r.candidate.saturation_rps, r.offered_rps)
            for r in solution.rows
        ]
        reports = [planner.simulated(by_id[candidate_id_of(r)], workload, r.offered_rps, r.replicas, slo, request) for r in rows]
        failing = [(row, report) for row, report in zip(rows, reports, strict=True) if not report["meets_slo"]]
        if not failing:
            main = max(range(len(rows)), key=lambda i: rows[i].offered_rps)
            verification = dict(reports[main])
            verification["rows"] = [{"gpu": r.gpu, "replicas": r.replicas, "meets_slo": True} for r in rows]
            return solution, candidates, rows, verification, adjustments
        for row, report in failing:
            option = by_id[candidate_id_of(row)]
            planner.record_simulated_miss(option, slo, row.offered_rps / row.replicas, tuple(report["misses"]))
            mus[option.id] = _mu_below_miss(planner, option, slo)
            adjustments.append(
                NextCandidate(
                    from_=_configuration(option),
                    to=None,
                    because=(
                        f"simulated p{slo.percentile:g} missed ({', '.join(report['misses'])}) at {row.replicas} replica(s), "
                        f"{row.offered_rps / row.replicas:.4g} req/s each: the fleet is solved again below that rate"
                    ),
                )
            )
    raise InfeasiblePlanError(
        f"the simulator finds the SLOs missed at every mixed fleet tried ({len(adjustments)} misses)",
        constraint="verification",
        adjustments=[as_dict(a) for a in adjustments],
    )


def _candidate(option: Option, mu: float, planner: _Planner) -> Candidate:
    g = option.group
    return Candidate(
        id=option.id,
        gpu=g.gpu.slug,
        tp=g.tp,
        weights_precision=g.precision.weights.slug,
        kv_precision=g.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        gpus_per_replica=g.tp,
        cost_usd_per_hour=g.price_usd_per_hour,
        max_rps_at_slo=mu,
        saturation_rps=max(planner.saturation(option), mu),
        instance_offers=g.offers,
    )


def _mu_below_miss(planner: _Planner, option: Option, slo: Slo) -> float:
    """μ of `option` again after the simulator found a rate missed: the queueing model's largest
    rate below that miss (0 when none down to a thousandth of it meets)."""
    facts = planner._facts(option, slo)
    rate = facts.missed_rps
    while facts.met_rps <= 0 and facts.drop is None and rate > facts.missed_rps * 1e-3:
        rate *= 0.8
        planner.meets(option, slo, rate)
    return planner.max_rate(option, slo)[0] if facts.met_rps > 0 and facts.drop is None else 0.0


# --- justification sections --------------------------------------------------------------------------


def _step_model_section(sm: StepModel) -> StepModelSection:
    return StepModelSection.of(sm, formula=STEP_FORMULA)


STEP_FORMULA = (
    "t_step = max(t_mem, t_compute) + (1 - overlap) * min(t_mem, t_compute) + t_comm + step_overhead_s; "
    "t_mem = (weight_bytes_read(n) + kv_tokens_read * kv_bytes_per_token) / memory_bandwidth_bytes_per_s; "
    "t_compute = (n * flops_per_token + attended_tokens * attention_flops_per_context_token) / compute_flops_per_s; "
    "t_comm = n * comm_s_per_token + comm_latency_s"
)


def _memory_section(option: Option, model: ModelSpec, workload: Workload, prediction: Prediction) -> MemorySection:
    g = option.group
    request_tokens = workload.prompt_tokens.mean + workload.output_tokens.mean
    detail = prediction.queueing
    return MemorySection(
        usable_bytes=g.tp * g.gpu.memory_bytes * (1 - g.gpu.efficiency.memory_reserve_fraction),
        weights_bytes=weight_bytes(model, g.precision.weights),
        kv_bytes_per_token=g.step_model.kv_bytes_per_token,
        kv_bytes_per_request=kv_bytes_per_request(model, g.precision.kv_cache, g.tp, math.ceil(request_tokens)),
        mean_request_tokens=request_tokens,
        kv_capacity_tokens=g.kv_capacity_tokens,
        concurrency_limit_by_kv=g.kv_slots,
        batch_limit=option.batch_limit,
        concurrency_limit=option.slots,
        batch_limited_by=detail.slots_limited_by
        if detail
        else ("batch_limit" if option.batch_limit <= g.kv_slots else "kv_cache"),
    )


def _roofline_section(option: Option, workload: Workload, prediction: Prediction) -> RooflineSection:
    sm = option.group.step_model
    context = max(1, round(workload.prompt_tokens.mean + workload.output_tokens.mean / 2))
    occupancy = prediction.queueing.mean_occupancy if prediction.queueing else 1.0
    rows: list[DecodeRoofline] = []
    for label, batch in (("batch_1", 1), ("at_plan_occupancy", max(1, round(occupancy))), ("at_concurrency_limit", option.slots)):
        d = decode_step(sm, batch=batch, context_tokens=context)
        rows.append(
            DecodeRoofline(
                at=label,
                batch=batch,
                context_tokens=context,
                step_s=d.step_s,
                memory_s=d.memory_s,  # type: ignore[arg-type]
                compute_s=d.compute_s,
                comm_s=d.comm_s,
                flops_per_byte=d.flops_per_byte_with_attention,
                bound=d.bound,
                output_tokens_per_s=d.output_tokens_per_s,
            )
        )
    p = prefill(sm, max(1, round(workload.prompt_tokens.mean)))
    return RooflineSection(
        decode=tuple(rows),
        prefill=PrefillRoofline(
            prompt_tokens=p.tokens,
            time_s=p.time_s,
            linear_time_s=p.linear_time_s,
            attention_time_s=p.attention_time_s,
            weight_read_s=p.weight_read_s,
            bound=p.bound,
        ),
        break_even_flops_per_byte=sm.break_even_flops_per_byte,
    )


def _rho_curve(planner: _Planner, option: Option, slo: Slo, plan_rate_rps: float, mu_rps: float) -> list[RhoPoint]:
    """p-percentile latencies against ρ around the plan: fixed utilisations plus the plan's and μ's."""
    saturation = planner.saturation(option)
    rates = sorted({u * saturation for u in CURVE_UTILISATIONS} | {plan_rate_rps, mu_rps})
    points: list[RhoPoint] = []
    for rate in rates:
        try:
            p = _cached_prediction(
                option.group.step_model, planner.mix, _serving(option), option.group.kv_capacity_tokens, rate, slo.percentile
            )
        except ConvergenceError:
            continue  # a point the queueing model cannot solve is left out of the drawing, not guessed
        points.append(
            RhoPoint(
                utilisation=rate / saturation,
                arrival_rate_rps=rate,
                ttft_s=_predicted_at(p, "ttft") if not p.unstable else None,
                tpot_s=_predicted_at(p, "tpot") if not p.unstable else None,
                e2e_s=_predicted_at(p, "e2e") if not p.unstable else None,
                meets_slo=_meets(p, slo),
                at="plan" if rate == plan_rate_rps else ("max_rps_at_slo" if rate == mu_rps else None),
            )
        )
    return points


def _queueing_section(prediction: Prediction, slo: Slo, curve: list[RhoPoint]) -> QueueingSection | UnstableQueueing:
    q = prediction.queueing
    if q is None:
        return UnstableQueueing()
    L, lam, W = q.littles_law
    return QueueingSection(
        arrival_rate_rps=q.arrival_rate_rps,
        arrival_cv=q.arrival_cv,
        service_s=q.service_s,
        steps_per_request=q.steps_per_request,
        mean_step_s=q.mean_step_s,
        utilisation=q.utilisation,
        saturation_rps=q.saturation_rps,
        slots=q.slots,
        slots_limited_by=q.slots_limited_by,  # type: ignore[arg-type]
        littles_law=LittlesLaw(
            occupancy=L, arrival_rate_rps=lam, time_in_service_s=W, check=f"L = λ·W: {L:.4g} = {lam:.4g} × {W:.4g}"
        ),
        wait_probability=q.wait_probability,
        mean_wait_s=q.mean_wait_s,
        wait_at_percentile_s=q.wait_at_percentile_s,
        formula=q.formula,
        rho_curve=tuple(curve),
        slo_lines_s=_slo_targets(slo),  # type: ignore[arg-type]
        percentile=slo.percentile,
    )


def _binding_section(
    ctx: _Context, solution: PlanSolution, main_option: Option, main: FleetRow, prediction: Prediction, mu_rps: float
) -> tuple[BindingEntry, ...]:
    planner, request = ctx.planner, ctx.request
    workload, slo, constraints = request.workload, request.slo, request.constraints
    lam = workload.arrival_rate_rps
    cost = ctx.cost  # the plan as returned, after verification
    at_mu = _cached_prediction(
        main_option.group.step_model,
        planner.mix,
        _serving(main_option),
        main_option.group.kv_capacity_tokens,
        mu_rps,
        slo.percentile,
    )
    ratios = {m: _predicted_at(at_mu, m) / t for m, t in _slo_targets(slo).items()}
    setting = max(ratios, key=lambda m: ratios[m]) if ratios else None
    # Capacity, not latency, sets the replica rate when every SLO still holds at 99 % of saturation:
    # decided by the prediction at that rate (usually already known from μ's bracket), not by μ's
    # estimate, which sits up to 1 % below μ and would make the answer depend on how μ was narrowed.
    at_saturation = planner.meets(main_option, slo, SATURATION_BINDS * planner.saturation(main_option))
    binding: list[BindingEntry] = []
    for metric, target in _slo_targets(slo).items():
        relaxed = replace(slo, **{f"{metric}_s": target * SLO_RELAXATION})
        relaxed_cost: float | None
        if constraints.mixed_fleet:
            saving = relaxed_cost = None
        else:
            # re-planned (and verified, as the plan was) at the looser target: only a plan strictly
            # cheaper than this one counts, and this plan itself still meets the looser target
            better = _verified_search(
                planner, workload, relaxed, lam, constraints, request, below_usd_per_hour=cost, infer=True
            ).best
            relaxed_cost = better.cost_usd_per_hour if better is not None else cost
            saving = cost - relaxed_cost
        predicted = _predicted_at(prediction, metric)
        binding.append(
            SloBinding(
                constraint=f"slo_{metric}",  # type: ignore[arg-type]
                binding=metric == setting and not at_saturation,
                target_s=target,
                predicted_at_plan_s=predicted,
                slack_s=target - predicted,
                predicted_at_max_rps_s=_predicted_at(at_mu, metric),
                relax_by=SLO_RELAXATION - 1.0,
                relaxed_cost_usd_per_hour=relaxed_cost,
                relaxed_saving_usd_per_hour=saving,
                note=None if saving is not None else "mixed fleet: relaxation not re-solved",
            )
        )
    limited_by = prediction.queueing.slots_limited_by if prediction.queueing else "batch_limit"
    binding.append(
        CapacityBinding(
            constraint="saturation" if at_saturation else "concurrency",
            binding=at_saturation,
            limited_by=limited_by,  # type: ignore[arg-type]
            concurrency_limit=main_option.slots,
            detail=(
                f"every SLO holds up to saturation, so capacity ({limited_by}) sets the replica rate"
                if at_saturation
                else f"concurrency is capped by {limited_by} at {main_option.slots} sequences"
            ),
        )
    )
    for slack in solution.constraints:
        binding.append(
            ConstraintBinding(
                constraint=slack.name,
                kind=slack.family,
                binding=slack.binding,  # type: ignore[arg-type]
                value=slack.value,
                limit=slack.limit,
                slack=slack.slack,
                unit=slack.unit,
            )
        )  # type: ignore[arg-type]
    return tuple(binding)


def _alternatives_section(ctx: _Context, outcome: _Outcome, main: FleetRow) -> tuple[Alternative, ...]:
    """The best plan for each other GPU type and each other precision, with why it lost.

    A group the final search left unpriced has a lower bound on its cost; where that bound does not
    exceed the plan's cost (a tie, or a mixed fleet's verified cost above its search's), the group is
    priced exactly by the same search restricted to it, so no entry claims less than it would cost."""
    planner, request, by_id, cost = ctx.planner, ctx.request, ctx.by_id, ctx.cost
    workload, slo, constraints = request.workload, request.slo, request.constraints
    alternatives: list[Alternative] = []
    chosen_precision = (main.weights_precision, main.kv_precision)

    # the least cost bound of what the search left unpriced, per (GPU, precision, tp) group first:
    # ~2,000 queued options, ~80 groups, then two groupings of those
    group_bounds: dict[Group, float] = {}
    for bound, option_id in [(b, i) for i, b in outcome.skipped.items()] + [(b, i) for b, _, i, _ in outcome.left_queued]:
        group = by_id[option_id].group
        if bound < group_bounds.get(group, math.inf):
            group_bounds[group] = bound

    def index(
        key: Callable[[Group], Any],
    ) -> tuple[dict[Any, list[SinglePlan]], dict[Any, float], dict[Any, tuple[str, str, float | None]], dict[Any, set[str]]]:
        """One pass over what the search learned, grouped by `key` of a group (GPU type or precision pair)."""
        priced: dict[Any, list[SinglePlan]] = {}
        bounds: dict[Any, float] = {}
        slo_fail: dict[Any, tuple[str, str, float | None]] = {}
        limit_fail: dict[Any, set[str]] = {}
        for plan in outcome.priced:
            priced.setdefault(key(plan.option.group), []).append(plan)
        for group, bound in group_bounds.items():
            k = key(group)
            bounds[k] = min(bound, bounds.get(k, math.inf))
        for option_id, why in outcome.slo_drops.items():
            slo_fail.setdefault(key(by_id[option_id].group), why)  # the first refused, as the search met them
        for option_id, family in outcome.limit_drops.items():
            limit_fail.setdefault(key(by_id[option_id].group), set()).add(family)
        return priced, bounds, slo_fail, limit_fail

    def verified_flag(plan: SinglePlan) -> bool | None:
        if not request.verify:
            return None
        report = planner._simulations.get((plan.option.id, workload.arrival_rate_rps, plan.replicas, slo))
        return None if report is None else bool(report["meets_slo"])

    def summarise(
        kind: str,
        label: str,
        k: Any,
        key: Callable[[Group], Any],
        grouped: tuple[
            dict[Any, list[SinglePlan]], dict[Any, float], dict[Any, tuple[str, str, float | None]], dict[Any, set[str]]
        ],
    ) -> None:
        priced_by, bounds_by, slo_by, limits_by = grouped
        priced = priced_by.get(k, [])
        feasible = sorted((p for p in priced if p.feasible), key=lambda p: (p.cost_usd_per_hour, p.gpus))
        bound = bounds_by.get(k)
        if (
            bound is not None
            and bound <= cost * (1 + _COST_TOLERANCE)
            and not (feasible and feasible[0].cost_usd_per_hour <= bound)
        ):
            exact = planner.search(slo, workload.arrival_rate_rps, constraints, only=lambda o: key(o.group) == k).best
            bound = None
            if exact is not None:
                feasible = [exact]
        entry: dict[str, Any] = {"kind": kind, "name": label}
        if feasible and (bound is None or feasible[0].cost_usd_per_hour <= bound * (1 + _COST_TOLERANCE)):
            best = feasible[0]
            delta = best.cost_usd_per_hour - cost
            entry.update(
                _config(best.option),
                replicas=best.replicas,
                gpus=best.gpus,
                cost_usd_per_hour=best.cost_usd_per_hour,
                exact=True,
                verified=verified_flag(best),
                reason=(
                    f"needs ${best.cost_usd_per_hour:.2f}/h, ${delta:.2f}/h more than this plan"
                    if delta > 0.005
                    else "same cost to the cent, more GPUs or a later tie-break"
                ),
            )
        elif bound is not None:
            entry.update(
                cost_usd_per_hour=None,
                cost_at_least_usd_per_hour=bound,
                exact=False,
                verified=None,
                reason=(
                    f"even with every replica at its saturation rate it needs at least ${bound:.2f}/h, "
                    f"${bound - cost:.2f}/h more than this plan"
                ),
            )
        else:
            slo_fail = slo_by.get(k)
            limit_fail = sorted(limits_by.get(k, set()) | {p.refused for p in priced if p.refused})
            group_drops = [
                d
                for d in ctx.drops
                if (kind == "gpu" and d.gpu == label)
                or (kind == "precision" and f"{d.weights_precision}/{d.kv_precision}" == label)
            ]
            if limit_fail:
                reason = f"breaks {', '.join(x for x in limit_fail if x)} at the replicas it would need"
            elif slo_fail is not None:
                reason = slo_fail[1]
            elif group_drops:
                reason = group_drops[0].reason
            else:
                reason = "not among the allowed configurations"
            entry.update(cost_usd_per_hour=None, exact=True, verified=None, reason=reason)
        alternatives.append(Alternative(**entry))

    gpu_key: Callable[[Group], Any] = lambda g: g.gpu.slug
    by_gpu = index(gpu_key)
    for gpu in ctx.inputs.gpus:
        if gpu.slug != main.gpu:
            summarise("gpu", gpu.slug, gpu.slug, gpu_key, by_gpu)
    precision_key: Callable[[Group], Any] = lambda g: (g.precision.weights.slug, g.precision.kv_cache.slug)
    by_precision = index(precision_key)
    for precision in ctx.inputs.precisions:
        pair = (precision.weights.slug, precision.kv_cache.slug)
        if pair != chosen_precision:
            summarise("precision", f"{pair[0]}/{pair[1]}", pair, precision_key, by_precision)
    return tuple(alternatives)


def _sensitivity_section(ctx: _Context, rows: Sequence[FleetRow], mu_bracket: tuple[float, float]) -> Sensitivity:
    """How the plan grows with traffic: each traffic level re-planned (by the queueing model, with
    what the simulator taught the search about the configurations it checked) within the limits, or
    without them when the limits leave nothing, saying which limit it breaks. More traffic never
    costs less: a level's plan also serves every lower level, so each level takes the cheaper of its
    own plan and the next level's (and never less than this plan)."""
    planner, request, by_id, cost = ctx.planner, ctx.request, ctx.by_id, ctx.cost
    workload, slo, constraints = request.workload, request.slo, request.constraints
    lam = workload.arrival_rate_rps
    single = len(rows) == 1
    if single:
        row = rows[0]
        lost = 1 if constraints.n_plus_one else 0
        holds = (row.replicas - lost) * mu_bracket[0]  # replicas still serving × the largest per-replica rate known to meet
        holds_below = (row.replicas - lost) * mu_bracket[1]
    else:
        capacity = sum(r.replicas * r.max_rps_at_slo for r in rows)
        holds = capacity - (max(r.max_rps_at_slo for r in rows) if constraints.n_plus_one else 0.0)
        holds_below = None
    traffic: list[dict[str, Any]] = []
    if single:
        option = by_id[candidate_id_of(rows[0])]
        unlimited = replace(
            constraints, max_gpus=None, budget_usd_per_hour=None, inventory={}, pin=without_replicas(constraints.pin)
        )
        # Each level is re-planned by the queueing model with what the simulator taught the search
        # (rates it found missed stay excluded); the levels themselves are not simulated (`method`).
        model_only = replace(request, verify=False)
        for factor in TRAFFIC_FACTORS:
            rate = lam * factor
            entry: dict[str, Any] = {"traffic_factor": factor, "arrival_rate_rps": rate}
            needed = planner.fewest_replicas(option, slo, rate)
            ceiling = math.inf
            if not isinstance(needed, tuple):
                replicas = max(constraints.min_replicas, needed + (1 if constraints.n_plus_one else 0), 1)
                entry["same_configuration"] = {
                    "replicas": replicas,
                    "gpus": replicas * option.group.tp,
                    "cost_usd_per_hour": option.group.cost_usd_per_hour(replicas),
                }
                same = single_plan(option, rate / needed, planner.saturation(option), rate, constraints)
                if same.feasible:
                    ceiling = same.cost_usd_per_hour
            # only what could undercut the plan's own configuration grown is searched
            found = _verified_search(
                planner,
                workload.at_rate(rate),
                slo,
                rate,
                constraints,
                model_only,
                below_usd_per_hour=ceiling * (1 + _COST_TOLERANCE),
            ).best
            if found is None and math.isfinite(ceiling):
                found = same
            within = found is not None
            if found is None and unlimited != constraints:
                found = _verified_search(planner, workload.at_rate(rate), slo, rate, unlimited, model_only).best
            if found is not None:
                entry.update(
                    _config(found.option),
                    replicas=found.replicas,
                    gpus=found.gpus,
                    cost_usd_per_hour=found.cost_usd_per_hour,
                    within_limits=within,
                    breaks=None
                    if within
                    else _refused_by(
                        found.option.group.gpu.slug, found.gpus, found.cost_usd_per_hour, constraints, found.replicas
                    ),
                )
            traffic.append(entry)
        # monotone: a plan for more traffic serves less, so each level is at most the next level's
        for lower, higher in zip(reversed(traffic[:-1]), reversed(traffic[1:]), strict=True):
            if (
                "cost_usd_per_hour" in higher
                and higher.get("within_limits")
                and ("cost_usd_per_hour" not in lower or higher["cost_usd_per_hour"] < lower["cost_usd_per_hour"])
            ):
                carried = {
                    k: higher[k]
                    for k in (
                        "gpu",
                        "tp",
                        "weights_precision",
                        "kv_precision",
                        "batch_limit",
                        "chunk_tokens",
                        "replicas",
                        "gpus",
                        "cost_usd_per_hour",
                        "within_limits",
                        "breaks",
                    )
                }
                lower.update(
                    carried, note=f"the plan for {higher['traffic_factor']:g}× traffic, which costs less than this level's own"
                )
        for entry in traffic:
            if "cost_usd_per_hour" in entry:
                if entry["cost_usd_per_hour"] < cost:
                    # never below the plan itself: this level's traffic needs at least what the plan's does
                    entry.update(cost_usd_per_hour=cost, note="no cheaper than the plan at 1× traffic")
                entry["cost_increase_usd_per_hour"] = entry["cost_usd_per_hour"] - cost
    else:
        for factor in TRAFFIC_FACTORS:
            scaled = [(r, math.ceil(r.replicas * factor * (1 - 1e-12))) for r in rows]  # a mixed fleet scaled row by row
            scaled_cost = sum(n * r.cost_usd_per_hour / r.replicas for r, n in scaled)
            traffic.append(
                {
                    "traffic_factor": factor,
                    "arrival_rate_rps": lam * factor,
                    "replicas": sum(n for _, n in scaled),
                    "gpus": sum(n * r.tp for r, n in scaled),
                    "cost_usd_per_hour": scaled_cost,
                    "cost_increase_usd_per_hour": scaled_cost - cost,
                    "note": "mixed fleet: every row scaled by the traffic factor, not re-planned",
                }
            )
    method = (
        "re-planned by the queueing model at each level, with the rates the simulator found missed excluded"
        if single
        else "mixed fleet: every row scaled by the traffic factor"
    )
    entries = tuple(
        SensitivityEntry(
            **{
                **entry,
                "same_configuration": SameConfiguration(**entry["same_configuration"]) if "same_configuration" in entry else None,
            }
        )
        for entry in traffic
    )
    return Sensitivity(
        traffic=entries,
        max_arrival_rate_rps_within_slo=holds,
        fails_by_arrival_rate_rps=holds_below,
        headroom_fraction=holds / lam - 1.0,
        method=method,
    )


__all__ = [
    "FleetRow",
    "PlanResult",
    "PlanningInputs",
    "PlanningRequest",
    "SinglePlan",
    "UnsupportedConfigurationError",
    "plan_capacity",
    "single_plan",
]
