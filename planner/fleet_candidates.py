"""Candidate tables for the fleet MILP: for one workload shape (model, length mix, SLO), the
configurations worth offering the solver and each one's per-replica `max_rps_at_slo`.

The per-replica rate at the SLO does not depend on the demand, so a table is computed once per
shape (not per period) and shared by every workload with the same shape (`CandidateTables`).

Only undominated candidates matter to the fleet MILP, because its costs come from GPU prices
alone (planner/fleet.py): a candidate on GPU type k with g GPUs per replica is dominated by one
on k with g' GPUs, g' dividing g, when (g/g')·μ' ≥ μ (`planner.fleet.dominates`). So for each
GPU type and replica width g = tp × pp only the option with the largest μ survives, and a wider
replica survives only if it beats every divisor width scaled up. The search finds exactly those, and skips most of the
queueing model's work (each prediction ≈ a few ms) with bounds that are exact, not heuristic.
With θ the rate an option must beat to survive:

    μ ≤ saturation ≤ the closed-form bound of planner/candidates.py   (skip when bound ≤ θ, then when saturation ≤ θ)
    the SLOs fail at rate θ  ⇒  μ < θ                                 (one prediction; p99s never fall as the rate rises)

Pipeline stages (pp 2, 4, 8) and tensor parallelism over whole nodes are offered where no node
holds the model (planner/candidates.py `enumerate_groups`, the grid's `pp_degrees`), and an MoE
model's in-node tp groups are offered a second time as expert-parallel ep = tp groups (attention
data-parallel, experts sharded, an all-to-all per MoE layer: planner/expert_parallel.py), as the
single-plan search offers them. A candidate records its tp, pp and ep, and its `gpus_per_replica`
= tp × pp is what the MILP buys: an ep group competes with its ep = 1 twin at the same width and
price, so the one with the larger μ is kept.

Options are taken per (GPU, g) in decreasing order of the closed-form bound, so the first
μ found usually sets a θ the rest cannot reach. An option that survives gets μ by regula falsi
on [θ, saturation) to within 1 % (planner/rate_search.py), taken from below: the rate used is one the model verified
meets every SLO (planner/planning.py narrows its chosen μ the same way). (GPU, precision, tp)
groups whose step model and KV capacity are identical (fp16 and bf16 on most GPUs) are
searched once.

The small pieces of planner/planning.py this needs (cached predictions and saturation, the
met/missed bracket of an option's μ, serving from an option) are private there, so they are
re-implemented here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from planner.candidates import (
    BATCH_LIMITS,
    CHUNK_BUDGETS,
    TP_DEGREES,
    Drop,
    Option,
    enumerate_all_options,
    enumerate_groups,
)
from planner.errors import ConvergenceError, InfeasiblePlanError, PlannerInputError
from planner.fleet_formulation import undominated
from planner.fleet_levers import (
    NO_LEVERS,
    CandidateLevers,
    DraftPin,
    SpeculativeMode,
    cached_groups,
    levers_of,
    prefix_variants,
    speculative_search_groups,
)
from planner.fleet_spec import Checkpoint, no_checkpoint
from planner.optimizer import Candidate
from planner.pipeline import PP_DEGREES
from planner.queueing import SloExcess, saturation_rps, slo_excess
from planner.rate_search import Bracket
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.units import MS_PER_S
from planner.workload import Serving, Slo, Workload

#: Upper bound on μ searches for one GPU type of one table, so a pathological request stays
#: bounded; reaching it is reported (`exhaustive: false`). The same bound as planner/planning.py's search.
MAX_MU_SEARCHES = 400

#: The rate, as a fraction of saturation, at which "no rate meets the SLO" is probed (as
#: planner/queueing.py's max_rps_at_slo does).
VANISHING_UTILISATION = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateGrid:
    """The search grids: tensor-parallel degrees, batch limits and chunked-prefill budgets
    (None = no chunking). Defaults are planner/candidates.py's (docs/design.md "The optimisation")."""

    tp_degrees: tuple[int, ...] = TP_DEGREES
    #: Pipeline stages searched where no node holds the model (planner/pipeline.py PP_DEGREES).
    pp_degrees: tuple[int, ...] = PP_DEGREES
    batch_limits: tuple[int, ...] = BATCH_LIMITS
    chunk_budgets: tuple[int | None, ...] = CHUNK_BUDGETS
    #: Offer an MoE model's tp-GPU groups a second time as ep = tp (planner/expert_parallel.py), as a single plan does.
    expert_parallel: bool = True

    def __post_init__(self) -> None:
        for name in ("tp_degrees", "pp_degrees", "batch_limits", "chunk_budgets"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if not values:
                raise PlannerInputError(f"{name} needs at least one value", constraint=name)
            if any(v is not None and (not isinstance(v, int) or v < 1) for v in values):
                raise PlannerInputError(f"{name} must be whole numbers >= 1, got {values}", constraint=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class SloRefusal:
    """An option the queueing model refused: no rate meets the SLO on it (or the root-find failed)."""

    option_id: str
    constraint: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateTable:
    """The undominated candidates of one workload shape, and what the search did to find them."""

    candidates: tuple[Candidate, ...]
    options_enumerated: int
    groups: int  # (GPU, precision, tp) groups that hold the model within the SLO floors
    groups_searched: int  # after merging groups with identical physics
    drops: tuple[Drop, ...]  # groups dropped before any queueing, with the reason
    slo_refusals: tuple[SloRefusal, ...]
    mu_searches: int  # options whose μ was narrowed (planner/rate_search.py)
    predictions: int  # queueing-model predictions asked for (cached ones included)
    exhaustive: bool  # False when MAX_MU_SEARCHES stopped the search
    #: Candidate id → the prefix cache and draft it deploys (planner/fleet_levers.py); a candidate without either is absent.
    levers: Mapping[str, CandidateLevers] = field(default_factory=dict)


# --- cached queueing calls (pure functions of hashable inputs; shared across requests) -----------


@lru_cache(maxsize=8192)
def _saturation(sm: StepModel, mix: Workload, serving: Serving, capacity: int) -> float:
    return saturation_rps(sm, mix, serving, kv_capacity_tokens=capacity)


@lru_cache(maxsize=65536)
def _excess(sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int, rate_rps: float) -> SloExcess:
    """max over the SLO's targets of predicted/target − 1 at per-replica rate `rate_rps` (≤ 0: every
    target met), the metric that sets it and its predicted value (inf when unstable)."""
    return slo_excess(sm, mix.at_rate(rate_rps), serving, slo, kv_capacity_tokens=capacity)


@lru_cache(maxsize=65536)
def _screened_excess(sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int, rate_rps: float) -> SloExcess:
    """`_excess`, except that a miss `queueing.screen` proves on a slice of the sample gives a lower
    bound on the excess (and on the predicted value): enough to know the rate misses."""
    return slo_excess(sm, mix.at_rate(rate_rps), serving, slo, kv_capacity_tokens=capacity, screen_first=True)


def clear_caches() -> None:
    """Forget every cached queueing result (benchmarks measuring a cold start call this)."""
    _saturation.cache_clear()
    _excess.cache_clear()
    _screened_excess.cache_clear()


def _serving(option: Option) -> Serving:
    return Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)


# --- the search ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Found:
    """The option with the largest μ a search found above a threshold, with its μ and saturation rate."""

    option: Option
    mu_rps: float
    saturation_rps: float


@dataclass(slots=True)
class _Search:
    mix: Workload
    slo: Slo
    max_mu_searches: int
    mu_searches: int = 0
    predictions: int = 0
    exhaustive: bool = True
    refusals: list[SloRefusal] = field(default_factory=list)
    brackets: dict[str, Bracket] = field(default_factory=dict)

    def saturation(self, option: Option) -> float:
        return _saturation(option.group.step_model, self.mix, _serving(option), option.group.kv_capacity_tokens)

    def _bracket(self, option: Option) -> Bracket:
        if option.id not in self.brackets:
            self.brackets[option.id] = Bracket(met_rps=0.0, missed_rps=self.saturation(option))
        return self.brackets[option.id]

    def excess(self, option: Option, rate_rps: float, *, screened: bool = False) -> SloExcess:
        """`_excess` (`_screened_excess` when only met-or-missed matters); a fixed point that does
        not converge counts as a miss ("queueing", NaN)."""
        group = option.group
        self.predictions += 1
        find = _screened_excess if screened else _excess
        try:
            return find(group.step_model, self.mix, _serving(option), self.slo, group.kv_capacity_tokens, rate_rps)
        except ConvergenceError:
            return SloExcess(math.inf, "queueing", math.nan)

    def meets(self, option: Option, rate_rps: float, *, screened: bool = False) -> bool:
        """Whether one replica at `rate_rps` meets every SLO target (one prediction unless known).
        With `screened`, a clear miss is settled on a slice of the sample and records only a lower
        bound on the excess (the μ search, which interpolates it, asks for the exact one)."""
        bracket = self._bracket(option)
        if rate_rps <= bracket.met_rps:
            return True
        if rate_rps >= bracket.missed_rps:
            return False
        return bracket.record(rate_rps, self.excess(option, rate_rps, screened=screened).excess)

    def mu(self, option: Option) -> float | None:
        """The largest rate found to meet every SLO, within MU_RELATIVE_TOLERANCE below μ (regula falsi);
        None when no rate does (the refusal is recorded) or the search budget is spent."""
        if self.mu_searches >= self.max_mu_searches:
            self.exhaustive = False
            return None
        self.mu_searches += 1
        bracket = self._bracket(option)
        if bracket.met_rps == 0.0:
            vanishing = bracket.missed_rps * VANISHING_UTILISATION
            excess, metric, predicted = self.excess(option, vanishing)
            if excess > 0:
                self.refusals.append(
                    SloRefusal(option_id=option.id, constraint=metric, reason=self._why_never(metric, predicted))
                )
                return None
            bracket.record(vanishing, excess)
        while not bracket.narrow_enough():
            self.meets(option, bracket.next_probe())
        return bracket.met_rps

    def _why_never(self, metric: str, predicted_s: float) -> str:
        if metric in ("ttft", "tpot", "e2e"):
            target = getattr(self.slo, f"{metric}_s")
            return (
                f"p{self.slo.percentile:g} {metric.upper()} is {predicted_s * MS_PER_S:.4g} ms even at vanishing load, "
                f"above the {target * MS_PER_S:.4g} ms target"
            )
        return f"no stable rate meets the SLO on this configuration ({metric})"

    def best_above(self, options: Sequence[Option], threshold_rps: float) -> _Found | None:
        """The option with the largest μ among `options` if that μ exceeds `threshold_rps`, with its
        μ and saturation; None when none beats it."""
        best: _Found | None = None
        theta = threshold_rps
        for option in sorted(options, key=lambda o: -o.saturation_bound_rps):
            if not option.saturation_bound_rps > theta:
                break  # sorted: no later option's bound exceeds θ either
            saturation = self.saturation(option)
            if not saturation > theta:
                continue
            if theta > 0 and not self.meets(option, theta, screened=True):
                continue  # μ < θ: the model's percentiles never fall as the rate rises
            value = self.mu(option)
            if value is None:
                if not self.exhaustive:
                    break
                continue
            if value > theta:
                best, theta = _Found(option=option, mu_rps=value, saturation_rps=saturation), value
        return best


def _candidate(option: Option, mu_rps: float, saturation: float, *, suffix: str = "") -> Candidate:
    group = option.group
    return Candidate(
        id=option.id + suffix,
        gpu=group.gpu.slug,
        tp=group.tp,
        pp=group.pp,
        ep=group.ep,
        weights_precision=group.precision.weights.slug,
        kv_precision=group.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        gpus_per_replica=group.gpus_per_replica,
        cost_usd_per_hour=group.price_usd_per_hour,
        max_rps_at_slo=mu_rps,
        saturation_rps=saturation,
    )


def candidate_table(
    *,
    model: ModelSpec,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[Precision],
    workload: Workload,
    slo: Slo,
    grid: CandidateGrid = CandidateGrid(),
    max_mu_searches: int = MAX_MU_SEARCHES,
    checkpoint: Checkpoint = no_checkpoint,
    speculative: SpeculativeMode = "off",
    published: frozenset[str] | None = None,
    draft: DraftPin | None = None,
) -> CandidateTable:
    """The undominated candidates for serving `model` to `workload`'s length mix within `slo`.

    `workload`'s arrival rate is ignored (μ is per replica and does not depend on it). Every
    candidate that planner/candidates.py enumerates and that no kept candidate dominates is
    kept, unless MAX_MU_SEARCHES stops a GPU type's search first (`exhaustive` False). An empty
    table is an answer: `drops` and `slo_refusals` say why. `checkpoint` is called before each
    (GPU, tp) search; whatever it raises abandons the table (planner/fleet.py `Checkpoint`).

    It is `merged_tables` of one `gpu_candidate_table` per GPU type, in order: a candidate only
    ever dominates one of its own GPU type (`planner.fleet.dominates`), so the GPU types' searches
    are independent, and an operation computes them as separate tasks (api/fleet_operation.py).

    `workload.prefix_reuse` and `speculative` (off, auto, on; heads limited to `published` where
    given; `draft` a pinned draft model or α) add the lever variants of planner/fleet_levers.py as more candidates, recorded in `levers`.
    """
    return merged_tables(
        [
            gpu_candidate_table(
                model=model, gpu=gpu, precisions=precisions, workload=workload, slo=slo, grid=grid,
                max_mu_searches=max_mu_searches, checkpoint=checkpoint, speculative=speculative, published=published,
                draft=draft,
            )
            for gpu in gpus
        ]
    )  # fmt: skip


def gpu_candidate_table(
    *,
    model: ModelSpec,
    gpu: GpuSpec,
    precisions: Sequence[Precision],
    workload: Workload,
    slo: Slo,
    grid: CandidateGrid = CandidateGrid(),
    max_mu_searches: int = MAX_MU_SEARCHES,
    checkpoint: Checkpoint = no_checkpoint,
    speculative: SpeculativeMode = "off",
    published: frozenset[str] | None = None,
    draft: DraftPin | None = None,
) -> CandidateTable:
    """One GPU type's part of `candidate_table`: its undominated candidates, drops and refusals,
    the search bounded by `max_mu_searches` μ searches over every lever variant (planner/fleet_levers.py),
    each variant searched with its own prompt mix and groups."""
    kept: list[Candidate] = []
    levers: dict[str, CandidateLevers] = {}
    drops: list[Drop] = []
    searches: list[_Search] = []
    group_count = searched_groups = enumerated = 0
    for variant in prefix_variants(workload):
        mix = variant.mix
        groups, variant_drops = enumerate_groups(
            model=model,
            gpus=(gpu,),
            precisions=precisions,
            workload=mix,
            slo=slo,
            tp_degrees=grid.tp_degrees,
            pp_degrees=grid.pp_degrees,
            expert_parallel=grid.expert_parallel,
        )
        if not variant.suffix:  # the plain table's drops explain an empty table; a cache variant's add nothing new
            drops.extend(variant_drops)
            group_count += len(groups)
        groups = speculative_search_groups(cached_groups(groups, variant), model, mix, speculative, published, draft)
        by_width: dict[int, list[Option]] = {}  # options by GPUs per replica (tp × pp)
        # one enumeration over every group, so an expert-parallel group's settings its ep = 1 twin is sure to beat are
        # left out as the single-plan search leaves them (planner/candidates.py `enumerate_all_options`)
        options = enumerate_all_options(groups, mix, batch_limits=grid.batch_limits, chunk_budgets=grid.chunk_budgets)
        enumerated += len(options)
        searched: dict[tuple[int, int, int, StepModel, int], int] = {}  # physics → the first group that has it
        for option in options:
            group = option.group
            key = (group.tp, group.pp, group.ep, group.step_model, group.kv_capacity_tokens)
            if searched.setdefault(key, id(group)) == id(group):  # identical physics (fp16, bf16): same μ, searched once
                by_width.setdefault(group.gpus_per_replica, []).append(option)
        searched_groups += len(searched)
        search = _Search(mix=mix, slo=slo, max_mu_searches=max_mu_searches - sum(s.mu_searches for s in searches))
        searches.append(search)
        for width in sorted(by_width):
            checkpoint()
            # A g-GPU option must beat every kept candidate of a dividing width (any variant) scaled up to g GPUs, else it
            # is dominated (planner/fleet_formulation.py `dominates` counts GPUs per replica, whatever their tp × pp).
            theta = max(
                (width // c.gpus_per_replica * c.max_rps_at_slo for c in kept if width % c.gpus_per_replica == 0),
                default=0.0,
            )
            best = search.best_above(by_width[width], theta)
            if best is not None:
                found = _candidate(best.option, best.mu_rps, best.saturation_rps, suffix=variant.suffix)
                kept.append(found)
                levers[found.id] = levers_of(best.option, variant, workload)
    candidates = undominated(kept)
    ids = {c.id for c in candidates}
    return CandidateTable(
        candidates=candidates,
        options_enumerated=enumerated,
        groups=group_count,
        groups_searched=searched_groups,
        drops=tuple(drops),
        slo_refusals=tuple(r for s in searches for r in s.refusals),
        mu_searches=sum(s.mu_searches for s in searches),
        predictions=sum(s.predictions for s in searches),
        exhaustive=all(s.exhaustive for s in searches),
        levers={cid: lever for cid, lever in levers.items() if cid in ids and lever != NO_LEVERS},
    )


def merged_tables(parts: Sequence[CandidateTable]) -> CandidateTable:
    """One workload shape's table from its GPU types' parts (`gpu_candidate_table`), in order:
    candidates, drops and refusals concatenated (no candidate dominates one of another GPU type,
    so nothing more is dropped), the search's counts summed."""
    return CandidateTable(
        candidates=tuple(c for part in parts for c in part.candidates),
        options_enumerated=sum(part.options_enumerated for part in parts),
        groups=sum(part.groups for part in parts),
        groups_searched=sum(part.groups_searched for part in parts),
        drops=tuple(d for part in parts for d in part.drops),
        slo_refusals=tuple(r for part in parts for r in part.slo_refusals),
        mu_searches=sum(part.mu_searches for part in parts),
        predictions=sum(part.predictions for part in parts),
        exhaustive=all(part.exhaustive for part in parts),
        levers={cid: lever for part in parts for cid, lever in part.levers.items()},
    )


def no_candidates_error(workload_name: str, table: CandidateTable) -> InfeasiblePlanError:
    """The 422 answer for a workload no allowed configuration can serve within its SLOs: the
    reasons, most common constraint first."""
    reasons: dict[str, list[str]] = {}
    for drop in table.drops:
        reasons.setdefault(drop.constraint, []).append(
            f"{drop.gpu} {drop.weights_precision}/{drop.kv_precision}"
            + ("" if drop.tp is None else f" tp{drop.tp}")
            + f": {drop.reason}"
        )
    for refusal in table.slo_refusals:
        reasons.setdefault(refusal.constraint, []).append(f"{refusal.option_id}: {refusal.reason}")
    ranked = sorted(reasons.items(), key=lambda item: -len(item[1]))
    constraint = ranked[0][0] if ranked else "candidates"
    examples = [example for _, found in ranked for example in found[:2]][:6]
    summary = "; ".join(examples) if examples else "nothing to plan with"
    return InfeasiblePlanError(
        f"workload {workload_name!r}: no allowed configuration holds the model and meets its SLOs ({summary}); "
        "allow more GPU types, precisions or tensor-parallel degrees, or relax its SLOs",
        constraint=constraint,
        workload=workload_name,
        refused_by={name: len(found) for name, found in ranked},
        examples=examples,
    )


class CandidateTables:
    """Candidate tables for many workloads on one set of GPUs, precisions and grids, computed
    once per distinct (model, length mix, SLO): identical workload shapes share the work."""

    def __init__(
        self,
        *,
        gpus: Sequence[GpuSpec],
        precisions: Sequence[Precision],
        grid: CandidateGrid = CandidateGrid(),
        max_mu_searches: int = MAX_MU_SEARCHES,
    ) -> None:
        if not gpus:
            raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
        if not precisions:
            raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")
        self._gpus = tuple(gpus)
        self._precisions = tuple(precisions)
        self._grid = grid
        self._max_mu_searches = max_mu_searches
        self._tables: dict[tuple[ModelSpec, Workload, Slo], CandidateTable] = {}

    def table(self, model: ModelSpec, workload: Workload, slo: Slo) -> CandidateTable:
        key = (model, workload.at_rate(1.0), slo)
        if key not in self._tables:
            self._tables[key] = candidate_table(
                model=model,
                gpus=self._gpus,
                precisions=self._precisions,
                workload=workload,
                slo=slo,
                grid=self._grid,
                max_mu_searches=self._max_mu_searches,
            )
        return self._tables[key]

    @property
    def computed(self) -> int:
        """Distinct tables computed so far."""
        return len(self._tables)
