"""The branch and bound that finds the cheapest single configuration, and the per-request state
it keeps (`Planner`): what each option is known to meet or miss under each SLO, and what the
simulator taught it. planner/planning.py runs it; planner/plan_verify.py puts the simulator in its loop.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from planner.candidates import (
    Option,
)
from planner.errors import (
    ConvergenceError,
)
from planner.optimizer import PlanConstraints
from planner.plan_predict import (
    PREDICTIONS,
    cached_max_rps,
    cached_prediction,
    cached_saturation_rps,
    option_serving,
    predicted_at,
    slo_excess,
    slo_stricter_or_equal,
    slo_targets,
    unit_rate_mix,
    verify_replica_share,
)
from planner.queueing import PercentileBounds, Prediction
from planner.rate_search import Bracket
from planner.units import MS_PER_S
from planner.workload import Slo, Workload

if TYPE_CHECKING:
    from planner.planning import PlanningRequest

#: Utilisations of the ρ-vs-latency curve (with the plan's own ρ and μ's): where the 1/(1−ρ) wall shows.
CURVE_UTILISATIONS: tuple[float, ...] = (0.5, 0.8, 0.9, 0.95)
#: Upper bound on queueing root-finds in one search, so a pathological request stays bounded;
#: reaching it is reported (`exhaustive: false`).
MAX_EVALUATIONS = 600
#: Below this fraction of the lowest rate known to miss, the oracle checks vanishing load before searching on.
_VANISHING = 1e-3
_COST_TOLERANCE = 1e-9


@dataclass(slots=True)
class _RateFacts(Bracket):
    """What is known about one option under one SLO: a per-replica rate that meets it, the lowest
    that misses (saturation at first), and why no rate does (when so)."""

    drop: tuple[str, str, float | None] | None = None
    probes: int = 0


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
    gpus = replicas * option.group.gpus_per_replica
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
    price, tp = group.price_usd_per_hour, group.gpus_per_replica  # price: a per-replica floor of the cost (exact by the GPU)
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


class Planner:
    """Caches for one request: exact saturations and μ per (option, SLO)."""

    def __init__(self, options: Sequence[Option], workload: Workload, *, checkpoint: Callable[[], None] | None = None) -> None:
        self.options = list(options)
        self.checkpoint = checkpoint
        self.mix = unit_rate_mix(workload)
        self.root_finds = 0
        self.predictions = 0
        self.facts: dict[tuple[str, Slo], _RateFacts] = {}
        self._facts_of: dict[str, list[tuple[Slo, _RateFacts]]] = {}  # option id → its facts under every SLO seen
        self.by_id = {o.id: o for o in self.options}
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._id_list: list[str] | None = None
        self._by_group: dict[int, list[Option]] | None = None
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
        share, as `verify_replica_share`), run once per request for each configuration, load and SLO."""
        key = (option.id, rate_rps, replicas, slo)
        report = self._simulations.get(key)
        if report is None:
            report = verify_replica_share(option, workload, rate_rps, replicas, slo, request.verify_requests, request.seed)
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
            if passed_cv == cv_key and per_replica <= passed_rate and slo_stricter_or_equal(passed_slo, slo):
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
        """The other batch/chunk settings of the option's (GPU, precision, tp, draft) group."""
        if self._by_group is None:
            self._by_group = {}
            for other in self.options:
                self._by_group.setdefault(id(other.group), []).append(other)  # a group's options share its object
        return [o for o in self._by_group.get(id(option.group), ()) if o.id != option.id]

    def _record_miss(self, option: Option, slo: Slo, rate_rps: float) -> None:
        facts = self._facts(option, slo)
        if rate_rps < facts.missed_rps:
            facts.missed_rps, facts.missed_slack = rate_rps, None
        if facts.met_rps >= facts.missed_rps:
            facts.met_rps, facts.met_slack, facts.run, facts.probes = 0.0, None, 0, 0
        self.simulator_corrected.add(option.id)

    def report_of(self, option_id: str, rate_rps: float, replicas: int, slo: Slo) -> dict[str, Any] | None:
        """The simulator's report on `replicas` of the option sharing `rate_rps`, when this request ran it."""
        return self._simulations.get((option_id, rate_rps, replicas, slo))

    @property
    def simulations(self) -> int:
        """How many simulations this request ran (each configuration, load and SLO once)."""
        return len(self._simulations)

    def saturation(self, option: Option) -> float:
        return cached_saturation_rps(option.group.step_model, self.mix, option_serving(option), option.group.kv_capacity_tokens)

    def mu(self, option: Option, slo: Slo) -> float | tuple[str, str, float | None]:
        """The queueing model's root-find for μ (mixed fleets need the exact rate)."""
        before = cached_max_rps.cache_info().hits
        value = cached_max_rps(option.group.step_model, self.mix, option_serving(option), slo, option.group.kv_capacity_tokens)
        if cached_max_rps.cache_info().hits == before:
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
                if slo_stricter_or_equal(other_slo, slo):
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
        sm, serving, capacity = option.group.step_model, option_serving(option), option.group.kv_capacity_tokens
        try:
            if exact_slack:
                answer: Prediction | PercentileBounds = PREDICTIONS.prediction(
                    sm, self.mix, serving, capacity, rate_rps, slo.percentile
                )
            else:
                answer = PREDICTIONS.screened(sm, self.mix, serving, capacity, rate_rps, slo)
        except ConvergenceError as exc:
            facts.drop = ("queueing", f"the queueing model did not converge on this configuration ({exc.detail})", None)
            facts.missed_rps = 0.0
            return False
        self.predictions += 1
        self._answers.setdefault((option.id, slo.percentile), []).append((rate_rps, answer))
        excess = (
            answer.excess(slo)[0] if isinstance(answer, PercentileBounds) else slo_excess(answer, slo)
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
            excess = answer.excess(slo)[0] if isinstance(answer, PercentileBounds) else slo_excess(answer, slo)
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
        decisive = beat_at_most if beat_at_most is not None and beat_at_most > low else None
        if high is None:
            if facts.probes == 0:
                probe = low
            elif decisive is not None:
                probe = decisive
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
            if decisive is not None and decisive < probe:
                probe = decisive
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
        prediction = cached_prediction(
            option.group.step_model, self.mix, option_serving(option), option.group.kv_capacity_tokens, rate_rps, slo.percentile
        )
        metric = max(slo_targets(slo), key=lambda m: predicted_at(prediction, m) / slo_targets(slo)[m])
        predicted = predicted_at(prediction, metric)
        target = slo_targets(slo)[metric]
        return (
            metric,
            (
                f"p{slo.percentile:g} {metric.upper()} is {predicted * MS_PER_S:.4g} ms even at vanishing load, "
                f"above the {target * MS_PER_S:.4g} ms target"
            ),
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
        if out.best is not None and out.best.option.group.draft:
            self._plain_on_a_tie(out, slo, arrival_rate_rps, constraints, only)
        return out

    def _plain_on_a_tie(
        self,
        out: _Outcome,
        slo: Slo,
        arrival_rate_rps: float,
        constraints: PlanConstraints,
        only: Callable[[Option], bool] | None,
    ) -> None:
        """A speculating winner gives way to a configuration without speculation that costs as much on no
        more GPUs: speculation is bought for what it saves, and a tie says it saves nothing (where it
        still lowers the TPOT at that cost, planner/plan_speculative.py `latency_choice` adds it back
        on the plain winner's own setting). One more search, over the plain options alone, bounded by
        the winner's cost."""
        best = out.best
        if best is None:
            return
        ceiling = best.cost_usd_per_hour * (1 + 3 * _COST_TOLERANCE)  # a tie within rounding counts as cheaper

        def plain(option: Option) -> bool:
            return option.group.step_model.speculation is None and (only is None or only(option))

        tie = self.search(slo, arrival_rate_rps, constraints, below_usd_per_hour=ceiling, only=plain)
        # the first search may have priced some of these plain options already (same option, same μ):
        # each option is priced once, or the MILP would see two candidates with one id
        already = {p.option.id for p in out.priced}
        out.priced.extend(p for p in tie.priced if p.option.id not in already)
        out.root_finds += tie.root_finds
        if tie.best is not None and tie.best.gpus <= best.gpus:
            out.best = tie.best

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
            tp = np.fromiter((o.group.gpus_per_replica for o in options), dtype=np.int64, count=len(options))
            self._arrays = (bound, price, tp, (bound > 0) & np.isfinite(bound))
        return self._arrays

    def cost_floor_usd_per_hour(self, arrival_rate_rps: float, constraints: PlanConstraints) -> float:
        """No single-configuration plan of these options costs less: the least of the closed-form
        bounds `search` starts from (each option's replicas at its saturation bound, within the
        limits); infinite when every option breaks a limit (the search would find no plan)."""
        heap = self._initial_heap(arrival_rate_rps, constraints, _Outcome())
        return heap[0][0] if heap else math.inf

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
        gpus = replicas * option.group.gpus_per_replica
        cost = option.group.cost_usd_per_hour(replicas)
        refused = _refused_by(option.group.gpu.slug, gpus, cost, constraints, natural)
        if refused is not None:
            out.limit_drops[option.id] = refused
            return
        heapq.heappush(heap, (cost, gpus, option.id, stage))

    def best_per_group(
        self,
        slo: Slo,
        *,
        ceiling_usd_per_hour: float = math.inf,
        arrival_rate_rps: float = 0.0,
        strictly_below: bool = False,
    ) -> tuple[dict[tuple[str, str, str, int, int, int], tuple[Option, float]], dict[str, tuple[str, str, float | None]]]:
        """For a mixed fleet: each group's option with the largest μ (equal price and GPUs, so the
        others are dominated), searched in order of the saturation bound; an option that misses at
        the largest μ found so far in its group is dominated and costs no root-find.

        Only groups that could sit in a fleet costing at most `ceiling_usd_per_hour` are searched.
        With e the lowest cost per unit of rate of any option (≥ min p_c / saturation bound_c), a
        fleet using r ≥ 1 replicas of group g at price p_g and rate μ_g ≤ S_g (its largest bound)
        costs at least r·p_g + (λ − r·μ_g)⁺·e ≥ p_g + (λ − S_g)⁺·e, since p_g/μ_g ≥ e (the minimum is
        at r = 1) and the rest of the rate costs at least e per unit; N+1, min_replicas and the
        limits only add to it. `strictly_below`: only fleets costing strictly less than the ceiling
        count (a prefix trial's bound), so a group whose floor reaches it is not searched."""
        efficiency = min((o.group.price_usd_per_hour / o.saturation_bound_rps for o in self.options), default=0.0)
        largest: dict[tuple[str, str, str, int, int, int], float] = {}
        for option in self.options:
            largest[option.group.layout_key] = max(largest.get(option.group.layout_key, 0.0), option.saturation_bound_rps)
        groups: dict[tuple[str, str, str, int, int, int], list[Option]] = {}
        for option in self.options:
            price = option.group.price_usd_per_hour
            floor = price + max(0.0, arrival_rate_rps - largest[option.group.layout_key]) * efficiency  # p_g + (λ − S_g)⁺·e
            if floor < ceiling_usd_per_hour if strictly_below else floor <= ceiling_usd_per_hour * (1 + _COST_TOLERANCE):
                groups.setdefault(option.group.layout_key, []).append(option)
        best: dict[tuple[str, str, str, int, int, int], tuple[Option, float]] = {}
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
                if facts.met_rps <= 0 and not self.meets(option, slo, self.saturation(option) * 1e-6) and facts.drop is None:
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
